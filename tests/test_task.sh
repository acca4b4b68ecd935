#!/usr/bin/env bash
# Labelled tasks end to end (SPEC §16): `eval --task` on the classifier
# fixtures (tests/fixtures/classifiers/: BERT, RoBERTa, GPT-2, Llama) gives
# the task loss and metrics that an independent Python computes from the
# PyTorch forwards of scripts/oracle/gen_classifiers.py and the metric
# definitions of scripts/oracle/gen_task_metrics.py; the numbers do not
# depend on the batch size; --label-map permutes the outputs; labels by
# name; bad task files and options are refused naming the file and line.
SUITE=task
. "$(dirname "$0")/lib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
C=$FIX/classifiers

# task NAME VOCAB K N [PAD]: NAME.jsonl, N id lines of 3..8 tokens below
# VOCAB - 1 (a decoder's: the pad id VOCAB - 1 inside some), labels 0..K-1,
# every third by its id2label name
task() {
    py - "$@" <<'PY'
import json, random, sys
name, V, K, N = sys.argv[1], *map(int, sys.argv[2:5])
pad = int(sys.argv[5]) if len(sys.argv) > 5 else None
r = random.Random(N * 7 + K)
with open(name + ".jsonl", "w") as f:
    for i in range(N):
        ids = [r.randrange(3, V - 1) for _ in range(r.randrange(3, 9))]
        if pad is not None and i % 4 == 1:
            ids[1] = pad  # pad = eos inside a text
        label = r.randrange(K)
        f.write(json.dumps({"ids": ids, "label": label if i % 3 else "class_%d" % label}) + "\n")
        if i == 5:
            f.write("\n")  # a blank line is no example
PY
}

# oracle MODEL TASK [MAP] ...: for each triple (MAP "-" for none), a line
# of the JSON eval --task must print, from PyTorch (one torch process)
oracle() {
    "$PY" - "$HERE/../scripts/oracle" "$@" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
import gen_classifiers as G
import gen_task_metrics as M


def numbers(d, path, perm):
    c = json.load(open(d + "/config.json"))
    W = G.read_st(d + "/model.safetensors")
    K = len(c["id2label"])
    names = {v: int(k) for k, v in c["id2label"].items()}
    rows = [json.loads(l) for l in open(path) if l.strip()]
    enc = c["model_type"] in ("bert", "roberta")
    out, lab = [], []
    for r in rows:  # one example at a time: no padding at all
        idx = torch.tensor([r["ids"]])
        if enc:
            h = G.encoder_hidden(W, c, idx, c["model_type"] == "roberta")
            dense, o = (("bert.pooler.dense", "classifier") if c["model_type"] == "bert"
                        else ("classifier.dense", "classifier.out_proj"))
            x = torch.tanh(h[:, 0] @ W[dense + ".weight"].T + W[dense + ".bias"])
            y = x @ W[o + ".weight"].T + W[o + ".bias"]
        else:
            h = G.gpt2_hidden(W, c, idx) if c["model_type"] == "gpt2" else G.llama_hidden(W, c, idx)
            y = h[0, G.pool_last(idx, c["pad_token_id"])] @ W["score.weight"].T
        y = y.flatten().tolist()
        if perm:  # output j scores the task's label perm[j]
            z = [0.0] * K
            for j in range(K):
                z[perm[j]] = y[j]
            y = z
        out.append(y)
        lab.append(r["label"] if isinstance(r["label"], int) else names[r["label"]])
    n = len(out)
    loss = [M.loss(0, o, y) for o, y in zip(out, lab)]
    mean = sum(loss) / n
    res = {"task_loss": mean,
           "task_loss_stderr": (sum((x - mean) ** 2 for x in loss) / (n - 1)) ** 0.5 / n ** 0.5}
    for m in ("accuracy", "f1", "mcc"):
        res[m] = M.metric(m, 0, out, lab, K)
        res[m + "_stderr"] = M.jackknife([M.metric(m, 0, out[:i] + out[i + 1:],
                                                   lab[:i] + lab[i + 1:], K) for i in range(n)])
    res["n"] = n
    return res


a = sys.argv[2:]
for d, path, perm in zip(a[0::3], a[1::3], a[2::3]):
    print(json.dumps(numbers(d, path, None if perm == "-" else [int(x) for x in perm.split(",")])))
PY
}

# same GOT WANT: every number of WANT in GOT within 2e-5 (float) relative
same() {
    "$PY" -c 'import json, sys
got, want = json.loads(sys.argv[1]), json.loads(sys.argv[2])
bad = [k for k in want if abs(got[k] - want[k]) > 2e-5 * max(1, abs(want[k]))]
sys.exit("%s: %s / %s" % (bad, [got[k] for k in bad], [want[k] for k in bad]) if bad else 0)' "$1" "$2"
}

classifiers_equal_torch() {
    local m V K b want args=() all i=0
    local models="bert:40:3 roberta:40:2 gpt2:48:3 llama:48:4"
    for m in $models; do
        IFS=: read -r m V K <<<"$m"
        task "$m" "$V" "$K" 13 $([ "$m" = gpt2 ] || [ "$m" = llama ] && echo $((V - 1)))
        args+=("$C/$m" "$m.jsonl" -)
    done
    args+=("$C/bert" bert.jsonl 2,0,1)
    all=$(oracle "${args[@]}") || bad "the oracle failed" || return 1
    mapfile -t want <<<"$all"
    for m in $models; do
        m=${m%%:*}
        for b in 1 4 13; do
            hs eval --model "$C/$m" --task "$m.jsonl" --batch $b --seq-len 8 --json
            expect_rc 0 "eval --task $m --batch $b" || return 1
            same "$OUT" "${want[$i]}" || bad "$m --batch $b: $OUT, torch ${want[$i]}" || return 1
        done
        expect_grep "$OUT" '"n":13' "$m: the blank line is no example" || return 1
        i=$((i + 1))
    done
    hs eval --model "$C/bert" --task bert.jsonl --label-map 2,0,1 --seq-len 8 --json
    expect_rc 0 "--label-map" && same "$OUT" "${want[4]}" || bad "--label-map 2,0,1: $OUT" ||
        return 1
    hs eval --model "$C/bert" --task bert.jsonl --metric mcc --seq-len 8
    expect_rc 0 "--metric mcc" && expect_grep "$OUT" "mcc " "the headline first"
}

bad_tasks_are_refused() {
    task t 40 3 4
    printf '{"ids": [5, 6], "label": "no_such_class"}\n' >name.jsonl
    printf '{"ids": [5, 6], "label": 0}\n{"ids": [5, 6], "label": 3}\n' >range.jsonl
    printf '{"ids": [5, 6, 7, 8, 9, 10, 11, 12, 13], "label": 0}\n' >long.jsonl
    printf '{"text": "a b", "text_pair": "c", "label": 0}\n' >pair.jsonl
    printf '{"ids": [5, 6], "label": 0}\n{"ids": [5, 6], "label": [0, 1, 0]}\n' >mixed.jsonl
    printf '{"ids": [5, 6], "label": 0.5}\n' >regress.jsonl
    printf '{"ids": [5, 6], "label": 0}\n{"ids": [5, 6], "label": 1\n' >json.jsonl
    printf '{"text": "hello", "label": 0}\n' >text.jsonl
    local m="--model $C/bert --seq-len 8"
    expect_refused 1 eval "name.jsonl:1: label \"no_such_class\" is none of id2label's names" $m \
        --task name.jsonl || return 1
    expect_refused 1 eval "range.jsonl:2: \"label\" must be a class 0 .. 2" $m --task range.jsonl ||
        return 1
    expect_refused 1 eval "long.jsonl:1: 9 tokens, longer than --seq-len 8 (an ids line is never" \
        $m --task long.jsonl --truncate || return 1
    expect_refused 1 eval "pair.jsonl:1: \"text_pair\"" $m --task pair.jsonl || return 1
    expect_refused 1 eval "mixed.jsonl:2:" $m --task mixed.jsonl || return 1
    expect_refused 1 eval "regress.jsonl:1: a regression label" $m --task regress.jsonl || return 1
    expect_refused 1 eval "json.jsonl:2" $m --task json.jsonl || return 1
    expect_refused 1 eval "text.jsonl:1: a \"text\" line needs a tokenizer" $m --task text.jsonl ||
        return 1
    expect_refused 1 eval "--metric pearson: not a metric of this task" $m --task t.jsonl \
        --metric pearson || return 1
    expect_refused 2 eval "--label-map" $m --task t.jsonl --label-map 0,x || return 1
    expect_refused 1 eval "--label-map: a permutation" $m --task t.jsonl --label-map 0,0,1 ||
        return 1
    expect_refused 2 eval "does not apply with --task" $m --task t.jsonl --data t.jsonl || return 1
    expect_refused 2 eval "--metric needs --task" --model "$C/bert" --data t.jsonl --metric f1 ||
        return 1
    expect_refused 1 eval "no classification head" --model "$FIX/models/gpt2_tiny" --task t.jsonl ||
        return 1
    # a classifier has no language-model head
    expect_refused 1 eval "a classifier (a task head, no language-model head)" --model "$C/gpt2" \
        --data "$FIX/models/gpt2_tiny/eval.bin" --batch 1 --seq-len 8
}

# Under ASan the task files' refusals run; the numbers against torch in the
# float build (the same code, and the unit suites' classifiers under ASan).
under_asan && SKIP="${SKIP:-} classifiers_equal_torch"
run_checks classifiers_equal_torch bad_tasks_are_refused
