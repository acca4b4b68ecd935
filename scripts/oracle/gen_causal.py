"""Oracle activation patching and path patching for headscope (SPEC §11).

Provenance
----------
An independent PyTorch reference: its own minimal float64 forwards of the
GPT-2, Llama and GPT-NeoX families (written from the Hugging Face model
definitions: GPT2LMHeadModel with Conv1D c_attn/c_proj, gelu_new,
pre-LayerNorm, tied wte; LlamaForCausalLM with RMSNorm, rotate-half RoPE,
GQA by h // (H/G), SwiGLU; GPTNeoXForCausalLM with the fused
query_key_value viewed as (B,T,H,3*dh) and split per head, rotary on the
first int(dh*rotary_pct) dims, parallel or sequential residual, exact-erf
GELU, untied embed_out, checked equal to scripts/oracle/gen_families.py's
NeoX forward), each calling a hook at every site TransformerLens users patch:

  resid_pre (B,T,d)  entering layer l       q (B,T,H,dh)  after RoPE
  k, v (B,T,G,dh)    after RoPE (k)          pattern (B,H,T,T) post-softmax
  z (B,T,H,dh)       before the output proj  attn_out, mlp_out (B,T,d)

A hook is fn(x) -> x'; the forward continues with x'. Nothing here uses the
C code; it reads the checkpoints with its own safetensors parser. A family is
one class with load() and forward() in FAMILIES, a case one line of CASES.
With a parallel residual (NeoX) attn_out and mlp_out are both added to the
layer's input; the MLP reads ln2 of that input, so patching attn_out does not
reach the same layer's MLP.

Definitions (SPEC §11), LD = logit[answer] - logit[wrong] at the last position
-----------------------------------------------------------------------------
* patch (denoising): base = corrupt run, source = clean run; noising: base =
  clean, source = corrupt. One activation of the base run replaced by the
  source run's: a head's z or pattern at every position, or resid_pre /
  attn_out / mlp_out of one layer at one position.
    value  = (mean LD_patched - mean LD_base) / (mean LD_source - mean LD_base)
    stderr = std(dP - value * D, ddof=1) / sqrt(n) / |mean LD_clean - mean LD_corrupt|
  with per prompt dP = LD_patched - LD_base and D = LD_source - LD_base
  (SPEC §21's delta method, which replaced §11's std(dP) / sqrt(n) / |gap|).
* path_patch, per sender head (l,h), on the clean prompt: run 1 with every
  head's z replaced by the clean run's and the sender's by the corrupt run's
  (MLPs and norms recomputed), recording the receivers' q/k/v (k, v: the
  receiver's key/value head h // (H/G)); run 2 with those patched in (nothing
  else changed). Without receivers LD is run 1's.
    value  = (mean LD_pp - mean LD_clean) / (mean LD_corrupt - mean LD_clean)
    stderr = as patch's, dP = LD_pp - LD_clean, D = LD_corrupt - LD_clean
* logit_diff_clean / logit_diff_corrupt: mean and stderr over prompts;
  logit_diff_gap (SPEC §21): mean LD_clean - mean LD_corrupt with the stderr
  of the per-prompt LD_clean - LD_corrupt.

Prompts: ids drawn from torch.Generator().manual_seed(seed of the case); the
corrupt prompt changes two positions of the clean one; answer = the clean
run's argmax at the last position, wrong = the corrupt run's (another token
when equal), so LD_clean > LD_corrupt.

Output: tests/fixtures/causal/<case>.jsonl (the prompts) and
tests/fixtures/causal/oracle.json: per case the model directory, the prompt
file, the sites, and rows [layer, head_or_position, value, stderr] per metric.
Regenerate (from the repo root): /usr/bin/python3 scripts/oracle/gen_causal.py
(byte-identical on rerun).
"""

import json
import math
import os
import struct

import numpy as np
import torch

torch.set_num_threads(1)
DT = torch.float64
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
MODELS = os.path.join(ROOT, "tests", "fixtures", "models")
OUT = os.path.join(ROOT, "tests", "fixtures", "causal")


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in hdr.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", name
        a, b = e["data_offsets"]
        arr = np.frombuffer(data[a:b], dtype="<f4").astype(np.float64).reshape(e["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out


def hook(hooks, site, layer, x):
    fn = hooks.get((site, layer))
    return fn(x) if fn else x


def attend(hooks, l, q, k, v, H, G):
    """q (B,T,H,dh), k/v (B,T,G,dh) after their hooks -> z (B,T,H,dh)."""
    B, T, _, dh = q.shape
    rep = H // G
    kk = k.repeat_interleave(rep, dim=2)
    vv = v.repeat_interleave(rep, dim=2)
    s = torch.einsum("bthd,bshd->bhts", q, kk) / math.sqrt(dh)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    s = s.masked_fill(~mask, float("-inf"))
    p = hook(hooks, "pattern", l, torch.softmax(s, dim=-1))
    z = torch.einsum("bhts,bshd->bthd", p, vv)
    return hook(hooks, "z", l, z)


class Gpt2:
    def __init__(self, d):
        self.c = json.load(open(os.path.join(d, "config.json")))
        self.w = read_safetensors(os.path.join(d, "model.safetensors"))
        self.L, self.H = self.c["n_layer"], self.c["n_head"]
        self.G = self.H

    def ln(self, x, p):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        eps = self.c["layer_norm_epsilon"]
        return (x - mu) / torch.sqrt(var + eps) * self.w[p + ".weight"] + self.w[p + ".bias"]

    def forward(self, tok, hooks):
        w, H = self.w, self.H
        B, T = tok.shape
        x = w["wte.weight"][tok] + w["wpe.weight"][:T]
        d = x.shape[-1]
        dh = d // H
        for l in range(self.L):
            p = "h.%d." % l
            x = hook(hooks, "resid_pre", l, x)
            qkv = self.ln(x, p + "ln_1") @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
            q, k, v = qkv.split(d, dim=-1)
            q = hook(hooks, "q", l, q.reshape(B, T, H, dh))
            k = hook(hooks, "k", l, k.reshape(B, T, H, dh))
            v = hook(hooks, "v", l, v.reshape(B, T, H, dh))
            z = attend(hooks, l, q, k, v, H, H)
            a = z.reshape(B, T, d) @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
            x = x + hook(hooks, "attn_out", l, a)
            h = self.ln(x, p + "ln_2") @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]
            h = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
            m = h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
            x = x + hook(hooks, "mlp_out", l, m)
        return self.ln(x, "ln_f") @ w["wte.weight"].T


class Llama:
    def __init__(self, d):
        self.c = json.load(open(os.path.join(d, "config.json")))
        self.w = read_safetensors(os.path.join(d, "model.safetensors"))
        self.L, self.H = self.c["num_hidden_layers"], self.c["num_attention_heads"]
        self.G = self.c["num_key_value_heads"]

    def rms(self, x, p):
        eps = self.c["rms_norm_eps"]
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * self.w[p + ".weight"]

    def rope(self, x):
        B, T, n, dh = x.shape
        inv = 1.0 / (self.c["rope_theta"] ** (torch.arange(0, dh, 2, dtype=DT) / dh))
        ang = torch.arange(T, dtype=DT)[:, None] * inv[None, :]
        cos = torch.cat([ang.cos(), ang.cos()], -1)[None, :, None, :]
        sin = torch.cat([ang.sin(), ang.sin()], -1)[None, :, None, :]
        rot = torch.cat([-x[..., dh // 2:], x[..., :dh // 2]], -1)
        return x * cos + rot * sin

    def forward(self, tok, hooks):
        w, H, G = self.w, self.H, self.G
        B, T = tok.shape
        x = w["model.embed_tokens.weight"][tok]
        d = x.shape[-1]
        dh = d // H
        for l in range(self.L):
            p = "model.layers.%d." % l
            x = hook(hooks, "resid_pre", l, x)
            n = self.rms(x, p + "input_layernorm")
            q = self.rope((n @ w[p + "self_attn.q_proj.weight"].T).reshape(B, T, H, dh))
            k = self.rope((n @ w[p + "self_attn.k_proj.weight"].T).reshape(B, T, G, dh))
            v = (n @ w[p + "self_attn.v_proj.weight"].T).reshape(B, T, G, dh)
            q, k, v = hook(hooks, "q", l, q), hook(hooks, "k", l, k), hook(hooks, "v", l, v)
            z = attend(hooks, l, q, k, v, H, G)
            a = z.reshape(B, T, d) @ w[p + "self_attn.o_proj.weight"].T
            x = x + hook(hooks, "attn_out", l, a)
            n = self.rms(x, p + "post_attention_layernorm")
            g = n @ w[p + "mlp.gate_proj.weight"].T
            u = n @ w[p + "mlp.up_proj.weight"].T
            m = (g * torch.sigmoid(g) * u) @ w[p + "mlp.down_proj.weight"].T
            x = x + hook(hooks, "mlp_out", l, m)
        head = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]
        return self.rms(x, "model.norm") @ head.T


class NeoX:
    """GPTNeoXForCausalLM: query_key_value's output viewed as (B, T, H, 3 dh)
    and split per head into q, k, v; rotate-half rotary on the first
    rotary_ndims = int(dh * rotary_pct) dims of q and k (inv_freq over
    rotary_ndims); scores / sqrt(dh); exact-erf GELU; parallel residual
    x + attn(ln1(x)) + mlp(ln2(x)) or sequential; untied embed_out."""

    def __init__(self, d):
        self.c = json.load(open(os.path.join(d, "config.json")))
        self.w = read_safetensors(os.path.join(d, "model.safetensors"))
        self.L, self.H = self.c["num_hidden_layers"], self.c["num_attention_heads"]
        self.G = self.H

    def ln(self, x, p):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        eps = self.c["layer_norm_eps"]
        return (x - mu) / torch.sqrt(var + eps) * self.w[p + ".weight"] + self.w[p + ".bias"]

    def rope(self, x, R):
        T = x.shape[1]
        inv = 1.0 / (self.c["rotary_emb_base"] ** (torch.arange(0, R, 2, dtype=DT) / R))
        ang = torch.arange(T, dtype=DT)[:, None] * inv[None, :]
        cos = torch.cat([ang.cos(), ang.cos()], -1)[None, :, None, :]
        sin = torch.cat([ang.sin(), ang.sin()], -1)[None, :, None, :]
        r = x[..., :R]
        rot = torch.cat([-r[..., R // 2:], r[..., :R // 2]], -1)
        return torch.cat([r * cos + rot * sin, x[..., R:]], -1)

    def forward(self, tok, hooks):
        w, H = self.w, self.H
        B, T = tok.shape
        x = w["gpt_neox.embed_in.weight"][tok]
        d = x.shape[-1]
        dh = d // H
        R = int(dh * self.c["rotary_pct"])
        for l in range(self.L):
            p = "gpt_neox.layers.%d." % l
            x = hook(hooks, "resid_pre", l, x)
            qkv = (self.ln(x, p + "input_layernorm") @ w[p + "attention.query_key_value.weight"].T
                   + w[p + "attention.query_key_value.bias"]).reshape(B, T, H, 3 * dh)
            q = hook(hooks, "q", l, self.rope(qkv[..., :dh], R))
            k = hook(hooks, "k", l, self.rope(qkv[..., dh:2 * dh], R))
            v = hook(hooks, "v", l, qkv[..., 2 * dh:])
            z = attend(hooks, l, q, k, v, H, H)
            a = z.reshape(B, T, d) @ w[p + "attention.dense.weight"].T + w[p + "attention.dense.bias"]
            a = hook(hooks, "attn_out", l, a)

            def mlp(y):
                h = self.ln(y, p + "post_attention_layernorm") @ w[p + "mlp.dense_h_to_4h.weight"].T
                h = h + w[p + "mlp.dense_h_to_4h.bias"]
                h = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
                m = h @ w[p + "mlp.dense_4h_to_h.weight"].T + w[p + "mlp.dense_4h_to_h.bias"]
                return hook(hooks, "mlp_out", l, m)

            if self.c["use_parallel_residual"]:
                x = x + a + mlp(x)
            else:
                x = x + a
                x = x + mlp(x)
        return self.ln(x, "gpt_neox.final_layer_norm") @ w["embed_out.weight"].T


FAMILIES = {"gpt2": Gpt2, "llama": Llama, "gpt_neox": NeoX}

# name, model directory, seed, lengths (one group per length), prompts per
# length, sites, path-patch receivers
CASES = [
    ("gpt2", "gpt2_tiny", 11, [6], 6, ["z", "pattern", "resid_pre", "attn_out", "mlp_out"],
     "1.0:q,1.2:k"),
    ("llama_gqa", "llama_gqa", 12, [6], 6, ["z", "pattern", "resid_pre", "attn_out", "mlp_out"],
     "1.1:k,1.2:v"),
    ("gpt2_lengths", "gpt2_tiny", 13, [4, 7], 3, ["z", "pattern"], None),
    # GPT-NeoX checkpoints of scripts/oracle/gen_families.py (directories
    # relative to tests/fixtures/models): Pythia-70m's shape (parallel
    # residual, rotary on a quarter of each head) and the sequential one
    ("neox_par", "../families/neox_par", 14, [6], 6,
     ["z", "pattern", "resid_pre", "attn_out", "mlp_out"], "1.0:q,1.1:k,1.1:v"),
    ("neox_seq", "../families/neox_seq", 15, [6], 6,
     ["z", "pattern", "resid_pre", "attn_out", "mlp_out"], "1.1:q,1.0:k"),
]


def record(store, site, layer):
    def fn(x):
        store[(site, layer)] = x.clone()
        return x
    return fn


def everything(model, tok):
    store = {}
    hooks = {(s, l): record(store, s, l) for l in range(model.L)
             for s in ("resid_pre", "q", "k", "v", "pattern", "z", "attn_out", "mlp_out")}
    return model.forward(tok, hooks), store


def ld(logits, ans, wrong):
    last = logits[:, -1, :]
    idx = torch.arange(last.shape[0])
    return last[idx, ans] - last[idx, wrong]


def replace_at(src, head=None, pos=None, head_dim=2):
    """A hook replacing the selected slice of x by src's."""
    def fn(x):
        y = x.clone()
        if head is not None:
            sl = [slice(None)] * y.dim()
            sl[head_dim] = head
            y[tuple(sl)] = src[tuple(sl)]
        else:
            y[:, pos] = src[:, pos]
        return y
    return fn


def make_prompts(model, seed, lengths, n):
    g = torch.Generator().manual_seed(seed)
    V = model.c["vocab_size"]
    groups = []
    for T in lengths:
        clean = torch.randint(0, V, (n, T), generator=g)
        corrupt = clean.clone()
        for i in range(n):
            for p in (1, T - 2):
                corrupt[i, p] = (clean[i, p] + 1 + torch.randint(0, V - 1, (1,), generator=g)) % V
        lc = model.forward(clean, {})[:, -1, :]
        lk = model.forward(corrupt, {})[:, -1, :]
        ans = lc.argmax(-1)
        wrong = lk.argmax(-1)
        for i in range(n):
            if wrong[i] == ans[i]:
                wrong[i] = lk[i].argsort(descending=True)[1]
        groups.append((clean, corrupt, ans, wrong))
    return groups


def ratio(diffs, towards, span, gaps):
    """SPEC §21: value mean dP / towards; stderr by the delta method, the
    residuals dP - value * D with D each prompt's own towards."""
    d, g = torch.cat(diffs), torch.cat(gaps)
    n = d.shape[0]
    v = d.mean() / towards
    resid = d - v * g * (1 if towards * span > 0 else -1)
    return float(v), float(resid.std(unbiased=True) / math.sqrt(n) / abs(span))


def patch_rows(model, groups, sites, noising, lc_all, lk_all):
    span = float(torch.cat(lc_all).mean() - torch.cat(lk_all).mean())
    towards = -span if noising else span
    rows = {}
    for site in sites:
        per = {}
        for clean, corrupt, ans, wrong in groups:
            base_tok, src_tok = (clean, corrupt) if noising else (corrupt, clean)
            _, src = everything(model, src_tok)
            base_ld = ld(model.forward(base_tok, {}), ans, wrong)
            T = clean.shape[1]
            for l in range(model.L):
                if site in ("z", "pattern"):
                    idxs = range(model.H)
                else:
                    idxs = range(T)
                for i in idxs:
                    if site == "z":
                        fn = replace_at(src[(site, l)], head=i, head_dim=2)
                    elif site == "pattern":
                        fn = replace_at(src[(site, l)], head=i, head_dim=1)
                    else:
                        fn = replace_at(src[(site, l)], pos=i)
                    pl = ld(model.forward(base_tok, {(site, l): fn}), ans, wrong)
                    per.setdefault((l, i), []).append(pl - base_ld)
        gaps = [c - k for c, k in zip(lc_all, lk_all)]
        rows["patch_" + site] = [[l, i] + list(ratio(v, towards, span, gaps))
                                 for (l, i), v in sorted(per.items())]
    return rows


def path_rows(model, groups, receivers, lc_all, lk_all):
    span = float(torch.cat(lc_all).mean() - torch.cat(lk_all).mean())
    recv = []
    for r in (receivers.split(",") if receivers else []):
        lh, s = r.split(":")
        l, h = (int(v) for v in lh.split("."))
        recv.append((l, h if s == "q" else h // (model.H // model.G), s))
    per = {}
    for clean, corrupt, ans, wrong in groups:
        lc, cs = everything(model, clean)
        _, ks = everything(model, corrupt)
        base = ld(lc, ans, wrong)
        for ls in range(model.L):
            for hs in range(model.H):
                hooks = {}
                for l in range(model.L):
                    def freeze(x, l=l):
                        y = cs[("z", l)].clone()
                        if l == ls:
                            y[:, :, hs] = ks[("z", l)][:, :, hs]
                        return y
                    hooks[("z", l)] = freeze
                got = {}
                for (l, h, s) in recv:
                    hooks[(s, l)] = record(got, s, l)
                out = model.forward(clean, hooks)
                if recv:
                    h2 = {}
                    for (l, h, s) in recv:
                        prev = h2.get((s, l))
                        rep = replace_at(got[(s, l)], head=h, head_dim=2)
                        h2[(s, l)] = (lambda x, a=prev, b=rep: b(a(x))) if prev else rep
                    out = model.forward(clean, h2)
                per.setdefault((ls, hs), []).append(ld(out, ans, wrong) - base)
    gaps = [c - k for c, k in zip(lc_all, lk_all)]
    return [[l, h] + list(ratio(v, -span, span, gaps)) for (l, h), v in sorted(per.items())]


def stat(xs):
    x = torch.cat(xs)
    return [float(x.mean()), float(x.std(unbiased=True) / math.sqrt(x.shape[0]))]


def check_neox(model):
    """The NeoX forward here against gen_families.py's (imported by path):
    equal logits (1e-10) on a batch of random tokens."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "gen_families", os.path.join(os.path.dirname(os.path.abspath(__file__)), "gen_families.py"))
    gf = importlib.util.module_from_spec(spec)
    default = torch.get_default_dtype()
    spec.loader.exec_module(gf)  # main() is guarded; it sets the default dtype
    torch.set_default_dtype(default)
    tok = torch.randint(0, model.c["vocab_size"], (3, 7), generator=torch.Generator().manual_seed(5))
    assert torch.allclose(model.forward(tok, {}), gf.neox_forward(model.w, model.c, tok),
                          atol=1e-10, rtol=0)


def main():
    os.makedirs(OUT, exist_ok=True)
    oracle = {}
    for name, mdir, seed, lengths, n, sites, receivers in CASES:
        model_dir = os.path.join(MODELS, mdir)
        family = json.load(open(os.path.join(model_dir, "config.json")))["model_type"]
        model = FAMILIES[family](model_dir)
        if family == "gpt_neox":
            check_neox(model)
        groups = make_prompts(model, seed, lengths, n)
        with open(os.path.join(OUT, name + ".jsonl"), "w") as f:
            # file order interleaves the lengths, as a user's file might
            for i in range(n):
                for clean, corrupt, ans, wrong in groups:
                    f.write(json.dumps({"clean_ids": clean[i].tolist(),
                                        "corrupt_ids": corrupt[i].tolist(),
                                        "answer_id": int(ans[i]), "wrong_id": int(wrong[i])}) + "\n")
        lc_all = [ld(model.forward(c, {}), a, w) for c, _, a, w in groups]
        lk_all = [ld(model.forward(k, {}), a, w) for _, k, a, w in groups]
        case = {"model": mdir, "prompts": name + ".jsonl", "sites": sites, "receivers": receivers,
                "logit_diff_clean": stat(lc_all), "logit_diff_corrupt": stat(lk_all),
                "logit_diff_gap": stat([c - k for c, k in zip(lc_all, lk_all)]),
                "denoising": patch_rows(model, groups, sites, False, lc_all, lk_all),
                "noising": patch_rows(model, groups, sites, True, lc_all, lk_all),
                "path_patch_logits": path_rows(model, groups, None, lc_all, lk_all)}
        if receivers:
            case["path_patch_receivers"] = path_rows(model, groups, receivers, lc_all, lk_all)
        oracle[name] = case
    with open(os.path.join(OUT, "oracle.json"), "w") as f:
        json.dump(oracle, f, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
