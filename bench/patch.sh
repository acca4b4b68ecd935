#!/usr/bin/env bash
# Activation patching benchmark (issue 14, must-show 4): all-heads
# `patch --site z` of a 6-layer, 8-head GELU model (d 256, T 32) over 64
# clean/corrupt prompt pairs by headscope's fast path (bench/bench_patch.c:
# hs_patch, as `headscope patch --site z --batch 64` runs it) against the loop
# a TransformerLens user writes (bench/patch_torch.py: one hooked forward per
# head), same weights, same prompts, same threads; the patch_z values of both
# are compared. Also printed: the sweep's lower bound, the FLOPs an exact
# patch must spend (the two plain forwards, then per head its W_o change, the
# MLP of its layer and every layer above, the last position's unembedding) at
# the FMA peak measured in the same run (the sgemm rate beside it); the tight bound also knows that only
# the last position's logits are read (the last layer needs its keys and values
# at every position, the rest at the last one). Times are medians of --repeats,
# in CPU seconds of each process (wall seconds beside them).
#
#   bench/patch.sh [--threads "1 2"] [--repeats N] [--tiny] [--contend] [--avx2-only]
# Results: bench/out/patch.jsonl and bench/out/patch.md. --tiny: 2 layers,
# d 64, 4 heads, T 16, 8 prompts at 1 thread (seconds; the slow tier runs it),
# results in bench/out/tiny/.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init "threads tiny contend isa"
threads="1"
repeats=3
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) repeats=$2; shift 2 ;;
    *) bench_opt "$@"; shift "$bench_shift" ;;
  esac
done
bench_build bench_patch bench_ablate
config=6,256,8,32 # layers, d, heads, T
prompts=64
outdir=bench/out
if [ "$tiny" = 1 ]; then
  config=2,64,4,16 prompts=8 threads=1 repeats=1 outdir=bench/out/tiny
fi
T=${config##*,}
mkdir -p "$outdir"
out=$outdir/patch.jsonl
: >"$out"
bench_tmp

"$bench_dir"/bench/bench_ablate --write "$tmp/m" --config "$config"
bench_torch_weights "$tmp/m/model.safetensors" "$tmp/m.pt"
# Prompt pairs: random tokens, the corrupt prompt differs at two positions (lib.sh).
bench_prompt_pairs "$tmp/p.jsonl" "$prompts" "$T"

bench_contend_start
for t in $threads; do
  bench_threads "$t"
  echo "threads $t: headscope patch --site z" >&2
  "$bench_dir"/bench/bench_patch --model "$tmp/m" --prompts "$tmp/p.jsonl" --threads "$t" \
    --repeats "$repeats" --dump "$tmp/hs.json" >>"$out"
  echo "threads $t: torch loop, one hooked forward per head" >&2
  bench_torch bench/patch_torch.py --threads "$t" --config "$config" \
    --weights "$tmp/m.pt" --prompts "$tmp/p.jsonl" --repeats "$repeats" --dump "$tmp/torch.json" >>"$out"
  /usr/bin/python3 - "$tmp/hs.json" "$tmp/torch.json" "$t" >>"$out" <<'PY'
import json, sys
hs, th = (json.load(open(p))["patch_z"] for p in sys.argv[1:3])
worst = max(abs(a - b) for ra, rb in zip(hs, th) for a, b in zip(ra, rb))
print(json.dumps({"impl": "compare", "threads": int(sys.argv[3]), "max_abs_patch_z_diff": worst}))
PY
done

bench_mark "$out"
/usr/bin/python3 - "$out" "$config" <<'PY' | bench_md "$outdir/patch.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
L, d, H, T = sys.argv[2].split(",")
print(f"all-heads patch --site z: {L} layers x {H} heads, d {d}, T {T}, GELU MLP; medians\n")
print("Seconds are CPU seconds of the process (on a shared machine the work done; wall time also")
print("counts the waits for a core), wall seconds in brackets; the bounds are in CPU seconds, every")
print("FLOP at the FMA peak.\n")
print("| threads | prompts | headscope s | torch loop s | torch / headscope | lower bound s | headscope / bound | tight bound s | headscope / tight | FMA peak GFLOP/s | sgemm GFLOP/s | max abs patch_z difference |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    if r["impl"] != "headscope":
        continue
    t = next(x for x in rows if x["impl"] == "torch_loop" and x["threads"] == r["threads"])
    c = next(x for x in rows if x["impl"] == "compare" and x["threads"] == r["threads"])
    print(f"| {r['threads']} | {r['prompts']} | {r['cpu_s']:.3f} ({r['wall_s']:.2f}) | "
          f"{t['cpu_s']:.3f} ({t['wall_s']:.2f}) | {t['cpu_s'] / r['cpu_s']:.2f} | "
          f"{r['lower_bound_s']:.3f} | {r['cpu_s'] / r['lower_bound_s']:.2f} | "
          f"{r['tight_bound_s']:.3f} | {r['cpu_s'] / r['tight_bound_s']:.2f} | "
          f"{r['peak_gflops']:.1f} | {r['sgemm_gflops']:.1f} | {c['max_abs_patch_z_diff']:.2g} |")
PY
