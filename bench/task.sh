#!/usr/bin/env bash
# Heads measured on a labelled task (SPEC §16): `headscope eval --task` and
# `headscope importance --task` on a BERT-base-shaped classifier (12 layers,
# d 768, 12 heads, F 3072, vocabulary 30,522; random weights; 2 labels),
# 256 examples of 128 tokens, against PyTorch at its best in the same run
# (bench/task_torch.py: eval the faster of transformers' arithmetic and
# torch's fused encoder layer under no_grad; importance the head-mask
# loop of Michel et al.), at 1 and 2 threads. Ours: the command's wall time
# (model and task loading included) of each of R runs (default 3); torch's
# the forward/backward loop alone, the median of R after a warm-up. The
# target is ours >= 1.5x torch float32. Both sides' task loss and accuracy
# (and importance_raw, max relative difference) are compared.
#
#   bench/task.sh [--threads "1 2"] [--runs R] [--batch B] [--tiny] [--contend]
#
# Results: bench/out/task.jsonl and bench/out/task.md. --tiny: 2 layers, d 64,
# 4 heads, 16 examples of 32 tokens, 1 thread, 1 run (seconds; scripts/test
# --slow), results in bench/out/tiny/.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init "threads tiny contend"
threads="1 2"
runs=3
batch=32
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    *) bench_opt "$@"; shift "$bench_shift" ;;
  esac
done
bench_build headscope_cli
hs=$(pwd)/$bench_dir/headscope
shape=(--layers 12 --d 768 --heads 12 --ff 3072 --vocab 30522 --examples 256 --seq-len 128)
T=128 outdir=bench/out
if [ "$tiny" = 1 ]; then
  shape=(--layers 2 --d 64 --heads 4 --ff 128 --vocab 2000 --examples 16 --seq-len 32)
  T=32 threads=1 runs=1 batch=8 outdir=bench/out/tiny
fi
mkdir -p "$outdir"
bench_tmp
out=$outdir/task.jsonl
: >"$out"
/usr/bin/python3 bench/task_torch.py make "$tmp/m" "$tmp/task.jsonl" "${shape[@]}"

# ours MODE T: one JSON row of `headscope MODE --task` at T threads
ours() {
  local mode=$1 t=$2 r t0 t1 line walls=()
  for r in $(seq 1 "$runs"); do
    rm -f "$tmp/r.db"
    t0=$(date +%s.%N)
    if [ "$mode" = eval ]; then
      line=$("$hs" eval --model "$tmp/m" --task "$tmp/task.jsonl" --batch "$batch" \
        --seq-len "$T" --threads "$t" --json)
    else
      line=$("$hs" importance --model "$tmp/m" --task "$tmp/task.jsonl" --batch "$batch" \
        --db "$tmp/r.db" --threads "$t" --json)
    fi
    t1=$(date +%s.%N)
    walls+=("$(echo "$t1 - $t0" | bc)")
  done
  if [ "$mode" = importance ]; then # the numbers to compare: the model-wide rows and importance_raw
    line=$(/usr/bin/python3 - "$tmp/r.db" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
r = dict(db.execute("select metric, value from head_metrics where layer = -1"))
imp = {}
for l, h, v in db.execute("select layer, head, value from head_metrics where metric = 'importance_raw'"):
    imp.setdefault(l, {})[h] = v
print(json.dumps({"task_loss": r["task_loss"], "accuracy": r["accuracy"],
                  "importance_raw": [[imp[l][h] for h in sorted(imp[l])] for l in sorted(imp)]}))
PY
    )
  fi
  bench_ours_row "$line" "$mode" "$t" "${walls[@]}"
}

bench_contend_start
for t in $threads; do
  bench_threads "$t"
  for mode in eval importance; do
    echo "threads $t: $mode --task (headscope, torch)" >&2
    ours "$mode" "$t" >>"$out"
    bench_torch bench/task_torch.py run "$tmp/m" "$tmp/task.jsonl" --mode "$mode" --batch "$batch" \
      --threads "$t" --runs "$runs" >>"$out"
  done
done
bench_contend_stop
bench_mark "$out"

/usr/bin/python3 - "$out" "${shape[*]}" "$batch" <<'PY' | bench_md "$outdir/task.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"BertForSequenceClassification ({sys.argv[2]}), batch {sys.argv[3]}; seconds = median of "
      "runs (ours: the command's wall time, loading included; torch: the loop alone)\n")
print("| threads | command | headscope s | torch s (best of) | torch / headscope | task_loss diff | accuracy | importance_raw max rel. diff |")
print("|---|---|---|---|---|---|---|---|")
for t in sorted({r["threads"] for r in rows}):
    for mode in ("eval", "importance"):
        o = [r for r in rows if r["impl"] == "headscope" and r["threads"] == t and r["mode"] == mode][0]
        p = [r for r in rows if r["impl"] == "torch" and r["threads"] == t and r["mode"] == mode][0]
        rel = "-"
        if mode == "importance":
            rel = "%.1e" % max(abs(a - b) / max(abs(b), 1e-12) for la, lb in zip(o["importance_raw"], p["importance_raw"])
                               for a, b in zip(la, lb))
        print(f"| {t} | {mode} --task | {o['seconds']:.3f} | {p['seconds']:.3f} ({p.get('best', 'head mask')}) | "
              f"**{p['seconds'] / o['seconds']:.2f}x** | {abs(o['task_loss'] - p['task_loss']):.1e} | "
              f"{o['accuracy']:.4f} / {p['accuracy']:.4f} | {rel} |")
PY
