#!/usr/bin/env bash
# Training and inference throughput against PyTorch eager, and the memory of
# loading a ~100M-parameter checkpoint.
#
#   bench/train.sh [--steps S] [--threads "1 2"] [--blas-autodetect] [--skip-load] [--tiny]
#
# Same model on both sides (bench/train_torch.py's definition: learned
# positions, pre-LayerNorm, biases, GELU MLP of 4d, tied unembedding, byte
# vocabulary 256, batch 4), same random batch shape, both pinned to N threads
# (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, torch.set_num_threads). As in
# bench/attention.sh, --blas-autodetect unsets OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE for both sides. Results: bench/out/train.jsonl and
# bench/out/train.md. --tiny runs tiny models for 2 steps at 1 thread and loads
# a tiny checkpoint (a few seconds; scripts/test --slow, so the benchmark keeps
# working), results in bench/out/tiny/.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=10
threads="1 2"
load=1
tiny=0
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --blas-autodetect) unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE; shift ;;
    --skip-load) load=0; shift ;;
    --tiny) tiny=1; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "train.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

cmake -S . -B build/float >/dev/null
cmake --build build/float -j "$(nproc)" --target bench_train >/dev/null
bin=build/float/bench/bench_train
configs=(--config 2,128,4,4,128 --config 4,256,8,2,256 --config 6,384,6,6,256)
# the load: gpt2 family, d=768, 12 layers, vocabulary 32768: about 111M parameters.
load_config=(--config 12,768,12,12,1024 --vocab 32768)
outdir=bench/out
if [ "$tiny" = 1 ]; then
  configs=(--config 1,32,2,2,32 --config 2,64,4,2,32) steps=2 threads=1 outdir=bench/out/tiny
  load_config=(--config 2,64,4,4,64 --vocab 256)
fi
mkdir -p "$outdir"
out=$outdir/train.jsonl
: >"$out"
# torch keeps two thread pools (its OpenMP one and OpenBLAS's); with OpenMP
# threads spinning while idle, torch at 2 threads ran up to 5x slower than at
# 1 on this 2-core machine, so torch runs with OMP_WAIT_POLICY=passive. Ours
# has one pool and keeps OpenMP's default (spinning is faster for it).
for t in $threads; do
  export OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t
  echo "threads $t: headscope, torch" >&2
  "$bin" --threads "$t" --steps "$steps" "${configs[@]}" >>"$out"
  OMP_WAIT_POLICY=passive /usr/bin/python3 bench/train_torch.py --threads "$t" --steps "$steps" "${configs[@]}" \
    >>"$out" 2>/dev/null
done

if [ "$load" = 1 ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "writing a checkpoint (${load_config[*]})" >&2
  OMP_NUM_THREADS=2 "$bin" --write-checkpoint "$tmp/ckpt" "${load_config[@]}" >/dev/null
  sync
  OMP_NUM_THREADS=1 "$bin" --load "$tmp/ckpt" >>"$out"
fi

/usr/bin/python3 - "$out" "${OPENBLAS_CORETYPE:-autodetect}" <<'PY' | tee "$outdir/train.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
key = lambda r: (r["threads"], r["L"], r["d"], r["H"], r["G"], r["T"])
hs = {key(r): r for r in rows if r["impl"] == "headscope"}
th = {key(r): r for r in rows if r["impl"] == "torch"}
print(f"OpenBLAS kernels: {sys.argv[2]}; batch 4, vocabulary 256, float32, median of the steps\n")
print("| threads | L,d,H,G,T | params | train tok/s (hs / torch) | train x | eval tok/s (hs / torch) | eval x |")
print("|---|---|---|---|---|---|---|")
for k in sorted(hs):
    a, b = hs[k], th.get(k)
    if not b:
        continue
    print(f"| {k[0]} | {k[1]},{k[2]},{k[3]},{k[4]},{k[5]} | {a['params']:,} | "
          f"{a['train_tok_s']:,.0f} / {b['train_tok_s']:,.0f} | {a['train_tok_s']/b['train_tok_s']:.2f} | "
          f"{a['eval_tok_s']:,.0f} / {b['eval_tok_s']:,.0f} | {a['eval_tok_s']/b['eval_tok_s']:.2f} |")
for r in rows:
    if r["impl"] == "headscope_load":
        print(f"\nLoading a {r['params']:,}-parameter F32 checkpoint ({r['file_bytes']/2**20:.0f} MiB): "
              f"peak RSS {r['peak_rss_kib']/1024:.0f} MiB = {r['peak_over_file']:.3f} x the file "
              f"(growth while loading {r['growth_over_file']:.3f} x), {r['load_s']:.2f} s.")
PY
