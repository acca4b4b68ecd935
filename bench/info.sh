#!/usr/bin/env bash
# `info` at real sizes (SPEC §13: it reads headers only): BF16 checkpoints of
# the Llama-3.2-1B and Llama-3-8B shapes in the Hugging Face layout (2.5 and
# 16 GB), written as sparse files whose every o_proj holds random values (so
# every head is live, as in a trained model) and whose other tensors are
# holes; and the 1B shape with W_o all zero (every head dead: the probe reads
# W_o whole, its worst case). Median wall time and peak resident memory of
# `headscope info --model DIR --batch 1 --seq-len 512 --json`.
#
#   bench/info.sh [--reps 5] [--tiny]
#
# Results: bench/out/info.jsonl and bench/out/info.md (--tiny: a tiny shape,
# 3 runs, in bench/out/tiny/).
. "$(dirname "$0")/lib.sh"
bench_init "tiny"
reps=5
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2 ;;
    *) bench_opt "$@"; shift "$bench_shift" ;;
  esac
done
bench_build headscope_cli
bench_tmp
outdir=bench/out
shapes=("llama-3.2-1b 2048 8192 16 32 8 128256 1 live" "llama-3-8b 4096 14336 32 32 8 128256 0 live"
        "llama-3.2-1b 2048 8192 16 32 8 128256 1 dead")
if [ "$tiny" = 1 ]; then
  outdir=bench/out/tiny reps=3
  shapes=("tiny 64 128 2 4 2 1000 1 live" "tiny 64 128 2 4 2 1000 1 dead")
fi
mkdir -p "$outdir"
out=$outdir/info.jsonl
: >"$out"
for s in "${shapes[@]}"; do
  read -r name d f L H G V tied heads <<<"$s"
  dir=$tmp/$name-$heads
  /usr/bin/python3 scripts/llama_bf16.py "$dir" "$d" "$f" "$L" "$H" "$G" "$V" "$tied" \
    "$([ "$heads" = live ] && echo o_proj || echo holes)"
  for ((r = 0; r < reps; r++)); do
    /usr/bin/time -f '%e %M' -o "$tmp/t.txt" build/float/headscope info --model "$dir" --batch 1 \
      --seq-len 512 --json >"$tmp/info.json"
    printf '{"shape":"%s","heads":"%s","file_bytes":%s,"wall_s":%s,"rss_kb":%s,"info":%s}\n' \
      "$name" "$heads" "$(stat -c %s "$dir/model.safetensors")" "$(cut -d' ' -f1 "$tmp/t.txt")" \
      "$(cut -d' ' -f2 "$tmp/t.txt")" "$(cat "$tmp/info.json")" >>"$out"
  done
  rm -rf "$dir"
done
load=$(cut -d' ' -f1 /proc/loadavg)
/usr/bin/python3 - "$out" "$load" <<'PY' | tee "$outdir/info.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"`headscope info --batch 1 --seq-len 512 --json` on sparse BF16 checkpoints, median of "
      f"the runs; load average {sys.argv[2]} at the end\n")
print("| shape | heads | file | parameters | wall | peak RSS | plan: forward |")
print("|---|---|---|---|---|---|---|")
seen = []
for r in rows:
    key = (r["shape"], r["heads"])
    if key in seen:
        continue
    seen.append(key)
    g = [x for x in rows if (x["shape"], x["heads"]) == key]
    i = g[0]["info"]
    print(f"| {key[0]} | {key[1]} | {g[0]['file_bytes'] / 1e9:.2f} GB | {i['parameters']:,} | "
          f"{statistics.median(x['wall_s'] for x in g):.2f} s | "
          f"{statistics.median(x['rss_kb'] for x in g) / 1024:.0f} MB | "
          f"{i['memory_plan']['forward'] / 1e9:.2f} GB |")
PY
