"""Oracle checkpoints and expected values for the encoder-decoder families of
SPEC section 17: t5 (v1.0 and v1.1 / Flan), bart, marian.

Provenance
----------
The reference forwards below are written from the Hugging Face model
definitions, not from headscope's code (no transformers package is installed
here; each function follows its modeling file, in float64):

* t5 (modeling_t5.py T5ForConditionalGeneration): shared embeddings, no
  scale; T5LayerNorm weight * x * rsqrt(mean(x^2) + eps); T5Attention scores
  q k^T (no 1/sqrt(d_kv)) + position_bias, where the bias is
  relative_attention_bias(_relative_position_bucket(memory - context)) of
  the first block of each stack (bidirectional in the encoder, causal in the
  decoder; the bucket's logarithm in float32, exactly as the modeling file:
  relative_position.float()), zeros for EncDecAttention, plus the extended
  masks; T5LayerFF x + DenseReluDense(norm(x)) with wi -> relu -> wo
  (feed_forward_proj "relu") or gelu_new(wi_0 x) * wi_1 x -> wo
  ("gated-gelu"); final_layer_norm of each stack; with tie_word_embeddings
  the decoder output times d_model ** -0.5 before lm_head.
* bart (modeling_bart.py BartForConditionalGeneration): embed_tokens(x) *
  embed_scale (sqrt(d_model) with scale_embedding) + BartLearnedPositional
  Embedding(arange(T) + 2); layernorm_embedding; post-LayerNorm layers:
  h = LN(h + self_attn(h)); decoder also h = LN(h + encoder_attn(h, enc));
  h = LN(h + fc2(act(fc1(h)))); q_proj(h) * head_dim ** -0.5; lm_head tied to
  shared plus final_logits_bias.
* marian (modeling_marian.py MarianMTModel): bart's layers and head with
  MarianSinusoidalPositionalEmbedding (the numpy table of _init_weight,
  rounded to float32; positions arange(T), no offset) and no
  layernorm_embedding; decoder_start_token_id = pad_token_id.

Loss: CrossEntropyLoss over the labels (-100 ignored) of decoder inputs
shift_tokens_right(labels): [decoder_start_token_id] + labels[:-1], -100
replaced by pad_token_id; sources padded with pad_token_id and masked.

Checkpoints are small random-weight models in the real HF tensor names and
layouts (with the tied copies HF saves: encoder/decoder embed_tokens, and
Marian's sinusoid tables), config.json files with the key sets of t5-small,
google/flan-t5-small, facebook/bart-base and Helsinki-NLP/opus-mt-en-de with
sizes shrunk.

* torch: Debian python3-torch, float64 everywhere but the bucket logarithm,
  torch.set_num_threads(1).
* weights: drawn in float64 with torch.manual_seed(seed), rounded to F32.
* regenerate (from the repo root; deterministic):
      /usr/bin/python3 scripts/oracle/gen_seq2seq.py

Outputs: tests/fixtures/seq2seq/NAME/{config.json, model.safetensors,
pairs.jsonl} and tests/fixtures/seq2seq.txt ('case', 'int', 'tensor NAME NDIM
dims', values, 'end'; tests/fixture.h): src (B,S), dec (B,T) and tgt (B,T)
(-1: ignored) as hs_pairs_eval pads pairs.jsonl, logits (B,T,V), loss (HF's
pooled loss), stderr (sample sd of the pairs' mean losses / sqrt(B)),
enc_maps (E,B,H,S,S), dec_maps (D,B,H,T,T), cross_maps (D,B,H,T,S);
off_FEATURE (B,V) the last position's logits with FEATURE switched off;
genB the greedy decoding of pair B's source alone ([start] + at most 6 new
ids, stopping after eos), by recomputation of the whole decoder each step;
ablate_TYPE_L_H the pooled loss with head H of layer L (within its stack) of
attention type TYPE (enc, dec, cross) zeroed before the output projection,
minus the clean loss; dgate_TYPE (layers of that type, H) the pooled
loss's gradient with respect to each head's gate (its output z multiplied
by the gate, all at 1), and grad:NAME the pooled loss's gradient with
respect to the tensor headscope calls NAME (GRADS: its HF name), both by
torch.autograd through the forwards above; imp_raw_TYPE the mean over the
pairs of |dL_n / d gate| (L_n pair n's summed target loss, gates per pair):
Michel et al.'s importance_raw.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_families3 import fmt, quantize, write_checkpoint  # noqa: E402

torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)
DT = torch.float64

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
OUT = os.path.join(ROOT, "tests", "fixtures", "seq2seq")
TXT = os.path.join(ROOT, "tests", "fixtures", "seq2seq.txt")

V = 40
GAP = 2e-4
# pairs: (source ids, target ids); the second pair shorter on both sides, so
# both padding paths are exercised
SRC_LEN, TGT_LEN = (9, 6), (7, 4)


# ---------------------------------------------------------------------------
# T5


def t5_bucket(rel, bidirectional, num_buckets, max_distance):
    """_relative_position_bucket, as the modeling file writes it."""
    buckets = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets += (rel > 0).to(torch.long) * num_buckets
        rel = torch.abs(rel)
    else:
        rel = -torch.min(rel, torch.zeros_like(rel))
    max_exact = num_buckets // 2
    is_small = rel < max_exact
    large = max_exact + (torch.log(rel.float() / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(is_small, rel, large)


def t5_bias(table, q_len, k_len, bidirectional, c):
    ctx = torch.arange(q_len, dtype=torch.long)[:, None]
    mem = torch.arange(k_len, dtype=torch.long)[None, :]
    b = t5_bucket(mem - ctx, bidirectional, c["relative_attention_num_buckets"],
                  c["relative_attention_max_distance"])
    return table[b].permute(2, 0, 1).unsqueeze(0)  # (1, H, q, k)


def t5_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def mha(x, kv, Wq, Wk, Wv, Wo, H, bias, mask, bq=None, bk=None, bv=None, bo=None,
        q_scale=1.0, zero_head=None, gate=None):
    """T5Attention / BartAttention: mask (B, 1 or q, k) True where hidden;
    zero_head: that head's output (before o / out_proj) zeroed; gate (H):
    each head's output multiplied by its gate (Michel et al.'s xi); (B, H):
    one set per sequence."""
    Bn, q_len, _ = x.shape
    k_len = kv.shape[1]
    q = F.linear(x, Wq, bq) * q_scale
    k = F.linear(kv, Wk, bk)
    v = F.linear(kv, Wv, bv)
    dh = q.shape[-1] // H
    q = q.view(Bn, q_len, H, dh).transpose(1, 2)
    k = k.view(Bn, k_len, H, dh).transpose(1, 2)
    v = v.view(Bn, k_len, H, dh).transpose(1, 2)
    s = q @ k.transpose(-1, -2)
    if bias is not None:
        s = s + bias
    s = s.masked_fill(mask.unsqueeze(1), float("-inf"))
    p = torch.softmax(s, dim=-1)
    z = p @ v
    if zero_head is not None:
        z = z.clone()
        z[:, zero_head] = 0
    if gate is not None:
        z = z * gate.view(-1, H, 1, 1)
    z = z.transpose(1, 2).reshape(Bn, q_len, H * dh)
    return F.linear(z, Wo, bo), p


def masks(src, dec, pad):
    Bn, S = src.shape
    T = dec.shape[1]
    key_pad = (src == pad).unsqueeze(1)  # (B, 1, S)
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1).unsqueeze(0).expand(Bn, T, T)
    return key_pad.expand(Bn, S, S), causal, key_pad.expand(Bn, T, S)


def t5_forward(W, c, src, dec, off=frozenset(), ablate=None, gates=None):
    """ablate: (type, layer within its stack, head) zeroed, type enc, dec or cross;
    gates: {(type, layer): (H) gates} (None: none)."""
    E, D, H = c["num_layers"], c["num_decoder_layers"], c["num_heads"]
    eps, gated = c["layer_norm_epsilon"], c["feed_forward_proj"] == "gated-gelu"
    enc_mask, self_mask, cross_mask = masks(src, dec, c["pad_token_id"])
    enc_maps, dec_maps, cross_maps = [], [], []

    def ff(h, p):
        x = t5_norm(h, W[p + "layer_norm.weight"], eps)
        if gated:
            g = F.gelu(F.linear(x, W[p + "DenseReluDense.wi_0.weight"]), approximate="tanh")
            u = F.linear(x, W[p + "DenseReluDense.wi_1.weight"])
            y = g * u
        else:
            y = F.relu(F.linear(x, W[p + "DenseReluDense.wi.weight"]))
        return h + F.linear(y, W[p + "DenseReluDense.wo.weight"])

    def block_attn(h, kv, p, kind, bias, mask, maps, typ, l):
        x = t5_norm(h, W[p + "layer_norm.weight"], eps)
        zero = ablate[2] if ablate and ablate[:2] == (typ, l) else None
        out, att = mha(x, x if kv is None else kv,
                       W[p + kind + ".q.weight"], W[p + kind + ".k.weight"],
                       W[p + kind + ".v.weight"], W[p + kind + ".o.weight"], H, bias, mask,
                       zero_head=zero, gate=(gates or {}).get((typ, l)))
        maps.append(att)
        return h + out

    rel = "relative_bias" not in off
    h = W["shared.weight"][src]
    S = src.shape[1]
    bias = t5_bias(W["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
                   S, S, True, c) if rel else None
    for l in range(E):
        p = f"encoder.block.{l}.layer."
        h = block_attn(h, None, p + "0.", "SelfAttention", bias, enc_mask, enc_maps, "enc", l)
        h = ff(h, p + "1.")
    enc = t5_norm(h, W["encoder.final_layer_norm.weight"], eps)
    T = dec.shape[1]
    h = W["shared.weight"][dec]
    bias = t5_bias(W["decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
                   T, T, False, c) if rel else None
    for l in range(D):
        p = f"decoder.block.{l}.layer."
        h = block_attn(h, None, p + "0.", "SelfAttention", bias, self_mask, dec_maps, "dec", l)
        h = block_attn(h, enc, p + "1.", "EncDecAttention", None, cross_mask, cross_maps,
                       "cross", l)
        h = ff(h, p + "2.")
    h = t5_norm(h, W["decoder.final_layer_norm.weight"], eps)
    if c.get("tie_word_embeddings", True):
        if "tied_scale" not in off:
            h = h * c["d_model"] ** -0.5
        logits = h @ W["shared.weight"].T
    else:
        logits = h @ W["lm_head.weight"].T
    return logits, enc_maps, dec_maps, cross_maps


# ---------------------------------------------------------------------------
# BART and Marian


def sinusoids(n_pos, dim):
    """MarianSinusoidalPositionalEmbedding._init_weight."""
    enc = np.array([[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)]
                    for pos in range(n_pos)])
    out = torch.zeros(n_pos, dim, dtype=torch.float32)
    sentinel = dim // 2 if dim % 2 == 0 else (dim // 2) + 1
    out[:, 0:sentinel] = torch.FloatTensor(np.sin(enc[:, 0::2]))
    out[:, sentinel:] = torch.FloatTensor(np.cos(enc[:, 1::2]))
    return out.to(DT)


ACT = {"gelu": F.gelu, "relu": F.relu, "swish": F.silu, "silu": F.silu,
       "gelu_new": lambda x: F.gelu(x, approximate="tanh")}


def bart_forward(W, c, src, dec, marian, off=frozenset(), ablate=None, gates=None):
    E, D, d = c["encoder_layers"], c["decoder_layers"], c["d_model"]
    H = c["encoder_attention_heads"]
    scale = math.sqrt(d) if c.get("scale_embedding") else 1.0
    act = ACT[c["activation_function"]]
    enc_mask, self_mask, cross_mask = masks(src, dec, c["pad_token_id"])
    enc_maps, dec_maps, cross_maps = [], [], []

    def ln(x, p):
        return F.layer_norm(x, (d,), W[p + ".weight"], W[p + ".bias"], 1e-5)

    def embed(ids, stack):
        n = ids.shape[1]
        h = W["model.shared.weight"][ids] * scale
        if marian:
            pos = sinusoids(c["max_position_embeddings"], d)[:n]
        else:
            shift = 0 if "position_offset" in off else 2
            pos = W[f"model.{stack}.embed_positions.weight"][torch.arange(n) + shift]
        h = h + pos
        return h if marian else ln(h, f"model.{stack}.layernorm_embedding")

    def attn(h, kv, p, mask, maps, typ, l):
        zero = ablate[2] if ablate and ablate[:2] == (typ, l) else None
        out, att = mha(h, kv, W[p + ".q_proj.weight"], W[p + ".k_proj.weight"],
                       W[p + ".v_proj.weight"], W[p + ".out_proj.weight"], H, None, mask,
                       W[p + ".q_proj.bias"], W[p + ".k_proj.bias"], W[p + ".v_proj.bias"],
                       W[p + ".out_proj.bias"], q_scale=(d // H) ** -0.5, zero_head=zero,
                       gate=(gates or {}).get((typ, l)))
        maps.append(att)
        return out

    def ffn(h, p):
        y = F.linear(act(F.linear(h, W[p + "fc1.weight"], W[p + "fc1.bias"])),
                     W[p + "fc2.weight"], W[p + "fc2.bias"])
        return ln(h + y, p + "final_layer_norm")

    h = embed(src, "encoder")
    for l in range(E):
        p = f"model.encoder.layers.{l}."
        h = ln(h + attn(h, h, p + "self_attn", enc_mask, enc_maps, "enc", l),
               p + "self_attn_layer_norm")
        h = ffn(h, p)
    enc = h
    h = embed(dec, "decoder")
    for l in range(D):
        p = f"model.decoder.layers.{l}."
        h = ln(h + attn(h, h, p + "self_attn", self_mask, dec_maps, "dec", l),
               p + "self_attn_layer_norm")
        h = ln(h + attn(h, enc, p + "encoder_attn", cross_mask, cross_maps, "cross", l),
               p + "encoder_attn_layer_norm")
        h = ffn(h, p)
    logits = h @ W["model.shared.weight"].T + W["final_logits_bias"]
    return logits, enc_maps, dec_maps, cross_maps


# ---------------------------------------------------------------------------
# configs (the Hub's key sets, sizes shrunk) and weights


def t5_small():
    return {
        "architectures": ["T5ForConditionalGeneration"], "d_ff": 24, "d_kv": 4, "d_model": 16,
        "decoder_start_token_id": 0, "dropout_rate": 0.1, "eos_token_id": 1,
        "feed_forward_proj": "relu", "initializer_factor": 1.0, "is_encoder_decoder": True,
        "layer_norm_epsilon": 1e-06, "model_type": "t5", "n_positions": 512,
        "num_decoder_layers": 2, "num_heads": 4, "num_layers": 2, "output_past": True,
        "pad_token_id": 0, "relative_attention_max_distance": 12,
        "relative_attention_num_buckets": 8, "task_specific_params": {},
        "vocab_size": V}


def flan_t5_small():
    return {
        "architectures": ["T5ForConditionalGeneration"], "classifier_dropout": 0.0,
        "d_ff": 20, "d_kv": 6, "d_model": 16, "decoder_start_token_id": 0,
        "dense_act_fn": "gelu_new", "dropout_rate": 0.1, "eos_token_id": 1,
        "feed_forward_proj": "gated-gelu", "initializer_factor": 1.0,
        "is_encoder_decoder": True, "is_gated_act": True, "layer_norm_epsilon": 1e-06,
        "model_type": "t5", "n_positions": 512, "num_decoder_layers": 3, "num_heads": 4,
        "num_layers": 2, "output_past": True, "pad_token_id": 0,
        "relative_attention_max_distance": 12, "relative_attention_num_buckets": 8,
        "tie_word_embeddings": False, "torch_dtype": "float32",
        "transformers_version": "4.23.1", "use_cache": True, "vocab_size": V}


def bart_base():
    return {
        "activation_dropout": 0.1, "activation_function": "gelu", "add_bias_logits": False,
        "add_final_layer_norm": False, "architectures": ["BartModel"],
        "attention_dropout": 0.1, "bos_token_id": 0, "classif_dropout": 0.1,
        "classifier_dropout": 0.0, "d_model": 16, "decoder_attention_heads": 4,
        "decoder_ffn_dim": 24, "decoder_layerdrop": 0.0, "decoder_layers": 2,
        "decoder_start_token_id": 2, "dropout": 0.1, "early_stopping": True,
        "encoder_attention_heads": 4, "encoder_ffn_dim": 24, "encoder_layerdrop": 0.0,
        "encoder_layers": 2, "eos_token_id": 2, "forced_bos_token_id": 0,
        "forced_eos_token_id": 2, "gradient_checkpointing": False,
        "id2label": {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}, "init_std": 0.02,
        "is_encoder_decoder": True,
        "label2id": {"LABEL_0": 0, "LABEL_1": 1, "LABEL_2": 2}, "max_position_embeddings": 12,
        "model_type": "bart", "no_repeat_ngram_size": 3, "normalize_before": False,
        "normalize_embedding": True, "num_beams": 4, "num_hidden_layers": 2,
        "pad_token_id": 1, "scale_embedding": False, "task_specific_params": {},
        "torch_dtype": "float32", "transformers_version": "4.12.0.dev0", "use_cache": True,
        "vocab_size": V}


def opus_mt():
    return {
        "activation_dropout": 0.0, "activation_function": "swish", "add_bias_logits": False,
        "add_final_layer_norm": False, "architectures": ["MarianMTModel"],
        "attention_dropout": 0.0, "bad_words_ids": [[V - 1]], "bos_token_id": 0,
        "classif_dropout": 0.0, "classifier_dropout": 0.0, "d_model": 16,
        "decoder_attention_heads": 4, "decoder_ffn_dim": 24, "decoder_layerdrop": 0.0,
        "decoder_layers": 3, "decoder_start_token_id": V - 1, "decoder_vocab_size": V,
        "dropout": 0.1, "encoder_attention_heads": 4, "encoder_ffn_dim": 24,
        "encoder_layerdrop": 0.0, "encoder_layers": 2, "eos_token_id": 0,
        "forced_eos_token_id": 0, "init_std": 0.02, "is_encoder_decoder": True,
        "max_length": 512, "max_position_embeddings": 12, "model_type": "marian",
        "normalize_before": False, "normalize_embedding": False, "num_beams": 4,
        "num_hidden_layers": 2, "pad_token_id": V - 1, "scale_embedding": True,
        "share_encoder_decoder_embeddings": True, "static_position_embeddings": True,
        "transformers_version": "4.22.0.dev0", "use_cache": True, "vocab_size": V}


def t5_spec(c):
    d, H, dk, F_ = c["d_model"], c["num_heads"], c["d_kv"], c["d_ff"]
    inner = H * dk
    s = {"shared.weight": (V, d)}
    ff = ["wi_0", "wi_1"] if c["feed_forward_proj"] == "gated-gelu" else ["wi"]
    for stack, n in (("encoder", c["num_layers"]), ("decoder", c["num_decoder_layers"])):
        s[f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = (
            c["relative_attention_num_buckets"], H)
        for l in range(n):
            kinds = ["SelfAttention"] + (["EncDecAttention"] if stack == "decoder" else [])
            for i, kind in enumerate(kinds):
                p = f"{stack}.block.{l}.layer.{i}."
                s[p + "layer_norm.weight"] = (d,)
                for m in "qkv":
                    s[p + f"{kind}.{m}.weight"] = (inner, d)
                s[p + f"{kind}.o.weight"] = (d, inner)
            p = f"{stack}.block.{l}.layer.{len(kinds)}."
            s[p + "layer_norm.weight"] = (d,)
            for w in ff:
                s[p + f"DenseReluDense.{w}.weight"] = (F_, d)
            s[p + "DenseReluDense.wo.weight"] = (d, F_)
        s[f"{stack}.final_layer_norm.weight"] = (d,)
    if not c.get("tie_word_embeddings", True):
        s["lm_head.weight"] = (V, d)
    return s


def bart_spec(c, marian):
    d, F_, n_pos = c["d_model"], c["encoder_ffn_dim"], c["max_position_embeddings"]
    s = {"model.shared.weight": (V, d), "final_logits_bias": (1, V)}
    for stack, n in (("encoder", c["encoder_layers"]), ("decoder", c["decoder_layers"])):
        s[f"model.{stack}.embed_positions.weight"] = (n_pos + (0 if marian else 2), d)
        if not marian:
            s[f"model.{stack}.layernorm_embedding.weight"] = (d,)
            s[f"model.{stack}.layernorm_embedding.bias"] = (d,)
        for l in range(n):
            p = f"model.{stack}.layers.{l}."
            for kind in ["self_attn"] + (["encoder_attn"] if stack == "decoder" else []):
                for m in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    s[p + f"{kind}.{m}.weight"] = (d, d)
                    s[p + f"{kind}.{m}.bias"] = (d,)
                s[p + f"{kind}_layer_norm.weight"] = (d,)
                s[p + f"{kind}_layer_norm.bias"] = (d,)
            s[p + "fc1.weight"], s[p + "fc1.bias"] = (F_, d), (F_,)
            s[p + "fc2.weight"], s[p + "fc2.bias"] = (d, F_), (d,)
            s[p + "final_layer_norm.weight"], s[p + "final_layer_norm.bias"] = (d,), (d,)
    return s


def draw(spec, seed, marian_d=None):
    torch.manual_seed(seed)
    W = {}
    for name, shape in spec.items():
        if name.endswith("layer_norm.weight") or name.endswith("layernorm_embedding.weight"):
            t = 1 + 0.2 * torch.randn(shape)
        elif len(shape) == 1 or name == "final_logits_bias":
            t = 0.2 * torch.randn(shape)
        elif "relative_attention_bias" in name:
            t = 1.0 * torch.randn(shape)
        else:
            t = 0.4 * torch.randn(shape)
        W[name] = quantize(t)
    if marian_d:  # the sinusoid tables the checkpoints store
        for stack in ("encoder", "decoder"):
            W[f"model.{stack}.embed_positions.weight"] = sinusoids(*marian_d)
    return W


def with_tied_copies(W, c, family):
    """The tensors HF also saves: the stacks' embed_tokens (and a tied lm_head)."""
    out = dict(W)
    shared = "shared.weight" if family == "t5" else "model.shared.weight"
    pre = "" if family == "t5" else "model."
    out[pre + "encoder.embed_tokens.weight"] = W[shared]
    out[pre + "decoder.embed_tokens.weight"] = W[shared]
    if family != "t5" or c.get("tie_word_embeddings", True):
        out["lm_head.weight"] = W[shared]
    return out


# ---------------------------------------------------------------------------


def pairs(c, seed):
    """Two pairs of ids ending in eos, the second shorter; and the batch
    hs_pairs_eval makes of them."""
    g = torch.Generator().manual_seed(seed)
    eos, pad, start = c["eos_token_id"], c["pad_token_id"], c["decoder_start_token_id"]
    special = {eos, pad, start}
    ok = [i for i in range(V) if i not in special]
    P = []
    for S, T in zip(SRC_LEN, TGT_LEN):
        src = [ok[int(i)] for i in torch.randint(0, len(ok), (S - 1,), generator=g)] + [eos]
        tgt = [ok[int(i)] for i in torch.randint(0, len(ok), (T - 1,), generator=g)] + [eos]
        P.append((src, tgt))
    S, T = max(SRC_LEN), max(TGT_LEN)
    src = torch.tensor([s + [pad] * (S - len(s)) for s, _ in P])
    tgt = torch.tensor([t + [-100] * (T - len(t)) for _, t in P])
    dec = torch.tensor([[start] + [pad if x == -100 else x for x in row[:-1]]
                        for row in tgt.tolist()])
    return P, src, dec, tgt


CASES = [  # name, family, config, weight seed, features switched off
    ("t5", "t5", t5_small(), 1701, ["relative_bias", "tied_scale"]),
    ("flan_t5", "t5", flan_t5_small(), 1702, ["relative_bias"]),
    ("bart", "bart", bart_base(), 1703, ["position_offset"]),
    ("marian", "marian", opus_mt(), 1704, []),
]


def forward(family, W, c, src, dec, off=frozenset(), ablate=None, gates=None):
    if family == "t5":
        return t5_forward(W, c, src, dec, off, ablate, gates)
    return bart_forward(W, c, src, dec, family == "marian", off, ablate, gates)


# the weight gradients written per case: (headscope's tensor name, HF's)
GRADS = {
    "t5": [("wte.weight", "shared.weight"),
           ("enc.rel_bias.weight", "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"),
           ("rel_bias.weight", "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"),
           ("h.0.attn.q_proj.weight", "encoder.block.0.layer.0.SelfAttention.q.weight"),
           ("h.2.attn.v_proj.weight", "decoder.block.0.layer.0.SelfAttention.v.weight"),
           ("h.3.xattn.k_proj.weight", "decoder.block.1.layer.1.EncDecAttention.k.weight"),
           ("h.2.ln_x.weight", "decoder.block.0.layer.1.layer_norm.weight"),
           ("h.1.mlp.fc.weight", "encoder.block.1.layer.1.DenseReluDense.wi.weight"),
           ("enc.ln_f.weight", "encoder.final_layer_norm.weight"),
           ("ln_f.weight", "decoder.final_layer_norm.weight")],
    "flan_t5": [("lm_head.weight", "lm_head.weight"), ("wte.weight", "shared.weight"),
                ("enc.rel_bias.weight",
                 "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"),
                ("rel_bias.weight",
                 "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"),
                ("h.1.mlp.gate_proj.weight", "encoder.block.1.layer.1.DenseReluDense.wi_0.weight"),
                ("h.4.mlp.up_proj.weight", "decoder.block.2.layer.2.DenseReluDense.wi_1.weight"),
                ("h.2.xattn.o_proj.weight", "decoder.block.0.layer.1.EncDecAttention.o.weight")],
    "bart": [("wte.weight", "model.shared.weight"),
             ("enc.wpe.weight", "model.encoder.embed_positions.weight"),
             ("wpe.weight", "model.decoder.embed_positions.weight"),
             ("enc.ln_emb.weight", "model.encoder.layernorm_embedding.weight"),
             ("ln_emb.bias", "model.decoder.layernorm_embedding.bias"),
             ("h.0.attn.q_proj.bias", "model.encoder.layers.0.self_attn.q_proj.bias"),
             ("h.3.ln_x.weight", "model.decoder.layers.1.encoder_attn_layer_norm.weight"),
             ("h.2.mlp.fc.weight", "model.decoder.layers.0.fc1.weight"),
             ("h.1.ln_2.bias", "model.encoder.layers.1.final_layer_norm.bias"),
             ("h.3.xattn.v_proj.weight", "model.decoder.layers.1.encoder_attn.v_proj.weight")],
    "marian": [("wte.weight", "model.shared.weight"),
               ("h.0.ln_1.weight", "model.encoder.layers.0.self_attn_layer_norm.weight"),
               ("h.4.xattn.q_proj.weight", "model.decoder.layers.2.encoder_attn.q_proj.weight"),
               ("h.3.mlp.proj.weight", "model.decoder.layers.1.fc2.weight"),
               ("h.1.attn.o_proj.bias", "model.encoder.layers.1.self_attn.out_proj.bias")],
}


def gradients(name, family, W, c, src, dec, tgt, H):
    """The pooled loss's gradients: of every head's gate per type at 1, and
    of GRADS[name]'s tensors (the tied copies are one leaf: shared)."""
    leaves = {k: v.clone().requires_grad_(True) for k, v in W.items()}
    n = {"enc": c.get("num_layers", c.get("encoder_layers")),
         "dec": c.get("num_decoder_layers", c.get("decoder_layers")),
         "cross": c.get("num_decoder_layers", c.get("decoder_layers"))}
    gates = {(t, l): torch.ones(H, requires_grad=True) for t in n for l in range(n[t])}
    logits = forward(family, leaves, c, src, dec, gates=gates)[0]
    loss = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1), ignore_index=-100)
    loss.backward()
    out = []
    for t in ("enc", "dec", "cross"):
        g = torch.stack([gates[(t, l)].grad for l in range(n[t])])
        out += [f"tensor dgate_{t} 2 {n[t]} {H}", fmt(g)]
    for ours, hf in GRADS[name]:
        g = leaves[hf].grad
        out += [f"tensor grad:{ours} {g.dim()} " + " ".join(map(str, g.shape)), fmt(g)]
    # Michel et al.'s importance_raw: per pair, its summed loss's gradient by
    # its own gates (gates per sequence), |.| averaged over the pairs
    Bn = src.shape[0]
    gates = {(t, l): torch.ones(Bn, H, requires_grad=True) for t in n for l in range(n[t])}
    logits = forward(family, W, c, src, dec, gates=gates)[0]
    F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1), ignore_index=-100,
                    reduction="sum").backward()
    for t in ("enc", "dec", "cross"):
        g = torch.stack([gates[(t, l)].grad.abs().mean(0) for l in range(n[t])])
        out += [f"tensor imp_raw_{t} 2 {n[t]} {H}", fmt(g)]
    return out


# one head of each type zeroed: (type, layer within its stack, head)
ABLATED = [("enc", 1, 2), ("dec", 0, 3), ("cross", 1, 1)]


MAX_NEW = 6


def greedy(family, W, c, src):
    """generate(num_beams=1, do_sample=False) by recomputation: the argmax
    (the first on ties) of the last position, fed back, after eos stop."""
    ids = [c["decoder_start_token_id"]]
    for _ in range(MAX_NEW):
        logits = forward(family, W, c, src, torch.tensor([ids]))[0]
        ids.append(int(torch.argmax(logits[0, -1])))
        if ids[-1] == c["eos_token_id"]:
            break
    return ids


def self_check():
    """The bucket function against the T5 paper's table for 32 buckets and a
    distance of 128 (hand-derived points), and sinusoid rows against sin/cos."""
    rel = torch.tensor([-200, -128, -20, -8, -7, -1, 0, 1, 7, 8, 20, 128, 200])
    got = t5_bucket(rel, True, 32, 128).tolist()
    # bidirectional: 16 buckets a side, 8 exact; log bins up to 128
    assert got[6] == 0 and got[7] == 17 and got[5] == 1 and got[8] == 16 + 7
    assert got[0] == 15 and got[-1] == 31 and got[3] == 8 and got[9] == 24
    causal = t5_bucket(rel, False, 32, 128).tolist()
    assert causal[6:] == [0] * 7 and causal[5] == 1 and causal[0] == 31
    s = sinusoids(5, 8)
    assert abs(float(s[3, 1]) - math.sin(3 / 10000 ** (2 / 8))) < 1e-7
    assert abs(float(s[3, 5]) - math.cos(3 / 10000 ** (2 / 8))) < 1e-7


def main():
    self_check()
    lines = [
        "# headscope oracle fixtures of SPEC section 17's encoder-decoders; generated by",
        "# scripts/oracle/gen_seq2seq.py",
        f"# torch {torch.__version__}, float64, num_threads=1; weight seeds 1701..1704, "
        "pairs 1801..1804",
        "# regenerate: /usr/bin/python3 scripts/oracle/gen_seq2seq.py (from the repo root)",
        "# checkpoints and pairs.jsonl: tests/fixtures/seq2seq/NAME; src, dec, tgt (-1:",
        "# ignored) the padded batch of pairs.jsonl; logits (B,T,V); loss (pooled); stderr;",
        "# enc_maps (E,B,H,S,S), dec_maps (D,B,H,T,T), cross_maps (D,B,H,T,S); off_F (B,V);",
        "# genB: greedy decoding of pair B's source alone, at most 6 new ids;",
        "# ablate_TYPE_L_H: the pooled loss with that head zeroed minus the clean loss;",
        "# dgate_TYPE (layers, H) the pooled loss's gradient by each head's gate at 1;",
        "# grad:NAME the pooled loss's gradient by headscope's tensor NAME;",
        "# imp_raw_TYPE (layers, H) the mean over pairs of |d(pair's summed loss)/d gate|",
    ]
    for k, (name, family, c, seed, offs) in enumerate(CASES):
        marian = family == "marian"
        spec = t5_spec(c) if family == "t5" else bart_spec(c, marian)
        W = draw(spec, seed, (c.get("max_position_embeddings"), c["d_model"]) if marian
                 else None)
        d = os.path.join(OUT, name)
        write_checkpoint(d, c, with_tied_copies(W, c, family))
        P, src, dec, tgt = pairs(c, 1801 + k)
        with open(os.path.join(d, "pairs.jsonl"), "w") as f:
            for s, t in P:
                f.write(json.dumps({"source_ids": s, "target_ids": t}) + "\n")
        with torch.no_grad():
            logits, em, dm, cm = forward(family, W, c, src, dec)
            ce = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1), ignore_index=-100,
                                 reduction="none").view(tgt.shape)
            count = (tgt != -100).sum(1)
            loss = ce.sum() / count.sum()
            means = ce.sum(1) / count
            stderr = means.std(unbiased=True) / math.sqrt(len(means))
        Bn, S = src.shape
        T = dec.shape[1]
        H = em[0].shape[1]
        lines += [f"case {name}", f"int B {Bn}", f"int S {S}", f"int T {T}", f"int V {V}",
                  f"int E {len(em)}", f"int D {len(dm)}", f"int H {H}",
                  f"tensor src 2 {Bn} {S}", fmt(src), f"tensor dec 2 {Bn} {T}", fmt(dec),
                  f"tensor tgt 2 {Bn} {T}", fmt(torch.where(tgt < 0, -1, tgt)),
                  f"tensor logits 3 {Bn} {T} {V}", fmt(logits),
                  "tensor loss 1 1", "%.17g" % loss.item(),
                  "tensor stderr 1 1", "%.17g" % stderr.item(),
                  f"tensor enc_maps 5 {len(em)} {Bn} {H} {S} {S}", fmt(torch.stack(em)),
                  f"tensor dec_maps 5 {len(dm)} {Bn} {H} {T} {T}", fmt(torch.stack(dm)),
                  f"tensor cross_maps 5 {len(cm)} {Bn} {H} {T} {S}", fmt(torch.stack(cm))]
        for typ, l, hd in ABLATED:  # the pooled loss with one head zeroed, minus the clean
            with torch.no_grad():
                lg = forward(family, W, c, src, dec, ablate=(typ, l, hd))[0]
                ce_a = F.cross_entropy(lg.reshape(-1, V), tgt.reshape(-1), ignore_index=-100,
                                       reduction="sum") / count.sum()
            lines += [f"tensor ablate_{typ}_{l}_{hd} 1 1", "%.17g" % (ce_a - loss).item()]
        for b, (sb, _) in enumerate(P):  # greedy decoding of each source alone
            with torch.no_grad():
                g = greedy(family, W, c, torch.tensor([sb]))
            lines += [f"tensor gen{b} 1 {len(g)}", fmt(torch.tensor(g))]
        lines += gradients(name, family, W, c, src, dec, tgt, H)
        last = logits[:, -1, :]
        for feat in offs:
            with torch.no_grad():
                o = forward(family, W, c, src, dec, frozenset([feat]))[0][:, -1, :]
            gap = float(((o - last).abs() / torch.clamp(last.abs(), min=1)).max())
            print(f"{name:8s} {feat:16s} moves the last logits by {gap:.3g}")
            assert gap > GAP, (name, feat, gap)
            lines += [f"tensor off_{feat} 2 {Bn} {V}", fmt(o)]
        lines.append("end")
    with open(TXT, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
