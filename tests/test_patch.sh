#!/usr/bin/env bash
# End-to-end checks of `headscope patch` and `headscope path-patch` (SPEC §11)
# against the PyTorch hook oracle tests/fixtures/causal/oracle.json
# (scripts/oracle/gen_causal.py: GPT-2, Llama-GQA and GPT-NeoX, every site, denoising
# and noising, path patching to receivers and to the logits, within 1e-4 with
# the stderr), the fast path against the naive one, the index rows, and the
# refusals (0/0, clean/corrupt lengths, position sites over mixed lengths).
#
# usage: tests/test_patch.sh HEADSCOPE_BINARY FIXTURE_DIR
# ONLY="name1 name2" runs the checks named. Needs /usr/bin/python3 (sqlite3, json).
SUITE=patch
source "$(dirname "$0")/lib.sh"

C=$FIX/causal
M=$FIX/models
ALL=z,pattern,resid_pre,attn_out,mlp_out

# compare OUT.json CASE KEY [METRICS]: every oracle row of oracle[CASE][KEY]
# (per metric: [layer, idx, value, stderr]) against the command's JSON rows,
# values and stderrs within 1e-4, and the logit difference rows.
compare() {
    py - "$1" "$C/oracle.json" "$2" "$3" <<'PY' || bad "$(cat cmp.txt)"
import json, sys
got = json.load(open(sys.argv[1]))
case = json.load(open(sys.argv[2]))[sys.argv[3]]
want = case[sys.argv[4]]
if isinstance(want, list):
    want = {"path_patch": want}
rows = {}
for r in got.get("heads", []):
    rows[(r["metric"], r["layer"], r["head"])] = (r["value"], r["stderr"], r["n"])
for r in got.get("positions", []):
    rows[(r["metric"], r["layer"], r["position"])] = (r["value"], r["stderr"], r["n"])
worst, bad, count = 0.0, [], 0
for metric, lst in want.items():
    for l, i, v, e in lst:
        g = rows.get((metric, l, i))
        if g is None:
            bad.append("missing %s %d %d" % (metric, l, i)); continue
        d = max(abs(g[0] - v), abs(g[1] - e)); count += 1
        worst = max(worst, d)
        if d > 1e-4:
            bad.append("%s %d %d: got %r want %r" % (metric, l, i, g[:2], (v, e)))
for name in ("logit_diff_clean", "logit_diff_corrupt"):
    g, (v, e) = rows.get((name, -1, -1)), case[name]
    if g is None or abs(g[0] - v) > 1e-4 or abs(g[1] - e) > 1e-4:
        bad.append("%s: got %r want %r" % (name, g, (v, e)))
extra = sum(1 for k in rows if k[0].startswith(("patch_", "path_patch")))
if extra != count:
    bad.append("%d patch rows, the oracle has %d" % (extra, count))
open("cmp.txt", "w").write("; ".join(bad[:5]) or "max difference %.3g" % worst)
sys.exit(1 if bad else 0)
PY
    echo "    $2 $3: $(cat cmp.txt)"
}

# patch_case CASE MODE: the command's JSON for a case against the oracle.
patch_case() {
    local case=$1 mode=$2 sites model
    sites=$(py -c 'import json,sys; print(",".join(json.load(open(sys.argv[1]))[sys.argv[2]]["sites"]))' "$C/oracle.json" "$case")
    model=$(jget "$C/oracle.json" "$case" model)
    local extra=()
    [ "$mode" = noising ] && extra=(--noising)
    hs patch --model "$M/$model" --prompts "$C/$case.jsonl" --db p.db --site "$sites" "${extra[@]}" --batch 4 --json
    expect_rc 0 "patch $case $mode" || return 1
    cp out.txt "$case.$mode.json"
    compare "$case.$mode.json" "$case" "$mode"
}

path_case() {
    local case=$1 model recv
    model=$(jget "$C/oracle.json" "$case" model)
    hs path-patch --model "$M/$model" --prompts "$C/$case.jsonl" --db p.db --senders all --json
    expect_rc 0 "path-patch $case to the logits" || return 1
    cp out.txt logits.json
    compare logits.json "$case" path_patch_logits || return 1
    recv=$(py -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]]["receivers"] or "")' "$C/oracle.json" "$case")
    [ -n "$recv" ] || return 0
    hs path-patch --model "$M/$model" --prompts "$C/$case.jsonl" --db p.db --senders all --receivers "$recv" --json
    expect_rc 0 "path-patch $case to $recv" || return 1
    cp out.txt recv.json
    compare recv.json "$case" path_patch_receivers
}

oracle_gpt2() {
    patch_case gpt2 denoising && patch_case gpt2 noising && path_case gpt2
}

oracle_llama_gqa() {
    patch_case llama_gqa denoising && patch_case llama_gqa noising && path_case llama_gqa
}

# GPT-NeoX (tests/fixtures/families): parallel residual with rotary on a
# quarter of each head, and the sequential residual with half rotary.
oracle_neox_par() {
    patch_case neox_par denoising && patch_case neox_par noising && path_case neox_par
}

oracle_neox_seq() {
    patch_case neox_seq denoising && patch_case neox_seq noising && path_case neox_seq
}

# Head sites over prompts of two lengths (batched by length); position sites
# are keyed by position and refused there, naming two lines.
oracle_lengths() {
    patch_case gpt2_lengths denoising && patch_case gpt2_lengths noising || return 1
    expect_refused 2 patch "line 1 has 4 tokens, line 2 has 7" --model "$M/gpt2_tiny" \
        --prompts "$C/gpt2_lengths.jsonl" --db r.db --site z,resid_pre || return 1
    expect_nofile r.db "a refused patch"
    # the default sites are the head site z alone there
    hs patch --model "$M/gpt2_tiny" --prompts "$C/gpt2_lengths.jsonl" --db d.db --json
    expect_rc 0 "patch with the default sites" || return 1
    expect_eq "$(py -c 'import json; r=json.load(open("out.txt")); print(len(r["positions"]), sorted({h["metric"] for h in r["heads"]}))')" \
        "0 ['logit_diff_clean', 'logit_diff_corrupt', 'patch_z']" "default sites over two lengths"
}

# The stacked continuations equal one hooked full forward per patch.
fast_equals_naive() {
    local s
    for s in "" --noising; do
        hs patch --model "$M/llama_gqa" --prompts "$C/llama_gqa.jsonl" --db f.db --site $ALL --stack 3 $s --json
        expect_rc 0 "patch fast" || return 1
        cp out.txt fast.json
        hs patch --model "$M/llama_gqa" --prompts "$C/llama_gqa.jsonl" --db f.db --site $ALL --naive $s --json
        expect_rc 0 "patch naive" || return 1
        py - fast.json out.txt <<'PY' || bad "fast and naive differ: $(cat cmp.txt)" || return 1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
def rows(r):
    return {(x["metric"], x["layer"], x.get("head", x.get("position"))): (x["value"], x["stderr"])
            for x in r["heads"] + r["positions"]}
ra, rb = rows(a), rows(b)
worst = max(max(abs(ra[k][0] - rb[k][0]), abs(ra[k][1] - rb[k][1])) for k in ra)
open("cmp.txt", "w").write("max %.3g, %d vs %d rows" % (worst, len(ra), len(rb)))
sys.exit(0 if ra.keys() == rb.keys() and worst < 1e-5 else 1)
PY
    done
}

# The rows in the index: head_metrics, position_metrics (positions 0..T-1),
# the model-wide rows, a complete run.
index_rows() {
    hs patch --model "$M/gpt2_tiny" --prompts "$C/gpt2.jsonl" --db i.db --json
    expect_rc 0 "patch" || return 1
    local run
    run=$(jget out.txt run_id)
    py - i.db "$run" <<'PY' || bad "$(cat cmp.txt)"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1]); run = int(sys.argv[2])
one = lambda q: db.execute(q, (run,)).fetchone()
checks = [
    (one("select kind, status from runs where run_id=?"), ("patch", "complete")),
    (one("select count(*) from head_metrics where run_id=? and metric='patch_z'"), (8,)),
    (one("select count(*), min(position), max(position) from position_metrics where run_id=? and metric='patch_resid_pre'"), (12, 0, 5)),
    (one("select count(*) from position_metrics where run_id=? and metric in ('patch_attn_out','patch_mlp_out')"), (24,)),
    (one("select layer, head, n from head_metrics where run_id=? and metric='logit_diff_clean'"), (-1, -1, 6)),
    (one("select count(*) from head_metrics where run_id=? and (value is null or stderr is null)"), (0,)),
]
bad = ["%r != %r" % c for c in checks if tuple(c[0]) != c[1]]
open("cmp.txt", "w").write("; ".join(bad))
sys.exit(1 if bad else 0)
PY
}

# clean = corrupt: every value would be 0/0; a clear failure, the run failed,
# no rows.
zero_over_zero() {
    py -c 'import json
for i in range(3):
    s = [1 + i, 5, 9, 2]
    print(json.dumps({"clean_ids": s, "corrupt_ids": s, "answer_id": 3, "wrong_id": 4}))' >same.jsonl
    local cmd
    for cmd in patch path-patch; do
        local extra=()
        [ "$cmd" = path-patch ] && extra=(--senders 0.1)
        expect_refused 1 "$cmd" "would be 0/0" --model "$M/gpt2_tiny" --prompts same.jsonl --db z.db "${extra[@]}" || return 1
    done
    expect_eq "$(sqlite3 z.db "select group_concat(status) from runs")" "failed,failed" "runs" || return 1
    expect_eq "$(sqlite3 z.db "select (select count(*) from head_metrics) + (select count(*) from position_metrics)")" 0 "rows of a 0/0 run"
}

# Clean and corrupt of one prompt must have equal lengths: the line is named.
# predict (SPEC §21): the top tokens at the last position equal a PyTorch
# forward of the same GPT-2 (scripts/oracle/gen_classifiers.py, float64,
# tied unembedding); each prompts line's clean LDs average to patch's
# logit_diff_clean
predict_equals_the_forward() {
    hs predict --model "$M/gpt2_tiny" --prompt-ids 5,6,7,8,9 --top 4 --json
    expect_rc 0 "predict --prompt-ids" || return 1
    py - "$(cd "$(dirname "$0")/.." && pwd)/scripts/oracle" "$M/gpt2_tiny" "$OUT" <<'PY' ||
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
import gen_classifiers as G
c = json.load(open(sys.argv[2] + "/config.json"))
W = G.read_st(sys.argv[2] + "/model.safetensors")
x = G.gpt2_hidden(W, c, torch.tensor([[5, 6, 7, 8, 9]]))[0, -1] @ W["wte.weight"].T
p = torch.softmax(x, -1)
got = json.loads(sys.argv[3])["top"]
want = sorted(range(len(x)), key=lambda v: (-x[v].item(), v))[:4]
assert [t["id"] for t in got] == want, (got, want)
for t in got:
    assert abs(t["logit"] - x[t["id"]].item()) < 1e-5 and abs(t["prob"] - p[t["id"]].item()) < 1e-6, t
PY
        bad "predict's top tokens differ from torch's" || return 1
    hs predict --model "$M/gpt2_tiny" --prompts "$C/gpt2.jsonl" --json
    expect_rc 0 "predict --prompts" || return 1
    cp out.txt pred.json
    hs patch --model "$M/gpt2_tiny" --prompts "$C/gpt2.jsonl" --db pr.db --site z --json
    expect_rc 0 "patch" || return 1
    py -c 'import json, sqlite3, sys
lines = json.load(open("pred.json"))["lines"]
ld = sum(l["clean"]["ld"] for l in lines) / len(lines)
want = sqlite3.connect("pr.db").execute("select value from head_metrics where metric = \"logit_diff_clean\"").fetchone()[0]
assert abs(ld - want) < 1e-5 * max(1, abs(want)), (ld, want)
assert [l["line"] for l in lines] == list(range(1, len(lines) + 1))' ||
        bad "predict's clean LDs and patch's logit_diff_clean" || return 1
    expect_refused 2 predict "one of --prompt, --prompt-ids, --prompts" --model "$M/gpt2_tiny"
}

bad_prompts() {
    printf '%s\n' '{"clean_ids": [1, 2, 3], "corrupt_ids": [1, 4, 3], "answer_id": 3, "wrong_id": 4}' \
        '{"clean_ids": [1, 2, 3], "corrupt_ids": [1, 4], "answer_id": 3, "wrong_id": 4}' >len.jsonl
    expect_refused 1 patch "len.jsonl:2" --model "$M/gpt2_tiny" --prompts len.jsonl --db b.db || return 1
    expect_nofile b.db "refused prompts" || return 1
    printf '%s\n' '{"clean": "a b", "corrupt": "a c", "answer": " d", "wrong": " e"}' >text.jsonl
    expect_refused 1 patch "text.jsonl:1" --model "$M/gpt2_tiny" --prompts text.jsonl --db b.db || return 1
    printf '%s\n' '{"clean_ids": [1, 2, 3], "corrupt_ids": [1, 4, 3], "answer_id": 3, "wrong_id": 4}' \
        '{"clean_ids": [1, 2, 3], "corrupt_ids": [1, 4, 3], "answer_id": 5, "wrong_id": 5}' >same.jsonl
    expect_refused 1 patch "same.jsonl:2: the answer and wrong tokens are the same token (id 5)" \
        --model "$M/gpt2_tiny" --prompts same.jsonl --db b.db || return 1
    expect_refused 2 patch "unknown site 'q'" --model "$M/gpt2_tiny" --prompts "$C/gpt2.jsonl" --db b.db --site z,q || return 1
    expect_refused 2 patch "--prompts FILE" --model "$M/gpt2_tiny" --db b.db || return 1
    expect_refused 2 path-patch "--senders" --model "$M/gpt2_tiny" --prompts "$C/gpt2.jsonl" --db b.db --senders 0.9 || return 1
    expect_refused 2 path-patch "--receivers" --model "$M/gpt2_tiny" --prompts "$C/gpt2.jsonl" --db b.db --senders 0.1 --receivers 1.0:x || return 1
    expect_nofile b.db "refused options"
}

run_checks oracle_gpt2 oracle_llama_gqa oracle_neox_par oracle_neox_seq oracle_lengths fast_equals_naive index_rows zero_over_zero \
    predict_equals_the_forward bad_prompts
