"""Oracle checkpoints and expected values for the gpt_neox, mistral and qwen2
families and Llama's rope_scaling (SPEC section 10).

Provenance
----------
The reference forwards below are written from the Hugging Face model
definitions (transformers' modeling_gpt_neox.py GPTNeoXForCausalLM,
modeling_mistral.py MistralForCausalLM, modeling_qwen2.py Qwen2ForCausalLM,
modeling_llama.py LlamaForCausalLM with modeling_rope_utils.py's
_compute_llama3_parameters / _compute_linear_scaling_rope_parameters), not
from headscope's code:

* gpt_neox: query_key_value output viewed as (B, T, H, 3 dh) and split per
  head into q, k, v; rotary on the first int(dh * rotary_pct) dims
  (rotate-half within them, inv_freq = base^(-arange(0, R, 2) / R)); scores
  / sqrt(dh); parallel residual x + attn(ln1(x)) + mlp(ln2(x)) or sequential;
  exact-erf GELU; final_layer_norm; untied embed_out.
* mistral: llama with the sliding-window mask of
  _prepare_4d_causal_attention_mask_with_cache_position: key s is masked for
  query t when s <= t - sliding_window (and when s > t).
* qwen2: llama with biases on q_proj, k_proj, v_proj (none on o_proj).
* llama rope_scaling: llama3 (long wavelengths / factor, short kept, smooth
  band between) and linear (inv_freq / factor).

Checkpoints are small random-weight models in the real HF tensor names and
layouts, with config.json files as the Hub ships them for Pythia-70m,
Pythia-160m (as saved by a recent transformers), Mistral-7B-v0.1, Qwen2-0.5B
and Llama-3.2-1B with only the sizes shrunk (neox_seq also flips
use_parallel_residual; mistral_w16 sets sliding_window 16 >= T).

* torch: Debian python3-torch (version in the header of families.txt), float64
  everywhere, torch.set_num_threads(1); numpy only for byte packing.
* weights: drawn in float64 with torch.manual_seed(seed), rounded to the stored
  dtype (F32, or BF16 for neox_bf16); expected values use the rounded weights.
* regenerate (from the repo root; deterministic, prints nothing):
      /usr/bin/python3 scripts/oracle/gen_families.py

Outputs: tests/fixtures/families/NAME/{config.json, model.safetensors or the
shards + model.safetensors.index.json, grad.safetensors (some cases)} and
tests/fixtures/families.txt ('case', 'int', 'tensor NAME NDIM dims', values,
'end'; see tests/fixture.h): tokens (B, T+1), logits (B, T, V) of
tokens[:, :T], loss (mean cross-entropy against tokens[:, 1:]).
grad.safetensors holds d loss / d stored tensor (F32, the checkpoint's names
and shapes), kept binary so the fixtures stay small.
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
OUT = os.path.join(ROOT, "tests", "fixtures", "families")
TXT = os.path.join(ROOT, "tests", "fixtures", "families.txt")

V, T, B = 32, 8, 2
assert sys.byteorder == "little"

# ---------------------------------------------------------------------------
# safetensors by hand


def encode(t, dtype):
    f = t.detach().to(DT).to(torch.float32).contiguous()
    if dtype == "F32":
        return f.numpy().astype("<f4").tobytes()
    if dtype == "BF16":  # round to nearest even, as torch does
        return f.bfloat16().view(torch.int16).numpy().view("<u2").tobytes()
    raise ValueError(dtype)


def quantize(t, dtype):
    f = t.detach().to(DT).to(torch.float32)
    if dtype == "F32":
        return f.to(DT)
    return f.bfloat16().to(DT)


def st_bytes(tensors, dtype):
    header = {"__metadata__": {"format": "pt"}}
    blobs, off = [], 0
    for name, t in tensors.items():
        b = encode(t, dtype)
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((-(8 + len(h))) % 8)
    return len(h).to_bytes(8, "little") + h + b"".join(blobs)


def write_st(path, tensors, dtype):
    with open(path, "wb") as f:
        f.write(st_bytes(tensors, dtype))


# ---------------------------------------------------------------------------
# the reference forwards


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def rms_norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_inv_freq(dim, base, scaling):
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=DT) / dim))
    if scaling is None:
        return inv
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "linear":
        return inv / scaling["factor"]
    assert kind == "llama3"
    factor, lo, hi = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / lo, old / hi
    wavelen = 2 * math.pi / inv
    inv_l = torch.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, inv_l)


def cos_sin(dim, base, scaling, n):
    inv = rope_inv_freq(dim, base, scaling)
    freqs = torch.outer(torch.arange(n, dtype=DT), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def attend(q, k, v, window=None):
    """q (B,H,T,dh), k/v (B,H,T,dh); causal (and sliding-window) softmax."""
    n, dh = q.shape[-2], q.shape[-1]
    t = torch.arange(n).view(-1, 1)
    s = torch.arange(n).view(1, -1)
    masked = s > t
    if window is not None:
        masked = masked | (s <= t - window)
    scores = q @ k.transpose(-1, -2) / math.sqrt(dh)
    scores = scores.masked_fill(masked, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def neox_forward(W, c, idx):
    d, H, L = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"]
    dh = d // H
    R = int(dh * c["rotary_pct"])
    eps = c["layer_norm_eps"]
    cos, sin = cos_sin(R, c["rotary_emb_base"], None, idx.shape[1])
    x = W["gpt_neox.embed_in.weight"][idx]
    Bn, Tn = idx.shape
    for i in range(L):
        p = f"gpt_neox.layers.{i}."
        h = layer_norm(x, W[p + "input_layernorm.weight"], W[p + "input_layernorm.bias"], eps)
        qkv = h @ W[p + "attention.query_key_value.weight"].T + W[p + "attention.query_key_value.bias"]
        qkv = qkv.view(Bn, Tn, H, 3 * dh).permute(0, 2, 1, 3)
        q, k, v = qkv[..., :dh], qkv[..., dh:2 * dh], qkv[..., 2 * dh:]
        q = torch.cat((q[..., :R] * cos + rotate_half(q[..., :R]) * sin, q[..., R:]), dim=-1)
        k = torch.cat((k[..., :R] * cos + rotate_half(k[..., :R]) * sin, k[..., R:]), dim=-1)
        z = attend(q, k, v).permute(0, 2, 1, 3).reshape(Bn, Tn, d)
        a = z @ W[p + "attention.dense.weight"].T + W[p + "attention.dense.bias"]

        def mlp(y):
            u = y @ W[p + "mlp.dense_h_to_4h.weight"].T + W[p + "mlp.dense_h_to_4h.bias"]
            return F.gelu(u) @ W[p + "mlp.dense_4h_to_h.weight"].T + W[p + "mlp.dense_4h_to_h.bias"]

        ln2 = lambda y: layer_norm(y, W[p + "post_attention_layernorm.weight"],
                                   W[p + "post_attention_layernorm.bias"], eps)
        if c["use_parallel_residual"]:
            x = mlp(ln2(x)) + a + x
        else:
            a = a + x
            x = mlp(ln2(a)) + a
    x = layer_norm(x, W["gpt_neox.final_layer_norm.weight"], W["gpt_neox.final_layer_norm.bias"], eps)
    return x @ W["embed_out.weight"].T


def llama_forward(W, c, idx, family):
    d, H, L = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"]
    G = c.get("num_key_value_heads", H)
    dh = c.get("head_dim", d // H)
    eps = c["rms_norm_eps"]
    window = c.get("sliding_window") if family == "mistral" else None
    cos, sin = cos_sin(dh, c["rope_theta"], c.get("rope_scaling"), idx.shape[1])
    Bn, Tn = idx.shape
    x = W["model.embed_tokens.weight"][idx]
    for i in range(L):
        p = f"model.layers.{i}."
        h = rms_norm(x, W[p + "input_layernorm.weight"], eps)

        def proj(name):
            y = h @ W[p + f"self_attn.{name}.weight"].T
            if family == "qwen2":
                y = y + W[p + f"self_attn.{name}.bias"]
            return y

        q = proj("q_proj").view(Bn, Tn, H, dh).transpose(1, 2)
        k = proj("k_proj").view(Bn, Tn, G, dh).transpose(1, 2)
        v = proj("v_proj").view(Bn, Tn, G, dh).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // G, dim=1)  # repeat_kv
        v = v.repeat_interleave(H // G, dim=1)
        z = attend(q, k, v, window).transpose(1, 2).reshape(Bn, Tn, H * dh)
        x = x + z @ W[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        g = h @ W[p + "mlp.gate_proj.weight"].T
        u = h @ W[p + "mlp.up_proj.weight"].T
        x = x + (F.silu(g) * u) @ W[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, W["model.norm.weight"], eps)
    lm = W["model.embed_tokens.weight"] if c.get("tie_word_embeddings") else W["lm_head.weight"]
    return x @ lm.T


# ---------------------------------------------------------------------------
# tensor specs (HF names and shapes)


def neox_spec(c):
    d, L, Fd = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"]
    s = {"gpt_neox.embed_in.weight": (V, d)}
    for i in range(L):
        p = f"gpt_neox.layers.{i}."
        s.update({p + "input_layernorm.weight": (d,), p + "input_layernorm.bias": (d,),
                  p + "post_attention_layernorm.weight": (d,), p + "post_attention_layernorm.bias": (d,),
                  p + "attention.query_key_value.weight": (3 * d, d),
                  p + "attention.query_key_value.bias": (3 * d,),
                  p + "attention.dense.weight": (d, d), p + "attention.dense.bias": (d,),
                  p + "mlp.dense_h_to_4h.weight": (Fd, d), p + "mlp.dense_h_to_4h.bias": (Fd,),
                  p + "mlp.dense_4h_to_h.weight": (d, Fd), p + "mlp.dense_4h_to_h.bias": (d,)})
    s.update({"gpt_neox.final_layer_norm.weight": (d,), "gpt_neox.final_layer_norm.bias": (d,),
              "embed_out.weight": (V, d)})
    return s


def llama_spec(c, family):
    d, L, Fd = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"]
    H = c["num_attention_heads"]
    G = c.get("num_key_value_heads", H)
    dh = c.get("head_dim", d // H)
    s = {"model.embed_tokens.weight": (V, d)}
    for i in range(L):
        p = f"model.layers.{i}."
        s.update({p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
                  p + "self_attn.q_proj.weight": (H * dh, d), p + "self_attn.k_proj.weight": (G * dh, d),
                  p + "self_attn.v_proj.weight": (G * dh, d), p + "self_attn.o_proj.weight": (d, H * dh),
                  p + "mlp.gate_proj.weight": (Fd, d), p + "mlp.up_proj.weight": (Fd, d),
                  p + "mlp.down_proj.weight": (d, Fd)})
        if family == "qwen2":
            s.update({p + "self_attn.q_proj.bias": (H * dh,), p + "self_attn.k_proj.bias": (G * dh,),
                      p + "self_attn.v_proj.bias": (G * dh,)})
    s["model.norm.weight"] = (d,)
    if not c.get("tie_word_embeddings"):
        s["lm_head.weight"] = (V, d)
    return s


def draw(spec, seed, dtype):
    torch.manual_seed(seed)
    W = {}
    for name, shape in spec.items():
        if "norm" in name and name.endswith("weight"):
            t = 1 + 0.1 * torch.randn(shape)
        else:
            t = 0.3 * torch.randn(shape)
        W[name] = quantize(t, dtype)
    return W


# ---------------------------------------------------------------------------
# the Hub's config.json files, sizes shrunk


def pythia_70m():
    return {
        "architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0,
        "hidden_act": "gelu", "hidden_size": 16, "initializer_range": 0.02,
        "intermediate_size": 32, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
        "model_type": "gpt_neox", "num_attention_heads": 2, "num_hidden_layers": 2,
        "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": False,
        "torch_dtype": "float16", "transformers_version": "4.24.0", "use_cache": True,
        "use_parallel_residual": True, "vocab_size": V,
    }


def pythia_160m_recent():
    """Pythia-160m's keys as a recent transformers saves GPTNeoXConfig."""
    return {
        "architectures": ["GPTNeoXForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
        "bos_token_id": 0, "classifier_dropout": 0.1, "eos_token_id": 0, "hidden_act": "gelu",
        "hidden_dropout": 0.0, "hidden_size": 16, "initializer_range": 0.02,
        "intermediate_size": 32, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
        "model_type": "gpt_neox", "num_attention_heads": 2, "num_hidden_layers": 2,
        "partial_rotary_factor": 0.5, "rope_scaling": None, "rope_theta": 10000,
        "rotary_emb_base": 10000, "rotary_pct": 0.5, "tie_word_embeddings": False,
        "torch_dtype": "float16", "transformers_version": "4.46.0", "use_cache": True,
        "use_parallel_residual": False, "vocab_size": V,
    }


def mistral_7b(window):
    return {
        "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
        "hidden_act": "silu", "hidden_size": 16, "initializer_range": 0.02,
        "intermediate_size": 24, "max_position_embeddings": 32768, "model_type": "mistral",
        "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": window,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.34.0.dev0", "use_cache": True, "vocab_size": V,
    }


def qwen2_05b():
    return {
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
        "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 16,
        "initializer_range": 0.02, "intermediate_size": 24, "max_position_embeddings": 131072,
        "max_window_layers": 24, "model_type": "qwen2", "num_attention_heads": 4,
        "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": True,
        "use_sliding_window": False, "vocab_size": V,
    }


def llama_32_1b(scaling):
    """original_max_position_embeddings shrunk with the sizes (8192 -> 64), so
    that all three llama3 bands act within T positions of a 4-wide head."""
    return {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 4, "hidden_act": "silu",
        "hidden_size": 16, "initializer_range": 0.02, "intermediate_size": 24,
        "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
        "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
        "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": scaling,
        "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "transformers_version": "4.45.0.dev0", "use_cache": True, "vocab_size": V,
    }


LLAMA3 = {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
          "original_max_position_embeddings": 64, "rope_type": "llama3"}
LINEAR = {"factor": 4.0, "type": "linear"}

# name, family, config, weight seed, dtype, shards, gradients written
CASES = [
    ("neox_par", "gpt_neox", pythia_70m(), 501, "F32", 0, True),
    ("neox_seq", "gpt_neox", pythia_160m_recent(), 502, "F32", 0, True),
    ("neox_bf16", "gpt_neox", pythia_70m(), 501, "BF16", 0, False),
    ("mistral_w3", "mistral", mistral_7b(3), 503, "F32", 0, True),
    ("mistral_w16", "mistral", mistral_7b(16), 503, "F32", 0, True),
    ("qwen2", "qwen2", qwen2_05b(), 504, "F32", 0, True),
    ("llama3_scaled", "llama", llama_32_1b(LLAMA3), 505, "F32", 0, True),
    ("llama_linear", "llama", llama_32_1b(LINEAR), 505, "F32", 0, False),
    ("llama3_sharded", "llama", llama_32_1b(LLAMA3), 505, "F32", 3, False),
]


def forward(family, W, c, idx):
    return neox_forward(W, c, idx) if family == "gpt_neox" else llama_forward(W, c, idx, family)


def write_checkpoint(d, c, W, dtype, shards):
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")
    if not shards:
        write_st(os.path.join(d, "model.safetensors"), W, dtype)
        return
    names = list(W)
    per = -(-len(names) // shards)
    weight_map, total = {}, 0
    for s in range(shards):
        part = {n: W[n] for n in names[s * per:(s + 1) * per]}
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        write_st(os.path.join(d, fname), part, dtype)
        for n in part:
            weight_map[n] = fname
            total += 4 * part[n].numel()
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
        f.write("\n")


def fmt(t):
    return " ".join("%.13g" % v for v in t.reshape(-1).tolist())


def self_check():
    """The per-head q/k/v split of query_key_value against an explicit loop,
    and the window mask against a loop over (t, s)."""
    torch.manual_seed(7)
    H, dh, n = 2, 4, 5
    w = torch.randn(3 * H * dh, 3)
    x = torch.randn(1, n, 3)
    qkv = (x @ w.T).view(1, n, H, 3 * dh)
    for h in range(H):
        for part in range(3):
            rows = w[h * 3 * dh + part * dh:h * 3 * dh + (part + 1) * dh]
            assert torch.allclose(qkv[0, :, h, part * dh:(part + 1) * dh], x[0] @ rows.T)
    q, k, v = torch.randn(3, 1, 1, n, dh)
    out = attend(q, k, v, window=2)
    for t in range(n):
        keep = [s for s in range(n) if t - 2 < s <= t]
        sc = torch.stack([q[0, 0, t] @ k[0, 0, s] / math.sqrt(dh) for s in keep])
        p = torch.softmax(sc, 0)
        want = sum(p[j] * v[0, 0, s] for j, s in enumerate(keep))
        assert torch.allclose(out[0, 0, t], want)


def main():
    self_check()
    lines = [
        "# headscope family oracle fixtures; generated by scripts/oracle/gen_families.py",
        f"# torch {torch.__version__}, float64, num_threads=1; weight seeds 501..505, tokens 601",
        "# regenerate: /usr/bin/python3 scripts/oracle/gen_families.py (from the repo root)",
        "# checkpoints: tests/fixtures/families/NAME; logits (B,T,V) for tokens[:, :T]; loss = mean",
        "# cross-entropy vs tokens[:, 1:]; NAME/grad.safetensors: d loss / d stored tensor (F32)",
    ]
    torch.manual_seed(601)
    tokens = torch.randint(0, V, (B, T + 1))
    for name, family, c, seed, dtype, shards, grads in CASES:
        spec = neox_spec(c) if family == "gpt_neox" else llama_spec(c, family)
        W = draw(spec, seed, dtype)
        d = os.path.join(OUT, name)
        write_checkpoint(d, c, W, dtype, shards)
        P = {k: v.clone().requires_grad_(True) for k, v in W.items()}
        logits = forward(family, P, c, tokens[:, :T])
        loss = F.cross_entropy(logits.reshape(-1, V), tokens[:, 1:].reshape(-1))
        loss.backward()
        if grads:
            write_st(os.path.join(d, "grad.safetensors"), {k: P[k].grad for k in W}, "F32")
        lines += [f"case {name}", f"int B {B}", f"int T {T}", f"int V {V}",
                  f"tensor tokens 2 {B} {T + 1}", fmt(tokens),
                  f"tensor logits 3 {B} {T} {V}", fmt(logits.detach()),
                  "tensor loss 1 1", "%.17g" % loss.item(), "end"]
    with open(TXT, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
