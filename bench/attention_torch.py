#!/usr/bin/env python3
"""PyTorch CPU baseline for headscope's attention kernel.

What it measures
----------------
Wall-clock time (median over --reps repetitions, after --warmup untimed
repetitions, each repetition timed with time.perf_counter) of one float32
self-attention layer on the CPU, for each --shape B,T,d,h[,g]:

* "fwd":    forward pass under torch.no_grad(), returning the per-head
            attention maps (need_weights=True, average_attn_weights=False,
            i.e. a (B, h, T, T) tensor), the same thing our C kernel produces.
* "fwdbwd": forward (maps still requested) plus backward of (out * gout).sum()
            for a fixed random gout, gradients w.r.t. the input and all
            projection weights; grads are reset (set_to_none) between reps.

This is the "natural Python workflow" baseline: what a PyTorch user would
write without hand-tuning.  For g == h it is torch.nn.MultiheadAttention(d, h,
bias=False, batch_first=True, dropout=0.0).  torch 1.13 has no grouped-query
attention module, so for g < h it is the obvious hand-written module: separate
bias-free Linear layers for q (d->d), k and v (d->g*dh) and the output (d->d),
reshape/transpose into heads, K/V expanded with repeat_interleave(h//g, dim=1),
scores = q @ k^T / sqrt(dh), masked_fill(-inf) with the causal mask, softmax,
@ v, transpose back, output Linear.

Causal masking (--causal 1, the default) uses a bool mask
torch.ones(T, T, dtype=bool).triu(1) (True = blocked).

Flop convention (forward only, identical for torch and the C kernel):
    projections     2*B*T*d*(2*d + 2*g*dh)      (q, o: d->d; k, v: d->g*dh)
    attention core  2 * 2*B*h*T*T*dh            (q@k^T and att@v)
The core is counted as the full T x T square even when causal: a causal kernel
could skip about half of it, but we count the full square for both
implementations so that their GFLOP/s are directly comparable (GFLOP/s is then
just a rescaled inverse time).  fwd_gflops = flops / median_fwd_seconds / 1e9.

Output: one JSON object per shape on stdout, e.g.
  {"impl":"torch","threads":1,"B":2,"T":64,"d":128,"h":4,"g":4,"causal":1,
   "fwd_ms":..,"fwdbwd_ms":..,"fwd_gflops":..,"reps":3}
Nothing else is written to stdout; diagnostics go to stderr.

Note on torch's MHA "fast path" (torch._native_multi_head_attention): torch
1.13 only takes it in eval mode with nothing requiring grad, batch_first=True,
no attn_mask, an even head count, self-attention, etc.  In this torch build the
fast path also crashes for bias=False modules ("argument 'qkv_bias' must be
Tensor, not NoneType"), so the module is kept in train() mode for both "fwd" and
"fwdbwd" (with dropout=0.0 that is numerically the same as eval()).  Both
measurements therefore always use the ordinary Python/ATen path
(F.multi_head_attention_forward), also with --causal 0; "fwd" still runs under
torch.no_grad().  The path used is reported on stderr.

Example:
  /usr/bin/python3 bench/attention_torch.py --threads 1 \\
      --shape 2,64,128,4 --shape 2,64,128,4,2 --reps 3
"""

import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def log(*a):
    print(*a, file=sys.stderr, flush=True)


class GQAttention(nn.Module):
    """Grouped-query attention as a PyTorch user would write it (torch 1.13).

    Call signature mirrors nn.MultiheadAttention enough for this benchmark:
    forward(query, key, value, attn_mask=None, need_weights=True,
            average_attn_weights=False) -> (out, att) with att (B, h, T, T).
    attn_mask is a bool (T, T) mask, True = blocked.
    """

    def __init__(self, d, h, g):
        super().__init__()
        assert d % h == 0 and h % g == 0
        self.d, self.h, self.g, self.dh = d, h, g, d // h
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, g * self.dh, bias=False)
        self.v_proj = nn.Linear(d, g * self.dh, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)

    def forward(self, query, key, value, attn_mask=None, need_weights=True,
                average_attn_weights=False):
        B, T, _ = query.shape
        S = key.shape[1]
        h, g, dh = self.h, self.g, self.dh
        q = self.q_proj(query).view(B, T, h, dh).transpose(1, 2)   # B,h,T,dh
        k = self.k_proj(key).view(B, S, g, dh).transpose(1, 2)     # B,g,S,dh
        v = self.v_proj(value).view(B, S, g, dh).transpose(1, 2)
        k = k.repeat_interleave(h // g, dim=1)                     # B,h,S,dh
        v = v.repeat_interleave(h // g, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(dh)           # B,h,T,S
        if attn_mask is not None:
            scores = scores.masked_fill(attn_mask, float("-inf"))
        att = F.softmax(scores, dim=-1)
        out = (att @ v).transpose(1, 2).reshape(B, T, self.d)
        out = self.o_proj(out)
        if not need_weights:
            return out, None
        if average_attn_weights:
            return out, att.mean(dim=1)
        return out, att


def parse_shape(s):
    try:
        parts = [int(p) for p in s.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad shape {s!r}")
    if len(parts) == 4:
        parts.append(parts[3])
    if len(parts) != 5 or min(parts) <= 0:
        raise argparse.ArgumentTypeError(f"shape must be B,T,d,h[,g] > 0: {s!r}")
    B, T, d, h, g = parts
    if d % h != 0:
        raise argparse.ArgumentTypeError(f"d={d} not divisible by h={h}")
    if h % g != 0:
        raise argparse.ArgumentTypeError(f"h={h} not divisible by g={g}")
    return tuple(parts)


def forward_flops(B, T, d, h, g):
    dh = d // h
    proj = 2 * B * T * d * (2 * d + 2 * g * dh)
    # Full T x T square: a causal kernel could skip about half of this, but we
    # count the full square for both torch and the C kernel so GFLOP/s compare.
    core = 2 * (2 * B * h * T * T * dh)
    return proj + core


def time_reps(fn, reps, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def fast_path_reason(module, x, mask):
    """Best-effort replica of torch 1.13's MHA fast-path check (for logging)."""
    if not isinstance(module, nn.MultiheadAttention):
        return "custom GQA module (no fast path)"
    if module.training:
        return "training mode"
    if mask is not None:
        return "attn_mask given"
    if module.num_heads % 2 == 1:
        return "num_heads odd"
    if torch.is_grad_enabled() and (x.requires_grad or any(
            p.requires_grad for p in module.parameters())):
        return "grad enabled and something requires grad"
    return None


def bench_shape(shape, reps, warmup, causal):
    B, T, d, h, g = shape
    if g == h:
        module = nn.MultiheadAttention(d, h, bias=False, batch_first=True,
                                       dropout=0.0)
    else:
        module = GQAttention(d, h, g)
    module = module.float()
    mask = torch.ones(T, T, dtype=torch.bool).triu(1) if causal else None
    x = torch.randn(B, T, d, dtype=torch.float32)
    gout = torch.randn(B, T, d, dtype=torch.float32)

    # Stay in train() mode throughout: dropout is 0.0, and train mode keeps
    # torch 1.13 off the MHA fast path, which crashes for bias=False modules.
    module.train()

    # ---- fwd: no_grad forward, maps returned ----
    with torch.no_grad():
        reason = fast_path_reason(module, x, mask)
        log(f"[attention_torch] shape={shape} fwd: "
            + ("fast path (_native_multi_head_attention)" if reason is None
               else f"slow/python path ({reason})"))

        def fwd():
            out, att = module(x, x, x, attn_mask=mask, need_weights=True,
                              average_attn_weights=False)
            return out, att

        out, att = fwd()
        assert att is not None and tuple(att.shape) == (B, h, T, T), att.shape
        fwd_s = time_reps(fwd, reps, warmup)

    # ---- fwdbwd: training step on input and weights ----
    xg = x.clone().requires_grad_(True)
    reason = fast_path_reason(module, xg, mask)
    assert reason is not None, "fast path must not be used when grads are needed"
    log(f"[attention_torch] shape={shape} fwdbwd: slow/python path ({reason})")

    def fwdbwd():
        module.zero_grad(set_to_none=True)
        xg.grad = None
        out, att = module(xg, xg, xg, attn_mask=mask, need_weights=True,
                          average_attn_weights=False)
        (out * gout).sum().backward()

    fwdbwd()
    assert xg.grad is not None
    fwdbwd_s = time_reps(fwdbwd, reps, warmup)

    flops = forward_flops(B, T, d, h, g)
    return {
        "impl": "torch",
        "B": B, "T": T, "d": d, "h": h, "g": g,
        "causal": 1 if causal else 0,
        "fwd_ms": round(fwd_s * 1e3, 4),
        "fwdbwd_ms": round(fwdbwd_s * 1e3, 4),
        "fwd_gflops": round(flops / fwd_s / 1e9, 4),
        "reps": reps,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shape", type=parse_shape, action="append",
                    required=True, help="B,T,d,h[,g] (repeatable; g defaults to h)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--causal", type=int, choices=(0, 1), default=1)
    args = ap.parse_args()
    if args.reps < 1 or args.warmup < 0 or args.threads < 1:
        ap.error("need --reps >= 1, --warmup >= 0, --threads >= 1")

    try:
        torch.set_num_interop_threads(1)
    except Exception as e:  # may fail if already initialised
        log(f"[attention_torch] set_num_interop_threads(1) failed: {e}")
    try:
        torch.set_num_threads(args.threads)
    except Exception as e:
        log(f"[attention_torch] set_num_threads({args.threads}) failed: {e}")
    if torch.get_num_threads() != args.threads:
        log(f"[attention_torch] warning: torch uses {torch.get_num_threads()} "
            f"threads, {args.threads} requested")
    log(f"[attention_torch] torch {torch.__version__}, "
        f"threads={torch.get_num_threads()}, "
        f"interop={torch.get_num_interop_threads()}")

    torch.manual_seed(0)
    for shape in args.shape:
        rec = bench_shape(shape, args.reps, args.warmup, bool(args.causal))
        rec = {"impl": rec.pop("impl"), "threads": args.threads, **rec}
        print(json.dumps(rec, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()
