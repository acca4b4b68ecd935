"""Oracle checkpoints and expected values for headscope's model runtime.

Provenance
----------
Writes small random-weight checkpoints in the Hugging Face layout
(config.json + model.safetensors, safetensors written by hand below), llm.c
token shards, and tests/fixtures/models.txt with the expected logits, losses,
gradients and optimizer trajectories. The expected values come from the
PyTorch reference implementations in this file, written from the Hugging Face
semantics (GPT2LMHeadModel, LlamaForCausalLM) and from the headscope family of
SPEC.md section 3; they are checked against each other, against
torch.nn.MultiheadAttention and against the seed's TinyLM before anything is
written (see self_check).

* torch version: written into the header of models.txt (generated with
  Debian's python3-torch 1.13); numpy only for byte packing.
* dtype: float64 everywhere (torch.set_default_dtype(torch.float64)),
  torch.set_num_threads(1). Checkpoint weights are drawn in float64, rounded
  to the stored dtype (F32; F16/BF16 for the llama_gqa_f16/_bf16 copies) and
  every expected value is computed from the rounded weights converted back to
  float64, so a loader sees exactly the weights the oracle used.
* seeds: torch.manual_seed(s) before each draw; weights 101..105 (see
  CHECKPOINTS), case tokens 201..205, train.bin 301 (gpt2_tiny) / 302
  (llama_gqa), eval.bin 303, self-checks 7. tinylm_h1/_h4 reproduce the seed's
  TinyLM: torch.manual_seed(29) and PyTorch's default float32 initialisation.
* regenerate (from the repo root; writes every file below, prints nothing):
      /usr/bin/python3 scripts/oracle/gen_models.py
  Running it twice gives byte-identical files.

Outputs: tests/fixtures/models/NAME/{config.json, model.safetensors[, train.bin,
eval.bin]} and tests/fixtures/models.txt ('case', 'int', 'tensor NAME NDIM
dims', values '%.17g', 'end'; see tests/fixture.h).
"""
import copy
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)
DT = torch.float64

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MODELS = os.path.join(ROOT, "tests", "fixtures", "models")
TXT = os.path.join(ROOT, "tests", "fixtures", "models.txt")

V, P, T, B = 48, 16, 8, 2
FX_MAX_TENSORS, FX_MAX_NAME = 64, 63  # limits of tests/fixture.c

assert sys.byteorder == "little"

# ---------------------------------------------------------------------------
# safetensors and token shards, by hand


def quantize(t, dtype):
    """float64 tensor holding exactly the values a `dtype` file stores."""
    f = t.detach().to(DT).to(torch.float32)
    if dtype == "F32":
        return f.to(DT)
    if dtype == "F16":
        return f.half().to(DT)
    if dtype == "BF16":
        return decode(encode(t, "BF16"), "BF16", list(t.shape))
    raise ValueError(dtype)


def encode(t, dtype):
    f = t.detach().to(DT).to(torch.float32).contiguous()
    if dtype == "F32":
        return f.numpy().astype("<f4").tobytes()
    if dtype == "F16":
        return f.half().numpy().astype("<f2").tobytes()
    if dtype == "BF16":  # upper 16 bits of the float32 bits, round to nearest even
        bits = f.numpy().view("<u4").astype(np.uint64)
        r = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")
        ref = f.bfloat16().view(torch.int16).numpy().view("<u2")
        assert np.array_equal(r.reshape(ref.shape), ref)
        return r.tobytes()
    raise ValueError(dtype)


def decode(data, dtype, shape):
    if dtype == "F32":
        a = np.frombuffer(data, "<f4")
    elif dtype == "F16":
        a = np.frombuffer(data, "<f2").astype(np.float32)
    elif dtype == "BF16":
        a = (np.frombuffer(data, "<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        raise ValueError(dtype)
    return torch.from_numpy(a.astype(np.float64)).reshape(shape)


def write_safetensors(path, tensors, dtype):
    """tensors: ordered {name: float64 tensor}; packed back to back in that order."""
    header = {"__metadata__": {"format": "pt"}}
    blobs, off = [], 0
    for name, t in tensors.items():
        b = encode(t, dtype)
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((-(8 + len(h))) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """Our own parser: {name: (dtype, float64 tensor)} in file order, offsets checked."""
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    assert (8 + n) % 8 == 0
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    assert header.pop("__metadata__") == {"format": "pt"}
    data, out, pos = raw[8 + n:], {}, 0
    size = {"F32": 4, "F16": 2, "BF16": 2}
    for name, e in header.items():
        b, end = e["data_offsets"]
        assert b == pos and end - b == size[e["dtype"]] * math.prod(e["shape"])
        out[name] = (e["dtype"], decode(data[b:end], e["dtype"], e["shape"]))
        pos = end
    assert pos == len(data)
    return out


def write_shard(path, tokens):
    """llm.c shard: 256 int32 header (20240520, 1, count) then uint16 tokens."""
    hdr = np.zeros(256, "<i4")
    hdr[0], hdr[1], hdr[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(hdr.tobytes())
        f.write(np.asarray(tokens.tolist(), "<u2").tobytes())
    with open(path, "rb") as f:
        raw = f.read()
    back = np.frombuffer(raw[1024:], "<u2")
    assert np.frombuffer(raw[:1024], "<i4")[2] == len(tokens) and back.tolist() == tokens.tolist()


# ---------------------------------------------------------------------------
# shared pieces


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)  # biased variance
    y = (x - mu) / torch.sqrt(var + eps) * w
    return y + b if b is not None else y


def rms_norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def silu(x):
    return x * torch.sigmoid(x)


def causal_attend(q, k, v):
    """q (B,H,T,dh), k/v (B,H,T,dh) -> (B,H,T,dh); causal, scale 1/sqrt(dh)."""
    Tn, dh = q.shape[-2], q.shape[-1]
    s = q @ k.transpose(-1, -2) / math.sqrt(dh)
    blocked = torch.ones(Tn, Tn, dtype=torch.bool).triu(1)
    return s.masked_fill(blocked, float("-inf")).softmax(-1) @ v


def rope_cos_sin(positions, dh, theta):
    """HF LlamaRotaryEmbedding in float64: (T, dh) cos and sin."""
    inv_freq = 1.0 / theta ** (torch.arange(0, dh, 2, dtype=DT) / dh)
    freqs = positions.to(DT)[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


def apply_rope(x, cos, sin):
    """x (..., T, dh); pairs dim i with dim i + dh/2 (HF rotate-half)."""
    return x * cos + rotate_half(x) * sin


# ---------------------------------------------------------------------------
# gpt2: HF GPT2LMHeadModel


def gpt2_config(d, L, H):
    return {"model_type": "gpt2", "vocab_size": V, "n_positions": P, "n_embd": d, "n_layer": L,
            "n_head": H, "n_inner": None, "activation_function": "gelu_new",
            "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True,
            "architectures": ["GPT2LMHeadModel"]}


def gpt2_spec(c):
    d, L = c["n_embd"], c["n_layer"]
    s = [("wte.weight", [c["vocab_size"], d], "mat"), ("wpe.weight", [c["n_positions"], d], "mat")]
    for i in range(L):
        p = f"h.{i}."
        s += [(p + "ln_1.weight", [d], "normw"), (p + "ln_1.bias", [d], "bias"),
              (p + "attn.c_attn.weight", [d, 3 * d], "mat"), (p + "attn.c_attn.bias", [3 * d], "bias"),
              (p + "attn.c_proj.weight", [d, d], "mat"), (p + "attn.c_proj.bias", [d], "bias"),
              (p + "ln_2.weight", [d], "normw"), (p + "ln_2.bias", [d], "bias"),
              (p + "mlp.c_fc.weight", [d, 4 * d], "mat"), (p + "mlp.c_fc.bias", [4 * d], "bias"),
              (p + "mlp.c_proj.weight", [4 * d, d], "mat"), (p + "mlp.c_proj.bias", [d], "bias")]
    return s + [("ln_f.weight", [d], "normw"), ("ln_f.bias", [d], "bias")]


def gpt2_attn(x, w_attn, b_attn, w_proj, b_proj, H):
    Bn, Tn, d = x.shape
    dh = d // H
    q, k, v = (x @ w_attn + b_attn).split(d, -1)  # Conv1D: [in, out]

    def heads(t):
        return t.reshape(Bn, Tn, H, dh).transpose(1, 2)

    y = causal_attend(heads(q), heads(k), heads(v)).transpose(1, 2).reshape(Bn, Tn, d)
    return y @ w_proj + b_proj


def gpt2_forward(W, c, idx):
    Tn, eps, H = idx.shape[1], c["layer_norm_epsilon"], c["n_head"]
    x = W["wte.weight"][idx] + W["wpe.weight"][:Tn]
    for i in range(c["n_layer"]):
        p = f"h.{i}."
        a = layer_norm(x, W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps)
        x = x + gpt2_attn(a, W[p + "attn.c_attn.weight"], W[p + "attn.c_attn.bias"],
                          W[p + "attn.c_proj.weight"], W[p + "attn.c_proj.bias"], H)
        m = layer_norm(x, W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
        m = gelu_new(m @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"])
        x = x + m @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    x = layer_norm(x, W["ln_f.weight"], W["ln_f.bias"], eps)
    return x @ W["wte.weight"].T


# ---------------------------------------------------------------------------
# llama: HF LlamaForCausalLM


def llama_config(d, L, H, G, Fd, tie):
    return {"model_type": "llama", "vocab_size": V, "hidden_size": d, "intermediate_size": Fd,
            "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": G,
            "max_position_embeddings": P, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
            "tie_word_embeddings": tie, "attention_bias": False, "mlp_bias": False,
            "hidden_act": "silu", "architectures": ["LlamaForCausalLM"]}


def llama_spec(c):
    d, Fd, H, G = c["hidden_size"], c["intermediate_size"], c["num_attention_heads"], c["num_key_value_heads"]
    dh = d // H
    s = [("model.embed_tokens.weight", [c["vocab_size"], d], "mat")]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        s += [(p + "input_layernorm.weight", [d], "normw"),
              (p + "self_attn.q_proj.weight", [H * dh, d], "mat"),
              (p + "self_attn.k_proj.weight", [G * dh, d], "mat"),
              (p + "self_attn.v_proj.weight", [G * dh, d], "mat"),
              (p + "self_attn.o_proj.weight", [d, H * dh], "mat"),
              (p + "post_attention_layernorm.weight", [d], "normw"),
              (p + "mlp.gate_proj.weight", [Fd, d], "mat"),
              (p + "mlp.up_proj.weight", [Fd, d], "mat"),
              (p + "mlp.down_proj.weight", [d, Fd], "mat")]
    s += [("model.norm.weight", [d], "normw")]
    if not c["tie_word_embeddings"]:
        s += [("lm_head.weight", [c["vocab_size"], d], "mat")]
    return s


def llama_forward(W, c, idx):
    Bn, Tn = idx.shape
    H, G, eps = c["num_attention_heads"], c["num_key_value_heads"], c["rms_norm_eps"]
    dh = c["hidden_size"] // H
    cos, sin = rope_cos_sin(torch.arange(Tn), dh, c["rope_theta"])
    x = W["model.embed_tokens.weight"][idx]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        q = (h @ W[p + "self_attn.q_proj.weight"].T).view(Bn, Tn, H, dh).transpose(1, 2)
        k = (h @ W[p + "self_attn.k_proj.weight"].T).view(Bn, Tn, G, dh).transpose(1, 2)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).view(Bn, Tn, G, dh).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        k, v = k.repeat_interleave(H // G, 1), v.repeat_interleave(H // G, 1)  # HF repeat_kv
        o = causal_attend(q, k, v).transpose(1, 2).reshape(Bn, Tn, H * dh)
        x = x + o @ W[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        m = silu(h @ W[p + "mlp.gate_proj.weight"].T) * (h @ W[p + "mlp.up_proj.weight"].T)
        x = x + m @ W[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, W["model.norm.weight"], eps)
    lm = W["model.embed_tokens.weight"] if c["tie_word_embeddings"] else W["lm_head.weight"]
    return x @ lm.T


# ---------------------------------------------------------------------------
# headscope: our family (SPEC.md section 3)


def hs_config(**kw):
    c = {"model_type": "headscope", "vocab_size": V, "n_layer": None, "d_model": None,
         "n_head": None, "n_kv_head": None, "head_dim": None, "n_ctx": P,
         "positional": None, "rope_theta": 10000.0, "norm": None, "norm_position": None,
         "norm_eps": 1e-5, "final_norm": None, "mlp": None, "d_ff": None, "attn_bias": None,
         "mlp_bias": None, "norm_bias": None, "lm_head_bias": None, "tie_word_embeddings": None}
    for k, v in kw.items():
        assert k in c, k
        c[k] = v
    assert all(v is not None for v in c.values()), c
    return c


def per_layer(v, i):
    return v[i] if isinstance(v, list) else v


def hs_spec(c):
    d, Vn, dh, Fd = c["d_model"], c["vocab_size"], c["head_dim"], c["d_ff"]
    s = [("wte.weight", [Vn, d], "mat")]
    if c["positional"] == "learned":
        s += [("wpe.weight", [c["n_ctx"], d], "mat")]

    def norm(p):
        out = [(p + ".weight", [d], "normw")]
        if c["norm"] == "layernorm" and c["norm_bias"]:
            out += [(p + ".bias", [d], "bias")]
        return out

    def lin(p, o, i, bias):
        return [(p + ".weight", [o, i], "mat")] + ([(p + ".bias", [o], "bias")] if bias else [])

    for i in range(c["n_layer"]):
        p, H, G = f"h.{i}.", per_layer(c["n_head"], i), per_layer(c["n_kv_head"], i)
        s += norm(p + "ln_1")
        s += lin(p + "attn.q_proj", H * dh, d, c["attn_bias"])
        s += lin(p + "attn.k_proj", G * dh, d, c["attn_bias"])
        s += lin(p + "attn.v_proj", G * dh, d, c["attn_bias"])
        s += lin(p + "attn.o_proj", d, H * dh, c["attn_bias"])
        if c["mlp"] != "none":
            s += norm(p + "ln_2")
        if c["mlp"] == "gelu":
            s += lin(p + "mlp.fc", Fd, d, c["mlp_bias"]) + lin(p + "mlp.proj", d, Fd, c["mlp_bias"])
        elif c["mlp"] == "swiglu":
            s += lin(p + "mlp.gate_proj", Fd, d, c["mlp_bias"]) + lin(p + "mlp.up_proj", Fd, d, c["mlp_bias"])
            s += lin(p + "mlp.down_proj", d, Fd, c["mlp_bias"])
    if c["final_norm"]:
        s += norm("ln_f")
    if not c["tie_word_embeddings"]:
        s += [("lm_head.weight", [Vn, d], "mat")]
    if c["lm_head_bias"]:
        s += [("lm_head.bias", [Vn], "bias")]
    return s


def hs_forward(W, c, idx):
    Bn, Tn = idx.shape
    dh, eps = c["head_dim"], c["norm_eps"]

    def lin(x, p):
        y = x @ W[p + ".weight"].T
        return y + W[p + ".bias"] if (p + ".bias") in W else y

    def norm(x, p):
        if c["norm"] == "layernorm":
            return layer_norm(x, W[p + ".weight"], W.get(p + ".bias"), eps)
        return rms_norm(x, W[p + ".weight"], eps)

    def attn(x, p, H, G):
        q = lin(x, p + "q_proj").reshape(Bn, Tn, H, dh).transpose(1, 2)
        k = lin(x, p + "k_proj").reshape(Bn, Tn, G, dh).transpose(1, 2)
        v = lin(x, p + "v_proj").reshape(Bn, Tn, G, dh).transpose(1, 2)
        if c["positional"] == "rope":
            cos, sin = rope_cos_sin(torch.arange(Tn), dh, c["rope_theta"])
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        group = torch.arange(H) // (H // G)  # query head h reads kv head h // (H/G)
        z = causal_attend(q, k[:, group], v[:, group])
        return lin(z.transpose(1, 2).reshape(Bn, Tn, H * dh), p + "o_proj")

    def mlp(x, p):
        if c["mlp"] == "gelu":
            return lin(gelu_new(lin(x, p + "fc")), p + "proj")
        return lin(silu(lin(x, p + "gate_proj")) * lin(x, p + "up_proj"), p + "down_proj")

    x = W["wte.weight"][idx]
    if c["positional"] == "learned":
        x = x + W["wpe.weight"][:Tn]
    for i in range(c["n_layer"]):
        p, H, G = f"h.{i}.", per_layer(c["n_head"], i), per_layer(c["n_kv_head"], i)
        if c["norm_position"] == "pre":
            x = x + attn(norm(x, p + "ln_1"), p + "attn.", H, G)
            if c["mlp"] != "none":
                x = x + mlp(norm(x, p + "ln_2"), p + "mlp.")
        else:
            x = norm(x + attn(x, p + "attn.", H, G), p + "ln_1")
            if c["mlp"] != "none":
                x = norm(x + mlp(x, p + "mlp."), p + "ln_2")
    if c["final_norm"]:
        x = norm(x, "ln_f")
    logits = x @ (W["wte.weight"] if c["tie_word_embeddings"] else W["lm_head.weight"]).T
    return logits + W["lm_head.bias"] if c["lm_head_bias"] else logits


# ---------------------------------------------------------------------------
# checkpoints


def draw_weights(spec, seed):
    """GPT-2-like init, larger: matrices N(0,0.2), biases N(0,0.1), norm weights
    1+N(0,0.1); drawn in float64 in spec order, then rounded to float32."""
    torch.manual_seed(seed)
    W = {}
    for name, shape, kind in spec:
        r = torch.randn(shape)
        W[name] = {"mat": 0.2 * r, "bias": 0.1 * r, "normw": 1.0 + 0.1 * r}[kind]
        W[name] = quantize(W[name], "F32")
    return W


def write_checkpoint(name, config, spec, W, dtype="F32"):
    d = os.path.join(MODELS, name)
    os.makedirs(d, exist_ok=True)
    assert [n for n, _, _ in spec] == list(W) and all(list(W[n].shape) == s for n, s, _ in spec)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(json.dumps(config, indent=2) + "\n")
    Wq = {n: quantize(t, dtype) for n, t in W.items()}
    path = os.path.join(d, "model.safetensors")
    write_safetensors(path, Wq, dtype)
    back = read_safetensors(path)
    assert list(back) == list(Wq)
    for n, (dt, t) in back.items():
        assert dt == dtype and torch.equal(t, Wq[n]), n
    return Wq


# ---------------------------------------------------------------------------
# fixture text


class Fixture:
    def __init__(self):
        self.lines = []

    def case(self, name, ints, tensors):
        assert len(tensors) <= FX_MAX_TENSORS and len(ints) <= 32
        self.lines.append(f"case {name}")
        for k, v in ints.items():
            self.lines.append(f"int {k} {int(v)}")
        for k, t in tensors.items():
            assert len(k) <= FX_MAX_NAME, k
            t = t.detach().to(DT).contiguous()
            assert bool(torch.isfinite(t).all()), (name, k)
            self.lines.append(f"tensor {k} {t.dim()} " + " ".join(str(s) for s in t.shape))
            vals = ["%.17g" % v for v in t.reshape(-1).tolist()]
            for i in range(0, len(vals), 8):
                self.lines.append(" ".join(vals[i:i + 8]))
        self.lines.append("end")

    def write(self, path, header):
        with open(path, "w") as f:
            f.write("\n".join(header + self.lines) + "\n")


def token_losses(logits, targets):
    """(B,T) per-position cross-entropy."""
    Bn, Tn, Vn = logits.shape
    return F.cross_entropy(logits.reshape(-1, Vn), targets.reshape(-1), reduction="none").view(Bn, Tn)


def forward_case(fx, name, fwd, W, c, Vn, tokens, grads):
    params = {n: t.clone().requires_grad_(grads) for n, t in W.items()}
    logits = fwd(params, c, tokens[:, :-1])
    tl = token_losses(logits, tokens[:, 1:])
    loss = tl.mean()
    out = {"tokens": tokens, "logits": logits, "loss": loss.reshape(1), "seq_loss": tl.mean(1)}
    if grads:
        g = torch.autograd.grad(loss, list(params.values()))
        out.update({"grad:" + n: gi for n, gi in zip(params, g)})
    Bn, Tn = tokens.shape[0], tokens.shape[1] - 1
    fx.case(name, {"B": Bn, "T": Tn, "V": Vn}, out)


def train_case(fx, name, fwd, W, c, Vn, tokens, opt_cls, opt_kw, steps=10, lr=1e-3):
    """llm.c-style batches with wrap-around; loss recorded before each update."""
    params = {n: t.clone().requires_grad_(True) for n, t in W.items()}
    opt = opt_cls(list(params.values()), lr=lr, betas=(0.9, 0.999), eps=1e-8, **opt_kw)
    pos, losses, n = 0, [], len(tokens)
    for _ in range(steps):
        if pos + B * T + 1 > n:
            pos = 0
        buf = tokens[pos:pos + B * T + 1]
        x, y = buf[:-1].view(B, T), buf[1:].view(B, T)
        pos += B * T
        opt.zero_grad(set_to_none=True)
        loss = token_losses(fwd(params, c, x), y).mean()
        loss.backward()
        losses.append(loss.detach().clone())
        opt.step()
    out = {"lr": torch.tensor([lr]), "losses": torch.stack(losses)}
    out.update({"final:" + k: p.detach() for k, p in params.items()})
    fx.case(name, {"B": B, "T": T, "steps": steps}, out)


def eval_case(fx, name, fwd, W, c, tokens, batches):
    per_seq = []
    for i in range(batches):
        buf = tokens[i * B * T:i * B * T + B * T + 1]
        tl = token_losses(fwd(W, c, buf[:-1].view(B, T)), buf[1:].view(B, T))
        per_seq.append(tl.mean(1))
    per_seq = torch.cat(per_seq)
    loss = per_seq.mean()  # equal-length sequences: the mean over all positions
    stderr = per_seq.std(unbiased=True) / math.sqrt(per_seq.numel())
    fx.case(name, {"B": B, "T": T, "batches": batches},
            {"loss": loss.reshape(1), "stderr": stderr.reshape(1)})


# ---------------------------------------------------------------------------
# the seed's TinyLM (verbatim semantics, cache-less), for tinylm_h1/_h4


class SeedGQA(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads=None):
        super().__init__()
        g = n_heads if n_kv_heads is None else n_kv_heads
        self.d, self.h, self.g, self.dh = d_model, n_heads, g, d_model // n_heads
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, g * self.dh, bias=False)
        self.W_v = nn.Linear(d_model, g * self.dh, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x):
        Bn, Tn, D = x.shape
        q = self.W_q(x).reshape(Bn, Tn, self.h, self.dh).transpose(1, 2)
        k = self.W_k(x).reshape(Bn, Tn, self.g, self.dh).transpose(1, 2)
        v = self.W_v(x).reshape(Bn, Tn, self.g, self.dh).transpose(1, 2)
        allowed = torch.arange(Tn)[None, :] <= torch.arange(Tn)[:, None]
        kr, vr = k.repeat_interleave(self.h // self.g, 1), v.repeat_interleave(self.h // self.g, 1)
        a = (q @ kr.transpose(-2, -1) / math.sqrt(self.dh)).masked_fill(~allowed, -torch.inf).softmax(-1)
        return self.W_o((a @ vr).transpose(1, 2).reshape(Bn, Tn, D))


class SeedTinyLM(nn.Module):
    def __init__(self, heads):
        super().__init__()
        self.emb = nn.Embedding(5, 16)
        self.pos = nn.Parameter(torch.randn(1, 8, 16) * .01)
        self.attn = SeedGQA(16, heads)
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 5)

    def forward(self, ids):
        x = self.emb(ids) + self.pos[:, :ids.shape[1]]
        return self.head(self.norm(x + self.attn(x)))


TINY_NAMES = {"emb.weight": "wte.weight", "pos": "wpe.weight",
              "attn.W_q.weight": "h.0.attn.q_proj.weight", "attn.W_k.weight": "h.0.attn.k_proj.weight",
              "attn.W_v.weight": "h.0.attn.v_proj.weight", "attn.W_o.weight": "h.0.attn.o_proj.weight",
              "norm.weight": "h.0.ln_1.weight", "norm.bias": "h.0.ln_1.bias",
              "head.weight": "lm_head.weight", "head.bias": "lm_head.bias"}
SEQ = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3], [1, 2, 3, 4, 0, 1, 2, 3, 4]])


def seed_state():
    """torch.manual_seed(29); TinyLM(1) with PyTorch's default float32 init."""
    torch.set_default_dtype(torch.float32)
    try:
        torch.manual_seed(29)
        state = copy.deepcopy(SeedTinyLM(1).state_dict())
    finally:
        torch.set_default_dtype(DT)
    return state


def tiny_config(h):
    return hs_config(vocab_size=5, n_layer=1, d_model=16, n_head=h, n_kv_head=h, head_dim=16 // h,
                     n_ctx=8, positional="learned", norm="layernorm", norm_position="post",
                     final_norm=False, mlp="none", d_ff=0, attn_bias=False, mlp_bias=False,
                     norm_bias=True, lm_head_bias=True, tie_word_embeddings=False)


def headcount_losses(train_step_model, params, lr=0.02, steps=25):
    opt = torch.optim.Adam(params, lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        z = train_step_model(SEQ[:, :-1])
        loss = F.cross_entropy(z.flatten(0, 1), SEQ[:, 1:].flatten())
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return torch.tensor(losses, dtype=DT)


# ---------------------------------------------------------------------------
# self-checks (assertions only)


def close(a, b, tol=1e-12):
    return torch.allclose(a, b, rtol=0, atol=tol)


def self_check():
    torch.manual_seed(7)
    # gpt2 attention == nn.MultiheadAttention with the Conv1D weights transposed.
    d, H, Tn = 16, 4, 6
    x = torch.randn(2, Tn, d)
    wa, ba, wp, bp = torch.randn(d, 3 * d) * .3, torch.randn(3 * d) * .1, torch.randn(d, d) * .3, torch.randn(d) * .1
    mha = nn.MultiheadAttention(d, H, batch_first=True, dropout=0.)
    with torch.no_grad():
        mha.in_proj_weight.copy_(wa.T)
        mha.in_proj_bias.copy_(ba)
        mha.out_proj.weight.copy_(wp.T)
        mha.out_proj.bias.copy_(bp)
    blocked = torch.ones(Tn, Tn, dtype=torch.bool).triu(1)
    ref, _ = mha(x, x, x, attn_mask=blocked, need_weights=False)
    assert close(gpt2_attn(x, wa, ba, wp, bp, H), ref)

    # rotate-half RoPE: q'.k' depends only on the position difference.
    for dh, theta in [(4, 10000.0), (8, 10000.0), (16, 500.0)]:
        q, k = torch.randn(dh), torch.randn(dh)
        cos, sin = rope_cos_sin(torch.arange(8), dh, theta)

        def dot(tq, tk):
            return apply_rope(q, cos[tq], sin[tq]) @ apply_rope(k, cos[tk], sin[tk])

        assert abs(dot(3, 1) - dot(7, 5)) < 1e-12 and abs(dot(2, 2) - q @ k) < 1e-12
        assert abs(dot(3, 1) - dot(1, 3)) > 1e-6  # not trivially symmetric

    # cross-entropy == log-sum-exp minus the target logit.
    lg, tg = torch.randn(2, 3, 5), torch.randint(0, 5, (2, 3))
    manual = lg.logsumexp(-1) - lg.gather(-1, tg[..., None])[..., 0]
    assert close(token_losses(lg, tg), manual)

    # headscope reference == gpt2 reference on a gpt2-shaped headscope config.
    gc = gpt2_config(16, 2, 4)
    gw = draw_weights(gpt2_spec(gc), 7)
    hc = hs_config(n_layer=2, d_model=16, n_head=4, n_kv_head=4, head_dim=4, positional="learned",
                   norm="layernorm", norm_position="pre", final_norm=True, mlp="gelu", d_ff=64,
                   attn_bias=True, mlp_bias=True, norm_bias=True, lm_head_bias=False,
                   tie_word_embeddings=True)
    hw = {"wte.weight": gw["wte.weight"], "wpe.weight": gw["wpe.weight"]}
    for i in range(2):
        p = f"h.{i}."
        wa, ba = gw[p + "attn.c_attn.weight"], gw[p + "attn.c_attn.bias"]
        hw[p + "ln_1.weight"], hw[p + "ln_1.bias"] = gw[p + "ln_1.weight"], gw[p + "ln_1.bias"]
        for j, nm in enumerate("qkv"):
            hw[p + f"attn.{nm}_proj.weight"] = wa[:, j * 16:(j + 1) * 16].T
            hw[p + f"attn.{nm}_proj.bias"] = ba[j * 16:(j + 1) * 16]
        hw[p + "attn.o_proj.weight"] = gw[p + "attn.c_proj.weight"].T
        hw[p + "attn.o_proj.bias"] = gw[p + "attn.c_proj.bias"]
        hw[p + "ln_2.weight"], hw[p + "ln_2.bias"] = gw[p + "ln_2.weight"], gw[p + "ln_2.bias"]
        hw[p + "mlp.fc.weight"], hw[p + "mlp.fc.bias"] = gw[p + "mlp.c_fc.weight"].T, gw[p + "mlp.c_fc.bias"]
        hw[p + "mlp.proj.weight"], hw[p + "mlp.proj.bias"] = gw[p + "mlp.c_proj.weight"].T, gw[p + "mlp.c_proj.bias"]
    hw["ln_f.weight"], hw["ln_f.bias"] = gw["ln_f.weight"], gw["ln_f.bias"]
    assert sorted(hw) == sorted(n for n, _, _ in hs_spec(hc))
    idx = torch.randint(0, V, (2, T))
    assert close(hs_forward(hw, hc, idx), gpt2_forward(gw, gc, idx))

    # headscope reference == llama reference on a llama-shaped headscope config.
    for G, tie in [(2, False), (1, True), (4, False)]:
        lc = llama_config(16, 2, 4, G, 24, tie)
        lw = draw_weights(llama_spec(lc), 8)
        hc = hs_config(n_layer=2, d_model=16, n_head=4, n_kv_head=G, head_dim=4, positional="rope",
                       norm="rmsnorm", norm_position="pre", norm_eps=1e-6, final_norm=True,
                       mlp="swiglu", d_ff=24, attn_bias=False, mlp_bias=False, norm_bias=False,
                       lm_head_bias=False, tie_word_embeddings=tie)
        ren = {"model.embed_tokens.weight": "wte.weight", "model.norm.weight": "ln_f.weight",
               "lm_head.weight": "lm_head.weight"}
        hw = {}
        for n, t in lw.items():
            m = ren.get(n)
            if m is None:
                m = (n.replace("model.layers.", "h.").replace("self_attn.", "attn.")
                     .replace("input_layernorm", "ln_1").replace("post_attention_layernorm", "ln_2"))
            hw[m] = t
        assert sorted(hw) == sorted(n for n, _, _ in hs_spec(hc))
        assert close(hs_forward(hw, hc, idx), llama_forward(lw, lc, idx))

    # GQA by index == explicit per-head loop (hs_mixed-like shapes, H*dh != d).
    mc = hs_config(n_layer=1, d_model=24, n_head=4, n_kv_head=2, head_dim=4, positional="none",
                   norm="rmsnorm", norm_position="pre", final_norm=False, mlp="none", d_ff=0,
                   attn_bias=True, mlp_bias=False, norm_bias=False, lm_head_bias=False,
                   tie_word_embeddings=True)
    mw = draw_weights(hs_spec(mc), 9)
    xe = mw["wte.weight"][idx]
    hn = rms_norm(xe, mw["h.0.ln_1.weight"], 1e-5)
    q = hn @ mw["h.0.attn.q_proj.weight"].T + mw["h.0.attn.q_proj.bias"]
    k = hn @ mw["h.0.attn.k_proj.weight"].T + mw["h.0.attn.k_proj.bias"]
    v = hn @ mw["h.0.attn.v_proj.weight"].T + mw["h.0.attn.v_proj.bias"]
    zs = []
    for h in range(4):
        j = h // 2
        s = q[..., 4 * h:4 * h + 4] @ k[..., 4 * j:4 * j + 4].transpose(-1, -2) / 2.0
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        zs.append(s @ v[..., 4 * j:4 * j + 4])
    xo = xe + torch.cat(zs, -1) @ mw["h.0.attn.o_proj.weight"].T + mw["h.0.attn.o_proj.bias"]
    assert close(hs_forward(mw, mc, idx), xo @ mw["wte.weight"].T)

    # torch Adam/AdamW == the textbook update, so the trajectories pin that formula.
    for wd, cls in [(0.0, torch.optim.Adam), (0.1, torch.optim.AdamW)]:
        p = torch.randn(5, requires_grad=True)
        mine, m, s = p.detach().clone(), torch.zeros(5), torch.zeros(5)
        opt = cls([p], lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd)
        for t in range(1, 6):
            opt.zero_grad()
            ((p ** 3).sum()).backward()
            g = 3 * mine ** 2
            opt.step()
            mine = mine * (1 - 1e-3 * wd)
            m, s = 0.9 * m + 0.1 * g, 0.999 * s + 0.001 * g * g
            mine = mine - 1e-3 * (m / (1 - 0.9 ** t)) / (torch.sqrt(s / (1 - 0.999 ** t)) + 1e-8)
            assert close(p.detach(), mine, 1e-14)


# ---------------------------------------------------------------------------


def case_tokens(seed, Vn):
    torch.manual_seed(seed)
    return torch.randint(0, Vn, (B, T + 1))


def shard_tokens(seed, n):
    torch.manual_seed(seed)
    return torch.randint(0, V, (n,))


def main():
    self_check()
    fx = Fixture()
    header = [
        "# headscope model oracle fixtures; generated by scripts/oracle/gen_models.py",
        f"# torch {torch.__version__}, float64, num_threads=1; weights seeds 101..105, tokens 201..205,",
        "# train.bin 301/302, eval.bin 303, tinylm torch.manual_seed(29) (seed TinyLM init)",
        "# regenerate: /usr/bin/python3 scripts/oracle/gen_models.py (from the repo root)",
        "# checkpoints: tests/fixtures/models/NAME; logits (B,T,V) for tokens[:, :T]; loss = mean",
        "# cross-entropy vs tokens[:, 1:]; grad:NAME = d loss / d stored tensor (safetensors shape);",
        "# NAME_adam*: 10 steps on NAME/train.bin, llm.c batches with wrap, losses before each update",
    ]

    # 1. gpt2_tiny
    gc = gpt2_config(16, 2, 4)
    gw = write_checkpoint("gpt2_tiny", gc, gpt2_spec(gc), draw_weights(gpt2_spec(gc), 101))
    forward_case(fx, "gpt2_tiny", gpt2_forward, gw, gc, V, case_tokens(201, V), True)
    train = shard_tokens(301, 61)
    write_shard(os.path.join(MODELS, "gpt2_tiny", "train.bin"), train)
    train_case(fx, "gpt2_tiny_adam", gpt2_forward, gw, gc, V, train, torch.optim.Adam, {"weight_decay": 0.0})
    ev = shard_tokens(303, 2 * B * T + 1)
    write_shard(os.path.join(MODELS, "gpt2_tiny", "eval.bin"), ev)
    eval_case(fx, "eval_gpt2_tiny", gpt2_forward, gw, gc, ev, 2)

    # 2. llama_gqa (+ 6. its F16 / BF16 copies)
    lc = llama_config(16, 2, 4, 2, 40, False)
    lspec = llama_spec(lc)
    lw32 = draw_weights(lspec, 102)
    lw = write_checkpoint("llama_gqa", lc, lspec, lw32)
    ltok = case_tokens(202, V)
    forward_case(fx, "llama_gqa", llama_forward, lw, lc, V, ltok, True)
    train = shard_tokens(302, 61)
    write_shard(os.path.join(MODELS, "llama_gqa", "train.bin"), train)
    train_case(fx, "llama_gqa_adam", llama_forward, lw, lc, V, train, torch.optim.Adam, {"weight_decay": 0.0})
    train_case(fx, "llama_gqa_adamw", llama_forward, lw, lc, V, train, torch.optim.AdamW, {"weight_decay": 0.1})

    # 3. llama_mqa_tied
    mc = llama_config(16, 2, 4, 1, 24, True)
    mw = write_checkpoint("llama_mqa_tied", mc, llama_spec(mc), draw_weights(llama_spec(mc), 103))
    forward_case(fx, "llama_mqa_tied", llama_forward, mw, mc, V, case_tokens(203, V), False)

    # 4. hs_mixed
    hc = hs_config(n_layer=2, d_model=24, n_head=[4, 2], n_kv_head=[2, 1], head_dim=4,
                   positional="rope", norm="rmsnorm", norm_position="pre", final_norm=True,
                   mlp="swiglu", d_ff=32, attn_bias=True, mlp_bias=True, norm_bias=False,
                   lm_head_bias=True, tie_word_embeddings=False)
    hw = write_checkpoint("hs_mixed", hc, hs_spec(hc), draw_weights(hs_spec(hc), 104))
    assert list(hw["h.0.attn.q_proj.weight"].shape) == [16, 24] and list(hw["h.1.attn.q_proj.weight"].shape) == [8, 24]
    forward_case(fx, "hs_mixed", hs_forward, hw, hc, V, case_tokens(204, V), True)

    # 5. hs_post_gelu
    pc = hs_config(n_layer=2, d_model=16, n_head=4, n_kv_head=4, head_dim=4, positional="learned",
                   norm="layernorm", norm_position="post", final_norm=False, mlp="gelu", d_ff=32,
                   attn_bias=True, mlp_bias=True, norm_bias=True, lm_head_bias=False,
                   tie_word_embeddings=True)
    pw = write_checkpoint("hs_post_gelu", pc, hs_spec(pc), draw_weights(hs_spec(pc), 105))
    forward_case(fx, "hs_post_gelu", hs_forward, pw, pc, V, case_tokens(205, V), True)

    # 6. llama_gqa as F16 / BF16: same weights, expected values from the rounded ones
    for suffix, dt in [("f16", "F16"), ("bf16", "BF16")]:
        qw = write_checkpoint("llama_gqa_" + suffix, lc, lspec, lw32, dt)
        assert not all(torch.equal(qw[n], lw[n]) for n in lw)
        forward_case(fx, "llama_gqa_" + suffix, llama_forward, qw, lc, V, ltok, False)

    # 7. the seed's TinyLM, one and four heads, same weights
    state = seed_state()
    tw = {TINY_NAMES[k]: v.to(DT).reshape(8, 16) if k == "pos" else v.to(DT) for k, v in state.items()}
    tspec = hs_spec(tiny_config(1))
    tw = {n: tw[n] for n, _, _ in tspec}
    for h in (1, 4):
        write_checkpoint(f"tinylm_h{h}", tiny_config(h), tspec, tw)
    losses = {}
    for h in (1, 4):
        c = tiny_config(h)
        params = {n: t.clone().requires_grad_(True) for n, t in tw.items()}
        losses[h] = headcount_losses(lambda ids: hs_forward(params, c, ids), list(params.values()))
        # the seed's own classes, in float64 and in float32 (as the seed runs it)
        seed64 = SeedTinyLM(h)
        seed64.load_state_dict({k: v.to(DT) for k, v in state.items()})
        with torch.no_grad():
            assert close(seed64(SEQ[:, :-1]), hs_forward(tw, c, SEQ[:, :-1]))
        assert close(headcount_losses(seed64, list(seed64.parameters())), losses[h], 1e-10)
        torch.set_default_dtype(torch.float32)
        try:
            seed32 = SeedTinyLM(h)
            seed32.load_state_dict(state)
            l32 = headcount_losses(seed32, list(seed32.parameters()))
        finally:
            torch.set_default_dtype(DT)
        assert close(l32, losses[h], 1e-4)
    fx.case("tinylm_headcount", {"steps": 25},
            {"seq": SEQ, "losses_h1": losses[1], "losses_h4": losses[4]})

    fx.write(TXT, header)


if __name__ == "__main__":
    main()
