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
    local grid="--lengths 40,72 --depths 0,100"
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
    return planted.reference(sys.argv[4], [40, 72], [0.0, 100.0],
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

# A byte-level model without a tokenizer reads the haystack's and the
# needles' bytes: the same numbers as through the byte-level tokenizer.
byte_level_without_a_tokenizer() {
    planted || return 1
    rm -rf bare && mkdir bare && cp pm/config.json pm/model.safetensors bare/ || return 1
    local m
    for m in pm bare; do
        hs retrieval --model $m --haystack pm/haystack.txt --needles pm/needles.jsonl \
            --lengths 40 --depths 0,50 --db $m.db --json
        expect_rc 0 "retrieval --model $m" || return 1
        jget out.txt needle_accuracy >$m.acc
        py -c 'import sqlite3, sys
print(sqlite3.connect(sys.argv[1]).execute("select group_concat(value) from head_metrics "
      "where metric = ? order by layer, head", ("retrieval",)).fetchone()[0])' $m.db >>$m.acc
    done
    expect_eq "$(<bare.acc)" "$(<pm.acc)" "needle accuracy and scores without the tokenizer"
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

# A random GQA Llama (sharp enough that a plan changes its outputs) and its shard.
llama() {
    [ -s lr/model.safetensors ] && return 0
    head -c 20000 "$HERE/../README.md" >hay.txt
    hs tokens --in hay.txt --out hay.bin
    expect_rc 0 "tokens" || return 1
    hs train --preset llama n_layer=2 n_head=4 n_kv_head=2 d_model=32 n_ctx=96 vocab_size=256 \
        initializer_range=0.3 --data hay.bin --out lr --steps 1 --batch 2 --seq-len 32
    expect_rc 0 "train the llama" || return 1
}

# eval and generate under KV plans (GQA: kv heads of 2 query heads; one plan
# with sinks and full heads, one all streaming without sinks) equal the
# float64 reference that masks the streaming heads' keys, and generate's
# cache_bytes is the plan's arithmetic; a window as long as the sequence
# changes nothing.
plans_equal_reference() {
    llama || return 1
    printf '{"sink": 2, "window": 5, "full": [[0, 1], [1, 0]]}' >mixed.json
    printf '{"sink": 0, "window": 3, "full": []}' >window.json
    printf '{"sink": 1, "window": 96, "full": []}' >wide.json
    local plan want prompt=1,2,3,4,5,6,7,8,9,10,11,12 E=4 # bytes of a cache element
    [[ "$("$HS" version)" == *double* ]] && E=8
    for plan in mixed.json window.json wide.json; do
        hs eval --model lr --data hay.bin --batch 2 --seq-len 48 --max-batches 3 --json \
            --kv-plan $plan
        expect_rc 0 "eval --kv-plan $plan" || return 1
        if ! under_asan; then # the torch references in the float build
            want=$(py "$HERE/kv_plan_reference.py" eval lr hay.bin $plan 2 48 3) || return 1
            close "$(jget out.txt loss)" "$want" 2e-5 || bad "$plan: eval $OUT, reference $want" ||
                return 1
        fi
        hs generate --model lr --prompt-ids $prompt --max-new 20 --json --kv-plan $plan
        expect_rc 0 "generate --kv-plan $plan" || return 1
        if ! under_asan; then
            want=$(py "$HERE/kv_plan_reference.py" generate lr $plan $prompt 20) || return 1
            expect_eq "$(jget out.txt new_ids | tr -d '[]')" "$want" "$plan: greedy ids" || return 1
        fi
        want=$(py "$HERE/kv_plan_reference.py" bytes lr $plan 32) || return 1
        expect_eq "$(jget out.txt cache_bytes)" "$((want / 4 * E))" "$plan: cache_bytes" || return 1
    done
}

# capture under a plan: a streaming head's maps are 0 outside its sinks and
# window, and sum to 1.
plan_maps() {
    llama || return 1
    printf '{"sink": 2, "window": 5, "full": [[0, 1]]}' >p.json
    hs capture --model lr --data hay.bin --batch 1 --seq-len 40 --max-batches 1 --out m.h5 \
        --kv-plan p.json
    expect_rc 0 "capture --kv-plan" || return 1
    py - m.h5 <<'PYEOF' || bad "$(tail -c 800 err.txt)"
import sys
import h5py
import numpy as np
f = h5py.File(sys.argv[1], "r")
t, s = np.arange(40)[:, None], np.arange(40)[None, :]
seen = (s <= t) & ((s < 2) | (s > t - 5))
for layer in (0, 1):
    a = f[f"layer_{layer:02d}"]["attn"][0]
    for h in range(4):
        streaming = not (layer == 0 and h // 2 == 1)
        allowed = seen if streaming else (s <= t)
        assert np.all(a[h][~allowed] == 0), (layer, h)
        assert np.allclose(a[h].sum(-1), 1, atol=1e-5), (layer, h)
PYEOF
}

# retrieval under a plan equals the reference: the planted copier keeps its
# accuracy while its induction head keeps every position, and loses it when
# that head streams (a window of 4 cannot reach the needle).
retrieval_under_a_plan() {
    planted || return 1
    printf '{"sink": 1, "window": 4, "full": [[1, 0]]}' >keep.json
    printf '{"sink": 1, "window": 4, "full": []}' >none.json
    local plan
    for plan in keep.json none.json; do
        hs retrieval --model pm --haystack pm/haystack.txt --needles pm/needles.jsonl \
            --lengths 40 --depths 0,50 --db $plan.db --kv-plan $plan --json
        expect_rc 0 "retrieval --kv-plan $plan" || return 1
        printf '%s\n' "$OUT" >$plan.out
    done
    under_asan && return 0
    py - "$HERE/retrieval_planted.py" <<'PYEOF' || bad "$(tail -c 1500 err.txt)"
import importlib.util, json, sqlite3, sys
spec = importlib.util.spec_from_file_location("retrieval_planted", sys.argv[1])
planted = importlib.util.module_from_spec(spec)
spec.loader.exec_module(planted)
for name in ("keep.json", "none.json"):
    want = planted.reference("pm", [40], [0.0, 50.0], set(), json.load(open(name)))
    got = dict(((l, h), v) for l, h, v in sqlite3.connect(name + ".db").execute(
        "select layer, head, value from head_metrics where metric = 'retrieval'"))
    for key, v in want["retrieval"].items():
        l, h = map(int, key.split(":"))
        assert abs(got[(l, h)] - v) < 1e-12, (name, key, got[(l, h)], v)
    acc = json.load(open(name + ".out"))["needle_accuracy"]
    assert abs(acc - want["needle_accuracy"]) < 1e-6, (name, acc, want)
    print(name, want["needle_accuracy"])
assert json.load(open("keep.json.out"))["needle_accuracy"] > 0
assert json.load(open("none.json.out"))["needle_accuracy"] == 0
PYEOF
}

plans_refused() {
    llama || return 1
    local m="--model lr --prompt-ids 1,2,3 --max-new 2"
    printf '{"sink": 1, "window": 4, "full": [[2, 0]]}' >a.json
    expect_refused 1 generate 'a.json: "full"[0] names layer 2 kv head 0, which the model lacks' \
        $m --kv-plan a.json || return 1
    printf '{"sink": 1, "window": 4, "full": [[0, 0], [1, 2]]}' >b.json
    expect_refused 1 generate '"full"[1] names layer 1 kv head 2' $m --kv-plan b.json || return 1
    printf '{"sink": 1, "window": 0, "full": []}' >c.json
    expect_refused 1 generate 'c.json: "window" must be an integer >= 1' $m --kv-plan c.json ||
        return 1
    printf '{"sink": 1, "window": 4, "full": [[0, 1], [0, 1]]}' >d.json
    expect_refused 1 generate '"full"[1] names layer 0 kv head 1 again' $m --kv-plan d.json ||
        return 1
    printf '{"sink": 1, "window": 4, "ful": []}' >e.json
    expect_refused 1 generate 'unknown key "ful"' $m --kv-plan e.json || return 1
    printf '{"sink": -1, "window": 4, "full": []}' >f.json
    expect_refused 1 eval '"sink" must be an integer >= 0' --model lr --data hay.bin \
        --kv-plan f.json || return 1
    printf '{"sink": 1, "window": 4, "full": [[0, 1.5]]}' >g.json
    expect_refused 1 capture '"full"[0] must be a pair' --model lr --data hay.bin --out x.h5 \
        --kv-plan g.json || return 1
    printf '{"sink": 1, "window": 4, "full": []}' >h.json
    expect_refused 1 generate 'the model has sliding windows of its own' \
        --model "$FIX/windows/model" --prompt-ids 1,2 --max-new 1 --kv-plan h.json || return 1
    expect_nofile x.h5 "a refused capture wrote its file"
}

# kv-plan ranks kv heads by retrieval score (ties to the lower layer, kv
# head) and keeps ceil(p x 4) of the planted model's 4: the plan it writes
# runs retrieval, which keeps the accuracy with the planted head full.
kv_plan_from_a_run() {
    planted || return 1
    hs retrieval --model pm --haystack pm/haystack.txt --needles pm/needles.jsonl \
        --lengths 40 --depths 0,50 --db k.db
    expect_rc 0 "retrieval" || return 1
    local p want
    for p in 0:'[]' 0.25:'[[1,0]]' 0.3:'[[0,1],[1,0]]' 0.5:'[[0,1],[1,0]]' \
        1:'[[0,0],[0,1],[1,0],[1,1]]'; do
        want=${p#*:} p=${p%%:*}
        hs kv-plan --db k.db --run 1 --keep-fraction "$p" --sink 1 --window 4 --out "k$p.json"
        expect_rc 0 "kv-plan --keep-fraction $p" || return 1
        expect_eq "$(jget "k$p.json" full)" "$want" "kv heads kept at $p" || return 1
    done
    expect_eq "$(jget k0.json sink),$(jget k0.json window)" "1,4" "sink and window" || return 1
    hs retrieval --model pm --haystack pm/haystack.txt --needles pm/needles.jsonl \
        --lengths 40 --depths 0,50 --db k.db --kv-plan k0.25.json --json
    expect_rc 0 "retrieval under the written plan" || return 1
    expect_eq "$(jget out.txt needle_accuracy)" "0.666667" "accuracy with the planted head full" ||
        return 1
    expect_refused 2 kv-plan "--keep-fraction 1.5" --db k.db --run 1 --keep-fraction 1.5 \
        --out x.json || return 1
    expect_refused 2 kv-plan "--run 9: the run records no heads" --db k.db --run 9 \
        --keep-fraction 0.5 --out x.json || return 1
    expect_refused 2 kv-plan "option --window: '0' is not an integer >= 1" --db k.db --run 1 --keep-fraction 0.5 \
        --window 0 --out x.json || return 1
    expect_nofile x.json "a refused kv-plan wrote its file"
}

# The report's long-context section: the retrieval scores, the causal
# check, one curve point per run of the model and haystack (KV bytes,
# needle accuracy, the haystack's loss) and the sink grid of a patterns run.
report_long_context() {
    planted || return 1
    local p
    rm -f rep.db
    hs retrieval --model pm --haystack pm/haystack.txt --needles pm/needles.jsonl --lengths 40 \
        --depths 0,50 --db rep.db --mask-top 1 --seed 2
    expect_rc 0 "retrieval" || return 1
    for p in 0.25 0; do
        hs kv-plan --db rep.db --run 1 --keep-fraction $p --sink 1 --window 4 --out r$p.json &&
            hs retrieval --model pm --haystack pm/haystack.txt --needles pm/needles.jsonl \
                --lengths 40 --depths 0,50 --db rep.db --kv-plan r$p.json
        expect_rc 0 "retrieval --kv-plan r$p.json" || return 1
    done
    hs patterns --model pm --text pm/haystack.txt --db rep.db --seq-len 64 --max-batches 1
    expect_rc 0 "patterns" || return 1
    hs report --db rep.db --out rep
    expect_rc 0 "report" || return 1
    local page
    page=$(<rep/index.html)
    expect_grep "$page" '<h2 id="long-context">' "the section" || return 1
    expect_grep "$page" 'retrieval_run1.png' "the scores' grid" || return 1
    expect_grep "$page" 'with the top heads masked 0.000' "the causal check" || return 1
    expect_grep "$page" 'kv_budget.png' "the curve" || return 1
    expect_grep "$page" 'sink_run4.png' "the sinks' grid" || return 1
    [ "$(grep -c '<tr><td>[123]</td><td>[0-9.]* MiB</td>' rep/index.html)" = 3 ] ||
        bad "the curve's table does not hold the three runs" || return 1
    expect_file rep/kv_budget.png
}

# Under ASan: the planted run, the plans' commands and the refusals (every C path the others
# take); the torch references, the report and the variations in the float build. The fast
# tier's ASan runs the refusals; the slow tier's clang ASan all four.
under_asan && SKIP="${SKIP:-} report_long_context kv_plan_from_a_run byte_level_without_a_tokenizer
    depth_edges plan_maps retrieval_under_a_plan"
fast_asan && SKIP="$SKIP planted_retrieval_equals_reference plans_equal_reference"
run_checks planted_retrieval_equals_reference kv_plan_from_a_run report_long_context \
    byte_level_without_a_tokenizer depth_edges retrieval_refuses plans_equal_reference \
    plan_maps retrieval_under_a_plan plans_refused
