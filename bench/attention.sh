#!/usr/bin/env bash
# Attention benchmark: headscope's kernel against torch.nn.MultiheadAttention
# (bench/attention_torch.py) in the same run, at the same thread counts.
#
#   bench/attention.sh [--reps R] [--threads "1 2"] [--blas-autodetect] [--tiny] [--contend]
#                     [--avx2-only]
#
# Both sides are pinned to N threads: OMP_NUM_THREADS and OPENBLAS_NUM_THREADS
# as well as torch.set_num_threads, since torch's BLAS keeps a thread pool of
# its own that set_num_threads does not limit. Both use Debian's OpenBLAS; this
# machine's environment may force its kernels with OPENBLAS_CORETYPE (and
# OPENBLAS_L2_SIZE). --blas-autodetect unsets both for both sides, letting
# OpenBLAS pick its kernels for the CPU. Results: bench/out/attention.jsonl and
# a markdown table in bench/out/attention.md (also printed). --tiny runs tiny
# shapes once at 1 thread (a few seconds; scripts/test --slow, so the benchmark
# keeps working), results in bench/out/tiny/.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init "threads blas tiny contend isa"
reps=10
threads="1 2"
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2 ;;
    *) bench_opt "$@"; shift "$bench_shift" ;;
  esac
done

bench_build bench_attention
bin=$bench_dir/bench/bench_attention
outdir=bench/out
shapes=(--shape 8,128,256,8 --shape 8,128,256,8,2 --shape 4,512,512,8 --shape 4,512,512,8,2
        --shape 1,2048,512,8 --shape 1,2048,512,8,2)
gemm=1024
decode_T=4096
if [ "$tiny" = 1 ]; then
  outdir=bench/out/tiny reps=1 threads=1 gemm=128 decode_T=256
  shapes=(--shape 2,32,64,8 --shape 2,32,64,8,2)
fi
mkdir -p "$outdir"
out=$outdir/attention.jsonl
: >"$out"
# torch keeps two thread pools (its OpenMP one and OpenBLAS's); with OpenMP
# threads spinning while idle, torch at 2 threads ran up to 5x slower than at
# 1 on this 2-core machine, so torch runs with OMP_WAIT_POLICY=passive. Ours
# runs with headscope's own default (hs_runtime_init: passive waiting; bench/lib.sh
# leaves OMP_WAIT_POLICY unset for it).
bench_contend_start
for t in $threads; do
  bench_threads "$t"
  echo "threads $t: OpenBLAS sgemm, headscope, torch" >&2
  "$bin" --threads "$t" --gemm "$gemm" --reps "$reps" >>"$out"
  "$bin" --threads "$t" --reps "$reps" "${shapes[@]}" >>"$out"
  bench_torch bench/attention_torch.py --threads "$t" --reps "$reps" "${shapes[@]}" \
    >>"$out" 2>/dev/null
done

# Incremental decoding memory: compact cache vs K/V repeated to h heads, each
# in its own process so the peak RSS is its own.
bench_threads "1"
for g in 8 4 2 1; do
  for path in "" --repeat-kv; do
    "$bin" --threads 1 --decode $path --shape 1,$decode_T,512,8,$g >>"$out"
  done
done

bench_mark "$out"
/usr/bin/python3 - "$out" "${OPENBLAS_CORETYPE:-autodetect}" <<'PY' | bench_md "$outdir/attention.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
core = sys.argv[2]
key = lambda r: (r["threads"], r["B"], r["T"], r["d"], r["h"], r["g"])
hs = {key(r): r for r in rows if r["impl"] == "headscope"}
th = {key(r): r for r in rows if r["impl"] == "torch"}
gemm = {r["threads"]: r["gflops"] for r in rows if r["impl"] == "openblas_sgemm"}
print(f"OpenBLAS kernels: {core}; causal self-attention, float32, median of the reps\n")
print("| threads | B,T,d,h,g | fwd ms (hs / torch) | fwd x | fwd+bwd ms (hs / torch) | fwd+bwd x | hs fwd GFLOP/s | sgemm GFLOP/s |")
print("|---|---|---|---|---|---|---|---|")
for k in sorted(hs):
    a, b = hs[k], th.get(k)
    if not b:
        continue
    print(f"| {k[0]} | {k[1]},{k[2]},{k[3]},{k[4]},{k[5]} | {a['fwd_ms']:.2f} / {b['fwd_ms']:.2f} | "
          f"{b['fwd_ms']/a['fwd_ms']:.2f} | {a['fwdbwd_ms']:.2f} / {b['fwdbwd_ms']:.2f} | "
          f"{b['fwdbwd_ms']/a['fwdbwd_ms']:.2f} | {a['fwd_gflops']:.0f} | {gemm.get(k[0], 0):.0f} |")
dec = [r for r in rows if r["impl"] == "headscope_decode"]
if dec:
    print(f"\nIncremental decoding, T={dec[0]['T']}, d=512, h=8, one token a step (peak RSS growth):\n")
    print("| g | h/g | compact cache KiB | compact peak KiB | repeated-K/V peak KiB | ms/token compact |")
    print("|---|---|---|---|---|---|")
    for g in sorted({r["g"] for r in dec}, reverse=True):
        c = next(r for r in dec if r["g"] == g and r["path"] == "compact")
        rp = next(r for r in dec if r["g"] == g and r["path"] == "repeat_kv")
        print(f"| {g} | {c['h']//g} | {c['cache_bytes']/1024:.0f} | {c['peak_growth_kib']} | "
              f"{rp['peak_growth_kib']} | {c['ms_per_token']:.3f} |")
PY
