"""Oracle sequence classifiers (SPEC §16) for tests/test_classifiers.c.

Provenance
----------
Takes the bodies of four committed fixtures (tests/fixtures/encoders/bert and
roberta, tests/fixtures/models/gpt2_tiny and llama_gqa), adds a
classification head of random weights (float64 drawn with torch.manual_seed
401..404, rounded to F32), and writes Hugging Face sequence classifiers:
tests/fixtures/classifiers/NAME/{config.json, model.safetensors}, the body's
tensors under the classifier's names (BertForSequenceClassification's
"bert." body, pooler and classifier; RobertaForSequenceClassification's
classifier.dense / out_proj; GPT2ForSequenceClassification's and
LlamaForSequenceClassification's score, no bias) and no language-model head.
The expected outputs come from the PyTorch forwards below, written here
from transformers' modeling_bert / modeling_roberta / modeling_gpt2 /
modeling_llama (float64, one thread), not from headscope's code; a layer's
heads are as many as its projections hold (HF's rule for pruned_heads: the
kept heads' rows, ascending); zfn(layer,
z) (optional) sees and may replace each layer's head outputs z (B, H, T, dh)
before they merge (the ablations and gates of tests/task_heads_oracle.py):

* BERT: word + position + token-type-0 embeddings, LayerNorm; post-LN
  layers with exact GELU; keys that are pad_token_id masked;
  pooler tanh(W_p h[:, 0] + b_p), classifier.
* RoBERTa: the same with positions from padding_idx + 1 over the real tokens;
  classifier.dense + tanh + out_proj on h[:, 0].
* GPT-2 / Llama: the causal body through the final norm; score at the
  rightmost token whose id is not pad_token_id (transformers >= 4.45's
  rule), padding to the right, a pad id also inside one text (pad = eos).

Output tests/fixtures/classifiers.txt ('case NAME', 'int B/T/K', 'tensor
tokens 2 B T', 'tensor pool 1 B', 'tensor logits 2 B K'; tests/fixture.h).
Regenerate from the repo root: /usr/bin/python3 scripts/oracle/gen_classifiers.py
(twice gives byte-identical files).
"""
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "classifiers")


def read_st(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for k, e in head.items():
        if k == "__metadata__" or e["dtype"] != "F32":
            continue
        a, b = e["data_offsets"]
        x = np.frombuffer(raw[8 + n + a:8 + n + b], "<f4").astype(np.float64)
        k = k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta",
                                                                      "LayerNorm.bias")
        out[k] = torch.from_numpy(x.copy()).reshape(e["shape"])
    return out


def write_st(path, tensors):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for k, t in tensors.items():
        b = t.to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[k] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-(8 + len(h))) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def f32(t):
    return t.to(torch.float32).to(torch.float64)


def ln(x, w, b, eps):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def encoder_hidden(W, c, idx, roberta, zfn=None, types=None):
    p = "roberta." if roberta else "bert."
    D, H = c["hidden_size"], c["num_attention_heads"]
    dh, eps, pad = D // H, c["layer_norm_eps"], c["pad_token_id"]
    Bn, Tn = idx.shape
    if roberta:  # create_position_ids_from_input_ids
        mask = idx.ne(pad).long()
        pos = torch.cumsum(mask, dim=1) * mask + pad
    else:
        pos = torch.arange(Tn).expand(Bn, Tn)
    x = (W[p + "embeddings.word_embeddings.weight"][idx] +
         W[p + "embeddings.token_type_embeddings.weight"][torch.zeros_like(idx) if types is None
                                                          else types] +
         W[p + "embeddings.position_embeddings.weight"][pos])
    x = ln(x, W[p + "embeddings.LayerNorm.weight"], W[p + "embeddings.LayerNorm.bias"], eps)
    ext = (1.0 - idx.ne(pad).double()[:, None, None, :]) * torch.finfo(torch.float64).min

    def lin(h, name):
        return h @ W[name + ".weight"].T + W[name + ".bias"]

    for i in range(c["num_hidden_layers"]):
        q = f"{p}encoder.layer.{i}."
        Hl = W[q + "attention.self.query.weight"].shape[0] // dh  # fewer with pruned_heads
        heads = lambda y: y.view(Bn, Tn, Hl, dh).permute(0, 2, 1, 3)
        qq, kk, vv = (heads(lin(x, q + "attention.self." + s)) for s in ("query", "key", "value"))
        probs = torch.softmax(qq @ kk.transpose(-1, -2) / math.sqrt(dh) + ext, dim=-1)
        ctx = probs @ vv
        ctx = (zfn(i, ctx) if zfn else ctx).permute(0, 2, 1, 3).reshape(Bn, Tn, Hl * dh)
        x = ln(lin(ctx, q + "attention.output.dense") + x, W[q + "attention.output.LayerNorm.weight"],
               W[q + "attention.output.LayerNorm.bias"], eps)
        inter = F.gelu(lin(x, q + "intermediate.dense"))
        x = ln(lin(inter, q + "output.dense") + x, W[q + "output.LayerNorm.weight"],
               W[q + "output.LayerNorm.bias"], eps)
    return x


def gpt2_hidden(W, c, idx, zfn=None):
    D, H, eps = c["n_embd"], c["n_head"], c["layer_norm_epsilon"]
    Bn, Tn = idx.shape
    dh = D // H
    x = W["wte.weight"][idx] + W["wpe.weight"][torch.arange(Tn)]
    causal = torch.full((Tn, Tn), float("-inf")).triu(1)
    gelu_new = lambda y: 0.5 * y * (1 + torch.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y ** 3)))
    for i in range(c["n_layer"]):
        q = f"h.{i}."
        h = ln(x, W[q + "ln_1.weight"], W[q + "ln_1.bias"], eps)
        qkv = h @ W[q + "attn.c_attn.weight"] + W[q + "attn.c_attn.bias"]  # Conv1D: x W + b
        Hl = qkv.shape[-1] // 3 // dh  # fewer with pruned_heads
        heads = [t.view(Bn, Tn, Hl, dh).permute(0, 2, 1, 3) for t in qkv.split(Hl * dh, dim=-1)]
        probs = torch.softmax(heads[0] @ heads[1].transpose(-1, -2) / math.sqrt(dh) + causal, -1)
        ctx = probs @ heads[2]
        ctx = (zfn(i, ctx) if zfn else ctx).permute(0, 2, 1, 3).reshape(Bn, Tn, Hl * dh)
        x = x + ctx @ W[q + "attn.c_proj.weight"] + W[q + "attn.c_proj.bias"]
        h = ln(x, W[q + "ln_2.weight"], W[q + "ln_2.bias"], eps)
        x = x + gelu_new(h @ W[q + "mlp.c_fc.weight"] + W[q + "mlp.c_fc.bias"]) @ \
            W[q + "mlp.c_proj.weight"] + W[q + "mlp.c_proj.bias"]
    return ln(x, W["ln_f.weight"], W["ln_f.bias"], eps)


def llama_hidden(W, c, idx, zfn=None):
    D, H, G = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    eps, theta = c["rms_norm_eps"], c["rope_theta"]
    Bn, Tn = idx.shape
    dh = D // H
    rms = lambda y, w: w * (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps))
    inv = 1.0 / (theta ** (torch.arange(0, dh, 2).double() / dh))
    ang = torch.outer(torch.arange(Tn).double(), inv)
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    rot = lambda y: torch.cat([-y[..., dh // 2:], y[..., :dh // 2]], -1)
    causal = torch.full((Tn, Tn), float("-inf")).triu(1)
    x = W["model.embed_tokens.weight"][idx]
    for i in range(c["num_hidden_layers"]):
        q = f"model.layers.{i}."
        h = rms(x, W[q + "input_layernorm.weight"])
        proj = lambda s, n: (h @ W[q + "self_attn." + s + ".weight"].T).view(Bn, Tn, n, dh).transpose(1, 2)
        qq, kk, vv = proj("q_proj", H), proj("k_proj", G), proj("v_proj", G)
        qq, kk = qq * cos + rot(qq) * sin, kk * cos + rot(kk) * sin
        kk, vv = kk.repeat_interleave(H // G, 1), vv.repeat_interleave(H // G, 1)
        probs = torch.softmax(qq @ kk.transpose(-1, -2) / math.sqrt(dh) + causal, -1)
        ctx = probs @ vv
        ctx = (zfn(i, ctx) if zfn else ctx).transpose(1, 2).reshape(Bn, Tn, D)
        x = x + ctx @ W[q + "self_attn.o_proj.weight"].T
        h = rms(x, W[q + "post_attention_layernorm.weight"])
        mlp = lambda n: h @ W[q + "mlp." + n + ".weight"].T
        x = x + (F.silu(mlp("gate_proj")) * mlp("up_proj")) @ W[q + "mlp.down_proj.weight"].T
    return rms(x, W["model.norm.weight"])


def pool_last(idx, pad):
    """transformers >= 4.45: the rightmost position whose id is not pad_token_id."""
    non_pad = idx.ne(pad).long()
    return (torch.arange(idx.shape[1]) * non_pad).argmax(-1)


def fmt(t):
    return " ".join("%.17g" % v for v in t.flatten().tolist())


def main():
    cases = [  # name, source, family, K, seed
        ("bert", os.path.join(FIX, "encoders", "bert"), "bert", 3, 401),
        ("roberta", os.path.join(FIX, "encoders", "roberta"), "roberta", 2, 402),
        ("gpt2", os.path.join(FIX, "models", "gpt2_tiny"), "gpt2", 3, 403),
        ("llama", os.path.join(FIX, "models", "llama_gqa"), "llama", 4, 404),
    ]
    lines = []
    for name, src, fam, K, seed in cases:
        c = json.load(open(os.path.join(src, "config.json")))
        W = read_st(os.path.join(src, "model.safetensors"))
        torch.manual_seed(seed)
        D = c.get("hidden_size", c.get("n_embd"))
        enc = fam in ("bert", "roberta")
        if enc:  # the body only, then the head
            W = {k: v for k, v in W.items() if k.startswith(fam + ".")
                 and not k.startswith(fam + ".pooler")}
            dense = ("bert.pooler.dense" if fam == "bert" else "classifier.dense")
            out = ("classifier" if fam == "bert" else "classifier.out_proj")
            W[dense + ".weight"] = f32(torch.randn(D, D) * 0.3)
            W[dense + ".bias"] = f32(torch.randn(D) * 0.1)
            W[out + ".weight"] = f32(torch.randn(K, D) * 0.5)
            W[out + ".bias"] = f32(torch.randn(K) * 0.1)
            c["architectures"] = ["BertForSequenceClassification" if fam == "bert"
                                  else "RobertaForSequenceClassification"]
            pad = c["pad_token_id"]
        else:
            W = {k: v for k, v in W.items() if not k.startswith("lm_head")}
            W["score.weight"] = f32(torch.randn(K, D) * 0.5)
            pad = c["vocab_size"] - 1
            c["pad_token_id"] = pad
            c["architectures"] = ["GPT2ForSequenceClassification" if fam == "gpt2"
                                  else "LlamaForSequenceClassification"]
        c["id2label"] = {str(k): "class_%d" % k for k in range(K)}
        c["label2id"] = {"class_%d" % k: k for k in range(K)}
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=2, sort_keys=True)
        write_st(os.path.join(d, "model.safetensors"), W)
        # three sequences padded on the right to T; a decoder's third holds
        # the pad id inside its text (pad = eos)
        T, V = 8, c["vocab_size"]
        g = torch.Generator().manual_seed(seed + 100)
        lengths = [8, 5, 6]
        idx = torch.full((3, T), pad, dtype=torch.long)
        for b, n in enumerate(lengths):
            body = torch.randint(3 if enc else 0, V - 1, (n,), generator=g)
            idx[b, :n] = body
        if not enc:
            idx[2, 2] = pad
        if enc:
            hid = encoder_hidden(W, c, idx, fam == "roberta")
            pool = torch.zeros(3, dtype=torch.long)
            dense = ("bert.pooler.dense" if fam == "bert" else "classifier.dense")
            out = ("classifier" if fam == "bert" else "classifier.out_proj")
            x = torch.tanh(hid[:, 0] @ W[dense + ".weight"].T + W[dense + ".bias"])
            logits = x @ W[out + ".weight"].T + W[out + ".bias"]
        else:
            hid = gpt2_hidden(W, c, idx) if fam == "gpt2" else llama_hidden(W, c, idx)
            pool = pool_last(idx, pad)
            logits = hid[torch.arange(3), pool] @ W["score.weight"].T
        lines += ["case " + name, "int B 3", "int T %d" % T, "int K %d" % K,
                  "tensor tokens 2 3 %d" % T, fmt(idx), "tensor pool 1 3", fmt(pool),
                  "tensor logits 2 3 %d" % K, fmt(logits), "end"]
    with open(os.path.join(FIX, "classifiers.txt"), "w") as f:
        f.write("# scripts/oracle/gen_classifiers.py (torch %s)\n" % torch.__version__)
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
