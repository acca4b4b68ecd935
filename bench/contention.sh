#!/usr/bin/env bash
# Threads under contention (issue 19, must-show 4): the headscope side of each
# benchmark (training steps of bench/train.sh's configs, the attention module,
# the all-heads ablation sweep at a reduced size, capture, generate, patch) at
# 1 and at 2 threads, each without and with one competing CPU-bound process
# (bench/spin.c, as `stress --cpu 1`), the four conditions alternating in a
# rotating order, medians of --reps rounds (default 3). The table's last
# column: 1 thread's time over 2 threads' time under competition (>= 1: two
# threads are not slower than one when another process wants a core).
# headscope runs with its own default OpenMP wait policy (passive, from
# hs_runtime_init: OMP_WAIT_POLICY is left unset) and its thread count from
# --threads and OMP_NUM_THREADS/OPENBLAS_NUM_THREADS. No torch: a few minutes.
#
#   bench/contention.sh [--reps R] [--tiny]
# Results: bench/out/contention.jsonl (one row per run: benchmark, threads,
# contend, ms, the 1-minute load average) and bench/out/contention.md.
# --tiny: tiny sizes, one round (seconds; the slow tier runs it), results in
# bench/out/tiny/.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init "tiny"
reps=3
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2 ;;
    *) bench_opt "$@"; shift "$bench_shift" ;;
  esac
done
bench_build bench_train bench_attention bench_ablate bench_capture bench_patch bench_spin headscope_cli
b=build/float/bench hs=build/float/headscope
outdir=bench/out
train_cfgs=(2,128,4,4,128 4,256,8,2,256 6,384,6,6,256) steps=4
attn=8,128,256,8 attn_reps=5
ablate_cfg=6,256,8,128 ablate_batch=4 ablate_seqs=8
capture_cfg=4,256,8,256 capture_batch=2 capture_batches=4
gen_shape=(d_model=256 n_layer=4 n_head=8 n_kv_head=2 d_ff=688) max_new=256
patch_cfg=6,256,8,32 prompts=32
if [ "$tiny" = 1 ]; then
  train_cfgs=(1,32,2,2,32) steps=2 attn=2,32,64,8 attn_reps=1 ablate_cfg=2,64,4,32 ablate_seqs=4
  capture_cfg=2,64,4,32 capture_batches=2 gen_shape=(d_model=64 n_layer=2 n_head=8 d_ff=128)
  max_new=16 patch_cfg=2,64,4,16 prompts=8 reps=1 outdir=bench/out/tiny
fi
mkdir -p "$outdir"
out=$outdir/contention.jsonl
: >"$out"
bench_tmp

# inputs: the ablation and patching models, a token file, prompt pairs, a
# llama-family model for generate
"$b/bench_ablate" --write "$tmp/ablate" --config "$ablate_cfg"
"$b/bench_ablate" --write "$tmp/patch" --config "$patch_cfg"
/usr/bin/python3 -c 'import sys; sys.stdout.write(("The quick brown fox jumps over the lazy dog, again and again, 0123456789. " * 3000)[:200000])' >"$tmp/t.txt"
"$hs" tokens --in "$tmp/t.txt" --out "$tmp/t.bin" >/dev/null
bench_prompt_pairs "$tmp/p.jsonl" "$prompts" "${patch_cfg##*,}"
"$hs" train --preset llama "${gen_shape[@]}" n_ctx=$((max_new + 17)) --data "$tmp/t.bin" \
  --out "$tmp/gen" --steps 1 --batch 1 --seq-len 16 >/dev/null

# field KEY SCALE: KEY of the JSON line on stdin, times SCALE (to ms)
field() { /usr/bin/python3 -c 'import json, sys
print(json.loads(sys.stdin.readline())[sys.argv[1]] * float(sys.argv[2]))' "$1" "$2"; }

# run BENCHMARK THREADS: the benchmark's time in ms at THREADS threads
run() {
  local t=$2
  case "$1" in
    train*) "$b/bench_train" --threads "$t" --steps "$steps" --warmup 1 --config "${1#train }" |
              field train_step_ms 1 ;;
    attention) "$b/bench_attention" --threads "$t" --reps "$attn_reps" --shape "$attn" | field fwdbwd_ms 1 ;;
    ablate) "$b/bench_ablate" --model "$tmp/ablate" --data "$tmp/t.bin" --batch "$ablate_batch" \
              --seq-len "${ablate_cfg##*,}" --sequences "$ablate_seqs" --threads "$t" | field ablate_s 1000 ;;
    capture) "$b/bench_capture" --threads "$t" --config "$capture_cfg" --batch "$capture_batch" \
               --batches "$capture_batches" --out "$tmp/c.h5" --dtype f32 --compress 0 | field capture_s 1000
             rm -f "$tmp/c.h5" ;;
    generate) "$hs" generate --model "$tmp/gen" --prompt-ids "$(seq -s, 10 25)" --max-new "$max_new" \
                --threads "$t" --json | field tokens_per_s 1 | awk '{ printf "%.6f\n", 1000 * '"$max_new"' / $1 }' ;;
    patch) "$b/bench_patch" --model "$tmp/patch" --prompts "$tmp/p.jsonl" --threads "$t" --repeats 1 |
             field wall_s 1000 ;;
  esac
}

benches=()
for c in "${train_cfgs[@]}"; do benches+=("train $c"); done
benches+=(attention ablate capture generate patch)
conds=("1 0" "2 0" "1 1" "2 1")
for r in $(seq "$reps"); do
  for i in 0 1 2 3; do
    set -- ${conds[$(((i + r) % 4))]}
    t=$1 contend=$2
    bench_threads "$t"
    [ "$contend" = 1 ] && bench_contend_start
    for bn in "${benches[@]}"; do
      echo "round $r/$reps, $t thread(s)$([ "$contend" = 1 ] && echo ' + competitor'): $bn" >&2
      ms=$(run "$bn" "$t")
      printf '{"benchmark":"%s","threads":%d,"contend":%s,"round":%d,"ms":%s,"load":%s}\n' "$bn" "$t" \
        "$([ "$contend" = 1 ] && echo true || echo false)" "$r" "$ms" "$(cut -d' ' -f1 /proc/loadavg)" >>"$out"
    done
    bench_contend_stop
  done
done
contend=0 # the table's own columns say which runs competed

/usr/bin/python3 - "$out" "$(getconf _NPROCESSORS_ONLN)" "$max_new" <<'PY' | bench_md "$outdir/contention.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
names = list(dict.fromkeys(r["benchmark"] for r in rows))
def med(n, t, c):
    v = [r["ms"] for r in rows if r["benchmark"] == n and r["threads"] == t and r["contend"] == c]
    return statistics.median(v) if v else float("nan")
loads = [r["load"] for r in rows]
print(f"headscope alone and with one competing CPU-bound process (bench/spin.c) on a {sys.argv[2]}-core "
      f"machine; ms, median of {max(r['round'] for r in rows)} alternating rounds; 1-minute load "
      f"{min(loads):.2f}-{max(loads):.2f}\n")
max_new = sys.argv[3]
print("| benchmark | 1 thread | 2 threads | 1 thread + competitor | 2 threads + competitor "
      "| 2t/1t under competition |")
print("|---|---|---|---|---|---|")
units = {"attention": "module fwd+bwd", "ablate": "all-heads sweep", "capture": "capture",
         "generate": f"{max_new} new tokens", "patch": "all-heads patch"}
for n in names:
    a, b, c, d = med(n, 1, False), med(n, 2, False), med(n, 1, True), med(n, 2, True)
    label = f"train step {n[6:]}" if n.startswith("train") else f"{n} ({units[n]})"
    print(f"| {label} | {a:.1f} | {b:.1f} | {c:.1f} | {d:.1f} | {c / d:.2f} |")
PY
