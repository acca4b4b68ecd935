"""Oracle checkpoints and expected values for the decoder families of SPEC
section 14: gemma, gemma2, gemma3_text, qwen3, olmo2, phi3.

Provenance
----------
The reference forwards below are written from the Hugging Face model
definitions, not from headscope's code (no transformers package is installed
here; each function follows its modeling file line by line, in float64):

* gemma (modeling_gemma.py GemmaForCausalLM): GemmaRMSNorm
  x * rsqrt(mean(x^2) + eps) * (1 + w); inputs_embeds * normalizer with
  normalizer = torch.tensor(hidden_size ** 0.5, dtype=hidden dtype);
  GemmaMLP down(act(gate(x)) * up(x)) with act = ACT2FN[hidden_activation],
  gelu_pytorch_tanh when hidden_activation is None (hidden_act is not read,
  SPEC section 14); scores q k^T * head_dim^-0.5; rotate-half RoPE; final
  norm; lm_head tied to embed_tokens.
* gemma2 (modeling_gemma2.py Gemma2ForCausalLM): gemma plus
  Gemma2DecoderLayer's four norms (input_layernorm -> attn ->
  post_attention_layernorm -> + residual; pre_feedforward_layernorm -> mlp ->
  post_feedforward_layernorm -> + residual); scaling =
  query_pre_attn_scalar ** -0.5; eager_attention_forward's soft-cap
  tanh(s / c) * c before the mask; the sliding-window mask on the layers
  with not bool(layer_idx % 2) (key s visible to query t iff t - W < s <= t:
  torch.tril(ones, diagonal=-W) masked); final logits tanh(l / c) * c.
* gemma3_text (modeling_gemma3.py Gemma3ForCausalLM): gemma2's norms and
  scaling, no attention soft-cap (Gemma3Attention does not pass it),
  q_norm / k_norm = Gemma3RMSNorm(head_dim) on each head before RoPE, layer
  i sliding iff bool((i + 1) % sliding_window_pattern), rotary_emb_local
  with rope_theta = rope_local_base_freq and rope_type default for the
  sliding layers, rotary_emb (rope_theta, rope_scaling linear: inv_freq /
  factor) for the global ones; final soft-cap when set.
* qwen3 (modeling_qwen3.py Qwen3ForCausalLM): Llama plus q_norm / k_norm =
  Qwen3RMSNorm(head_dim) (weight * normed) on q_proj(x).view(..., head_dim)
  before RoPE, head_dim from config, attention_bias on q, k, v and o.
* olmo2 (modeling_olmo2.py Olmo2ForCausalLM): Olmo2DecoderLayer
  x + post_attention_layernorm(attn(x)), x + post_feedforward_layernorm(mlp(x))
  (no input norms); q_norm = Olmo2RMSNorm(H * head_dim) on the whole q_proj
  output, k_norm = Olmo2RMSNorm(G * head_dim), before the per-head view and
  RoPE; final norm; untied lm_head.
* phi3 (modeling_phi3.py Phi3ForCausalLM): qkv = qkv_proj(x), q =
  qkv[..., :H dh], k = the next G dh, v = the rest; gate_up_proj(x).chunk(2)
  -> gate, up; up * silu(gate); apply_rotary_pos_emb on the first
  rotary_dim = int(head_dim * partial_rotary_factor) dims (rotate-half within
  them, the rest passed); sliding_window on every layer (masking_utils'
  sliding_window_overlay: kv_idx > q_idx - W).

Each family-specific feature is also switched off in the reference (the
`off` sets below) and the logits of the last position recorded as
off_<feature>: the generator asserts that each differs from the real
logits by more than GAP, and the C suite asserts that headscope's logits do
too, so no test can pass while ignoring a feature.

Checkpoints are small random-weight models in the real HF tensor names and
layouts, with config.json files carrying the key sets the Hub ships for
gemma-2b, gemma-2-2b, gemma-3-1b-it, Qwen3-0.6B, OLMo-2-0425-1B and
Phi-3-mini-4k-instruct with sizes shrunk (also query_pre_attn_scalar,
sliding_window and sliding_window_pattern, which are sizes of the same
kind; gemma3 takes gemma-3-4b's linear rope_scaling; phi3 adds
partial_rotary_factor, a Phi3Config key).

* torch: Debian python3-torch (version in the header of families3.txt),
  float64 everywhere, torch.set_num_threads(1); numpy only for byte packing.
* weights: drawn in float64 with torch.manual_seed(seed), rounded to F32;
  expected values use the rounded weights.
* regenerate (from the repo root; deterministic, prints the feature gaps):
      /usr/bin/python3 scripts/oracle/gen_families3.py

Outputs: tests/fixtures/families3/NAME/{config.json, model.safetensors,
grad.safetensors} and tests/fixtures/families3.txt ('case', 'int', 'tensor
NAME NDIM dims', values, 'end'; see tests/fixture.h): tokens (B, T+1),
logits (B, T, V) of tokens[:, :T], loss (mean cross-entropy against
tokens[:, 1:]), maps (L, B, H, T, T) the post-softmax attention of every
layer and head, off_FEATURE (B, V) the last position's logits with FEATURE
switched off. grad.safetensors holds d loss / d stored tensor (F32).
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
OUT = os.path.join(ROOT, "tests", "fixtures", "families3")
TXT = os.path.join(ROOT, "tests", "fixtures", "families3.txt")

V, T, B = 32, 8, 2
GAP = 2e-4  # the least a switched-off feature must move the last logits (20x the
# float tolerance of the C suite)
assert sys.byteorder == "little"

# ---------------------------------------------------------------------------
# safetensors by hand


def quantize(t):
    return t.detach().to(DT).to(torch.float32).to(DT)


def st_bytes(tensors):
    header = {"__metadata__": {"format": "pt"}}
    blobs, off = [], 0
    for name, t in tensors.items():
        b = t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((-(8 + len(h))) % 8)
    return len(h).to_bytes(8, "little") + h + b"".join(blobs)


def write_st(path, tensors):
    with open(path, "wb") as f:
        f.write(st_bytes(tensors))


# ---------------------------------------------------------------------------
# pieces every modeling file spells the same way


def rms(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def gemma_norm(x, w, eps, off):
    """Gemma*RMSNorm: output * (1 + weight) -- or, switched off, * weight."""
    return rms(x, eps) * (w if "norm_plus_one" in off else 1.0 + w)


def llama_norm(x, w, eps):
    """Qwen3RMSNorm / Olmo2RMSNorm / Phi3RMSNorm: weight * normed."""
    return w * rms(x, eps)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def cos_sin(dim, base, n, factor=1.0):
    """_compute_default_rope_parameters (linear: inv_freq / factor)."""
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=DT) / dim)) / factor
    freqs = torch.outer(torch.arange(n, dtype=DT), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rope(x, cos, sin):
    """apply_rotary_pos_emb on the first cos.shape[-1] dims (Phi-3's partial)."""
    r = cos.shape[-1]
    return torch.cat((x[..., :r] * cos + rotate_half(x[..., :r]) * sin, x[..., r:]), dim=-1)


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def attention(q, k, v, scaling, window=None, softcap=None):
    """eager_attention_forward: q (B,H,T,dh), k/v already repeat_kv'd.
    Returns the output (B,H,T,dh) and the post-softmax weights."""
    n = q.shape[-2]
    t = torch.arange(n).view(-1, 1)
    s = torch.arange(n).view(1, -1)
    masked = s > t
    if window is not None:
        masked = masked | (s <= t - window)
    w = q @ k.transpose(-1, -2) * scaling
    if softcap is not None:
        w = torch.tanh(w / softcap) * softcap
    w = w.masked_fill(masked, float("-inf"))
    p = torch.softmax(w, dim=-1)
    return p @ v, p


def split_heads(x, n, dh):
    Bn, Tn = x.shape[:2]
    return x.view(Bn, Tn, n, dh).transpose(1, 2)


def merge_heads(x):
    Bn, H, Tn, dh = x.shape
    return x.transpose(1, 2).reshape(Bn, Tn, H * dh)


def repeat_kv(x, rep):
    return x.repeat_interleave(rep, dim=1)


# ---------------------------------------------------------------------------
# the reference forwards; `off` names the features switched off


def gemma_forward(W, c, idx, family, off=frozenset()):
    d, H, L = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"]
    G, dh, eps = c["num_key_value_heads"], c["head_dim"], c["rms_norm_eps"]
    Bn, Tn = idx.shape
    x = W["model.embed_tokens.weight"][idx]
    if "embed_scale" not in off:
        x = x * torch.tensor(d ** 0.5, dtype=x.dtype)
    act = c.get("hidden_activation") or "gelu_pytorch_tanh"
    act_fn = gelu_tanh if act in ("gelu_pytorch_tanh", "gelu_new") else F.gelu
    if "gelu_tanh" in off:  # what reading hidden_act ("gelu": exact) would give
        act_fn = F.gelu
    later = family != "gemma"
    scaling = dh ** -0.5
    if later and "query_pre_attn_scalar" not in off:
        scaling = c["query_pre_attn_scalar"] ** -0.5
    softcap = c.get("attn_logit_softcapping") if family == "gemma2" else None
    if "attn_softcap" in off:
        softcap = None
    if family == "gemma3":
        pattern = c["sliding_window_pattern"]
        sliding = [bool((i + 1) % pattern) for i in range(L)]
    elif family == "gemma2":
        sliding = [not bool(i % 2) for i in range(L)]
    else:
        sliding = [False] * L
    if "sliding" in off:
        sliding = [False] * L
    theta = c["rope_theta"]
    factor = 1.0
    if family == "gemma3" and c.get("rope_scaling") and "rope_scaling" not in off:
        assert c["rope_scaling"]["rope_type"] == "linear"
        factor = c["rope_scaling"]["factor"]
    cs_global = cos_sin(dh, theta, Tn, factor)
    cs_local = cs_global
    if family == "gemma3":
        local = theta if "rope_local_base_freq" in off else c["rope_local_base_freq"]
        lfactor = factor if "rope_scaling_local" in off else 1.0
        cs_local = cos_sin(dh, local, Tn, lfactor)
    norm = lambda y, name: gemma_norm(y, W[name], eps, off)
    maps = []
    for i in range(L):
        p = f"model.layers.{i}."
        residual = x
        h = norm(x, p + "input_layernorm.weight")

        def proj(name):
            y = h @ W[p + f"self_attn.{name}.weight"].T
            if c.get("attention_bias"):
                y = y + W[p + f"self_attn.{name}.bias"]
            return y

        q = split_heads(proj("q_proj"), H, dh)
        k = split_heads(proj("k_proj"), G, dh)
        v = split_heads(proj("v_proj"), G, dh)
        if family == "gemma3" and "qk_norm" not in off:
            q = norm(q, p + "self_attn.q_norm.weight")
            k = norm(k, p + "self_attn.k_norm.weight")
        cos, sin = cs_local if sliding[i] else cs_global
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        z, att = attention(q, repeat_kv(k, H // G), repeat_kv(v, H // G), scaling,
                           c["sliding_window"] if sliding[i] else None, softcap)
        maps.append(att)
        a = merge_heads(z) @ W[p + "self_attn.o_proj.weight"].T
        if c.get("attention_bias"):
            a = a + W[p + "self_attn.o_proj.bias"]
        if not later:  # GemmaDecoderLayer: Llama's pre-norm layer
            x = residual + a
            h = norm(x, p + "post_attention_layernorm.weight")
        else:
            if "out_norms" not in off:
                a = norm(a, p + "post_attention_layernorm.weight")
            x = residual + a
            h = norm(x, p + "pre_feedforward_layernorm.weight")
        g = h @ W[p + "mlp.gate_proj.weight"].T
        u = h @ W[p + "mlp.up_proj.weight"].T
        m = (act_fn(g) * u) @ W[p + "mlp.down_proj.weight"].T
        if later and "out_norms" not in off:
            m = norm(m, p + "post_feedforward_layernorm.weight")
        x = x + m
    x = norm(x, "model.norm.weight")
    lm = W["model.embed_tokens.weight"] if c.get("tie_word_embeddings", True) else W["lm_head.weight"]
    logits = x @ lm.T
    cap = c.get("final_logit_softcapping")
    if cap is not None and "final_softcap" not in off:
        logits = torch.tanh(logits / cap) * cap
    return logits, maps


def qwen3_forward(W, c, idx, off=frozenset()):
    d, H, L = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"]
    G, dh, eps = c["num_key_value_heads"], c["head_dim"], c["rms_norm_eps"]
    cos, sin = cos_sin(dh, c["rope_theta"], idx.shape[1])
    x = W["model.embed_tokens.weight"][idx]
    maps = []
    for i in range(L):
        p = f"model.layers.{i}."
        h = llama_norm(x, W[p + "input_layernorm.weight"], eps)

        def proj(name):
            y = h @ W[p + f"self_attn.{name}.weight"].T
            if c.get("attention_bias"):
                y = y + W[p + f"self_attn.{name}.bias"]
            return y

        q = proj("q_proj").view(*h.shape[:2], H, dh)
        k = proj("k_proj").view(*h.shape[:2], G, dh)
        if "qk_norm" not in off:  # on the head dim, before the transpose
            q = llama_norm(q, W[p + "self_attn.q_norm.weight"], eps)
            k = llama_norm(k, W[p + "self_attn.k_norm.weight"], eps)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = split_heads(proj("v_proj"), G, dh)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        z, att = attention(q, repeat_kv(k, H // G), repeat_kv(v, H // G), dh ** -0.5)
        maps.append(att)
        a = merge_heads(z) @ W[p + "self_attn.o_proj.weight"].T
        if c.get("attention_bias"):
            a = a + W[p + "self_attn.o_proj.bias"]
        x = x + a
        h = llama_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        g = h @ W[p + "mlp.gate_proj.weight"].T
        u = h @ W[p + "mlp.up_proj.weight"].T
        x = x + (F.silu(g) * u) @ W[p + "mlp.down_proj.weight"].T
    x = llama_norm(x, W["model.norm.weight"], eps)
    lm = W["model.embed_tokens.weight"] if c.get("tie_word_embeddings") else W["lm_head.weight"]
    return x @ lm.T, maps


def olmo2_forward(W, c, idx, off=frozenset()):
    d, H, L = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"]
    G, eps = c["num_key_value_heads"], c["rms_norm_eps"]
    dh = d // H
    cos, sin = cos_sin(dh, c["rope_theta"], idx.shape[1])
    x = W["model.embed_tokens.weight"][idx]

    def qk_norm(y, w, n):
        if "qk_norm_whole" in off:  # the same weights, statistics per head instead
            Bn, Tn = y.shape[:2]
            return (rms(y.view(Bn, Tn, n, dh), eps) * w.view(n, dh)).reshape(Bn, Tn, n * dh)
        return llama_norm(y, w, eps)

    maps = []
    for i in range(L):
        p = f"model.layers.{i}."
        residual = x
        q = x @ W[p + "self_attn.q_proj.weight"].T
        k = x @ W[p + "self_attn.k_proj.weight"].T
        v = x @ W[p + "self_attn.v_proj.weight"].T
        q = qk_norm(q, W[p + "self_attn.q_norm.weight"], H)
        k = qk_norm(k, W[p + "self_attn.k_norm.weight"], G)
        q, k, v = split_heads(q, H, dh), split_heads(k, G, dh), split_heads(v, G, dh)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        z, att = attention(q, repeat_kv(k, H // G), repeat_kv(v, H // G), dh ** -0.5)
        maps.append(att)
        a = merge_heads(z) @ W[p + "self_attn.o_proj.weight"].T
        if "out_norms" not in off:
            a = llama_norm(a, W[p + "post_attention_layernorm.weight"], eps)
        x = residual + a
        g = x @ W[p + "mlp.gate_proj.weight"].T
        u = x @ W[p + "mlp.up_proj.weight"].T
        m = (F.silu(g) * u) @ W[p + "mlp.down_proj.weight"].T
        if "out_norms" not in off:
            m = llama_norm(m, W[p + "post_feedforward_layernorm.weight"], eps)
        x = x + m
    x = llama_norm(x, W["model.norm.weight"], eps)
    return x @ W["lm_head.weight"].T, maps


def phi3_forward(W, c, idx, off=frozenset()):
    d, H, L = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"]
    G, eps = c["num_key_value_heads"], c["rms_norm_eps"]
    dh = d // H
    prf = 1.0 if "partial_rotary" in off else c.get("partial_rotary_factor", 1.0)
    cos, sin = cos_sin(int(dh * prf), c["rope_theta"], idx.shape[1])
    window = None if "sliding" in off else c.get("sliding_window")
    x = W["model.embed_tokens.weight"][idx]
    maps = []
    for i in range(L):
        p = f"model.layers.{i}."
        h = llama_norm(x, W[p + "input_layernorm.weight"], eps)
        qkv = h @ W[p + "self_attn.qkv_proj.weight"].T
        qp = H * dh
        q, k, v = qkv[..., :qp], qkv[..., qp:qp + G * dh], qkv[..., qp + G * dh:]
        if "qkv_order" in off:  # k first, then q
            k, q = qkv[..., :G * dh], qkv[..., G * dh:G * dh + qp]
        q, k, v = split_heads(q, H, dh), split_heads(k, G, dh), split_heads(v, G, dh)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        z, att = attention(q, repeat_kv(k, H // G), repeat_kv(v, H // G), dh ** -0.5, window)
        maps.append(att)
        x = x + merge_heads(z) @ W[p + "self_attn.o_proj.weight"].T
        h = llama_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        gate, up = (h @ W[p + "mlp.gate_up_proj.weight"].T).chunk(2, dim=-1)
        if "gate_up_order" in off:
            gate, up = up, gate
        x = x + (up * F.silu(gate)) @ W[p + "mlp.down_proj.weight"].T
    x = llama_norm(x, W["model.norm.weight"], eps)
    return x @ W["lm_head.weight"].T, maps


# ---------------------------------------------------------------------------
# tensor specs (HF names and shapes)


def spec_of(family, c):
    d, L, Fd = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"]
    H, G = c["num_attention_heads"], c["num_key_value_heads"]
    dh = c.get("head_dim", d // H)
    s = {"model.embed_tokens.weight": (V, d)}
    for i in range(L):
        p = f"model.layers.{i}."
        a = {"self_attn.o_proj.weight": (d, H * dh), "mlp.down_proj.weight": (d, Fd)}
        if family == "phi3":
            a.update({"self_attn.qkv_proj.weight": ((H + 2 * G) * dh, d),
                      "mlp.gate_up_proj.weight": (2 * Fd, d)})
        else:
            a.update({"self_attn.q_proj.weight": (H * dh, d), "self_attn.k_proj.weight": (G * dh, d),
                      "self_attn.v_proj.weight": (G * dh, d), "mlp.gate_proj.weight": (Fd, d),
                      "mlp.up_proj.weight": (Fd, d)})
        if c.get("attention_bias") and family != "phi3":
            a.update({"self_attn.q_proj.bias": (H * dh,), "self_attn.k_proj.bias": (G * dh,),
                      "self_attn.v_proj.bias": (G * dh,), "self_attn.o_proj.bias": (d,)})
        if family != "olmo2":
            a["input_layernorm.weight"] = (d,)
        a["post_attention_layernorm.weight"] = (d,)
        if family in ("gemma2", "gemma3"):
            a.update({"pre_feedforward_layernorm.weight": (d,),
                      "post_feedforward_layernorm.weight": (d,)})
        if family == "olmo2":
            a["post_feedforward_layernorm.weight"] = (d,)
        if family in ("gemma3", "qwen3"):
            a.update({"self_attn.q_norm.weight": (dh,), "self_attn.k_norm.weight": (dh,)})
        if family == "olmo2":
            a.update({"self_attn.q_norm.weight": (H * dh,), "self_attn.k_norm.weight": (G * dh,)})
        s.update({p + k: v for k, v in sorted(a.items())})
    s["model.norm.weight"] = (d,)
    if not c.get("tie_word_embeddings", family.startswith("gemma")):
        s["lm_head.weight"] = (V, d)
    return s


def draw(spec, seed, family, scale):
    """Norm weights near their identity (0 for Gemma's (1 + w), 1 for the
    others), the rest N(0, scale^2)."""
    torch.manual_seed(seed)
    W = {}
    for name, shape in spec.items():
        if "norm" in name and name.endswith("weight"):
            base = 0.0 if family.startswith("gemma") else 1.0
            t = base + 0.3 * torch.randn(shape)
        else:
            t = scale * torch.randn(shape)
        W[name] = quantize(t)
    return W


# ---------------------------------------------------------------------------
# the Hub's config.json files, sizes shrunk


def gemma_2b():
    return {
        "architectures": ["GemmaForCausalLM"], "bos_token_id": 2, "eos_token_id": 1,
        "head_dim": 8, "hidden_act": "gelu", "hidden_size": 16, "initializer_range": 0.02,
        "intermediate_size": 24, "max_position_embeddings": 8192, "model_type": "gemma",
        "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 1,
        "pad_token_id": 0, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 10000.0,
        "torch_dtype": "bfloat16", "transformers_version": "4.38.0.dev0", "use_cache": True,
        "vocab_size": V,
    }


def gemma_2_2b():
    return {
        "architectures": ["Gemma2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid",
        "eos_token_id": [1, 107], "final_logit_softcapping": 30.0, "head_dim": 4,
        "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": 16, "initializer_range": 0.02, "intermediate_size": 24,
        "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 4,
        "num_hidden_layers": 2, "num_key_value_heads": 2, "pad_token_id": 0,
        "query_pre_attn_scalar": 6, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
        "sliding_window": 3, "torch_dtype": "float32", "transformers_version": "4.42.4",
        "use_cache": True, "vocab_size": V,
    }


def gemma_3_1b():
    return {
        "architectures": ["Gemma3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "attn_logit_softcapping": None, "bos_token_id": 2, "cache_implementation": "hybrid",
        "eos_token_id": [1, 106], "final_logit_softcapping": None, "head_dim": 4,
        "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 16, "initializer_range": 0.02,
        "intermediate_size": 24, "max_position_embeddings": 32768, "model_type": "gemma3_text",
        "num_attention_heads": 4, "num_hidden_layers": 3, "num_key_value_heads": 1,
        "pad_token_id": 0, "query_pre_attn_scalar": 6, "rms_norm_eps": 1e-06,
        "rope_local_base_freq": 10000, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "rope_theta": 1000000, "sliding_window": 3, "sliding_window_pattern": 3,
        "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0", "use_cache": True,
        "vocab_size": V,
    }


def qwen3_06b(bias=False):
    return {
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": bias, "attention_dropout": 0.0,
        "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 8, "hidden_act": "silu",
        "hidden_size": 16, "initializer_range": 0.02, "intermediate_size": 24,
        "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
        "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
        "sliding_window": None, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False,
        "vocab_size": V,
    }


def olmo2_1b():
    return {
        "architectures": ["Olmo2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": None, "eos_token_id": 100257, "hidden_act": "silu", "hidden_size": 16,
        "initializer_range": 0.02, "intermediate_size": 24, "max_position_embeddings": 4096,
        "model_type": "olmo2", "num_attention_heads": 4, "num_hidden_layers": 2,
        "num_key_value_heads": 4, "pad_token_id": 100277, "rms_norm_eps": 1e-06,
        "rope_scaling": None, "rope_theta": 500000, "tie_word_embeddings": False,
        "torch_dtype": "float32", "transformers_version": "4.48.3", "use_cache": True,
        "vocab_size": V,
    }


def phi3_mini_4k():
    return {
        "_name_or_path": "Phi-3-mini-4k-instruct", "architectures": ["Phi3ForCausalLM"],
        "attention_bias": False, "attention_dropout": 0.0,
        "auto_map": {"AutoConfig": "configuration_phi3.Phi3Config",
                     "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM"},
        "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu",
        "hidden_size": 16, "initializer_range": 0.02, "intermediate_size": 24,
        "max_position_embeddings": 4096, "model_type": "phi3", "num_attention_heads": 4,
        "num_hidden_layers": 2, "num_key_value_heads": 2, "original_max_position_embeddings": 4096,
        "pad_token_id": 32000, "partial_rotary_factor": 0.5, "resid_pdrop": 0.0,
        "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0, "sliding_window": 3,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.40.2", "use_cache": True, "vocab_size": V,
    }


# name, family, config, weight seed, weight scale, features to switch off, gradients written
CASES = [
    ("gemma", "gemma", gemma_2b(), 701, 0.35, ["norm_plus_one", "embed_scale", "gelu_tanh"], True),
    ("gemma2", "gemma2", gemma_2_2b(), 702, 0.9,
     ["norm_plus_one", "out_norms", "query_pre_attn_scalar", "attn_softcap", "final_softcap",
      "sliding"], True),
    ("gemma3", "gemma3", gemma_3_1b(), 703, 0.6,
     ["qk_norm", "out_norms", "query_pre_attn_scalar", "sliding", "rope_local_base_freq",
      "rope_scaling", "rope_scaling_local"], True),
    ("qwen3", "qwen3", qwen3_06b(), 704, 0.3, ["qk_norm"], True),
    ("qwen3_bias", "qwen3", qwen3_06b(bias=True), 705, 0.3, ["qk_norm"], False),
    ("olmo2", "olmo2", olmo2_1b(), 706, 0.3, ["out_norms", "qk_norm_whole"], True),
    ("phi3", "phi3", phi3_mini_4k(), 707, 0.3, ["qkv_order", "gate_up_order", "partial_rotary",
                                                 "sliding"], True),
]


def forward(family, W, c, idx, off=frozenset()):
    if family.startswith("gemma"):
        return gemma_forward(W, c, idx, family, off)
    return {"qwen3": qwen3_forward, "olmo2": olmo2_forward, "phi3": phi3_forward}[family](
        W, c, idx, off)


def write_checkpoint(d, c, W):
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")
    write_st(os.path.join(d, "model.safetensors"), W)


def fmt(t):
    return " ".join("%.13g" % v for v in t.reshape(-1).tolist())


def self_check():
    """The sliding-window mask against a loop over (t, s), the soft-cap
    against its formula, and the whole-projection norm against one done per
    position by hand."""
    torch.manual_seed(7)
    n, dh = 6, 4
    q, k, v = torch.randn(3, 1, 1, n, dh)
    out, att = attention(q, k, v, 0.7, window=2, softcap=1.5)
    for t in range(n):
        keep = [s for s in range(n) if t - 2 < s <= t]
        sc = torch.stack([1.5 * torch.tanh(q[0, 0, t] @ k[0, 0, s] * 0.7 / 1.5) for s in keep])
        p = torch.softmax(sc, 0)
        want = sum(p[j] * v[0, 0, s] for j, s in enumerate(keep))
        assert torch.allclose(out[0, 0, t], want)
        assert abs(float(att[0, 0, t].sum()) - 1) < 1e-12
    y, w = torch.randn(2, 3, 8), torch.randn(8)
    hand = torch.stack([torch.stack([y[b, t] / torch.sqrt((y[b, t] ** 2).mean() + 1e-6) * w
                                     for t in range(3)]) for b in range(2)])
    assert torch.allclose(llama_norm(y, w, 1e-6), hand)


def main():
    self_check()
    lines = [
        "# headscope oracle fixtures of SPEC section 14's families; generated by",
        "# scripts/oracle/gen_families3.py",
        f"# torch {torch.__version__}, float64, num_threads=1; weight seeds 701..707, tokens 801",
        "# regenerate: /usr/bin/python3 scripts/oracle/gen_families3.py (from the repo root)",
        "# checkpoints: tests/fixtures/families3/NAME; logits (B,T,V) for tokens[:, :T]; loss =",
        "# mean cross-entropy vs tokens[:, 1:]; maps (L,B,H,T,T); off_F (B,V): last-position",
        "# logits with feature F switched off; NAME/grad.safetensors: d loss / d stored tensor",
    ]
    torch.manual_seed(801)
    tokens = torch.randint(0, V, (B, T + 1))
    for name, family, c, seed, scale, offs, grads in CASES:
        W = draw(spec_of(family, c), seed, family, scale)
        d = os.path.join(OUT, name)
        write_checkpoint(d, c, W)
        P = {k: v.clone().requires_grad_(True) for k, v in W.items()}
        logits, maps = forward(family, P, c, tokens[:, :T])
        loss = F.cross_entropy(logits.reshape(-1, V), tokens[:, 1:].reshape(-1))
        loss.backward()
        if grads:
            write_st(os.path.join(d, "grad.safetensors"), {k: P[k].grad for k in W})
        last = logits.detach()[:, -1, :]
        H = c["num_attention_heads"]
        lines += [f"case {name}", f"int B {B}", f"int T {T}", f"int V {V}",
                  f"int L {c['num_hidden_layers']}", f"int H {H}",
                  f"tensor tokens 2 {B} {T + 1}", fmt(tokens),
                  f"tensor logits 3 {B} {T} {V}", fmt(logits.detach()),
                  "tensor loss 1 1", "%.17g" % loss.item(),
                  f"tensor maps 5 {len(maps)} {B} {H} {T} {T}",
                  fmt(torch.stack([m.detach() for m in maps]))]
        with torch.no_grad():
            for feat in offs:
                off_logits, _ = forward(family, W, c, tokens[:, :T], frozenset([feat]))
                o = off_logits[:, -1, :]
                gap = float(((o - last).abs() / torch.clamp(last.abs(), min=1)).max())
                print(f"{name:11s} {feat:22s} moves the last logits by {gap:.3g}")
                assert gap > GAP, (name, feat, gap)
                lines += [f"tensor off_{feat} 2 {B} {V}", fmt(o)]
        lines.append("end")
    with open(TXT, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
