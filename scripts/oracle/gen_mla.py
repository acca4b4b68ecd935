"""Oracle checkpoints and expected values for multi-head latent attention
(attention "mla" in the headscope family, SPEC section 10).

Provenance
----------
The attention below is written from Hugging Face's DeepseekV2Attention
(transformers' models/deepseek_v2/modeling_deepseek_v2.py, and DeepSeek's own
modeling_deepseek.py of deepseek-ai/DeepSeek-V2), not from headscope's code:

* q = q_proj(x), or q_b_proj(q_a_layernorm(q_a_proj(x))); viewed (B, T, H,
  qk_nope + qk_rope) and split per head into q_nope, q_pe.
* compressed_kv = kv_a_proj_with_mqa(x), split into the latent
  (kv_lora_rank) and k_pe (qk_rope); kv_b_proj(kv_a_layernorm(latent))
  viewed (B, T, H, qk_nope + v_head_dim) and split into k_nope, value.
* RoPE (DeepSeek's apply_rotary_pos_emb): q_pe and k_pe de-interleaved,
  view(..., d/2, 2).transpose(-1, -2).reshape(..., d), then rotate-half with
  inv_freq = theta^(-arange(0, d, 2) / d); k_pe is one head broadcast to all.
  self_check verifies this equals transformers' newer complex form
  (view_as_complex of the interleaved pairs times e^{i p inv_freq}) on the
  scores and outputs.
* query = [q_nope; q_pe], key = [k_nope; k_pe]; softmax(q k^T * scale +
  causal mask), scale = (qk_nope + qk_rope)^-0.5; attn_output = att v,
  heads concatenated, o_proj. No biases (attention_bias false).
* q_a_layernorm / kv_a_layernorm are RMSNorms with the model's norm_eps
  (headscope's rule; Hugging Face builds them with its default 1e-6, which
  is also DeepSeek-V2's rms_norm_eps).

The rest of each layer is the headscope family of SPEC section 3 (pre-norm
RMSNorm, SwiGLU MLP, final norm, untied lm_head), in headscope's tensor
names (h.{l}.ln_1, h.{l}.attn.<HF name>, h.{l}.mlp.gate_proj, ...).

* torch: Debian python3-torch (version in the header of expected.txt),
  float64 everywhere, torch.set_num_threads(1); numpy only for byte packing.
* weights: drawn in float64 with torch.manual_seed(seed), rounded to F32 (the
  stored dtype); expected values use the rounded weights.
* regenerate (from the repo root; deterministic, prints nothing):
      /usr/bin/python3 scripts/oracle/gen_mla.py

Outputs: tests/fixtures/mla/NAME/{config.json, model.safetensors,
grad.safetensors} and tests/fixtures/mla/expected.txt ('case', 'int',
'tensor NAME NDIM dims', values, 'end'; see tests/fixture.h): tokens (B, T+1),
logits (B, T, V) of tokens[:, :T], loss (mean cross-entropy against
tokens[:, 1:]), att0 (B, H, T, T) the maps of layer 0, z0 (B, T, H, v) its
head outputs. grad.safetensors: d loss / d stored tensor (F32).
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)
DT = torch.float64

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
OUT = os.path.join(ROOT, "tests", "fixtures", "mla")

V, T, B = 32, 8, 2
assert sys.byteorder == "little"

# ---------------------------------------------------------------------------
# safetensors by hand


def encode(t):
    return t.detach().to(DT).to(torch.float32).contiguous().numpy().astype("<f4").tobytes()


def write_st(path, tensors):
    header = {"__metadata__": {"format": "pt"}}
    blobs, off = [], 0
    for name, t in tensors.items():
        b = encode(t)
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((-(8 + len(h))) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


# ---------------------------------------------------------------------------
# DeepSeek-V2 attention


def rms_norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def cos_sin(dim, theta, n):
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=DT) / dim))
    freqs = torch.outer(torch.arange(n, dtype=DT), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin(), freqs


def apply_rotary_deepseek(q, k, cos, sin):
    """DeepSeek's apply_rotary_pos_emb: de-interleave, then rotate-half."""
    b, h, s, d = q.shape
    q = q.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    b, h, s, d = k.shape
    k = k.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def apply_rotary_complex(q, k, freqs):
    """transformers' newer form: complex pairs (2i, 2i+1) times e^{i p f_i}."""
    fc = torch.polar(torch.ones_like(freqs), freqs)[None, None]
    q_ = torch.view_as_complex(q.reshape(*q.shape[:-1], -1, 2).contiguous())
    k_ = torch.view_as_complex(k.reshape(*k.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(q_ * fc).flatten(3), torch.view_as_real(k_ * fc).flatten(3)


def mla_attention(W, p, c, x, rotary="deepseek"):
    """DeepseekV2Attention.forward for x (B, T, d); returns (out, att, z)."""
    bsz, n, _ = x.shape
    H, nope, rope, vd = c["n_head"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    C, eps = c["kv_lora_rank"], c["norm_eps"]
    qk = nope + rope
    if c["q_lora_rank"]:
        q = rms_norm(x @ W[p + "q_a_proj.weight"].T, W[p + "q_a_layernorm.weight"], eps)
        q = q @ W[p + "q_b_proj.weight"].T
    else:
        q = x @ W[p + "q_proj.weight"].T
    q = q.view(bsz, n, H, qk).transpose(1, 2)
    q_nope, q_pe = torch.split(q, [nope, rope], dim=-1)
    ckv = x @ W[p + "kv_a_proj_with_mqa.weight"].T
    latent, k_pe = torch.split(ckv, [C, rope], dim=-1)
    k_pe = k_pe.view(bsz, n, 1, rope).transpose(1, 2)
    kv = (rms_norm(latent, W[p + "kv_a_layernorm.weight"], eps) @ W[p + "kv_b_proj.weight"].T)
    kv = kv.view(bsz, n, H, nope + vd).transpose(1, 2)
    k_nope, value = torch.split(kv, [nope, vd], dim=-1)
    cos, sin, freqs = cos_sin(rope, c["rope_theta"], n)
    if rotary == "deepseek":
        q_pe, k_pe = apply_rotary_deepseek(q_pe, k_pe, cos, sin)
    else:
        q_pe, k_pe = apply_rotary_complex(q_pe, k_pe, freqs)
    query = torch.cat((q_nope, q_pe), dim=-1)
    key = torch.cat((k_nope, k_pe.expand(bsz, H, n, rope)), dim=-1)
    scores = query @ key.transpose(2, 3) * qk ** -0.5
    mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
    att = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
    z = (att @ value).transpose(1, 2)  # (B, T, H, v)
    out = z.reshape(bsz, n, H * vd) @ W[p + "o_proj.weight"].T
    return out, att, z


def forward(W, c, idx):
    """The headscope family: pre-norm RMSNorm layers of MLA + SwiGLU."""
    eps = c["norm_eps"]
    x = W["wte.weight"][idx]
    att0 = z0 = None
    for l in range(c["n_layer"]):
        p = f"h.{l}."
        a, att, z = mla_attention(W, p + "attn.", c, rms_norm(x, W[p + "ln_1.weight"], eps))
        if l == 0:
            att0, z0 = att, z
        x = x + a
        y = rms_norm(x, W[p + "ln_2.weight"], eps)
        g = F.silu(y @ W[p + "mlp.gate_proj.weight"].T) * (y @ W[p + "mlp.up_proj.weight"].T)
        x = x + g @ W[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, W["ln_f.weight"], eps)
    return x @ W["lm_head.weight"].T, att0, z0


# ---------------------------------------------------------------------------
# checkpoints


def spec(c):
    d, H, F_ = c["d_model"], c["n_head"], c["d_ff"]
    Q, C, nope, rope, vd = (c["q_lora_rank"], c["kv_lora_rank"], c["qk_nope_head_dim"],
                            c["qk_rope_head_dim"], c["v_head_dim"])
    s = {"wte.weight": (V, d)}
    for l in range(c["n_layer"]):
        p = f"h.{l}."
        s[p + "ln_1.weight"] = (d,)
        if Q:
            s[p + "attn.q_a_proj.weight"] = (Q, d)
            s[p + "attn.q_a_layernorm.weight"] = (Q,)
            s[p + "attn.q_b_proj.weight"] = (H * (nope + rope), Q)
        else:
            s[p + "attn.q_proj.weight"] = (H * (nope + rope), d)
        s[p + "attn.kv_a_proj_with_mqa.weight"] = (C + rope, d)
        s[p + "attn.kv_a_layernorm.weight"] = (C,)
        s[p + "attn.kv_b_proj.weight"] = (H * (nope + vd), C)
        s[p + "attn.o_proj.weight"] = (d, H * vd)
        s[p + "ln_2.weight"] = (d,)
        s[p + "mlp.gate_proj.weight"] = (F_, d)
        s[p + "mlp.up_proj.weight"] = (F_, d)
        s[p + "mlp.down_proj.weight"] = (d, F_)
    s["ln_f.weight"] = (d,)
    s["lm_head.weight"] = (V, d)
    return s


def draw(c, seed):
    torch.manual_seed(seed)
    W = {}
    for name, shape in spec(c).items():
        if len(shape) == 1:  # norm weights near 1
            t = 1 + 0.2 * torch.randn(shape)
        else:
            t = torch.randn(shape) / math.sqrt(shape[1]) * 1.5
        W[name] = t.to(torch.float32).to(DT)
    return W


def config_json(c):
    return {
        "model_type": "headscope", "vocab_size": V, "n_layer": c["n_layer"],
        "d_model": c["d_model"], "n_head": c["n_head"], "n_ctx": 64, "positional": "rope",
        "rope_theta": c["rope_theta"], "norm": "rmsnorm", "norm_position": "pre",
        "norm_eps": c["norm_eps"], "final_norm": True, "mlp": "swiglu", "d_ff": c["d_ff"],
        "attn_bias": False, "mlp_bias": False, "norm_bias": False, "lm_head_bias": False,
        "tie_word_embeddings": False, "attention": "mla", "kv_lora_rank": c["kv_lora_rank"],
        "q_lora_rank": c["q_lora_rank"] or None, "qk_nope_head_dim": c["qk_nope_head_dim"],
        "qk_rope_head_dim": c["qk_rope_head_dim"], "v_head_dim": c["v_head_dim"],
    }


BASE = {"n_layer": 2, "d_model": 16, "n_head": 2, "d_ff": 24, "kv_lora_rank": 8,
        "qk_nope_head_dim": 4, "qk_rope_head_dim": 4, "v_head_dim": 6, "rope_theta": 100.0,
        "norm_eps": 1e-5}
CASES = [  # name, q_lora_rank, seed
    ("mla_q", 0, 701),
    ("mla_qlora", 6, 702),
]


def fmt(t):
    return " ".join("%.13g" % v for v in t.reshape(-1).tolist())


def self_check():
    """DeepSeek's de-interleave + rotate-half RoPE gives the same attention
    as transformers' complex form; the per-head map equals an explicit loop
    over [q_nope; q_pe] . [k_nope; k_pe]."""
    torch.manual_seed(7)
    c = dict(BASE, q_lora_rank=0)
    W = draw(c, 7)
    x = torch.randn(1, 5, c["d_model"])
    p = "h.0.attn."
    o1, a1, _ = mla_attention(W, p, c, x, "deepseek")
    o2, a2, _ = mla_attention(W, p, c, x, "complex")
    assert torch.allclose(o1, o2, atol=1e-12) and torch.allclose(a1, a2, atol=1e-12)
    # the map of head 1 at query 3 from an explicit loop
    nope, rope, H = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["n_head"]
    q = (x @ W[p + "q_proj.weight"].T).view(5, H, nope + rope)[:, 1]
    ckv = x[0] @ W[p + "kv_a_proj_with_mqa.weight"].T
    kv = rms_norm(ckv[:, :c["kv_lora_rank"]], W[p + "kv_a_layernorm.weight"], c["norm_eps"])
    kv = (kv @ W[p + "kv_b_proj.weight"].T).view(5, H, -1)[:, 1]
    cos, sin, _ = cos_sin(rope, c["rope_theta"], 5)

    def rot(v, t):
        v = torch.cat((v[0::2], v[1::2]))
        return v * cos[t] + rotate_half(v) * sin[t]
    t = 3
    sc = torch.stack([(q[t, :nope] @ kv[s, :nope] + rot(q[t, nope:], t) @
                       rot(ckv[s, c["kv_lora_rank"]:], s)) / math.sqrt(nope + rope)
                      for s in range(t + 1)])
    assert torch.allclose(torch.softmax(sc, 0), a1[0, 1, t, :t + 1], atol=1e-12)


def main():
    self_check()
    os.makedirs(OUT, exist_ok=True)
    lines = [
        "# MLA oracle fixtures; generated by scripts/oracle/gen_mla.py",
        f"# torch {torch.__version__}, float64, num_threads=1; weight seeds 701..702, tokens 801",
        "# regenerate: /usr/bin/python3 scripts/oracle/gen_mla.py (from the repo root)",
        "# checkpoints: tests/fixtures/mla/NAME; logits (B,T,V) for tokens[:, :T]; loss = mean",
        "# cross-entropy vs tokens[:, 1:]; att0 (B,H,T,T), z0 (B,T,H,v): layer 0's maps and head",
        "# outputs; NAME/grad.safetensors: d loss / d stored tensor (F32)",
    ]
    torch.manual_seed(801)
    tokens = torch.randint(0, V, (B, T + 1))
    for name, q_lora, seed in CASES:
        c = dict(BASE, q_lora_rank=q_lora)
        W = draw(c, seed)
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config_json(c), f, indent=2)
            f.write("\n")
        write_st(os.path.join(d, "model.safetensors"), W)
        P = {k: v.clone().requires_grad_(True) for k, v in W.items()}
        logits, att0, z0 = forward(P, c, tokens[:, :T])
        loss = F.cross_entropy(logits.reshape(-1, V), tokens[:, 1:].reshape(-1))
        loss.backward()
        write_st(os.path.join(d, "grad.safetensors"), {k: P[k].grad for k in W})
        H, vd = c["n_head"], c["v_head_dim"]
        lines += [f"case {name}", f"int B {B}", f"int T {T}", f"int V {V}", f"int H {H}",
                  f"int v {vd}", f"tensor tokens 2 {B} {T + 1}", fmt(tokens),
                  f"tensor logits 3 {B} {T} {V}", fmt(logits.detach()),
                  "tensor loss 1 1", "%.17g" % loss.item(),
                  f"tensor att0 4 {B} {H} {T} {T}", fmt(att0.detach()),
                  f"tensor z0 4 {B} {T} {H} {vd}", fmt(z0.detach()), "end"]
    with open(os.path.join(OUT, "expected.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
