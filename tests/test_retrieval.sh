#!/usr/bin/env bash
# Heads at long context (SPEC §18): `retrieval` on a planted model whose
# induction head copies the needle (tests/retrieval_planted.py) equals the
# float64 PyTorch reference of that script -- every head's retrieval score,
# the needle accuracy, and both arms of the causal check with the heads the
# command chose -- over needles at depths 0 and 100 with exact ties in the
# argmax (the zero heads' uniform rows); the planted head ranks first,
# masking it drops the accuracy where a random head does not; bad grids,
# needles and haystacks are refused naming the option or line, recording
# nothing.
SUITE=retrieval
. "$(dirname "$0")/lib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)

planted() {
    [ -s pm/model.safetensors ] && return 0
    py "$HERE/retrieval_planted.py" build pm || bad "retrieval_planted.py build failed"
}

# rows DB RUN: "layer:head value" of the retrieval rows, then "metric value" model-wide
rows() {
    py -c 'import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for l, h, m, v in db.execute("select layer, head, metric, value from head_metrics where run_id = ? "
                             "order by layer, head, metric", (int(sys.argv[2]),)):
    print(f"{l}:{h}" if l >= 0 else m, repr(v))' "$@"
}

planted_retrieval_equals_reference() {
    planted || return 1
    local grid="--lengths 40,80 --depths 0,50,100"
    hs retrieval --model pm --haystack pm/haystack.txt --needles pm/needles.jsonl $grid \
        --db r.db --mask-top 1 --seed 3 --json
    expect_rc 0 "retrieval" || return 1
    printf '%s\n' "$OUT" >summary.json
    under_asan && return 0 # the reference's torch runs in the float build
    rows r.db 1 >got.txt
    py - got.txt summary.json "$HERE/retrieval_planted.py" pm <<'PYEOF' || bad "$(tail -c 1500 err.txt)"
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("retrieval_planted", sys.argv[3])
planted = importlib.util.module_from_spec(spec)
spec.loader.exec_module(planted)
got = dict(line.split() for line in open(sys.argv[1]))
summary = json.load(open(sys.argv[2]))
def reference(masked):
    return planted.reference(sys.argv[4], [40, 80], [0.0, 50.0, 100.0],
                             {(h["layer"], h["head"]) for h in masked})
want = reference([])
for key, v in want["retrieval"].items():
    assert abs(float(got[key]) - v) < 1e-12, (key, got[key], v)
assert want["retrieval"]["0:1"] > 0, "the zero heads' tie at depth 0 is not exercised"
assert abs(float(got["needle_accuracy"]) - want["needle_accuracy"]) < 1e-12
assert 0 < want["needle_accuracy"] < 1, want
assert summary["top_retrieval"]["layer"] == 1 and summary["top_retrieval"]["head"] == 0, summary
top = reference(summary["masked_top"])["needle_accuracy"]
rand = reference(summary["masked_random"])["needle_accuracy"]
assert abs(float(got["needle_accuracy_masked_top"]) - top) < 1e-12, (got, top)
assert abs(float(got["needle_accuracy_masked_random"]) - rand) < 1e-12, (got, rand)
assert top < want["needle_accuracy"] == rand, (top, rand, want)
PYEOF
}

# The 8 decoding steps past the answer always run, and a needle at depth 100
# sits right before the question: the planted head copies it there too.
depth_edges() {
    planted || return 1
    hs retrieval --model pm --haystack pm/haystack.txt --needles pm/needles.jsonl \
        --lengths 64 --depths 100 --db e.db --json
    expect_rc 0 "retrieval at depth 100" || return 1
    expect_eq "$(jget out.txt runs)" 3 "runs" || return 1
    expect_eq "$(jget out.txt succeeded)" 2 "successful runs (the third needle's key is absent)"
}

retrieval_refuses() {
    planted || return 1
    local m="--model pm --haystack pm/haystack.txt --db x.db"
    local n="--needles pm/needles.jsonl"
    expect_refused 2 retrieval "--depths '0,101'" $m $n --lengths 48 --depths 0,101 || return 1
    expect_refused 2 retrieval "--depths '-5'" $m $n --lengths 48 --depths=-5 || return 1
    expect_refused 2 retrieval "--lengths '0'" $m $n --lengths 0 --depths 50 || return 1
    expect_refused 2 retrieval "--lengths '48,'" $m $n --lengths 48, --depths 50 || return 1
    expect_refused 2 retrieval "--mask-top 3" $m $n --lengths 48 --depths 50 --mask-top 3 ||
        return 1
    expect_refused 2 retrieval "--seed needs --mask-top" $m $n --lengths 48 --depths 50 \
        --seed 4 || return 1
    # the planted context is 128 positions: 120 + needle + question + answer + 8 exceed it
    expect_refused 2 retrieval "needles.jsonl:1: at --lengths 120" $m $n --lengths 120 \
        --depths 50 || return 1
    head -c 100 pm/haystack.txt >short.txt
    expect_refused 2 retrieval "--haystack short.txt: 100 tokens, shorter than the longest" \
        --model pm --haystack short.txt $n --lengths 48,120 --depths 50 --db x.db || return 1
    printf '{"needle": " =AB ", "question": " ="}\n' >miss.jsonl
    expect_refused 1 retrieval 'miss.jsonl:1: "answer" must be a non-empty string' $m \
        --needles miss.jsonl --lengths 48 --depths 50 || return 1
    printf '\n{"needle": " =AB ", "question": " =", "answer": " \\u00a0 "}\n' >blank.jsonl
    expect_refused 1 retrieval 'blank.jsonl:2: "answer" has no word' $m \
        --needles blank.jsonl --lengths 48 --depths 50 || return 1
    printf '{"needle": " =AB ", "question": " =", "answer": "AB"\n' >broken.jsonl
    expect_refused 1 retrieval 'broken.jsonl:1' $m --needles broken.jsonl --lengths 48 \
        --depths 50 || return 1
    : >empty.jsonl
    expect_refused 1 retrieval 'empty.jsonl: no needle' $m --needles empty.jsonl --lengths 48 \
        --depths 50 || return 1
    expect_refused 2 retrieval "--needles FILE" $m --lengths 48 --depths 50 || return 1
    expect_nofile x.db "a refused retrieval made an index"
}

run_checks planted_retrieval_equals_reference depth_edges retrieval_refuses
