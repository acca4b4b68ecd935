#!/usr/bin/env bash
# Sliding-window attention benchmark: the window kernel against global causal
# attention at the same heads, and PyTorch's masked attention, in one run.
#
#   bench/window.sh [--reps R] [--threads "1 2"] [--shape B,T,d,h[,g]] [--window W]
#                   [--tiny] [--contend]
#
# Defaults: T = 8192, W = 512, B = 1, d = 512, h = 8 (dh = 64), 5 reps (median)
# at 1 and 2 threads. For each thread count, bench_attention --window (bench/
# bench_attention.c) times W = 0 (global causal) and W: the head kernel alone
# (q, k, v -> z, no maps), the module forward without maps (projections
# included), and the module forward + backward with maps; then
# bench/window_torch.py times torch 1.13's masked attention (full T x T scores,
# an explicit window mask, softmax, @ v) at the same shape and threads. Both
# sides are pinned to N threads (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS,
# torch.set_num_threads). Results: bench/out/window.jsonl and a markdown table
# in bench/out/window.md (also printed). --tiny: T = 256, W = 32, one rep at 1
# thread, results in bench/out/tiny/ (a few seconds; scripts/test --slow).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init "threads tiny contend"
reps=5
threads="1 2"
shape=1,8192,512,8
window=512
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2 ;;
    --shape) shape=$2; shift 2 ;;
    --window) window=$2; shift 2 ;;
    *) bench_opt "$@"; shift "$bench_shift" ;;
  esac
done
outdir=bench/out
warmup=1
if [ "$tiny" = 1 ]; then
  outdir=bench/out/tiny reps=1 warmup=0 threads=1 shape=1,256,512,8 window=32
fi

bench_build bench_attention
bin=build/float/bench/bench_attention
mkdir -p "$outdir"
out=$outdir/window.jsonl
: >"$out"
bench_contend_start
for t in $threads; do
  bench_threads "$t"
  echo "threads $t: headscope causal, headscope window $window, torch masked" >&2
  for w in 0 "$window"; do
    "$bin" --threads "$t" --reps "$reps" --warmup "$warmup" --window "$w" --shape "$shape" >>"$out"
  done
  bench_torch bench/window_torch.py --threads "$t" --reps "$reps" \
    --warmup "$warmup" --window "$window" --shape "$shape" >>"$out" 2>/dev/null
done

bench_mark "$out"
/usr/bin/python3 - "$out" <<'PY' | bench_md "$outdir/window.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
hs = {(r["threads"], r["window"]): r for r in rows if r["impl"] == "headscope_window"}
th = {r["threads"]: r for r in rows if r["impl"] == "torch_window"}
r0 = rows[0]
W = max(r["window"] for r in rows)
print(f"Sliding window W={W} vs global causal attention, B={r0['B']}, T={r0['T']}, "
      f"d={r0['d']}, h={r0['h']}, g={r0['g']}, float32, median of {r0['reps']} reps\n")
print("| threads | kernel fwd ms (causal / window) | x | module fwd ms (causal / window) | x | "
      "fwd+bwd ms (causal / window) | x | torch masked fwd ms | torch / window |")
print("|---|---|---|---|---|---|---|---|---|")
for t in sorted({k[0] for k in hs}):
    c, w, p = hs[(t, 0)], hs[(t, W)], th.get(t)
    fb = (f"{c['fwdbwd_ms']:.1f} / {w['fwdbwd_ms']:.1f} | {c['fwdbwd_ms'] / w['fwdbwd_ms']:.2f}"
          if w["fwdbwd_ms"] > 0 else "- | -")
    tp = (f"{p['kernel_fwd_ms']:.1f} | {p['kernel_fwd_ms'] / w['kernel_fwd_ms']:.1f}"
          if p else "- | -")
    print(f"| {t} | {c['kernel_fwd_ms']:.1f} / {w['kernel_fwd_ms']:.1f} | "
          f"{c['kernel_fwd_ms'] / w['kernel_fwd_ms']:.2f} | {c['fwd_ms']:.1f} / {w['fwd_ms']:.1f} | "
          f"{c['fwd_ms'] / w['fwd_ms']:.2f} | {fb} | {tp} |")
T = r0["T"]
pairs = lambda win: sum(min(t + 1, win) if win else t + 1 for t in range(T))
print(f"\nVisible query-key pairs, causal / window: {pairs(0) / pairs(W):.2f} (the ideal kernel "
      f"speed-up); with 64-query blocks the window kernel computes {W + 63} keys a row, the "
      f"causal one {T / 2 + 32:.0f} on average: {(T / 2 + 32) / (W + 63):.2f}.")
PY
