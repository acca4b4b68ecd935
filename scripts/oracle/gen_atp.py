"""Oracle attribution patching and edge attribution patching for headscope
(SPEC section 15): atp_* and atp_star_* of every site, eap and eap_ig of
every edge of the circuit graph, and the faithfulness of top-N circuits.

Provenance
----------
Independent of headscope's C code: its own float64 forwards of GPT-2
(GPT2LMHeadModel: Conv1D c_attn/c_proj, gelu_new, pre-LayerNorm, tied wte),
Llama (RMSNorm, rotate-half RoPE, GQA by h // (H/G), SwiGLU), GPT-NeoX
(query_key_value viewed (B,T,H,3 dh), partial rotary, exact GELU, parallel
residual) and the headscope family's multi-head latent attention (DeepSeek-V2
as Hugging Face's deepseek_v2 computes it: q_proj or q_a_proj/q_b_proj,
kv_a_proj_with_mqa = [latent; k_pe], kv_b_proj(rms(latent)) = [k_nope; v]
per head, de-interleaved rotate-half RoPE on q_pe and k_pe), every gradient
taken by torch autograd. The definitions are the papers' as SPEC section 15
fixes them:

* AtP (Nanda 2023; Syed et al. 2023): for a site activation a,
  I(n) = sum over the site's elements (every position of a head; one
  position of a position site) of (a_source - a_base) * dLD/da on the base
  run; denoising: base corrupt, source clean; noising: base clean, source
  corrupt. atp = mean_n I(n) / (mean LD_source - mean LD_base), stderr =
  sd(I - atp * D) / sqrt(n) / |mean LD_clean - mean LD_corrupt| with D each
  prompt's own LD_source - LD_base (patch's ratio: SPEC §21's delta method).
  Sites: q, k (after RoPE, before the scale), v, pattern (post-softmax), z;
  k and v per key/value head; MLA: k and v are the normalised latent as the
  keys (k_nope) and the values read it. resid_pre, attn_out, mlp_out per
  (layer, position).
* AtP* (Kramar et al. 2024), head sites: QK fix -- for q, k and pattern
  I = sum_{t,s} (A_patched - A)_{ts} dLD/dA_{ts}, A_patched each query row's
  softmax recomputed with the patched queries (resp. keys; MLA: the keys'
  latent, the rope key left as it was); GradDrop -- for every layer l the
  gradient recomputed with layer l's attention and MLP outputs detached from
  the residual (their values kept), giving I_l(n); atp_star = mean_n (1/(L-1))
  sum_l |I_l(n)| / |mean LD_clean - mean LD_corrupt|, its stderr the delta
  method's as above with D each prompt's gap signed as |span| is.
* EAP / EAP-IG (Syed et al. 2023; Hanna et al. 2024): nodes input (the
  embedding sum), a{l}.h{h} (z_h W_O^h, no bias), m{l} (MLP output with its
  biases), logits; receivers a{l}.h{h}<q>, <k>, <v> (k, v per key/value head;
  MLA: one, h0), m{l}, logits, each reading a residual stream of its own
  through its own input norm. An edge u -> v exists when u's output is a
  term of v's input (parallel residual: no same-layer head -> MLP edge).
  score(n) = sum over positions and width of (a_u,corrupt - a_u,clean) *
  dLD/d(input of v) on the clean run; eap_ig averages the gradient over
  m steps with the embeddings e_corrupt + (k/m)(e_clean - e_corrupt),
  k = 0..m-1. Value: mean over prompts, stderr sd / sqrt(n).
* Faithfulness of the top N edges by |score| (ties by (sender, receiver)
  name): the clean run in which each receiver's input is the sum of its
  in-circuit senders' outputs in this run and its other senders' outputs in
  the corrupt run, plus the constants (attention output biases);
  (mean LD_circuit - mean LD_corrupt) / (mean LD_clean - mean LD_corrupt).

Prompts: the causal fixtures' (tests/fixtures/causal/*.jsonl) for GPT-2,
Llama-GQA and NeoX; for the MLA models drawn here (seeded), answer = the clean
run's argmax at the last position, wrong = the corrupt run's.

Output: tests/fixtures/atp/oracle.json and the MLA prompt files beside it.
Regenerate (from the repo root; deterministic):
    /usr/bin/python3 scripts/oracle/gen_atp.py
"""

import json
import math
import os
import struct

import numpy as np
import torch

torch.set_num_threads(1)
DT = torch.float64
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "atp")
IG_STEPS = 3
TOP_N = [0, 1, 2, 4, 8, 16, 10 ** 6]


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in hdr.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        dt = {"F32": "<f4", "F16": "<f2"}[e["dtype"]]
        arr = np.frombuffer(data[a:b], dtype=dt).astype(np.float64).reshape(e["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out


def layernorm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def rmsnorm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rope_half(x, theta, R=None):
    """Rotate-half RoPE on the first R dims of x (B, T, dh), positions 0..T-1."""
    T, dh = x.shape[1], x.shape[-1]
    R = R or dh
    inv = 1.0 / (theta ** (torch.arange(0, R, 2, dtype=DT) / R))
    ang = torch.arange(T, dtype=DT)[:, None] * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[None]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[None]
    r = x[..., :R]
    rot = torch.cat([-r[..., R // 2:], r[..., :R // 2]], -1)
    return torch.cat([r * cos + rot * sin, x[..., R:]], -1)


def gelu_new(h):
    return 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))


# ---- families: the per-head pieces of a layer ------------------------------------------
#
# q_site(l, xn, h) -> (B,T,dq): head h's queries from its normed input
# k_site(l, xn, g) -> ((B,T,dk) site tensor, extra): key/value head g's keys (MLA: the
#                     latent, extra = the rotated rope key)
# v_site(l, xn, g) -> (B,T,dv) site tensor
# key(l, ksite, extra, h), value(l, vsite, h): what query head h scores and mixes
# head_out(l, z_h, h) -> (B,T,d) z_h W_O^h;  attn_bias(l) -> (d) or None
# mlp(l, xn), ln1(l, x), ln2(l, x), lnf(x), embed(tok), unembed(x)


class Gpt2:
    def __init__(self, d):
        self.c = json.load(open(os.path.join(d, "config.json")))
        self.w = read_safetensors(os.path.join(d, "model.safetensors"))
        self.L, self.H = self.c["n_layer"], self.c["n_head"]
        self.G = self.H
        self.d = self.c["n_embd"]
        self.dh = self.d // self.H
        self.parallel = False
        self.eps = self.c["layer_norm_epsilon"]

    def p(self, l):
        return "h.%d." % l

    def ln(self, x, name):
        return layernorm(x, self.w[name + ".weight"], self.w[name + ".bias"], self.eps)

    def ln1(self, l, x):
        return self.ln(x, self.p(l) + "ln_1")

    def ln2(self, l, x):
        return self.ln(x, self.p(l) + "ln_2")

    def lnf(self, x):
        return self.ln(x, "ln_f")

    def embed(self, tok):
        return self.w["wte.weight"][tok] + self.w["wpe.weight"][:tok.shape[1]]

    def unembed(self, x):
        return x @ self.w["wte.weight"].T

    def proj(self, l, xn, off):
        W, b = self.w[self.p(l) + "attn.c_attn.weight"], self.w[self.p(l) + "attn.c_attn.bias"]
        return xn @ W[:, off:off + self.dh] + b[off:off + self.dh]

    def q_site(self, l, xn, h):
        return self.proj(l, xn, h * self.dh)

    def k_site(self, l, xn, g):
        return self.proj(l, xn, self.d + g * self.dh), None

    def v_site(self, l, xn, g):
        return self.proj(l, xn, 2 * self.d + g * self.dh)

    def key(self, l, ks, extra, h):
        return ks

    def value(self, l, vs, h):
        return vs

    def scale(self):
        return 1 / math.sqrt(self.dh)

    def head_out(self, l, z, h):
        W = self.w[self.p(l) + "attn.c_proj.weight"]
        return z @ W[h * self.dh:(h + 1) * self.dh, :]

    def attn_bias(self, l):
        return self.w[self.p(l) + "attn.c_proj.bias"]

    def mlp(self, l, xn):
        p = self.p(l)
        h = gelu_new(xn @ self.w[p + "mlp.c_fc.weight"] + self.w[p + "mlp.c_fc.bias"])
        return h @ self.w[p + "mlp.c_proj.weight"] + self.w[p + "mlp.c_proj.bias"]

    def group(self, h):
        return h // (self.H // self.G)


class Llama(Gpt2):
    def __init__(self, d):
        self.c = json.load(open(os.path.join(d, "config.json")))
        self.w = read_safetensors(os.path.join(d, "model.safetensors"))
        self.L, self.H = self.c["num_hidden_layers"], self.c["num_attention_heads"]
        self.G = self.c["num_key_value_heads"]
        self.d = self.c["hidden_size"]
        self.dh = self.d // self.H
        self.parallel = False
        self.eps = self.c["rms_norm_eps"]

    def p(self, l):
        return "model.layers.%d." % l

    def ln1(self, l, x):
        return rmsnorm(x, self.w[self.p(l) + "input_layernorm.weight"], self.eps)

    def ln2(self, l, x):
        return rmsnorm(x, self.w[self.p(l) + "post_attention_layernorm.weight"], self.eps)

    def lnf(self, x):
        return rmsnorm(x, self.w["model.norm.weight"], self.eps)

    def embed(self, tok):
        return self.w["model.embed_tokens.weight"][tok]

    def unembed(self, x):
        W = self.w.get("lm_head.weight", self.w["model.embed_tokens.weight"])
        return x @ W.T

    def rows(self, l, name, i):
        return self.w[self.p(l) + "self_attn." + name + ".weight"][i * self.dh:(i + 1) * self.dh]

    def q_site(self, l, xn, h):
        return rope_half(xn @ self.rows(l, "q_proj", h).T, self.c["rope_theta"])

    def k_site(self, l, xn, g):
        return rope_half(xn @ self.rows(l, "k_proj", g).T, self.c["rope_theta"]), None

    def v_site(self, l, xn, g):
        return xn @ self.rows(l, "v_proj", g).T

    def head_out(self, l, z, h):
        W = self.w[self.p(l) + "self_attn.o_proj.weight"]
        return z @ W[:, h * self.dh:(h + 1) * self.dh].T

    def attn_bias(self, l):
        return None

    def mlp(self, l, xn):
        p = self.p(l) + "mlp."
        g = xn @ self.w[p + "gate_proj.weight"].T
        u = xn @ self.w[p + "up_proj.weight"].T
        return (g * torch.sigmoid(g) * u) @ self.w[p + "down_proj.weight"].T


class NeoX(Gpt2):
    def __init__(self, d):
        self.c = json.load(open(os.path.join(d, "config.json")))
        self.w = read_safetensors(os.path.join(d, "model.safetensors"))
        self.L, self.H = self.c["num_hidden_layers"], self.c["num_attention_heads"]
        self.G = self.H
        self.d = self.c["hidden_size"]
        self.dh = self.d // self.H
        self.R = int(self.dh * self.c["rotary_pct"])
        self.parallel = self.c["use_parallel_residual"]
        self.eps = self.c["layer_norm_eps"]

    def p(self, l):
        return "gpt_neox.layers.%d." % l

    def ln1(self, l, x):
        return self.ln(x, self.p(l) + "input_layernorm")

    def ln2(self, l, x):
        return self.ln(x, self.p(l) + "post_attention_layernorm")

    def lnf(self, x):
        return self.ln(x, "gpt_neox.final_layer_norm")

    def embed(self, tok):
        return self.w["gpt_neox.embed_in.weight"][tok]

    def unembed(self, x):
        return x @ self.w["embed_out.weight"].T

    def part(self, l, xn, h, k):
        p = self.p(l) + "attention.query_key_value."
        lo = h * 3 * self.dh + k * self.dh
        return xn @ self.w[p + "weight"][lo:lo + self.dh].T + self.w[p + "bias"][lo:lo + self.dh]

    def q_site(self, l, xn, h):
        return rope_half(self.part(l, xn, h, 0), self.c["rotary_emb_base"], self.R)

    def k_site(self, l, xn, g):
        return rope_half(self.part(l, xn, g, 1), self.c["rotary_emb_base"], self.R), None

    def v_site(self, l, xn, g):
        return self.part(l, xn, g, 2)

    def head_out(self, l, z, h):
        W = self.w[self.p(l) + "attention.dense.weight"]
        return z @ W[:, h * self.dh:(h + 1) * self.dh].T

    def attn_bias(self, l):
        return self.w[self.p(l) + "attention.dense.bias"]

    def mlp(self, l, xn):
        p = self.p(l) + "mlp."
        h = xn @ self.w[p + "dense_h_to_4h.weight"].T + self.w[p + "dense_h_to_4h.bias"]
        h = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
        return h @ self.w[p + "dense_4h_to_h.weight"].T + self.w[p + "dense_4h_to_h.bias"]


def deinterleave(x):
    """view(..., d/2, 2).transpose(-1, -2).reshape(..., d): pairs (2i, 2i+1) -> (i, i + d/2)."""
    s = x.shape
    return x.reshape(*s[:-1], s[-1] // 2, 2).transpose(-1, -2).reshape(s)


class Mla(Gpt2):
    """The headscope family with attention "mla": pre-norm RMSNorm, SwiGLU,
    final norm, untied lm_head; DeepSeek-V2's latent attention. Its k and v
    sites are the normalised latent (one key/value "head"), the rope key
    k_pe part of the keys but of neither site."""

    def __init__(self, d):
        self.c = json.load(open(os.path.join(d, "config.json")))
        self.w = read_safetensors(os.path.join(d, "model.safetensors"))
        c = self.c
        self.L, self.H, self.G = c["n_layer"], c["n_head"], 1
        self.d = c["d_model"]
        self.n, self.r, self.vd = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        self.C, self.Q = c["kv_lora_rank"], c["q_lora_rank"]
        self.dh = self.vd
        self.parallel = False
        self.eps = c["norm_eps"]

    def ln1(self, l, x):
        return rmsnorm(x, self.w[self.p(l) + "ln_1.weight"], self.eps)

    def ln2(self, l, x):
        return rmsnorm(x, self.w[self.p(l) + "ln_2.weight"], self.eps)

    def lnf(self, x):
        return rmsnorm(x, self.w["ln_f.weight"], self.eps)

    def embed(self, tok):
        return self.w["wte.weight"][tok]

    def unembed(self, x):
        return x @ self.w["lm_head.weight"].T

    def rope(self, x):
        return rope_half(deinterleave(x), self.c["rope_theta"])

    def q_site(self, l, xn, h):
        p, n, r = self.p(l) + "attn.", self.n, self.r
        if self.Q:
            cq = rmsnorm(xn @ self.w[p + "q_a_proj.weight"].T, self.w[p + "q_a_layernorm.weight"],
                         self.eps)
            W = self.w[p + "q_b_proj.weight"]
        else:
            cq, W = xn, self.w[p + "q_proj.weight"]
        q = cq @ W[h * (n + r):(h + 1) * (n + r)].T
        return torch.cat([q[..., :n], self.rope(q[..., n:])], -1)

    def latent(self, l, xn):
        p = self.p(l) + "attn."
        kva = xn @ self.w[p + "kv_a_proj_with_mqa.weight"].T
        ckv = rmsnorm(kva[..., :self.C], self.w[p + "kv_a_layernorm.weight"], self.eps)
        return ckv, self.rope(kva[..., self.C:])

    def k_site(self, l, xn, g):
        return self.latent(l, xn)

    def v_site(self, l, xn, g):
        return self.latent(l, xn)[0]

    def kvb(self, l, h, lo, n):
        W = self.w[self.p(l) + "attn.kv_b_proj.weight"]
        base = h * (self.n + self.vd)
        return W[base + lo:base + lo + n]

    def key(self, l, ks, extra, h):
        return torch.cat([ks @ self.kvb(l, h, 0, self.n).T, extra], -1)

    def value(self, l, vs, h):
        return vs @ self.kvb(l, h, self.n, self.vd).T

    def scale(self):
        return 1 / math.sqrt(self.n + self.r)

    def head_out(self, l, z, h):
        W = self.w[self.p(l) + "attn.o_proj.weight"]
        return z @ W[:, h * self.vd:(h + 1) * self.vd].T

    def attn_bias(self, l):
        return None

    def mlp(self, l, xn):
        p = self.p(l) + "mlp."
        g = xn @ self.w[p + "gate_proj.weight"].T
        u = xn @ self.w[p + "up_proj.weight"].T
        return (torch.nn.functional.silu(g) * u) @ self.w[p + "down_proj.weight"].T

    def group(self, h):
        return 0


# ---- the standard forward, with hooks at every site ------------------------------------

def hook(hooks, site, l, x):
    fn = hooks.get((site, l)) if hooks else None
    return fn(x) if fn else x


def attend(model, l, q, keys, vals):
    """q (B,T,dq), keys/vals (B,T,*) of one head -> scores' softmax (B,T,T)."""
    T = q.shape[1]
    s = torch.einsum("btd,bsd->bts", q, keys) * model.scale()
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    return torch.softmax(s.masked_fill(~mask, float("-inf")), -1)


def layer_heads(model, l, xq, xk, xv, hooks):
    """One layer's heads, query head h reading xq[h], key/value head g xk[g]
    and xv[g] (normed inputs). Returns per-head outputs (list of (B,T,d))."""
    H, G = model.H, model.G
    q = hook(hooks, "q", l, torch.stack([model.q_site(l, xq[h], h) for h in range(H)], 2))
    kx = [model.k_site(l, xk[g], g) for g in range(G)]
    k = hook(hooks, "k", l, torch.stack([a for a, _ in kx], 2))
    v = hook(hooks, "v", l, torch.stack([model.v_site(l, xv[g], g) for g in range(G)], 2))
    pats = []
    for h in range(H):
        g = model.group(h)
        pats.append(attend(model, l, q[:, :, h], model.key(l, k[:, :, g], kx[g][1], h), None))
    pat = hook(hooks, "pattern", l, torch.stack(pats, 1))
    zs = []
    for h in range(H):
        g = model.group(h)
        zs.append(torch.einsum("bts,bsd->btd", pat[:, h], model.value(l, v[:, :, g], h)))
    z = hook(hooks, "z", l, torch.stack(zs, 2))
    return [model.head_out(l, z[:, :, h], h) for h in range(H)]


def forward(model, emb, hooks=None, stop=None):
    """Logits of embeddings emb (B,T,d); stop: the layer whose attention and
    MLP outputs pass no gradient into the residual (values unchanged)."""
    x = emb
    for l in range(model.L):
        x = hook(hooks, "resid_pre", l, x)
        xn = model.ln1(l, x)
        outs = layer_heads(model, l, [xn] * model.H, [xn] * model.G, [xn] * model.G, hooks)
        a = sum(outs)
        if model.attn_bias(l) is not None:
            a = a + model.attn_bias(l)
        a = hook(hooks, "attn_out", l, a)
        if l == stop:
            a = a.detach()
        m = hook(hooks, "mlp_out", l, model.mlp(l, model.ln2(l, x if model.parallel else x + a)))
        if l == stop:
            m = m.detach()
        x = x + a + m
    return model.unembed(model.lnf(x))


def ld(logits, ans, wrong):
    last = logits[:, -1, :]
    i = torch.arange(last.shape[0])
    return last[i, ans] - last[i, wrong]


# ---- attribution patching ---------------------------------------------------------------

HEAD_SITES = ("z", "pattern", "q", "k", "v")
POS_SITES = ("resid_pre", "attn_out", "mlp_out")


def record(store, site, l, grad):
    def fn(x):
        if grad:
            x = x.clone().requires_grad_(True)
            x.retain_grad()
        store[(site, l)] = x
        return x
    return fn


def run(model, tok, grad, stop=None):
    store = {}
    hooks = {(s, l): record(store, s, l, grad) for l in range(model.L)
             for s in HEAD_SITES + POS_SITES}
    return forward(model, model.embed(tok), hooks, stop), store


def qk_maps(model, l, base, src, site, h):
    """The maps of the query heads a patch of site (q of head h, k of key/value
    head h) changes, with the patched queries or keys: {query head: (B,T,T)}."""
    H = model.H
    xn = model.ln1(l, base[("resid_pre", l)]).detach()
    out = {}
    heads = [h] if site == "q" else [i for i in range(H) if model.group(i) == h]
    for i in heads:
        g = model.group(i)
        q = (src if site == "q" else base)[("q", l)][:, :, i].detach()
        ks = (src if site == "k" else base)[("k", l)][:, :, g].detach()
        _, extra = model.k_site(l, xn, g)  # the base run's rope key (MLA)
        out[i] = attend(model, l, q, model.key(l, ks, None if extra is None else extra.detach(), i),
                        None)
    return out


def terms(model, site, l, base, src, qk, star):
    """Per prompt I(n) of every head/position of site at layer l from the base
    run's gradients (base[...].grad)."""
    x = base[(site, l)]
    g = x.grad if x.grad is not None else torch.zeros_like(x)
    if site in POS_SITES:
        return ((src[(site, l)] - x) * g).sum(-1).detach()        # (B, T)
    if site == "pattern":
        return ((src[(site, l)] - x) * g).sum((-1, -2)).detach()  # (B, H)
    n_heads = model.H if site in ("q", "z") else model.G
    if star and site in ("q", "k"):
        gp = base[("pattern", l)].grad
        gp = torch.zeros_like(base[("pattern", l)]) if gp is None else gp
        cols = []
        for h in range(n_heads):
            t = 0
            for i, A in qk[(site, l, h)].items():
                t = t + ((A - base[("pattern", l)][:, i]) * gp[:, i]).sum((-1, -2))
            cols.append(t.detach())
        return torch.stack(cols, 1)
    return ((src[(site, l)] - x) * g).sum(1).sum(-1).detach()    # (B, heads)


def atp_batch(model, clean, corrupt, ans, wrong, noising, star):
    base_tok, src_tok = (clean, corrupt) if noising else (corrupt, clean)
    with torch.no_grad():
        _, src = run(model, src_tok, False)
    lg, base = run(model, base_tok, True)
    ld(lg, ans, wrong).sum().backward()
    plain = {(s, l): terms(model, s, l, base, src, None, False)
             for l in range(model.L) for s in HEAD_SITES + POS_SITES}
    if not star:
        return plain, None
    qk = {}
    with torch.no_grad():
        for l in range(model.L):
            for site, n in (("q", model.H), ("k", model.G)):
                for h in range(n):
                    qk[(site, l, h)] = qk_maps(model, l, base, src, site, h)
    acc = {}
    for drop in range(model.L):
        lg, b2 = run(model, base_tok, True, stop=drop)
        ld(lg, ans, wrong).sum().backward()
        for l in range(model.L):
            for s in HEAD_SITES:
                t = terms(model, s, l, b2, src, qk, True).abs()
                acc[(s, l)] = acc.get((s, l), 0) + t
    return plain, {k: v / (model.L - 1) for k, v in acc.items()}


def mean_se(x):
    n = x.shape[0]
    return float(x.mean()), float(x.std(unbiased=True) / math.sqrt(n)) if n > 1 else 0.0


def delta_se(x, towards, span, gap):
    """SPEC §21: the stderr of mean x / towards by the delta method, D the
    per-prompt gap LD_clean - LD_corrupt with towards' sign against span."""
    v = x.mean() / towards
    resid = x - v * gap * (1 if towards * span > 0 else -1)
    n = x.shape[0]
    return float(resid.std(unbiased=True) / math.sqrt(n) / abs(span)) if n > 1 else 0.0


def atp_rows(model, groups, noising, star, span, gap):
    towards = -span if noising else span
    per, per_star = {}, {}
    for clean, corrupt, ans, wrong in groups:
        plain, st = atp_batch(model, clean, corrupt, ans, wrong, noising, star)
        for k, v in plain.items():
            per.setdefault(k, []).append(v)
        for k, v in (st or {}).items():
            per_star.setdefault(k, []).append(v)
    rows = {}
    for (s, l), vs in sorted(per.items()):
        if s in POS_SITES and len(groups) > 1:
            continue
        if s == "mlp_out" and not has_mlp(model):
            continue
        x = torch.cat(vs, 0)
        for i in range(x.shape[1]):
            m = float(x[:, i].mean())
            rows.setdefault("atp_" + s, []).append(
                [l, i, m / towards, delta_se(x[:, i], towards, span, gap)])
    for (s, l), vs in sorted(per_star.items()):
        x = torch.cat(vs, 0)
        for i in range(x.shape[1]):
            m = float(x[:, i].mean())
            rows.setdefault("atp_star_" + s, []).append(
                [l, i, m / abs(span), delta_se(x[:, i], abs(span), span, gap)])
    return rows


def has_mlp(model):
    return True


# ---- the circuit graph ---------------------------------------------------------------------

def graph(model):
    """Nodes in order and receivers with their senders, as SPEC section 15 names them."""
    nodes = ["input"]
    recv = []
    for l in range(model.L):
        before = list(nodes)
        for kind, n in (("q", model.H), ("k", model.G), ("v", model.G)):
            for h in range(n):
                recv.append(("a%d.h%d<%s>" % (l, h, kind), (l, kind, h), list(before)))
        heads = ["a%d.h%d" % (l, h) for h in range(model.H)]
        nodes += heads
        recv.append(("m%d" % l, (l, "m", 0), before if model.parallel else list(nodes)))
        nodes.append("m%d" % l)
    recv.append(("logits", (model.L, "logits", 0), list(nodes)))
    return nodes, recv


def graph_forward(model, emb, input_of, leaves=None):
    """The forward in which receiver r reads input_of(r, outs) (+ leaves[r], a
    zero tensor whose gradient is r's input gradient); outs collects each
    node's output of this run. Returns logits and outs."""
    outs = {"input": emb}
    const = torch.zeros_like(emb)

    def inp(name):
        x = input_of(name, outs, const)
        return x + leaves[name] if leaves is not None else x

    for l in range(model.L):
        xq = [model.ln1(l, inp("a%d.h%d<q>" % (l, h))) for h in range(model.H)]
        xk = [model.ln1(l, inp("a%d.h%d<k>" % (l, g))) for g in range(model.G)]
        xv = [model.ln1(l, inp("a%d.h%d<v>" % (l, g))) for g in range(model.G)]
        for h, o in enumerate(layer_heads(model, l, xq, xk, xv, None)):
            outs["a%d.h%d" % (l, h)] = o
        before = const
        if model.attn_bias(l) is not None:
            const = const + model.attn_bias(l)
        # a parallel residual's MLP reads the layer's input: not this layer's bias
        mlp_const = before if model.parallel else const
        outs["m%d" % l] = model.mlp(l, model.ln2(l, input_of("m%d" % l, outs, mlp_const) +
                                                 (leaves["m%d" % l] if leaves is not None else 0)))
    return model.unembed(model.lnf(inp("logits"))), outs


def full_input(senders):
    def fn(name, outs, const):
        return sum(outs[u] for u in senders[name]) + const
    return fn


def node_outputs(model, emb, senders):
    with torch.no_grad():
        return graph_forward(model, emb, full_input(senders))


def eap_batch(model, clean, corrupt, ans, wrong, steps):
    nodes, recv = graph(model)
    senders = {r: s for r, _, s in recv}
    ec, ek = model.embed(clean), model.embed(corrupt)
    _, oc = node_outputs(model, ec, senders)
    _, ok = node_outputs(model, ek, senders)
    points = [ec] if steps == 0 else [ek + (k / steps) * (ec - ek) for k in range(steps)]
    grads = {}
    for e in points:
        leaves = {r: torch.zeros_like(ec, requires_grad=True) for r, _, _ in recv}
        lg, _ = graph_forward(model, e, full_input(senders), leaves)
        ld(lg, ans, wrong).sum().backward()
        for r in leaves:
            grads[r] = grads.get(r, 0) + leaves[r].grad / len(points)
    out = {}
    for r, _, ss in recv:
        for u in ss:
            out[(u, r)] = ((ok[u] - oc[u]) * grads[r]).sum((1, 2)).detach()
    return out


def eap_rows(model, groups, steps):
    per = {}
    for g in groups:
        for k, v in eap_batch(model, *g, steps).items():
            per.setdefault(k, []).append(v)
    rows = []
    for (u, r), vs in per.items():
        m, e = mean_se(torch.cat(vs))
        rows.append([u, r, m, e])
    return rows


def faithfulness(model, groups, rows, span, ld_corrupt):
    nodes, recv = graph(model)
    senders = {r: s for r, _, s in recv}
    order = sorted(rows, key=lambda x: (-abs(x[2]), x[0], x[1]))
    curve = []
    for N in TOP_N:
        circuit = {(u, r) for u, r, _, _ in order[:N]}
        lds = []
        for clean, corrupt, ans, wrong in groups:
            ec, ek = model.embed(clean), model.embed(corrupt)
            _, ok = node_outputs(model, ek, senders)

            def input_of(name, outs, const):
                return sum(outs[u] if (u, name) in circuit else ok[u]
                           for u in senders[name]) + const
            with torch.no_grad():
                lg, _ = graph_forward(model, ec, input_of)
            lds.append(ld(lg, ans, wrong))
        f = (float(torch.cat(lds).mean()) - ld_corrupt) / span
        curve.append([min(N, len(rows)), f])
    return curve


# ---- cases ---------------------------------------------------------------------------------

def load_prompts(path):
    by_len = {}
    for line in open(path):
        if not line.strip():
            continue
        o = json.loads(line)
        by_len.setdefault(len(o["clean_ids"]), []).append(o)
    groups = []
    for T in sorted(by_len):
        ps = by_len[T]
        groups.append((torch.tensor([p["clean_ids"] for p in ps]),
                       torch.tensor([p["corrupt_ids"] for p in ps]),
                       torch.tensor([p["answer_id"] for p in ps]),
                       torch.tensor([p["wrong_id"] for p in ps])))
    return groups


def make_prompts(model, path, seed, T, n):
    g = torch.Generator().manual_seed(seed)
    V = model.c["vocab_size"]
    clean = torch.randint(0, V, (n, T), generator=g)
    corrupt = clean.clone()
    for i in range(n):
        for p in (1, T - 2):
            corrupt[i, p] = (clean[i, p] + 1 + torch.randint(0, V - 1, (1,), generator=g)) % V
    with torch.no_grad():
        lc = forward(model, model.embed(clean))[:, -1]
        lk = forward(model, model.embed(corrupt))[:, -1]
    ans, wrong = lc.argmax(-1), lk.argmax(-1)
    for i in range(n):
        if wrong[i] == ans[i]:
            wrong[i] = lk[i].argsort(descending=True)[1]
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"clean_ids": clean[i].tolist(), "corrupt_ids": corrupt[i].tolist(),
                                "answer_id": int(ans[i]), "wrong_id": int(wrong[i])}) + "\n")


# name, model class, model directory (relative to tests/fixtures), prompts (relative to
# tests/fixtures), MLA prompt seed (None: the causal fixtures' file)
CASES = [
    ("gpt2", Gpt2, "models/gpt2_tiny", "causal/gpt2.jsonl", None),
    ("llama_gqa", Llama, "models/llama_gqa", "causal/llama_gqa.jsonl", None),
    ("neox_par", NeoX, "families/neox_par", "causal/neox_par.jsonl", None),
    ("mla_qlora", Mla, "mla/mla_qlora", "atp/mla_qlora.jsonl", 31),
    ("mla_q", Mla, "mla/mla_q", "atp/mla_q.jsonl", 32),
]


def self_check():
    """The graph forward with every edge equals the standard forward."""
    for _, cls, mdir, _, _ in CASES:
        m = cls(os.path.join(FIX, mdir))
        tok = torch.tensor([[1, 5, 7, 3, 2]])
        _, recv = graph(m)
        senders = {r: s for r, _, s in recv}
        a = forward(m, m.embed(tok))
        b, _ = graph_forward(m, m.embed(tok), full_input(senders))
        assert float((a - b).abs().max()) < 1e-12, mdir


def main():
    self_check()
    os.makedirs(OUT, exist_ok=True)
    oracle = {}
    for name, cls, mdir, pfile, seed in CASES:
        model = cls(os.path.join(FIX, mdir))
        if seed is not None:
            make_prompts(model, os.path.join(FIX, pfile), seed, 6, 5)
        groups = load_prompts(os.path.join(FIX, pfile))
        with torch.no_grad():
            lc = torch.cat([ld(forward(model, model.embed(c)), a, w) for c, _, a, w in groups])
            lk = torch.cat([ld(forward(model, model.embed(k)), a, w) for _, k, a, w in groups])
        span = float(lc.mean() - lk.mean())
        case = {"model": mdir, "prompts": pfile, "ig_steps": IG_STEPS,
                "logit_diff_clean": list(mean_se(lc)), "logit_diff_corrupt": list(mean_se(lk)),
                "logit_diff_gap": list(mean_se(lc - lk))}
        for mode in ("denoising", "noising"):
            case[mode] = atp_rows(model, groups, mode == "noising", True, span, lc - lk)
        eap = eap_rows(model, groups, 0)
        ig = eap_rows(model, groups, IG_STEPS)
        case["eap"], case["eap_ig"] = eap, ig
        case["faithfulness_eap"] = faithfulness(model, groups, eap, span, float(lk.mean()))
        case["faithfulness_eap_ig"] = faithfulness(model, groups, ig, span, float(lk.mean()))
        oracle[name] = case
    with open(os.path.join(OUT, "oracle.json"), "w") as f:
        json.dump({"torch": torch.__version__, "cases": oracle}, f, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
