#!/usr/bin/env bash
# sgemm efficiency at every GEMM shape a training step of the benchmark
# models runs (forward, dinp and dw of q, k, v, o, fc, proj and the logits),
# GFLOP/s and % of the FMA peak measured in the same run (bench/peak.h),
# OpenBLAS and hs_gemm (the path HEADSCOPE_GEMM names, default auto; see
# docs/perf.md "Own GEMM") side by side, run alternately, with the CPU time
# per thread beside the elapsed time.
#
#   bench/gemm.sh [--threads "1 2"] [--blas-autodetect] [--tiny] [--decode]
#                 [--weights f32|bf16|f16] [--prepacked] [--config "L,d,H,G,T ..."]
#                 [--vocab V] [--batch B]
#
# Models: bench/train.sh's three (vocabulary 256) and GPT-2 small's shape
# (12 layers, d 768, T 64, vocabulary 50257), batch 4. Median of 5. Results:
# bench/out/gemm.jsonl and bench/out/gemm.md (--tiny: tiny models, 1 thread,
# in bench/out/tiny/). --decode: the same models at one row (batch 1, T 1),
# the shapes of decoding one token (the forward and dinp rows; the dw rows
# are then outer products), results in bench/out/decode/. --weights: hs_gemm
# reads the weights (B of the forward and dinp rows) held in that type, as a
# checkpoint stores them (widened as they are packed); OpenBLAS their float copy.
# --prepacked: hs_gemm's forward and dinp rows read the weights packed once
# beforehand, as the commands of many forwards (and backwards) hold them. --config (and --vocab, --batch):
# other models instead, e.g. the 1B shape's forward products: --config
# 16,2048,32,8,512 --vocab 256 --batch 1 --weights bf16 --prepacked.
set -euo pipefail
cd "$(dirname "$0")/.."
threads="1 2"
reps=5 outdir=bench/out batch=4 weights=f32 prepacked=() vocab=256 user_configs=
configs=("--vocab 256 --config 2,128,4,4,128 --config 4,256,8,2,256 --config 6,384,6,6,256"
         "--vocab 50257 --config 12,768,12,12,64")
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --blas-autodetect) unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE; shift ;;
    --tiny) threads=1 reps=1 outdir=bench/out/tiny
            configs=("--vocab 256 --config 1,32,2,2,32 --config 2,64,4,2,32"); shift ;;
    --decode) outdir=bench/out/decode batch=1
              configs=("--vocab 256 --config 2,128,4,4,1 --config 4,256,8,2,1 --config 6,384,6,6,1"
                       "--vocab 50257 --config 12,768,12,12,1"); shift ;;
    --weights) weights=$2; shift 2 ;;
    --prepacked) prepacked=(--prepacked); shift ;;
    --vocab) vocab=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --config) user_configs=$2; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "gemm.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
# shellcheck disable=SC2086
[ -n "$user_configs" ] && configs=("--vocab $vocab$(printf ' --config %s' $user_configs)")
cmake -S . -B build/float >/dev/null
cmake --build build/float -j "$(nproc)" --target bench_gemm >/dev/null
mkdir -p "$outdir"
out=$outdir/gemm.jsonl
: >"$out"
export OMP_WAIT_POLICY=passive
for t in $threads; do
  export OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t
  for c in "${configs[@]}"; do
    # shellcheck disable=SC2086
    build/float/bench/bench_gemm --threads "$t" --reps "$reps" --batch "$batch" --weights "$weights" \
      "${prepacked[@]}" $c >>"$out"
  done
done
load=$(cut -d' ' -f1 /proc/loadavg)
/usr/bin/python3 - "$out" "${OPENBLAS_CORETYPE:-autodetect}" "$load" "${HEADSCOPE_GEMM:-auto}" "$batch" "$weights" <<'PY' | tee "$outdir/gemm.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"OpenBLAS kernels: {sys.argv[2]}; hs_gemm: HEADSCOPE_GEMM={sys.argv[4]}, weights {sys.argv[6]}; "
      f"batch {sys.argv[5]}; median; "
      f"load average {sys.argv[3]} at the end\n")
print("| threads | L,d,H,G,T,V | GEMM | op | M,N,K | per step | OpenBLAS GFLOP/s | % of peak | "
      "hs_gemm GFLOP/s | % of peak | CPU ms/thread OpenBLAS / hs_gemm |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    if r["impl"] != "sgemm":
        continue
    name, op = r["gemm"].split(" ")
    print(f"| {r['threads']} | {r['L']},{r['d']},{r['H']},{r['G']},{r['T']},{r['V']} | {name} | "
          f"{op} ({r['trans']}{', pre-packed' if r.get('prepacked') else ''}) | {r['M']},{r['N']},{r['K']} | {r['per_step']} | {r['gflops']:.1f} | "
          f"{r['pct_peak']:.0f}% | {r['own_gflops']:.1f} | {r['own_pct_peak']:.0f}% | "
          f"{r['cpu_ms']:.2f} / {r['own_cpu_ms']:.2f} |")
print("\nAll of a step's GEMMs (FLOPs over summed median time):\n")
print("| threads | L,d,H,G,T,V | GEMM GFLOP | FMA peak | OpenBLAS ms | GFLOP/s | % of peak | "
      "hs_gemm ms | GFLOP/s | % of peak |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    if r["impl"] == "sgemm_step":
        print(f"| {r['threads']} | {r['L']},{r['d']},{r['H']},{r['G']},{r['T']},{r['V']} | "
              f"{r['gemm_gflop']:.1f} | {r['peak_gflops']:.1f} | {r['gemm_ms']:.1f} | "
              f"{r['gflops']:.1f} | {r['pct_peak']:.0f}% | {r['own_gemm_ms']:.1f} | "
              f"{r['own_gflops']:.1f} | {r['own_pct_peak']:.0f}% |")
PY
