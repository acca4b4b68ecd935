#!/usr/bin/env python3
"""PyTorch CPU reference for headscope's sliding-window attention benchmark.

What it measures
----------------
Wall-clock time (median over --reps repetitions after --warmup untimed ones,
time.perf_counter) of the attention core of one float32 layer with a sliding
window W, as a PyTorch 1.13 user writes it without a fused kernel: given
q (B,h,T,dh) and k, v (B,g,T,dh) (expanded to h heads with
repeat_interleave), the full T x T scores q @ k^T / sqrt(dh), an explicit
boolean mask (True = hidden: key s > t, or s <= t - W), masked_fill_ with
-inf, softmax, @ v. Under torch.no_grad(). The mask is built once, outside
the timing. W = 0 means the causal mask alone.

This is the same computation as bench_attention --window's "kernel_fwd_ms"
(q, k, v -> z, no maps kept); the masked matmul costs O(T^2) whatever W is.

Output: one JSON line per shape on stdout:
  {"impl":"torch_window","threads":1,"B":..,"T":..,"d":..,"h":..,"g":..,
   "window":W,"kernel_fwd_ms":..,"reps":..}

Example:
  /usr/bin/python3 bench/window_torch.py --threads 1 --window 32 --shape 1,256,512,8
"""

import argparse
import json
import math
import statistics
import sys
import time

import torch


def parse_shape(s):
    parts = [int(p) for p in s.split(",")]
    if len(parts) == 4:
        parts.append(parts[3])
    B, T, d, h, g = parts
    if min(parts) <= 0 or d % h or h % g:
        raise argparse.ArgumentTypeError(f"bad shape {s!r} (B,T,d,h[,g])")
    return B, T, d, h, g


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--window", type=int, default=0)
    ap.add_argument("--shape", type=parse_shape, action="append", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_interop_threads(1)
    torch.set_num_threads(args.threads)
    print(f"[window_torch] torch {torch.__version__}, threads={torch.get_num_threads()}",
          file=sys.stderr)
    torch.manual_seed(0)
    for B, T, d, h, g in args.shape:
        dh, W = d // h, args.window
        q = torch.randn(B, h, T, dh)
        k = torch.randn(B, g, T, dh)
        v = torch.randn(B, g, T, dh)
        t = torch.arange(T)[:, None]
        s = torch.arange(T)[None, :]
        hidden = s > t
        if W > 0:
            hidden |= s <= t - W

        def core():
            kk = k.repeat_interleave(h // g, dim=1)
            vv = v.repeat_interleave(h // g, dim=1)
            scores = q @ kk.transpose(-2, -1) / math.sqrt(dh)
            scores.masked_fill_(hidden, float("-inf"))
            return scores.softmax(-1) @ vv

        times = []
        with torch.no_grad():
            for r in range(args.warmup + args.reps):
                t0 = time.perf_counter()
                core()
                if r >= args.warmup:
                    times.append(time.perf_counter() - t0)
        rec = {"impl": "torch_window", "threads": args.threads, "B": B, "T": T, "d": d, "h": h,
               "g": g, "window": W, "kernel_fwd_ms": round(statistics.median(times) * 1e3, 4),
               "reps": args.reps}
        print(json.dumps(rec, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()
