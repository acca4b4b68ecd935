"""Oracle checkpoints and expected values for the encoders of SPEC section 14:
bert (BertForMaskedLM) and roberta (RobertaForMaskedLM).

Provenance
----------
The reference forward below is written from the Hugging Face model
definitions (transformers' modeling_bert.py and modeling_roberta.py), not
from headscope's code; no transformers package is installed here, so it
follows the modules line by line, in float64:

* BertEmbeddings.forward: inputs_embeds = word_embeddings(input_ids);
  embeddings = inputs_embeds + token_type_embeddings(token_type_ids = 0);
  embeddings += position_embeddings(position_ids); LayerNorm (eps
  layer_norm_eps); dropout (inactive: eval). position_ids = arange(T) for
  BERT; RobertaEmbeddings: create_position_ids_from_input_ids, i.e.
  mask = input_ids.ne(padding_idx); cumsum(mask, dim=1) * mask + padding_idx.
* BertModel.get_extended_attention_mask: (1 - attention_mask) * finfo.min
  added to every head's scores (attention_mask = input_ids != pad_token_id,
  as the tokenizer's padding gives it).
* BertSelfAttention: scores = q k^T / sqrt(head_dim) + mask; softmax;
  context = probs v; BertSelfOutput: LayerNorm(dense(context) + input);
  BertIntermediate: gelu(dense(x)) with ACT2FN["gelu"] (exact erf);
  BertOutput: LayerNorm(dense(h) + attention_output) -- post-LN layers.
* BertLMPredictionHead: transform = dense, gelu, LayerNorm; decoder
  (tied to word_embeddings) + bias (cls.predictions.bias). RobertaLMHead:
  dense, gelu, layer_norm, decoder (tied) + lm_head.bias.
* BertForMaskedLM's loss: CrossEntropyLoss() (ignore_index -100) over the
  labels: the mean over the labelled positions.

Each encoder feature is also switched off in the reference (`off` below) and
the logits recorded as off_<feature>: the generator asserts each differs
from the real logits by more than GAP, and the C suite that headscope's
logits do too, so no test can pass while ignoring a feature: token_types
(no token-type embedding), embed_norm (no embedding LayerNorm), post_ln
(pre-LN layers x + f(LN(x))), padding_mask (no mask), mlm_transform (the
decoder reads the last layer's output), position_offset (RoBERTa with
BERT's positions arange(T)).

Checkpoints: small random-weight models in the real HF tensor names, with
config.json carrying the keys bert-base-uncased's and roberta-base's
config.json ship (bookkeeping keys included), sizes shrunk:
* bert: "bert." names, the embeddings' norm in the legacy LayerNorm.gamma /
  .beta, the pooler, cls.seq_relationship (next-sentence head) and the
  int64 position_ids buffer, all of which headscope leaves unread;
* bert_bare: the same weights without the "bert." prefix, the decoder's
  bias as cls.predictions.decoder.bias and the tied
  cls.predictions.decoder.weight written out: the same logits;
* roberta: "roberta." and "lm_head." names, padding_idx 1.

* torch: Debian python3-torch (version in the header of encoders.txt),
  float64, torch.set_num_threads(1); numpy only for byte packing.
* weights: drawn in float64 with torch.manual_seed(seed), rounded to F32.
* regenerate (from the repo root; deterministic, prints the feature gaps):
      /usr/bin/python3 scripts/oracle/gen_encoders.py

Outputs: tests/fixtures/encoders/NAME/{config.json, model.safetensors,
grad.safetensors} and tests/fixtures/encoders.txt (tests/fixture.h's
format), per case: tokens (B,T) the unmasked ids with padding; input_ids
(B,T) the masked ids; labels (B,T) (-1 where HF has -100); logits (B,T,V)
of input_ids; loss (the masked-LM loss); maps (L,B,H,T,T); off_FEATURE
(B,T,V); every3_loss and every3_stderr: the loss of --mlm-mask every:3 on
tokens (positions t = 0 mod 3 that are not special, replaced by the mask
id; the pooled mean and the stderr of the per-sequence means); clark
(L,H,K): the pattern statistics of tokens' maps, K = cls, sep, punct,
entropy, self, prev_token, next_token, first_token, distance, each per
document the mean over its real queries, then the mean over documents
(Clark et al.'s order). grad.safetensors: d loss / d stored tensor (F32).
"""
import json
import math
import os
import shutil
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)
DT = torch.float64

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
OUT = os.path.join(ROOT, "tests", "fixtures", "encoders")
TXT = os.path.join(ROOT, "tests", "fixtures", "encoders.txt")

V, T, B, D, H, L, FF = 40, 8, 2, 16, 4, 2, 24
GAP = 2e-4
assert sys.byteorder == "little"

# ---------------------------------------------------------------------------
# safetensors by hand (F32, and I64 for the position_ids buffer)


def quantize(t):
    return t.detach().to(DT).to(torch.float32).to(DT)


def st_bytes(tensors):
    header = {"__metadata__": {"format": "pt"}}
    blobs, off = [], 0
    for name, t in tensors.items():
        if t.dtype == torch.int64:
            b, dt = t.contiguous().numpy().astype("<i8").tobytes(), "I64"
        else:
            b, dt = t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes(), "F32"
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((-(8 + len(h))) % 8)
    return len(h).to_bytes(8, "little") + h + b"".join(blobs)


def write_st(path, tensors):
    with open(path, "wb") as f:
        f.write(st_bytes(tensors))


# ---------------------------------------------------------------------------
# the reference forward (modeling_bert.py / modeling_roberta.py)


def layer_norm(x, w, b, eps):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def create_position_ids_from_input_ids(input_ids, padding_idx):
    mask = input_ids.ne(padding_idx).int()
    incremental_indices = torch.cumsum(mask, dim=1).type_as(mask) * mask
    return incremental_indices.long() + padding_idx


def encoder_forward(W, c, idx, roberta, off=frozenset()):
    """Logits (B,T,V) and the maps of every layer (B,H,T,T) of input ids idx."""
    p = "roberta." if roberta else "bert."
    eps = c["layer_norm_eps"]
    pad = c["pad_token_id"]
    dh = D // H
    Bn, Tn = idx.shape
    if roberta and "position_offset" not in off:
        position_ids = create_position_ids_from_input_ids(idx, pad)
    else:
        position_ids = torch.arange(Tn).expand(Bn, Tn)
    x = W[p + "embeddings.word_embeddings.weight"][idx]
    if "token_types" not in off:
        token_type_ids = torch.zeros(Bn, Tn, dtype=torch.long)
        x = x + W[p + "embeddings.token_type_embeddings.weight"][token_type_ids]
    x = x + W[p + "embeddings.position_embeddings.weight"][position_ids]
    if "embed_norm" not in off:
        x = layer_norm(x, W[p + "embeddings.LayerNorm.weight"], W[p + "embeddings.LayerNorm.bias"], eps)
    attention_mask = idx.ne(pad).to(DT)
    if "padding_mask" in off:
        attention_mask = torch.ones_like(attention_mask)
    extended = (1.0 - attention_mask[:, None, None, :]) * torch.finfo(DT).min
    maps = []

    def lin(h, name):
        return h @ W[name + ".weight"].T + W[name + ".bias"]

    for i in range(L):
        q = f"{p}encoder.layer.{i}."

        def heads(y):
            return y.view(Bn, Tn, H, dh).permute(0, 2, 1, 3)

        def ln(y, name):
            return layer_norm(y, W[q + name + ".weight"], W[q + name + ".bias"], eps)

        h_in = ln(x, "attention.output.LayerNorm") if "post_ln" in off else x
        query = heads(lin(h_in, q + "attention.self.query"))
        key = heads(lin(h_in, q + "attention.self.key"))
        value = heads(lin(h_in, q + "attention.self.value"))
        scores = query @ key.transpose(-1, -2) / math.sqrt(dh) + extended
        probs = torch.softmax(scores, dim=-1)
        maps.append(probs)
        ctx = (probs @ value).permute(0, 2, 1, 3).reshape(Bn, Tn, D)
        a = lin(ctx, q + "attention.output.dense")
        if "post_ln" in off:
            x = x + a
            h2 = ln(x, "output.LayerNorm")
            x = x + lin(F.gelu(lin(h2, q + "intermediate.dense")), q + "output.dense")
        else:
            x = ln(a + x, "attention.output.LayerNorm")
            inter = F.gelu(lin(x, q + "intermediate.dense"))
            x = ln(lin(inter, q + "output.dense") + x, "output.LayerNorm")
    hd = "lm_head." if roberta else "cls.predictions."
    if "mlm_transform" not in off:
        x = F.gelu(lin(x, hd + "dense" if roberta else hd + "transform.dense"))
    norm = hd + ("layer_norm" if roberta else "transform.LayerNorm")
    x = layer_norm(x, W[norm + ".weight"], W[norm + ".bias"], eps)
    logits = x @ W[p + "embeddings.word_embeddings.weight"].T + W[hd + "bias"]
    return logits, maps


# ---------------------------------------------------------------------------
# tensors and configs


def spec(roberta):
    p = "roberta." if roberta else "bert."
    s = {p + "embeddings.word_embeddings.weight": (V, D),
         p + "embeddings.position_embeddings.weight": (T + 2 if roberta else 16, D),
         p + "embeddings.token_type_embeddings.weight": (1 if roberta else 2, D),
         p + "embeddings.LayerNorm.weight": (D,), p + "embeddings.LayerNorm.bias": (D,)}
    for i in range(L):
        q = f"{p}encoder.layer.{i}."
        for n in ("attention.self.query", "attention.self.key", "attention.self.value",
                  "attention.output.dense"):
            s[q + n + ".weight"], s[q + n + ".bias"] = (D, D), (D,)
        s[q + "intermediate.dense.weight"], s[q + "intermediate.dense.bias"] = (FF, D), (FF,)
        s[q + "output.dense.weight"], s[q + "output.dense.bias"] = (D, FF), (D,)
        for n in ("attention.output.LayerNorm", "output.LayerNorm"):
            s[q + n + ".weight"], s[q + n + ".bias"] = (D,), (D,)
    hd = "lm_head." if roberta else "cls.predictions."
    dense = hd + ("dense" if roberta else "transform.dense")
    norm = hd + ("layer_norm" if roberta else "transform.LayerNorm")
    s[dense + ".weight"], s[dense + ".bias"] = (D, D), (D,)
    s[norm + ".weight"], s[norm + ".bias"] = (D,), (D,)
    s[hd + "bias"] = (V,)
    return s


def draw(sp, seed):
    torch.manual_seed(seed)
    W = {}
    for name, shape in sp.items():
        if ("LayerNorm" in name or "layer_norm" in name) and name.endswith("weight"):
            t = 1.0 + 0.3 * torch.randn(shape)
        elif name.endswith("bias"):
            t = 0.2 * torch.randn(shape)
        else:
            t = 0.4 * torch.randn(shape)
        W[name] = quantize(t)
    return W


def bert_base_uncased():
    return {
        "architectures": ["BertForMaskedLM"], "attention_probs_dropout_prob": 0.1,
        "gradient_checkpointing": False, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
        "hidden_size": D, "initializer_range": 0.02, "intermediate_size": FF,
        "layer_norm_eps": 1e-12, "max_position_embeddings": 16, "model_type": "bert",
        "num_attention_heads": H, "num_hidden_layers": L, "pad_token_id": 0,
        "position_embedding_type": "absolute", "transformers_version": "4.6.0.dev0",
        "type_vocab_size": 2, "use_cache": True, "vocab_size": V,
    }


def roberta_base():
    return {
        "architectures": ["RobertaForMaskedLM"], "attention_probs_dropout_prob": 0.1,
        "bos_token_id": 0, "classifier_dropout": None, "eos_token_id": 2, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "hidden_size": D, "initializer_range": 0.02,
        "intermediate_size": FF, "layer_norm_eps": 1e-05, "max_position_embeddings": T + 2,
        "model_type": "roberta", "num_attention_heads": H, "num_hidden_layers": L,
        "pad_token_id": 1, "position_embedding_type": "absolute", "torch_dtype": "float32",
        "transformers_version": "4.35.2", "type_vocab_size": 1, "use_cache": True,
        "vocab_size": V,
    }


# special ids: BERT [PAD] 0 [UNK] 1 [CLS] 2 [SEP] 3 [MASK] 4; RoBERTa <s> 0
# <pad> 1 </s> 2 <unk> 3 <mask> 4; "." 5 and "," 6 in both
BERT_IDS = {"cls": 2, "sep": 3, "pad": 0, "mask": 4, "unk": 1}
ROBERTA_IDS = {"cls": 0, "sep": 2, "pad": 1, "mask": 4, "unk": 3}
PUNCT = (5, 6)


def sequences(ids):
    c, s, p = ids["cls"], ids["sep"], ids["pad"]
    return torch.tensor([[c, 11, 5, 17, 6, 23, 30, s],
                         [c, 14, 9, 5, s, p, p, p]])


def masked(tokens, ids):
    """The masked input and labels of one hand-made choice: 80/10/10 kinds
    all present (a [MASK], a random id, an unchanged token)."""
    inp, lab = tokens.clone(), torch.full_like(tokens, -100)
    for b, t, new in ((0, 1, ids["mask"]), (0, 4, 19), (0, 5, None), (1, 2, ids["mask"])):
        lab[b, t] = tokens[b, t]
        if new is not None:
            inp[b, t] = new
    return inp, lab


def every(tokens, ids, K, O=0):
    """--mlm-mask every:K:O: positions t = O mod K of each sequence that are
    not special, replaced by the mask id."""
    special = set(ids.values())
    inp, lab = tokens.clone(), torch.full_like(tokens, -100)
    for b in range(tokens.shape[0]):
        for t in range(tokens.shape[1]):
            if t % K == O and int(tokens[b, t]) not in special:
                lab[b, t] = tokens[b, t]
                inp[b, t] = ids["mask"]
    return inp, lab


def mlm_loss(logits, labels):
    return F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=-100)


def per_sequence_stderr(logits, labels):
    means = []
    for b in range(labels.shape[0]):
        keep = labels[b] != -100
        if keep.any():
            means.append(F.cross_entropy(logits[b][keep], labels[b][keep]))
    m = torch.stack(means)
    return float(m.std(unbiased=True) / math.sqrt(len(means))) if len(means) > 1 else 0.0


def clark(maps, tokens, ids):
    """Clark et al.'s statistics per (layer, head): per document the mean over
    its real queries, then the mean over documents."""
    out = torch.zeros(L, H, 9)
    for li, a in enumerate(maps):
        for b in range(tokens.shape[0]):
            real = [t for t in range(T) if int(tokens[b, t]) != ids["pad"]]
            is_cls = (tokens[b] == ids["cls"]).to(DT)
            is_sep = (tokens[b] == ids["sep"]).to(DT)
            is_punct = ((tokens[b] == PUNCT[0]) | (tokens[b] == PUNCT[1])).to(DT)
            pos = torch.arange(T, dtype=DT)
            for h in range(H):
                rows = a[b, h]
                st = torch.zeros(9)
                for t in real:
                    r = rows[t]
                    st[0] += float(r @ is_cls)
                    st[1] += float(r @ is_sep)
                    st[2] += float(r @ is_punct)
                    st[3] += float(-(r[r > 0] * r[r > 0].log()).sum())
                    st[4] += float(r[t])
                    st[5] += float(r[t - 1]) if t >= 1 else 0.0
                    st[6] += float(r[t + 1]) if t + 1 < T else 0.0
                    st[7] += float(r[0])
                    st[8] += float(r @ (pos - t).abs())
                out[li, h] += st / len(real)
    return out / tokens.shape[0]


def write_checkpoint(d, c, tensors):
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")
    write_st(os.path.join(d, "model.safetensors"), tensors)


def legacy_bert(W):
    """The file bert-base-uncased ships: the embeddings' LayerNorm.gamma /
    .beta, the pooler, the next-sentence head and position_ids."""
    out = {}
    for k, v in W.items():
        if k.startswith("bert.embeddings.LayerNorm."):
            k = k.replace(".weight", ".gamma").replace(".bias", ".beta")
        out[k] = v
    torch.manual_seed(99)
    out["bert.pooler.dense.weight"] = quantize(torch.randn(D, D))
    out["bert.pooler.dense.bias"] = quantize(torch.randn(D))
    out["cls.seq_relationship.weight"] = quantize(torch.randn(2, D))
    out["cls.seq_relationship.bias"] = quantize(torch.randn(2))
    out["bert.embeddings.position_ids"] = torch.arange(16, dtype=torch.int64).view(1, 16)
    return out


def bare_bert(W):
    """A BertModel's own names (no "bert."), the decoder's bias under its
    name and the tied decoder weight written out."""
    out = {}
    for k, v in W.items():
        if k == "cls.predictions.bias":
            k = "cls.predictions.decoder.bias"
        out[k[5:] if k.startswith("bert.") else k] = v
    out["cls.predictions.decoder.weight"] = W["bert.embeddings.word_embeddings.weight"]
    return out


def fmt(t):
    return " ".join("%.13g" % v for v in t.reshape(-1).tolist())


def self_check():
    """create_position_ids_from_input_ids against a loop; the mask makes
    padding keys exactly 0."""
    idx = torch.tensor([[0, 5, 7, 1, 1], [1, 0, 6, 2, 1]])
    want = []
    for row in idx.tolist():
        k, r = 0, []
        for v in row:
            if v == 1:
                r.append(1)
            else:
                k += 1
                r.append(1 + k)
        want.append(r)
    assert create_position_ids_from_input_ids(idx, 1).tolist() == want


def main():
    self_check()
    lines = [
        "# headscope oracle fixtures of SPEC section 14's encoders; generated by",
        "# scripts/oracle/gen_encoders.py",
        f"# torch {torch.__version__}, float64, num_threads=1; weight seeds 901, 902",
        "# regenerate: /usr/bin/python3 scripts/oracle/gen_encoders.py (from the repo root)",
        "# checkpoints: tests/fixtures/encoders/NAME; tokens (B,T) unmasked; input_ids, labels",
        "# (-1: none) of the masked-LM loss; logits (B,T,V) of input_ids; maps (L,B,H,T,T) of",
        "# input_ids; off_F (B,T,V) with feature F switched off; every3_*: --mlm-mask every:3",
        "# on tokens; clark (L,H,9) of tokens' maps; NAME/grad.safetensors: d loss / d tensor",
    ]
    cases = [("bert", False, bert_base_uncased(), 901,
              ["token_types", "embed_norm", "post_ln", "padding_mask", "mlm_transform"]),
             ("roberta", True, roberta_base(), 902,
              ["token_types", "embed_norm", "post_ln", "padding_mask", "mlm_transform",
               "position_offset"])]
    for name, roberta, c, seed, offs in cases:
        ids = ROBERTA_IDS if roberta else BERT_IDS
        W = draw(spec(roberta), seed)
        d = os.path.join(OUT, name)
        write_checkpoint(d, c, legacy_bert(W) if name == "bert" else W)
        if name == "bert":
            write_checkpoint(os.path.join(OUT, "bert_bare"), c, bare_bert(W))
        tokens = sequences(ids)
        inp, lab = masked(tokens, ids)
        P = {k: v.clone().requires_grad_(True) for k, v in W.items()}
        logits, maps = encoder_forward(P, c, inp, roberta)
        loss = mlm_loss(logits, lab)
        loss.backward()
        grads = {k: P[k].grad for k in W}  # the canonical names (.weight, .bias)
        write_st(os.path.join(d, "grad.safetensors"), grads)
        for m in maps:  # padding keys are exactly 0
            assert float(m[1, :, :, 5:].abs().max()) == 0.0
        with torch.no_grad():
            ev_in, ev_lab = every(tokens, ids, 3)
            ev_logits, _ = encoder_forward(W, c, ev_in, roberta)
            ev_loss = float(mlm_loss(ev_logits, ev_lab))
            ev_se = per_sequence_stderr(ev_logits, ev_lab)
            _, tok_maps = encoder_forward(W, c, tokens, roberta)
            cl = clark(tok_maps, tokens, ids)
        lab_c = lab.clone()
        lab_c[lab_c == -100] = -1
        lines += [f"case {name}", f"int B {B}", f"int T {T}", f"int V {V}", f"int L {L}",
                  f"int H {H}", f"int cls {ids['cls']}", f"int sep {ids['sep']}",
                  f"int pad {ids['pad']}", f"int mask {ids['mask']}", f"int unk {ids['unk']}",
                  f"int dot {PUNCT[0]}", f"int comma {PUNCT[1]}",
                  f"tensor tokens 2 {B} {T}", fmt(tokens),
                  f"tensor input_ids 2 {B} {T}", fmt(inp),
                  f"tensor labels 2 {B} {T}", fmt(lab_c),
                  f"tensor logits 3 {B} {T} {V}", fmt(logits.detach()),
                  "tensor loss 1 1", "%.17g" % loss.item(),
                  f"tensor maps 5 {L} {B} {H} {T} {T}",
                  fmt(torch.stack([m.detach() for m in maps])),
                  "tensor every3_loss 1 1", "%.17g" % ev_loss,
                  "tensor every3_stderr 1 1", "%.17g" % ev_se,
                  f"tensor clark 3 {L} {H} 9", fmt(cl)]
        with torch.no_grad():
            for feat in offs:
                o, _ = encoder_forward(W, c, inp, roberta, frozenset([feat]))
                gap = float(((o - logits).abs() / torch.clamp(logits.abs(), min=1)).max())
                print(f"{name:8s} {feat:16s} moves the logits by {gap:.3g}")
                assert gap > GAP, (name, feat, gap)
                lines += [f"tensor off_{feat} 3 {B} {T} {V}", fmt(o)]
        print(f"{name:8s} loss {loss.item():.6f}, every:3 loss {ev_loss:.6f} +- {ev_se:.6f}")
        lines.append("end")
    with open(TXT, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
