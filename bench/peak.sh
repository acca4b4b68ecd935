#!/usr/bin/env bash
# The machine's FMA peak (bench/peak.h: 12 independent FMA accumulators per
# thread, AVX2 and AVX-512 where the CPU has it), the denominator of every
# "% of peak" in bench/gemm.sh and bench/train.sh; and the read bandwidth
# (a STREAM-style sum over 1 GiB in 2 MiB pages), the bound of decoding.
#
#   bench/peak.sh [--threads "1 2"] [--tiny]
#
# Median GFLOP/s of 7 runs of 0.2 s, median GB/s of 7 reads. Results:
# bench/out/peak.jsonl and bench/out/peak.md (--tiny: short runs at 1
# thread over 16 MiB, in bench/out/tiny/).
set -euo pipefail
cd "$(dirname "$0")/.."
threads="1 2"
secs=0.2 reps=7 outdir=bench/out read_mb=1024
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --tiny) threads=1 secs=0.01 reps=3 outdir=bench/out/tiny read_mb=16; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "peak.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
cmake -S . -B build/float >/dev/null
cmake --build build/float -j "$(nproc)" --target bench_peak >/dev/null
mkdir -p "$outdir"
out=$outdir/peak.jsonl
export OMP_WAIT_POLICY=passive
build/float/bench/bench_peak --threads "$threads" --seconds "$secs" --reps "$reps" \
  --read-mb "$read_mb" >"$out"
load=$(cut -d' ' -f1 /proc/loadavg)
/usr/bin/python3 - "$out" "$load" <<'PY' | tee "$outdir/peak.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"FMA peak, 12 accumulators, median of the runs; load average {sys.argv[2]} at the end\n")
print("| threads | ISA | GFLOP/s |")
print("|---|---|---|")
for r in rows:
    if r["impl"] == "fma_peak":
        print(f"| {r['threads']} | {r['isa']} | {r['gflops']:.1f} |")
print("\n| threads | read bandwidth, GB/s (of %.2f GB) |" % (rows[-1]["bytes"] / 1e9))
print("|---|---|")
for r in rows:
    if r["impl"] == "read_bandwidth":
        print(f"| {r['threads']} | {r['gbps']:.1f} |")
PY
