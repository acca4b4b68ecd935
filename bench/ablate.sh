#!/usr/bin/env bash
# Analysis benchmarks (issue: ablation, importance, pruning):
#  * the all-heads zero+mean ablation sweep of a 6-layer, 8-head GELU model
#    (d 256, T 256, 64 sequences) by `headscope`'s fast path against the loop a
#    TransformerLens user writes (bench/ablate_torch.py: one full forward per
#    head and kind with a hook on z), same weights, same data, same threads;
#    the deltas of both are compared; beside them the sweep's lower bound (the
#    layer passes an exact sweep must compute x one layer pass's FLOPs at the
#    FMA peak measured in the same run, bench/bound.h; the sgemm rate beside
#    it) and sweep / bound;
#  * importance of every head against one plain forward over the same data;
#  * forward latency of the dense model, the model with 25/50/75% of its heads
#    gated to zero, and the structurally pruned models.
#
#   bench/ablate.sh [--threads "1"] [--sequences N] [--blas-autodetect] [--tiny] [--contend]
#                  [--avx2-only]
# Results: bench/out/ablate.jsonl and bench/out/ablate.md. --tiny runs a tiny
# model (2 layers, d 64, 4 heads, T 32) on 8 sequences at 1 thread (a few
# seconds; scripts/test --slow, so the benchmark keeps working), results in
# bench/out/tiny/.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init "threads blas tiny contend isa"
threads="1"
seqs=64
while [ $# -gt 0 ]; do
  case "$1" in
    --sequences) seqs=$2; shift 2 ;;
    *) bench_opt "$@"; shift "$bench_shift" ;;
  esac
done
bench_build bench_ablate headscope_cli
bin=$bench_dir/bench/bench_ablate
config=6,256,8,256 # layers, d, heads, T
batch=8
outdir=bench/out
if [ "$tiny" = 1 ]; then
  config=2,64,4,32 batch=4 seqs=8 threads=1 outdir=bench/out/tiny
fi
T=${config##*,}
mkdir -p "$outdir"
out=$outdir/ablate.jsonl
: >"$out"
bench_tmp

"$bin" --write "$tmp/m" --config "$config"
/usr/bin/python3 -c 'import sys; sys.stdout.write(("The quick brown fox jumps over the lazy dog, again and again, 0123456789. " * 3000)[:200000])' >"$tmp/t.txt"
"$bench_dir"/headscope tokens --in "$tmp/t.txt" --out "$tmp/t.bin" >/dev/null
bench_torch_weights "$tmp/m/model.safetensors" "$tmp/m.pt"

bench_contend_start
for t in $threads; do
  bench_threads "$t"
  echo "threads $t: headscope ablate, importance, forward" >&2
  "$bin" --model "$tmp/m" --data "$tmp/t.bin" --batch "$batch" --seq-len "$T" --sequences "$seqs" \
    --threads "$t" --dump "$tmp/hs.json" >>"$out"
  echo "threads $t: torch naive ablation loop" >&2
  bench_torch bench/ablate_torch.py --threads "$t" \
    --config "$config" --batch "$batch" --sequences "$seqs" --weights "$tmp/m.pt" \
    --data "$tmp/t.bin" --dump "$tmp/torch.json" >>"$out"
  /usr/bin/python3 - "$tmp/hs.json" "$tmp/torch.json" "$t" >>"$out" <<'PY'
import json, sys
hs, th = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
worst = 0.0
for kind in ("zero", "mean"):
    for l, row in enumerate(th[kind]):
        for h, v in enumerate(row):
            worst = max(worst, abs(hs[f"{kind}/{l}"][h] - v))
print(json.dumps({"impl": "compare", "threads": int(sys.argv[3]), "max_abs_delta_diff": worst}))
PY
  "$bin" --latency "$tmp/m" --batch "$batch" --seq-len "$T" --threads "$t" >>"$out"
done

bench_mark "$out"
/usr/bin/python3 - "$out" "${OPENBLAS_CORETYPE:-autodetect}" "$config" "$batch" <<'PY' | bench_md "$outdir/ablate.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
L, d, H, T = sys.argv[3].split(",")
print(f"OpenBLAS kernels: {sys.argv[2]}; {L} layers x {H} heads, d {d}, T {T}, GELU MLP\n")
print("The lower bound: the layer passes an exact sweep must compute (sum over layers l of 2 H (L - l),")
print("plus the clean and the means pass) x one layer pass's FLOPs (projections, causal half of the")
print("T x T attention, MLP) at the FMA peak measured in the same run (CPU seconds; sweep / bound")
print("compares the sweep's CPU seconds).\n")
print("| threads | sequences | hs sweep s | torch naive s | x | lower bound s | sweep / bound | "
      "FMA peak GFLOP/s | sgemm GFLOP/s | max abs delta difference | importance / forward |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    if r["impl"] != "headscope":
        continue
    t = next(x for x in rows if x["impl"] == "torch_naive" and x["threads"] == r["threads"])
    c = next(x for x in rows if x["impl"] == "compare" and x["threads"] == r["threads"])
    print(f"| {r['threads']} | {r['sequences']} | {r['ablate_s']:.1f} | {t['seconds']:.1f} | "
          f"{t['seconds']/r['ablate_s']:.2f} | {r['lower_bound_s']:.2f} | "
          f"{r['ablate_cpu_s']/r['lower_bound_s']:.2f} | {r['peak_gflops']:.1f} | "
          f"{r['sgemm_gflops']:.1f} | "
          f"{c['max_abs_delta_diff']:.2g} | "
          f"{r['importance_s']/r['forward_s']:.2f} |")
print(f"\nForward latency, batch {sys.argv[4]} x {T} (ms, median of 9):\n")
print("| threads | pruned | dense | dense, heads gated to 0 | structurally pruned | params kept |")
print("|---|---|---|---|---|---|")
for r in rows:
    if r["impl"] == "headscope_latency" and r["pruned"]:
        print(f"| {r['threads']} | {r['pruned']}% | {r['dense_ms']:.1f} | {r['gated_ms']:.1f} | "
              f"{r['structural_ms']:.1f} | {r['structural_params']/r['params']:.2f} |")
PY
