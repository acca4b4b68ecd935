#!/usr/bin/env bash
# The Python package's overhead: run_with_cache of every layer's hook_pattern
# of a GPT-2-small-shaped model (random weights: L 12, d 768, H 12, V 50257)
# on 1 x 256 tokens, three ways, same model and sizes, same thread count:
#   c       bench_python: the C forward keeping every map in memory (the maps
#           observer copying each layer's into one buffer) -- and the plain
#           forward without maps, for reference
#   python  bench/python_hs.py: hs.Model.new + model.run_with_cache(ids,
#           names=patterns) through libheadscope.so (the cache's arrays
#           views into a block of the model's: a dropped one serves again),
#           and model(ids)
#   torch   bench/python_torch.py: the same GPT-2 forward in PyTorch keeping
#           every pattern as TransformerLens's run_with_cache keeps them, run
#           with MALLOC_MMAP_THRESHOLD_=17179869184 MALLOC_TRIM_THRESHOLD_=17179869184
#           MALLOC_TOP_PAD_=1073741824 (glibc keeps its freed blocks instead of
#           returning them to the kernel: no page faults from reallocated
#           maps and logits on every call) and OMP_WAIT_POLICY=passive; its
#           patterns and logits are checked against headscope's
# Medians of --reps runs after one warm-up each; the load average (uptime)
# before and after every side goes into each row.
#
#   bench/python.sh [--threads "1 2"] [--reps 7] [--config L,d,H,V,T]
#                   [--blas-autodetect] [--tiny] [--contend]
#
# Results: bench/out/python.jsonl and bench/out/python.md. --tiny runs a tiny
# model (2 layers, d 64, 4 heads, V 512) on 32 tokens, 2 repetitions, at 1
# thread (seconds; scripts/test --slow, so the benchmark keeps working),
# results in bench/out/tiny/.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init "threads blas tiny contend"
threads="1 2"
reps=7
config=12,768,12,50257,256
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2 ;;
    --config) config=$2; shift 2 ;;
    *) bench_opt "$@"; shift "$bench_shift" ;;
  esac
done
outdir=bench/out
if [ "$tiny" = 1 ]; then
  config=2,64,4,512,32 reps=2 threads=1 outdir=bench/out/tiny
fi
bench_build bench_python headscope_shared
bin=$bench_dir/bench/bench_python
export HEADSCOPE_LIB=$bench_dir/libheadscope.so
bench_tmp
mkdir -p "$outdir"
out=$outdir/python.jsonl
: >"$out"
load() { uptime | sed 's/.*load average: //'; }
# row JSON SIDE: the JSON line with the load before and after its run
row() { /usr/bin/python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r["load_before"]=sys.argv[2]; r["load_after"]=sys.argv[3]; print(json.dumps(r))' "$@"; }

bench_contend_start
for t in $threads; do
  bench_threads "$t"
  echo "threads $t: C forward with the maps kept ($config)" >&2
  l0=$(load); j=$("$bin" --config "$config" --reps "$reps" --threads "$t"); row "$j" "$l0" "$(load)" >>"$out"
  echo "threads $t: hs.run_with_cache" >&2
  rm -rf "$tmp/model"
  l0=$(load); j=$(/usr/bin/python3 bench/python_hs.py --config "$config" --reps "$reps" --threads "$t" --save "$tmp/model")
  row "$j" "$l0" "$(load)" >>"$out"
  echo "threads $t: torch" >&2
  l0=$(load)
  j=$(bench_torch bench/python_torch.py --model "$tmp/model" --reps "$reps" --threads "$t")
  row "$j" "$l0" "$(load)" >>"$out"
done

bench_mark "$out"
cpus=$(/usr/bin/python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
/usr/bin/python3 - "$out" "$config" "$reps" "${OPENBLAS_CORETYPE:-autodetect}" "$cpus" <<'PY' | bench_md "$outdir/python.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
L, d, H, V, T = sys.argv[2].split(",")
print(f"run_with_cache of every hook_pattern: GPT-2-shaped, random weights (L {L}, d {d}, H {H}, "
      f"V {V}), 1 x {T} tokens; medians of {sys.argv[3]} runs; OpenBLAS kernels {sys.argv[4]}; "
      f"{sys.argv[5]} CPUs.\n")
print("| threads | C forward + maps ms | hs.run_with_cache ms | / C | torch ms | torch / hs | "
      "C plain forward ms | hs model(ids) ms | max pattern diff | load (1/5/15 min) |")
print("|---|---|---|---|---|---|---|---|---|---|")
by = {}
for r in rows:
    by.setdefault(r["threads"], {})[r["impl"]] = r
for t in sorted(by):
    c, p, q = by[t].get("c"), by[t].get("headscope_python"), by[t].get("torch")
    if not (c and p and q):
        continue
    loads = " / ".join(sorted({c["load_before"], p["load_before"], q["load_before"], q["load_after"]}))
    print(f"| {t} | {c['capture_s']*1e3:.1f} | {p['run_with_cache_s']*1e3:.1f} | "
          f"{p['run_with_cache_s']/c['capture_s']:.3f} | {q['run_with_cache_s']*1e3:.1f} | "
          f"{q['run_with_cache_s']/p['run_with_cache_s']:.2f} | {c['forward_s']*1e3:.1f} | "
          f"{p['forward_s']*1e3:.1f} | {q['max_pattern_diff']:.1e} | {loads} |")
PY
