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
for name in ("logit_diff_clean", "logit_diff_corrupt", "logit_diff_gap"):
    g, (v, e) = rows.get((name, -1, -1)), case[name]
    if g is None or abs(g[0] - v) > 1e-4 or abs(g[1] - e) > 1e-4:
        bad.append("%s: got %r want %r" % (name, g, (v, e)))
# SPEC §21: the premise as the oracle's gap and stderr say (gpt2_lengths'
# is weak: run with --allow-weak-premise)
v, e = case["logit_diff_gap"]
ok = abs(v) >= 2 * e
if rows.get(("premise_ok", -1, -1), (None,))[0] != ok or \
        (got["premise"] == "ok") != ok or not got["premise"].startswith(("ok", "not established")):
    bad.append("premise: gap %r stderr %r, premise_ok %r, %r" % (
        v, e, rows.get(("premise_ok", -1, -1)), got.get("premise")))
extra = sum(1 for k in rows if k[0].startswith(("patch_", "path_patch")))
if extra != count:
    bad.append("%d patch rows, the oracle has %d" % (extra, count))
open("cmp.txt", "w").write("; ".join(bad[:5]) or "max difference %.3g" % worst)
sys.exit(1 if bad else 0)
PY
    echo "    $2 $3: $(cat cmp.txt)"
}

# patch_case CASE MODE [OPTION...]: the command's JSON for a case against the oracle.
patch_case() {
    local case=$1 mode=$2 sites model
    sites=$(py -c 'import json,sys; print(",".join(json.load(open(sys.argv[1]))[sys.argv[2]]["sites"]))' "$C/oracle.json" "$case")
    model=$(jget "$C/oracle.json" "$case" model)
    local extra=("${@:3}")
    [ "$mode" = noising ] && extra+=(--noising)
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
    # a weak premise (gap within 2 stderr of 0): refused, then recorded as such
    local gap
    gap=$(py -c 'import json,sys; v, e = json.load(open(sys.argv[1]))["gpt2_lengths"]["logit_diff_gap"]; assert abs(v) < 2 * e; print("= %+.4g has a standard error of %.2g over 6 prompts" % (v, e))' "$C/oracle.json")
    expect_refused 1 patch "gap mean LD_clean - mean LD_corrupt $gap" \
        --model "$M/gpt2_tiny" --prompts "$C/gpt2_lengths.jsonl" --db w.db --site z || return 1
    local w
    w=$(py -c 'import sqlite3; print(sqlite3.connect("w.db").execute("select status, (select count(*) from head_metrics) from runs").fetchall())')
    expect_eq "$w" "[('failed', 0)]" "a refused weak premise's run" || return 1
    patch_case gpt2_lengths denoising --allow-weak-premise &&
        patch_case gpt2_lengths noising --allow-weak-premise || return 1
    hs patch --model "$M/gpt2_tiny" --prompts "$C/gpt2_lengths.jsonl" --db w.db --site z \
        --allow-weak-premise
    expect_rc 0 "patch --allow-weak-premise" || return 1
    expect_grep "$OUT" "NOT ESTABLISHED: the logit-difference gap" "the summary" || return 1
    expect_eq "$(sqlite3 w.db "select status, (select value from head_metrics h where h.run_id = runs.run_id and metric = 'premise_ok') from runs order by run_id")" \
        "$(printf 'failed|\ncomplete|0.0')" "the index's runs" || return 1
    hs report --db w.db --out rep
    expect_rc 0 "report" || return 1
    expect_grep "$(cat rep/index.html)" "Not established (run 2).</b> The gap" "the report" || return 1
    expect_refused 2 patch "line 1 has 4 tokens, line 2 has 7" --model "$M/gpt2_tiny" \
        --prompts "$C/gpt2_lengths.jsonl" --db r.db --site z,resid_pre || return 1
    expect_nofile r.db "a refused patch"
    # the default sites are the head site z alone there
    hs patch --model "$M/gpt2_tiny" --prompts "$C/gpt2_lengths.jsonl" --db d.db --json --allow-weak-premise
    expect_rc 0 "patch with the default sites" || return 1
    expect_eq "$(py -c 'import json; r=json.load(open("out.txt")); print(len(r["positions"]), sorted({h["metric"] for h in r["heads"]}))')" \
        "0 ['logit_diff_clean', 'logit_diff_corrupt', 'logit_diff_gap', 'patch_z', 'premise_ok']" \
        "default sites over two lengths"
}

# SPEC §21 on every causal command: the two-length prompts' gap is within two
# standard errors of 0 (the oracle's numbers): each command refuses with the
# gap and its stderr, its run failed and empty; with --allow-weak-premise each
# records premise_ok 0 and its --json says "not established".
weak_premise_every_command() {
    local gap cmd
    gap=$(py -c 'import json,sys; v, e = json.load(open(sys.argv[1]))["gpt2_lengths"]["logit_diff_gap"]; print("= %+.4g has a standard error of %.2g over 6 prompts" % (v, e))' "$C/oracle.json")
    local -A args=([patch]="--site z" [path-patch]="--senders all" [atp]="--site z" [circuit]="--method eap")
    for cmd in patch path-patch atp circuit; do
        # shellcheck disable=SC2086
        expect_refused 1 "$cmd" "gap mean LD_clean - mean LD_corrupt $gap" --model "$M/gpt2_tiny" \
            --prompts "$C/gpt2_lengths.jsonl" --db "$cmd.db" ${args[$cmd]} || return 1
        expect_eq "$(sqlite3 "$cmd.db" "select status, (select count(*) from head_metrics) from runs")" \
            "failed|0" "$cmd: the refused run" || return 1
        # shellcheck disable=SC2086
        hs "$cmd" --model "$M/gpt2_tiny" --prompts "$C/gpt2_lengths.jsonl" --db "$cmd.db" \
            ${args[$cmd]} --allow-weak-premise --json
        expect_rc 0 "$cmd --allow-weak-premise" || return 1
        expect_grep "$(py -c 'import json; print(json.load(open("out.txt"))["premise"])')" \
            "not established: the logit-difference gap" "$cmd --json" || return 1
        expect_eq "$(sqlite3 "$cmd.db" "select status, value from runs join head_metrics using (run_id) where metric = 'premise_ok'")" \
            "complete|0.0" "$cmd: the index" || return 1
    done
}

# report --runs and --heads: by default the latest run of each kind, the
# others marked "left out"; --runs chooses; the maps drawn are the heads the
# causal runs single out (largest patch_z, largest DLA) unless --heads names
# them; a run or head list that is not one is refused.
report_runs_and_heads() {
    local g="$M/gpt2_tiny" p="$C/gpt2.jsonl" top
    hs patch --model "$g" --prompts "$p" --db rr.db --site z && expect_rc 0 "patch 1" || return 1
    hs patch --model "$g" --prompts "$p" --db rr.db --site z --noising &&
        expect_rc 0 "patch 2" || return 1
    hs dla --model "$g" --prompts "$p" --db rr.db && expect_rc 0 "dla" || return 1
    hs capture --model "$g" --data "$g/eval.bin" --out m.h5 --batch 1 --seq-len 8 --db rr.db &&
        expect_rc 0 "capture" || return 1
    top=$(sqlite3 rr.db "select 'map_L' || layer || 'H' || head || '.png' from head_metrics where run_id = 2 and metric = 'patch_z' order by value desc, layer, head limit 1")
    hs report --db rr.db --out r1 && expect_rc 0 "report" || return 1
    local page
    page=$(cat r1/index.html)
    expect_grep "$page" "<tr><td>1<br><b>left out</b></td>" "run 1 left out" || return 1
    expect_grep "$page" "src=\"$top\"" "the map of run 2's largest patch_z" || return 1
    expect_grep "$page" "largest patch_z" "the map's reason" || return 1
    hs report --db rr.db --out r2 --runs 1,3,4 && expect_rc 0 "report --runs" || return 1
    page=$(cat r2/index.html)
    expect_grep "$page" "<tr><td>2<br><b>left out</b></td>" "--runs: run 2 left out" || return 1
    expect_grep "$page" "Run 1: logit difference" "--runs: patch run 1 shown" || return 1
    hs report --db rr.db --out r3 --heads 0.1,1.0 && expect_rc 0 "report --heads" || return 1
    page=$(cat r3/index.html)
    expect_grep "$page" 'src="map_L0H1.png"' "--heads 0.1" || return 1
    expect_grep "$page" 'src="map_L1H0.png"' "--heads 1.0" || return 1
    expect_grep "$page" "chosen with --heads" "--heads: the maps' reason" || return 1
    expect_refused 1 report "rr.db holds no run 99" --db rr.db --out r4 --runs 1,99 || return 1
    expect_refused 1 report "--heads 'x': L.H,L.H,... expected" --db rr.db --out r4 --heads x ||
        return 1
    expect_nofile r4/index.html "a refused report"
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
    # dla counts the prompts the model gets right (LD clean > 0), as predict
    # shows them, here on the pairs swapped (the corrupt prompt as the clean)
    py -c 'import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    d["clean_ids"], d["corrupt_ids"] = d["corrupt_ids"], d["clean_ids"]
    print(json.dumps(d))' "$C/gpt2.jsonl" >swapped.jsonl
    hs predict --model "$M/gpt2_tiny" --prompts swapped.jsonl --json
    local right
    right=$(py -c 'import json; print(sum(l["clean"]["ld"] > 0 for l in json.load(open("out.txt"))["lines"]))')
    hs dla --model "$M/gpt2_tiny" --prompts swapped.jsonl --db dl.db --json
    expect_rc 0 "dla" || return 1
    expect_eq "$(py -c 'import json; print(json.load(open("out.txt"))["prompts_right"])')" "$right" \
        "dla's prompts_right" || return 1
    hs dla --model "$M/gpt2_tiny" --prompts swapped.jsonl --db dl.db
    expect_grep "$OUT" "prefers the answer to the wrong token on $right of 6 clean prompts" "dla's summary" ||
        return 1
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
    predict_equals_the_forward bad_prompts weak_premise_every_command report_runs_and_heads
