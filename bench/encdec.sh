#!/usr/bin/env bash
# Encoder-decoders (SPEC §17): `headscope eval --pairs`, `headscope ablate
# --pairs` (every head of every attention type zeroed) and `headscope
# generate --source-ids` on a t5-small-shaped model (6 + 6 layers, d 512, 8
# heads of 64, F 2048, vocabulary 32,128; random weights), against PyTorch
# at its best in the same run (bench/encdec_torch.py: modeling_t5.py's
# arithmetic in float32 under inference_mode; ablation by a head mask with
# the encoder's output reused for the decoder's heads; generation by the
# greedy loop with its own cache), at 1 and 2 threads. eval: 16 pairs of 64
# + 64 tokens, 8 a forward; ablate: 4 pairs of 32 + 32 (144 heads, 145
# forwards); generate: the first source, 64 new tokens at most. Ours: the
# command's wall time (model loading included) of each of R runs (default
# 3); torch's: the loop alone, the median of R after a warm-up. The targets:
# eval and ablate >= 1.5x torch float32, generate >= 2x. Both sides' loss,
# largest ablation delta and generated ids are compared.
#
#   bench/encdec.sh [--threads "1 2"] [--runs R] [--tiny] [--contend]
#
# Results: bench/out/encdec.jsonl and bench/out/encdec.md. --tiny: 2 + 2
# layers, d 64, 4 heads, vocabulary 512, 4 pairs of 16 + 16, 1 thread, 1 run
# (seconds; scripts/test --slow), results in bench/out/tiny/.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init "threads tiny contend"
threads="1 2"
runs=3
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    *) bench_opt "$@"; shift "$bench_shift" ;;
  esac
done
bench_build headscope_cli
hs=$(pwd)/$bench_dir/headscope
shape=(--layers 6 --d 512 --heads 8 --dkv 64 --ff 2048 --vocab 32128 --pairs 16 --src 64 --tgt 64)
batch=8 max_new=64 outdir=bench/out
if [ "$tiny" = 1 ]; then
  shape=(--layers 2 --d 64 --heads 4 --dkv 16 --ff 128 --vocab 512 --pairs 4 --src 16 --tgt 16)
  batch=2 max_new=8 threads=1 runs=1 outdir=bench/out/tiny
fi
mkdir -p "$outdir"
bench_tmp
out=$outdir/encdec.jsonl
: >"$out"
/usr/bin/python3 bench/encdec_torch.py make "$tmp/m" "${shape[@]}"
src_ids=$(/usr/bin/python3 -c 'import json, sys
print(",".join(map(str, json.loads(open(sys.argv[1]).readline())["source_ids"])))' "$tmp/m/pairs.jsonl")

# ours MODE T: one JSON row of the headscope command of MODE at T threads
ours() {
  local mode=$1 t=$2 r t0 t1 line walls=()
  for r in $(seq 1 "$runs"); do
    rm -f "$tmp/r.db"
    t0=$(date +%s.%N)
    case "$mode" in
      eval) line=$("$hs" eval --model "$tmp/m" --pairs "$tmp/m/pairs.jsonl" --batch "$batch" \
          --threads "$t" --json) ;;
      ablate) "$hs" ablate --model "$tmp/m" --pairs "$tmp/m/pairs_small.jsonl" --method zero \
          --batch "$batch" --db "$tmp/r.db" --threads "$t" --json >/dev/null
        line=$(/usr/bin/python3 -c 'import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
(v,), = db.execute("select max(value) from head_metrics where metric = \"loss_delta_zero\"")
(n,), = db.execute("select count(*) from head_metrics where metric = \"loss_delta_zero\"")
print(json.dumps({"max_delta": v, "heads": n}))' "$tmp/r.db") ;;
      generate) line=$("$hs" generate --model "$tmp/m" --source-ids "$src_ids" \
          --max-new "$max_new" --threads "$t" --json) ;;
    esac
    t1=$(date +%s.%N)
    walls+=("$(echo "$t1 - $t0" | bc)")
  done
  bench_ours_row "$line" "$mode" "$t" "${walls[@]}"
}

bench_contend_start
for t in $threads; do
  bench_threads "$t"
  for mode in eval ablate generate; do
    echo "threads $t: $mode (headscope, torch)" >&2
    ours "$mode" "$t" >>"$out"
    bench_torch bench/encdec_torch.py run "$tmp/m" --mode "$mode" --batch "$batch" \
      --threads "$t" --runs "$runs" --max-new "$max_new" >>"$out"
  done
done
bench_contend_stop
bench_mark "$out"

/usr/bin/python3 - "$out" "${shape[*]}" <<'PY' | bench_md "$outdir/encdec.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"T5 v1.0 ({sys.argv[2]}); seconds = median of runs (ours: the command's wall time, "
      "loading included; torch: the loop alone)\n")
print("| threads | command | headscope s | torch s | torch / headscope | target | agreement |")
print("|---|---|---|---|---|---|---|")
for t in sorted({r["threads"] for r in rows}):
    for mode, target in (("eval", 1.5), ("ablate", 1.5), ("generate", 2.0)):
        o = [r for r in rows if r["impl"] == "headscope" and r["threads"] == t and r["mode"] == mode][0]
        p = [r for r in rows if r["impl"] == "torch" and r["threads"] == t and r["mode"] == mode][0]
        if mode == "eval":
            agree = "loss diff %.1e" % abs(o["loss"] - p["loss"])
        elif mode == "ablate":
            agree = "max delta diff %.1e (%d heads)" % (abs(o["max_delta"] - p["max_delta"]), o["heads"])
        else:
            agree = "ids equal" if o["ids"] == p["ids"] else "ids differ"
        ratio = p["seconds"] / o["seconds"]
        print(f"| {t} | {mode} | {o['seconds']:.3f} | {p['seconds']:.3f} | **{ratio:.2f}x** | "
              f"{target}x {'met' if ratio >= target else 'missed'} | {agree} |")
PY
