"""Oracle fixtures for headscope's attention forward/backward.

Provenance
----------
Computes multi-head / grouped-query attention forward outputs, per-head
post-softmax attention maps and gradients of loss = sum(out * gout), where
gout is a random tensor stored in the fixture. MHA cases use
torch.nn.MultiheadAttention itself as the oracle; GQA/MQA cases use the small
reference `ref_attention` below, which is first asserted (inside this script)
to match nn.MultiheadAttention to 1e-12 when G == H and xi == 1.

* torch version: printed into the fixture header (generated with Debian's
  python3-torch, 1.13).
* dtype: float64 everywhere; torch.set_num_threads(1).
* seeds: torch.manual_seed(SEED) is called at the start of each case, with
  SEED listed in CASES below (1001..1005); the self-check uses seed 7.
* regenerate, from the repo root:
      /usr/bin/python3 scripts/oracle/gen_attention.py > tests/fixtures/attention.txt
      /usr/bin/python3 scripts/oracle/gen_attention.py window > tests/fixtures/attention_window.txt

Sliding windows (the `window` argument; WINDOW_CASES, seeds 2001..2006): key s
is visible to query t iff t - W < s <= t and s is not padding, per head (a
window of 0 is global). The boolean mask is built with plain Python loops
(`window_allowed`), independent of any kernel; MHA goes through
nn.MultiheadAttention with that mask as attn_mask, GQA/MQA and per-head
windows through ref_attention with it. The self-check asserts the two agree.
Inputs of these cases are multiples of 2^-8 (exact in float and double, and
short in the file); outputs are printed with 13 significant digits, so the
file stays small.

Format: see tests/fixtures/attention.txt header ('case', 'int', 'tensor',
values printed with %.17g, 'end'). Conventions: weights in nn.Linear layout
(out, in); valid (B,S) 1 = key may be attended; att (B,H,L,S) with masked
entries exactly 0; scale 1/sqrt(dh); head h reads KV group h // (H//G).
"""
import math
import sys

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)
DT = torch.float64


def valid_mask(B, S, lengths):
    """(B,S) float 0/1 mask: 1 for key positions < length (right padding)."""
    lengths = lengths or [S] * B
    return (torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]).to(DT)


def window_allowed(L, S, windows):
    """(H,L,S) bool, built naively: query t sees key s iff s <= t and, with a
    window W > 0 for its head, t - W < s (no cache: query t is position t)."""
    return torch.tensor([[[s <= t and (W == 0 or t - W < s) for s in range(S)]
                          for t in range(L)] for W in windows], dtype=torch.bool)


def ref_attention(x, y, w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o, xi, valid, causal, H, G,
                  head_allowed=None):
    """Grouped-query attention straight from the headscope definitions.
    head_allowed: None, or (H,L,S) bool replacing the causal rule per head."""
    B, L, d = x.shape
    S, dh = y.shape[1], d // H
    q = F.linear(x, w_q, b_q).reshape(B, L, H, dh).transpose(1, 2)  # (B,H,L,dh)
    k = F.linear(y, w_k, b_k).reshape(B, S, G, dh).transpose(1, 2)  # (B,G,S,dh)
    v = F.linear(y, w_v, b_v).reshape(B, S, G, dh).transpose(1, 2)
    k = k.repeat_interleave(H // G, dim=1)  # head h -> group h // (H//G)
    v = v.repeat_interleave(H // G, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(dh)  # (B,H,L,S)
    allowed = valid.bool()[:, None, None, :].expand(B, H, L, S)
    if head_allowed is not None:
        allowed = allowed & head_allowed[None]
    elif causal:
        allowed = allowed & torch.ones(L, S, dtype=torch.bool).tril()
    att = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
    z = (att @ v) * xi[None, :, None, None]  # gate each head's output
    out = F.linear(z.transpose(1, 2).reshape(B, L, d), w_o, b_o)
    return out, att


def run_mha(m, x, y, valid, causal, padded):
    L, S = x.shape[1], y.shape[1]
    mask = torch.ones(L, S, dtype=torch.bool).triu(1) if causal else None  # True = blocked
    kpm = ~valid.bool() if padded else None  # True = padded key
    return m(x, y, y, key_padding_mask=kpm, attn_mask=mask,
             need_weights=True, average_attn_weights=False)


def emit_case(name, ints, tensors, fmt="%.17g"):
    print(f"case {name}")
    for k, v in ints.items():
        print(f"int {k} {int(v)}")
    for k, t in tensors.items():
        t = t.detach().to(DT).contiguous()
        print(f"tensor {k} {t.dim()} " + " ".join(str(s) for s in t.shape))
        vals = [fmt % v for v in t.reshape(-1).tolist()]
        for i in range(0, len(vals), 8):
            print(" ".join(vals[i:i + 8]))
    print("end")


def mha_case(name, seed, B, L, S, d, H, causal, bias, cross, lengths):
    torch.manual_seed(seed)
    m = torch.nn.MultiheadAttention(d, H, bias=bias, batch_first=True, dropout=0.0, dtype=DT)
    if bias:  # default init zeroes the biases; make them non-trivial
        with torch.no_grad():
            m.in_proj_bias.normal_(0.0, 0.5)
            m.out_proj.bias.normal_(0.0, 0.5)
    x = torch.randn(B, L, d, requires_grad=True)
    y = torch.randn(B, S, d, requires_grad=True) if cross else x
    valid = valid_mask(B, S, lengths)
    gout = torch.randn(B, L, d)
    out, att = run_mha(m, x, y, valid, causal, lengths is not None)
    wrt = [x] + ([y] if cross else []) + [m.in_proj_weight, m.out_proj.weight]
    wrt += [m.in_proj_bias, m.out_proj.bias] if bias else []
    grads = list(torch.autograd.grad((out * gout).sum(), wrt))
    t = {"x": x}
    if cross:
        t["y"] = y
    t["valid"] = valid
    t.update(zip(["w_q", "w_k", "w_v"], m.in_proj_weight.chunk(3, 0)))
    t["w_o"] = m.out_proj.weight
    if bias:
        t.update(zip(["b_q", "b_k", "b_v"], m.in_proj_bias.chunk(3, 0)))
        t["b_o"] = m.out_proj.bias
    t.update(gout=gout, out=out, att=att, dx=grads.pop(0))
    if cross:
        t["dy"] = grads.pop(0)
    t.update(zip(["dw_q", "dw_k", "dw_v"], grads.pop(0).chunk(3, 0)))
    t["dw_o"] = grads.pop(0)
    if bias:
        t.update(zip(["db_q", "db_k", "db_v"], grads.pop(0).chunk(3, 0)))
        t["db_o"] = grads.pop(0)
    ints = dict(B=B, L=L, S=S, d=d, H=H, G=H, causal=causal, bias=bias, cross=cross, gates=0)
    emit_case(name, ints, t)


def gqa_case(name, seed, B, L, d, H, G, causal, lengths):
    torch.manual_seed(seed)
    dh, kv = d // H, G * (d // H)
    p = {"w_q": torch.randn(d, d) / math.sqrt(d), "w_k": torch.randn(kv, d) / math.sqrt(d),
         "w_v": torch.randn(kv, d) / math.sqrt(d), "w_o": torch.randn(d, d) / math.sqrt(d),
         "b_q": 0.5 * torch.randn(d), "b_k": 0.5 * torch.randn(kv),
         "b_v": 0.5 * torch.randn(kv), "b_o": 0.5 * torch.randn(d),
         "xi": 1.0 + 0.5 * torch.randn(H)}
    for v in p.values():
        v.requires_grad_(True)
    x = torch.randn(B, L, d, requires_grad=True)
    valid = valid_mask(B, L, lengths)
    gout = torch.randn(B, L, d)
    out, att = ref_attention(x, x, p["w_q"], p["w_k"], p["w_v"], p["w_o"], p["b_q"], p["b_k"],
                             p["b_v"], p["b_o"], p["xi"], valid, causal, H, G)
    names = ["w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o", "xi"]
    grads = torch.autograd.grad((out * gout).sum(), [x] + [p[n] for n in names])
    t = {"x": x, "valid": valid, **p, "gout": gout, "out": out, "att": att, "dx": grads[0]}
    t.update(("d" + n, g) for n, g in zip(names, grads[1:]))
    ints = dict(B=B, L=L, S=L, d=d, H=H, G=G, causal=causal, bias=1, cross=0, gates=1)
    emit_case(name, ints, t)


def self_check():
    """ref_attention with G == H, xi == 1 must reproduce nn.MultiheadAttention."""
    torch.manual_seed(7)
    for cross, causal, lengths in [(False, 1, [6, 4, 5]), (True, 0, [7, 5, 3])]:
        B, L, S, d, H = 3, 6, 7 if cross else 6, 16, 4
        m = torch.nn.MultiheadAttention(d, H, bias=True, batch_first=True, dtype=DT)
        with torch.no_grad():
            m.in_proj_bias.normal_()
            m.out_proj.bias.normal_()
        x = torch.randn(B, L, d, requires_grad=True)
        y = torch.randn(B, S, d) if cross else x
        valid = valid_mask(B, S, lengths)
        out1, att1 = run_mha(m, x, y, valid, causal, True)
        w_q, w_k, w_v = m.in_proj_weight.chunk(3, 0)
        b_q, b_k, b_v = m.in_proj_bias.chunk(3, 0)
        out2, att2 = ref_attention(x, y, w_q, w_k, w_v, m.out_proj.weight, b_q, b_k, b_v,
                                   m.out_proj.bias, torch.ones(H), valid, causal, H, H)
        g1, = torch.autograd.grad(out1.sum(), x)
        g2, = torch.autograd.grad(out2.sum(), x)
        for a, b in [(out1, out2), (att1, att2), (g1, g2)]:
            assert (a - b).abs().max().item() < 1e-12, (a - b).abs().max().item()


CASES = [
    # Baseline: plain causal self-attention, no biases, no padding (seed 1001).
    lambda: mha_case("mha_causal", 1001, B=2, L=5, S=5, d=12, H=4, causal=1, bias=0, cross=0, lengths=None),
    # Biases (and their grads) plus causal mask combined with right key padding (seed 1002).
    lambda: mha_case("mha_bias_padding", 1002, B=3, L=6, S=6, d=16, H=4, causal=1, bias=1, cross=0,
                     lengths=[6, 4, 5]),
    # Cross-attention: L != S, separate K/V input y (dy), padding, no causal mask (seed 1003).
    lambda: mha_case("mha_cross", 1003, B=2, L=4, S=7, d=12, H=3, causal=0, bias=1, cross=1,
                     lengths=[7, 5]),
    # Grouped-query (2 query heads per KV group) with per-head gates xi and padding (seed 1004).
    lambda: gqa_case("gqa_gates", 1004, B=2, L=6, d=16, H=4, G=2, causal=1, lengths=[6, 5]),
    # Multi-query extreme: all 6 query heads share one KV head, gated, unpadded (seed 1005).
    lambda: gqa_case("mqa_gates", 1005, B=2, L=5, d=12, H=6, G=1, causal=1, lengths=None),
]

def q8(t):
    """t rounded to a multiple of 2^-8: exact in float and double."""
    return (t * 256).round() / 256


def window_case(name, seed, B, L, d, H, G, windows, valid, gates, mha=False, att=True):
    """Sliding-window self-attention; windows has one entry per head (0 = global).
    valid: (B,L) list of 0/1 or None (no padding). mha: nn.MultiheadAttention
    with the window mask as attn_mask (needs G == H and one window)."""
    torch.manual_seed(seed)
    dh, kv = d // H, G * (d // H)
    p = {"w_q": q8(torch.randn(d, d) / math.sqrt(d)), "w_k": q8(torch.randn(kv, d) / math.sqrt(d)),
         "w_v": q8(torch.randn(kv, d) / math.sqrt(d)), "w_o": q8(torch.randn(d, d) / math.sqrt(d)),
         "b_q": q8(0.5 * torch.randn(d)), "b_k": q8(0.5 * torch.randn(kv)),
         "b_v": q8(0.5 * torch.randn(kv)), "b_o": q8(0.5 * torch.randn(d))}
    if gates:
        p["xi"] = q8(1.0 + 0.5 * torch.randn(H))
    for v in p.values():
        v.requires_grad_(True)
    x = q8(torch.randn(B, L, d)).requires_grad_(True)
    valid_t = torch.tensor(valid, dtype=DT) if valid else torch.ones(B, L)
    gout = q8(torch.randn(B, L, d))
    allowed = window_allowed(L, L, windows)
    if mha:
        assert G == H and len(set(windows)) == 1 and not gates
        m = torch.nn.MultiheadAttention(d, H, bias=True, batch_first=True, dropout=0.0, dtype=DT)
        with torch.no_grad():
            m.in_proj_weight.copy_(torch.cat([p["w_q"], p["w_k"], p["w_v"]]))
            m.in_proj_bias.copy_(torch.cat([p["b_q"], p["b_k"], p["b_v"]]))
            m.out_proj.weight.copy_(p["w_o"])
            m.out_proj.bias.copy_(p["b_o"])
        out, att_t = m(x, x, x, key_padding_mask=~valid_t.bool(), attn_mask=~allowed[0],
                       need_weights=True, average_attn_weights=False)
        wrt = [x, m.in_proj_weight, m.out_proj.weight, m.in_proj_bias, m.out_proj.bias]
        g = list(torch.autograd.grad((out * gout).sum(), wrt))
        grads = [g[0], *g[1].chunk(3, 0), g[2], *g[3].chunk(3, 0), g[4]]
    else:
        xi = p["xi"] if gates else torch.ones(H)
        out, att_t = ref_attention(x, x, p["w_q"], p["w_k"], p["w_v"], p["w_o"], p["b_q"],
                                   p["b_k"], p["b_v"], p["b_o"], xi, valid_t, 1, H, G, allowed)
        names = ["w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"] + (["xi"] if gates else [])
        grads = list(torch.autograd.grad((out * gout).sum(), [x] + [p[n] for n in names]))
    assert not att_t.isnan().any(), f"{name}: a query row sees no key"
    t = {"x": x, "valid": valid_t, "head_window": torch.tensor(windows, dtype=DT), **p,
         "gout": gout, "out": out}
    if att:
        t["att"] = att_t
    names = ["w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"] + (["xi"] if gates else [])
    t["dx"] = grads[0]
    t.update(("d" + n, g) for n, g in zip(names, grads[1:]))
    ints = dict(B=B, L=L, S=L, d=d, H=H, G=G, causal=1, bias=1, cross=0, gates=gates)
    emit_case(name, ints, t, fmt="%.13g")


def window_self_check():
    """ref_attention with a window mask and G == H must reproduce
    nn.MultiheadAttention given the same mask as attn_mask."""
    torch.manual_seed(8)
    B, L, d, H, W = 2, 7, 8, 2, 3
    m = torch.nn.MultiheadAttention(d, H, bias=True, batch_first=True, dtype=DT)
    x = torch.randn(B, L, d, requires_grad=True)
    valid = torch.tensor([[1] * 7, [1, 1, 0, 1, 1, 1, 0]], dtype=DT)
    allowed = window_allowed(L, L, [W] * H)
    out1, att1 = m(x, x, x, key_padding_mask=~valid.bool(), attn_mask=~allowed[0],
                   need_weights=True, average_attn_weights=False)
    w_q, w_k, w_v = m.in_proj_weight.chunk(3, 0)
    b_q, b_k, b_v = m.in_proj_bias.chunk(3, 0)
    out2, att2 = ref_attention(x, x, w_q, w_k, w_v, m.out_proj.weight, b_q, b_k, b_v,
                               m.out_proj.bias, torch.ones(H), valid, 1, H, H, allowed)
    g1, = torch.autograd.grad(out1.sum(), x)
    g2, = torch.autograd.grad(out2.sum(), x)
    for a, b in [(out1, out2), (att1, att2), (g1, g2)]:
        assert (a - b).abs().max().item() < 1e-12, (a - b).abs().max().item()
    # the mask itself: row t of a window W sees exactly min(t + 1, W) keys
    assert [int(r.sum()) for r in allowed[0]] == [min(t + 1, W) for t in range(L)]


HOLE = [1, 1, 0, 1, 1, 1, 0]  # a padded key inside the sequence and one at the end
WINDOW_CASES = [
    # MHA through nn.MultiheadAttention itself, W=3 < L, right padding (seed 2001).
    lambda: window_case("win_mha", 2001, B=2, L=6, d=8, H=2, G=2, windows=[3, 3],
                        valid=[[1] * 6, [1] * 5 + [0]], gates=0, mha=True),
    # GQA (2 query heads per KV head), W=3, gates, padding inside the window (seed 2002).
    lambda: window_case("win_gqa", 2002, B=2, L=7, d=8, H=4, G=2, windows=[3] * 4,
                        valid=[[1] * 7, HOLE], gates=1),
    # MQA with W=1: every query sees only itself (seed 2003).
    lambda: window_case("win_mqa_w1", 2003, B=1, L=6, d=8, H=4, G=1, windows=[1] * 4,
                        valid=None, gates=1),
    # W >= L: the causal maps (seed 2004).
    lambda: window_case("win_wide", 2004, B=1, L=5, d=8, H=4, G=2, windows=[7] * 4,
                        valid=None, gates=0),
    # Per-head windows (global, 2, 3, wider than L) on GQA with padding (seed 2005);
    # not 1: a padded query would then see nothing, which the kernel refuses.
    lambda: window_case("win_heads", 2005, B=2, L=7, d=8, H=4, G=2, windows=[0, 2, 3, 9],
                        valid=[HOLE, [1] * 7], gates=1),
    # L=80 > one 64-query block, W=8: the second block's band starts at key 57,
    # so the skipped keys are really skipped; maps left out for size (seed 2006).
    lambda: window_case("win_long", 2006, B=1, L=80, d=4, H=2, G=1, windows=[8, 8],
                        valid=None, gates=1, att=False),
]

if __name__ == "__main__" and sys.argv[1:] == ["window"]:
    window_self_check()
    print("# headscope sliding-window attention oracle fixtures; generated by "
          "scripts/oracle/gen_attention.py window")
    print(f"# torch {torch.__version__}, float64, num_threads=1, per-case torch.manual_seed 2001..2006")
    print("# regenerate: /usr/bin/python3 scripts/oracle/gen_attention.py window "
          "> tests/fixtures/attention_window.txt")
    print("# head_window (H): each head's window, 0 = global; key s visible to query t iff "
          "t - W < s <= t and valid")
    for make in WINDOW_CASES:
        make()
elif __name__ == "__main__":
    self_check()
    print("# headscope attention oracle fixtures; generated by scripts/oracle/gen_attention.py")
    print(f"# torch {torch.__version__}, float64, num_threads=1, per-case torch.manual_seed 1001..1005")
    print("# regenerate: /usr/bin/python3 scripts/oracle/gen_attention.py > tests/fixtures/attention.txt")
    print("# loss = sum(out * gout); att (B,H,L,S) post-softmax, masked entries 0; valid 1 = attendable key")
    for make in CASES:
        make()
