#!/usr/bin/env bash
# Viewer benchmark: the interactive viewer (headscope view) of one sequence of
# T = 2,048 tokens, 12 heads (a random-init one-layer GPT-2 of d_model 192,
# byte-level), opened from file:// in headless Chromium (playwright-core,
# tests/viewer_test.js perf). For each dtype (u8, f16), over R page loads
# (default 5), the medians of: the time until the page is interactive
# (performance.now() when the first head is drawn: data.js, viewer.js, the
# maps and every view), a hover (the mouseover handler on a token and the
# style recalculation it causes; 20 hovers a load, median and max), a head
# switch (decode + the T x T image); and the page weight (every file the page
# loads from file://: index.html, viewer.css, viewer.js, data.js, maps.js).
# Then T = 8,192 (two heads of a Llama-shaped model; not with --tiny): the
# maps in rows/, loaded on demand; a hover is timed until its row, read from
# a file not loaded before, is painted. Targets: interactive <= 2 s, hover
# <= 50 ms.
#
#   bench/viewer.sh [--reps R] [--tiny] [--contend]
#
# Needs chromium and playwright-core (scripts/setup --browser). Results:
# bench/out/viewer.jsonl and a markdown table in bench/out/viewer.md (also
# printed). --tiny: T = 256, one load (a few seconds; scripts/test --slow),
# results in bench/out/tiny/.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init "tiny contend"
reps=5
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2 ;;
    *) bench_opt "$@"; shift "$bench_shift" ;;
  esac
done
export NODE_PATH=${HEADSCOPE_NPM:-build/npm/node_modules}
# missing browser pieces: an error, but --tiny (the slow tier's smoke, which
# runs without scripts/setup --browser too) skips with the same message
missing() {
  echo "viewer.sh: $1: run scripts/setup --browser$([ "$tiny" = 1 ] && echo '; skipped')" >&2
  exit $((1 - tiny))
}
command -v node >/dev/null || missing "node not found"
[ -x "${CHROMIUM:-/usr/bin/chromium}" ] || missing "chromium not found"
[ -d "$NODE_PATH/playwright-core" ] || missing "no $NODE_PATH/playwright-core"

bench_build headscope_cli
hs=build/float/headscope
T=2048
outdir=bench/out
[ "$tiny" = 1 ] && { outdir=bench/out/tiny; reps=1; T=256; }
mkdir -p "$outdir"
bench_tmp
work=$tmp

# a byte-level shard (the licence texts), a random-init model, one sequence's maps
cat /usr/share/common-licenses/* >"$work/all.txt"
head -c 200000 "$work/all.txt" >"$work/text.txt"
"$hs" tokens --in "$work/text.txt" --out "$work/text.bin" >/dev/null
"$hs" train --out "$work/model" --preset gpt2 d_model=192 n_layer=1 n_head=12 n_ctx=$T vocab_size=256 \
  --data "$work/text.bin" --steps 1 --batch 1 --seq-len $T >/dev/null
"$hs" capture --model "$work/model" --data "$work/text.bin" --out "$work/maps.h5" --batch 1 \
  --seq-len $T --max-batches 1 >/dev/null

bench_contend_start
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
: >"$outdir/viewer.jsonl"
{
  echo "| T | heads | dtype | interactive (ms) | hover median (ms) | hover max (ms) | head switch (ms) | page weight (MB) | maps.bin (MB) |"
  echo "|---|---|---|---|---|---|---|---|---|"
} >"$outdir/viewer.md"
for dtype in u8 f16; do
  dir="$work/view_$dtype"
  "$hs" view --maps "$work/maps.h5" --out "$dir" --dtype $dtype >/dev/null
  weight=$(cat "$dir"/index.html "$dir"/viewer.css "$dir"/viewer.js "$dir"/data.js "$dir"/maps.js | wc -c)
  bin=$(stat -c %s "$dir/maps.bin")
  : >"$work/runs"
  for ((r = 0; r < reps; r++)); do
    node tests/viewer_test.js perf "$dir" 20 >>"$work/runs"
  done
  field() { "${PY:-/usr/bin/python3}" -c 'import json, sys
for l in open(sys.argv[1]): print(json.loads(l)[sys.argv[2]])' "$work/runs" "$1" | median; }
  ready=$(field interactive_ms) hover=$(field hover_median_ms) hmax=$(field hover_max_ms) sw=$(field head_switch_ms)
  printf '{"T":%d,"heads":12,"dtype":"%s","reps":%d,"interactive_ms":%s,"hover_median_ms":%s,"hover_max_ms":%s,"head_switch_ms":%s,"page_bytes":%d,"maps_bin_bytes":%d}\n' \
    $T $dtype "$reps" "$ready" "$hover" "$hmax" "$sw" "$weight" "$bin" >>"$outdir/viewer.jsonl"
  printf '| %d | 12 | %s | %s | %s | %s | %s | %.1f | %.1f |\n' $T $dtype "$ready" "$hover" "$hmax" "$sw" \
    "$(echo "$weight / 1000000" | bc -l)" "$(echo "$bin / 1000000" | bc -l)" >>"$outdir/viewer.md"
done
# long context: T = 8,192, two heads of a random-init Llama-shaped model
# (tests/fixtures' llama_gqa with its positions raised), the maps written to
# rows/ and loaded on demand (viewer_test.js long: interactive, the row files
# read at open, a hover until its row is painted)
if [ "$tiny" = 0 ]; then
  TL=8192
  cp -r tests/fixtures/models/llama_gqa "$work/lm"
  sed -i 's/"max_position_embeddings": 16/"max_position_embeddings": 8192/' "$work/lm/config.json"
  "${PY:-/usr/bin/python3}" - "$work/lm.bin" $TL <<'PYEOF'
import random, struct, sys
T = int(sys.argv[2])
random.seed(7)
seg = [random.randrange(48) for _ in range(300)]
ids = (seg * (T // 300 + 1))[:T + 1]
open(sys.argv[1], "wb").write(struct.pack("<256i", 20240520, 1, len(ids), *[0] * 253) +
                              struct.pack("<%dH" % len(ids), *ids))
PYEOF
  "$hs" capture --model "$work/lm" --data "$work/lm.bin" --out "$work/long.h5" --batch 1 --seq-len $TL \
    --max-batches 1 --layers 1 --heads 0,1 --dtype f16 --compress 1 >/dev/null
  "${PY:-/usr/bin/python3}" tests/viewer_long_expect.py "$work/long.h5" "$work/long.json"
  dir="$work/view_long"
  "$hs" view --maps "$work/long.h5" --out "$dir" >/dev/null
  weight=$(cat "$dir"/index.html "$dir"/viewer.css "$dir"/viewer.js "$dir"/data.js "$dir"/maps.js | wc -c)
  rows=$(du -sb "$dir/rows" | cut -f1)
  : >"$work/runs"
  for ((r = 0; r < reps; r++)); do
    node tests/viewer_test.js long "$dir" "$work/long.json" "$work/long.png" >>"$work/runs"
  done
  ready=$(field interactive_ms) hover=$(field hover_median_ms) hmax=$(field hover_max_ms) files=$(field files_at_open)
  printf '{"T":%d,"heads":2,"dtype":"u8","on_demand":true,"reps":%d,"interactive_ms":%s,"hover_median_ms":%s,"hover_max_ms":%s,"files_at_open":%s,"page_bytes":%d,"rows_bytes":%d}\n' \
    $TL "$reps" "$ready" "$hover" "$hmax" "$files" "$weight" "$rows" >>"$outdir/viewer.jsonl"
  {
    echo
    echo "| T | heads | dtype | interactive (ms) | hover until painted, median (ms) | max (ms) | row files at open | page weight (MB) | rows/ (MB) |"
    echo "|---|---|---|---|---|---|---|---|---|"
    printf '| %d | 2 | u8, rows on demand | %s | %s | %s | %s | %.2f | %.1f |\n' $TL "$ready" "$hover" "$hmax" "$files" \
      "$(echo "$weight / 1000000" | bc -l)" "$(echo "$rows / 1000000" | bc -l)"
  } >>"$outdir/viewer.md"
fi
bench_mark "$outdir/viewer.jsonl"
bench_md_note "$outdir/viewer.md"
cat "$outdir/viewer.md"
