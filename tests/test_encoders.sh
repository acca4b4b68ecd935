#!/bin/bash
# The encoders of SPEC §14 end to end: train --preset bert (and roberta)
# learns with the masked-LM loss; eval's every:K loss on the torch oracle's
# checkpoint equals torch's; ablate (fast and naive alike), importance,
# prune and patterns run on a BERT-shaped model over padded documents, with
# cls, sep and punct; capture writes full maps that patterns --maps, maps,
# view and report read, [CLS]/[SEP] labelled; induction gives scores and no
# causal check; the commands that need a causal LM refuse, saying why.
# Usage: tests/test_encoders.sh HEADSCOPE_BINARY FIXTURE_DIR [ONLY=checks]
SUITE=encoders
. "$(dirname "$0")/lib.sh"
BERT_FIX="$FIX/encoders/bert"

# docs.bin: documents of 16 ids framed by [CLS] 257 ... [SEP] 258 and padded
# with [PAD] 256 (the bert preset's byte-level ids), text bytes between.
data() {
    [ -s docs.bin ] && return 0
    py - <<'PYEOF' || bad "could not write docs.bin" || return 1
import random, struct
r = random.Random(3)
words = b"the cat sat on a mat, and a dog ran. then it slept."
ids = []
for d in range(160):
    n = r.randrange(6, 15)
    start = r.randrange(len(words) - n)
    body = list(words[start:start + n])
    ids += [257] + body + [258] + [256] * (16 - n - 2)
ids.append(257)
with open("docs.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253)))
    f.write(struct.pack("<%dH" % len(ids), *ids))
PYEOF
}

# bert: a small bert preset model trained a few steps on docs.bin
model() {
    [ -s bert/model.safetensors ] && return 0
    data || return 1
    hs train --preset bert d_model=32 n_head=4 n_ctx=32 --data docs.bin --out bert --steps 30 \
        --batch 8 --seq-len 16 --lr 3e-3 --json
    expect_rc 0 "train --preset bert" || return 1
}

train_preset_bert_learns() {
    model || return 1
    hs eval --model bert --data docs.bin --seq-len 16 --json
    expect_rc 0 "eval" || return 1
    # ln 260 = 5.56 nats is chance; a few steps must beat it clearly
    close "$(jget out.txt loss)" 2.5 2.3 || bad "masked-LM loss $(jget out.txt loss) not below 4.8" ||
        return 1
    hs train --preset roberta d_model=32 n_ctx=32 --data docs.bin --out roberta --steps 3 \
        --batch 4 --seq-len 16 --json
    expect_rc 0 "train --preset roberta" || return 1
    expect_eq "$(jget roberta/config.json max_position_embeddings)" 290 \
        "RoBERTa's table: n_ctx + pad_token_id + 1" || return 1
    # a checkpoint whose config asks for dropout trains without it, and says so
    py - <<'PYEOF' || return 1
import json
c = json.load(open("bert/config.json")); c["hidden_dropout_prob"] = 0.1
json.dump(c, open("bert/config.json", "w"))
PYEOF
    hs train --init bert --data docs.bin --out bert2 --steps 1 --batch 2 --seq-len 16
    expect_rc 0 "train --init" || return 1
    expect_grep "$ERR" "no dropout is applied" "the dropout note"
}

# --mlm-mask every:3 on the oracle's tokens: torch's loss and stderr
eval_every3_equals_torch() {
    mkdir -p fix && cp "$BERT_FIX"/* fix/ || return 1
    py - "$FIX/encoders.txt" <<'PYEOF' || bad "could not read the oracle" || return 1
import json, struct, sys
lines = open(sys.argv[1]).read().split("\n")
i = lines.index("case bert")
want = {}
while lines[i] != "end":
    if lines[i].startswith("tensor "):
        want[lines[i].split()[1]] = lines[i + 1]
    i += 1
ids = [int(float(v)) for v in want["tokens"].split()]
ids.append(ids[0])
with open("fix.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253)))
    f.write(struct.pack("<%dH" % len(ids), *ids))
open("want.txt", "w").write(want["every3_loss"] + " " + want["every3_stderr"] + "\n")
PYEOF
    # the fixture's config.json names no mask token and it has no tokenizer
    expect_refused 1 eval "mask_token_id" --model fix --data fix.bin --batch 2 --seq-len 8 || return 1
    py -c 'import json; c = json.load(open("fix/config.json")); c["mask_token_id"] = 4; \
c["cls_token_id"] = 2; c["sep_token_id"] = 3; c["unk_token_id"] = 1; \
json.dump(c, open("fix/config.json", "w"))'
    hs eval --model fix --data fix.bin --batch 2 --seq-len 8 --mlm-mask every:3 --json
    expect_rc 0 "eval --mlm-mask every:3" || return 1
    read -r loss se <want.txt
    close "$(jget out.txt loss)" "$loss" 1e-5 || bad "loss $(jget out.txt loss), torch $loss" || return 1
    close "$(jget out.txt stderr)" "$se" 1e-5 || bad "stderr $(jget out.txt stderr), torch $se" ||
        return 1
    expect_eq "$(jget out.txt tokens)" 3 "the chosen positions"
}

analyses_on_padded_documents() {
    model || return 1
    local small=(--batch 4 --seq-len 16 --max-batches 3)
    hs ablate --model bert --data docs.bin --db a.db "${small[@]}" --json
    expect_rc 0 "ablate" || return 1
    hs ablate --model bert --data docs.bin --db a.db "${small[@]}" --naive --json
    expect_rc 0 "ablate --naive" || return 1
    local diff
    diff=$(sqlite3 a.db "select max(abs(f.value - n.value)) from head_metrics f join head_metrics n
        using (layer, head, metric) where f.run_id = 1 and n.run_id = 2")
    close "$diff" 0 1e-6 || bad "fast and naive ablation differ by $diff" || return 1
    expect_eq "$(sqlite3 a.db "select count(*) from head_metrics where run_id = 1 and metric like 'loss_delta_%'")" \
        24 "2 layers x 4 heads x 3 kinds" || return 1
    hs importance --model bert --data docs.bin --db a.db "${small[@]}" --mlm-prob 0.3 --seed 4 --json
    expect_rc 0 "importance" || return 1
    hs prune --model bert --data docs.bin --db a.db "${small[@]}" --step-percent 25 --max-percent 50 \
        --out pruned --structural --json
    expect_rc 0 "prune --structural" || return 1
    # BERT's pruned heads are written as transformers writes them (test_pruned_heads.sh)
    expect_eq "$(jget pruned/config.json model_type)" bert "the pruned model is a BERT" || return 1
    expect_grep "$(jget pruned/config.json pruned_heads)" "[" "with pruned_heads" || return 1
    hs eval --model pruned --data docs.bin --seq-len 16 --max-batches 2 --json
    expect_rc 0 "eval of the pruned model" || return 1
    hs patterns --model bert --data docs.bin --db a.db "${small[@]}" --control --json
    expect_rc 0 "patterns" || return 1
    local run
    run=$(jget out.txt run_id)
    expect_eq "$(sqlite3 a.db "select count(distinct metric) from head_metrics where run_id = $run")" \
        24 "10 statistics, sink and sink_rate, and their controls" || return 1
    # every document starts with [CLS]: first_token and cls are the same mass
    diff=$(sqlite3 a.db "select max(abs(a.value - b.value)) from head_metrics a join head_metrics b
        using (run_id, layer, head) where run_id = $run and a.metric = 'cls' and b.metric = 'first_token'")
    close "$diff" 0 1e-9 || bad "cls and first_token differ by $diff" || return 1
}

maps_of_an_encoder() {
    model || return 1
    hs capture --model bert --data docs.bin --batch 2 --seq-len 16 --max-batches 2 --out m.h5 --db c.db
    expect_rc 0 "capture" || return 1
    # full maps: a query attends to later keys too
    py - <<'PYEOF' || bad "the maps are not bidirectional: $(cat py.txt)" || return 1
import h5py, sys
f = h5py.File("m.h5", "r")
a = f["layer_00/attn"][0, 0]
ok = float(a[0, 1:].sum()) > 1e-3 and abs(float(a[1].sum()) - 1) < 1e-5
print(f["token_text"][0][0], file=open("py.txt", "w"))
# docs/files.md: h5py 3 reads the strings as bytes, .asstr() as str
ok = ok and isinstance(f["token_text"][0][0], bytes) and f["token_text"].asstr()[0, 0] == "[CLS]"
sys.exit(0 if ok and f["token_text"][0][0].decode() == "[CLS]" else 1)
PYEOF
    hs maps m.h5
    expect_rc 0 "maps" || return 1
    expect_grep "$OUT" "[CLS]" "the tokens labelled" || return 1
    hs patterns --maps m.h5 --db c.db --json
    expect_rc 0 "patterns --maps" || return 1
    hs patterns --model bert --data docs.bin --db c.db --batch 2 --seq-len 16 --max-batches 2 --json
    expect_rc 0 "patterns" || return 1
    local diff
    diff=$(sqlite3 c.db "select max(abs(a.value - b.value)) from head_metrics a join head_metrics b
        using (layer, head, metric) where a.run_id = 2 and b.run_id = 3")
    close "$diff" 0 1e-5 || bad "patterns from the maps and from the forward differ by $diff" ||
        return 1
    hs induction --model bert --db c.db --seq-len 6 --samples 4
    expect_rc 0 "induction" || return 1
    expect_grep "$OUT" "no causal check" "induction says why" || return 1
    hs view --maps m.h5 --out viewer
    expect_rc 0 "view" || return 1
    hs report --db c.db --out rep
    expect_rc 0 "report" || return 1
    expect_grep "$(cat rep/index.html)" "No causal check" "the report's induction section" || return 1
    expect_grep "$(cat rep/index.html)" "[CLS]" "the report's tokens"
}

causal_only_commands_refuse() {
    model || return 1
    printf '{"clean_ids": [257, 10, 20, 259], "corrupt_ids": [257, 11, 20, 259], "answer_id": 40, "wrong_id": 41}\n' >p.jsonl
    expect_refused 1 generate "encoder" --model bert --prompt-ids 1,2 --max-new 4 || return 1
    expect_refused 1 logit-lens "next-token logits" --model bert --data docs.bin --db r.db || return 1
    expect_refused 1 dla "MLM head" --model bert --prompts p.jsonl --db r.db || return 1
    expect_refused 1 atp "attends both ways" --model bert --prompts p.jsonl --db r.db || return 1
    expect_refused 1 circuit "post-norm" --model bert --prompts p.jsonl --db r.db --method eap ||
        return 1
    expect_refused 2 experiment "next-token" head-count --preset bert --data docs.bin --db r.db \
        --heads 2,4 --steps 2 || return 1
    expect_refused 1 induction "ICL score" --model bert --db r.db --data docs.bin || return 1
    expect_refused 2 eval "encoders (bert, roberta) only" --model "$FIX/models/gpt2_tiny" \
        --data "$FIX/models/gpt2_tiny/eval.bin" --batch 1 --seq-len 8 --mlm-prob 0.2 || return 1
    expect_refused 2 ablate "--mlm-prob" --model bert --data docs.bin --db r.db --mlm-prob 1.5 ||
        return 1
    # patch runs, its logit difference at the last position ([MASK] here)
    hs patch --model bert --prompts p.jsonl --db r.db --json
    expect_rc 0 "patch on an encoder" || return 1
    mkdir -p rel && cp "$BERT_FIX"/* rel/ &&
        sed -i 's/"absolute"/"relative_key"/' rel/config.json || return 1
    expect_refused 1 info "relative_key" --model rel
}

# headless SRC DST: SRC without its masked-LM head's tensors (a
# sentence-embedding model as BertModel / RobertaModel save it)
headless() {
    mkdir -p "$2" && cp "$1/config.json" "$2/" || return 1
    py - "$1/model.safetensors" "$2/model.safetensors" <<'PYEOF'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head, data = json.loads(raw[8:8 + n]), raw[8 + n:]
out, blobs, at = {}, [], 0
for k, t in head.items():
    if k == "__metadata__" or k.startswith("cls.") or k.startswith("lm_head."):
        continue
    a, b = t["data_offsets"]
    out[k] = dict(t, data_offsets=[at, at + b - a])
    blobs.append(data[a:b])
    at += b - a
h = json.dumps(out).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PYEOF
}

# SPEC §16: an encoder whose masked-LM head is absent (or whose config names
# BertModel) is the encoder alone: capture's maps are the full model's,
# patterns runs; what needs logits refuses saying so, recording no run; a
# task head not implemented yet is refused naming it.
headless_encoders_run_without_logits() {
    model || return 1
    headless bert sent || return 1
    mkdir -p arch && cp bert/* arch/ &&
        sed -i 's/"BertForMaskedLM"/"BertModel"/' arch/config.json || return 1
    local d
    for d in bert sent arch; do
        hs capture --model $d --data docs.bin --batch 2 --seq-len 16 --max-batches 2 --out $d.h5
        expect_rc 0 "capture $d" || return 1
    done
    py - <<'PYEOF' || bad "the headless models' maps differ from the full model's" || return 1
import h5py, numpy as np, sys
full = h5py.File("bert.h5", "r")
for other in ("sent.h5", "arch.h5"):
    f = h5py.File(other, "r")
    for k in ("layer_00/attn", "layer_01/attn", "tokens"):
        if not np.array_equal(full[k][()], f[k][()]):
            sys.exit(1)
PYEOF
    hs info --model sent --json
    expect_grep "$OUT" '"headless":true' "info on a headless encoder" || return 1
    hs patterns --model sent --data docs.bin --db p.db --batch 2 --seq-len 16 --max-batches 2
    expect_rc 0 "patterns on a headless encoder" || return 1
    printf '{"clean_ids": [257, 10, 20, 258], "corrupt_ids": [257, 11, 20, 258], "answer_id": 40, "wrong_id": 41}\n' >p.jsonl
    expect_refused 1 eval "headless encoder" --model sent --data docs.bin --batch 2 --seq-len 16 ||
        return 1
    expect_refused 1 ablate "headless encoder" --model arch --data docs.bin --db r.db || return 1
    expect_refused 1 patch "headless encoder" --model sent --prompts p.jsonl --db r.db || return 1
    expect_refused 1 train "headless encoder" --init sent --data docs.bin --out t --steps 1 \
        --batch 2 --seq-len 16 || return 1
    expect_nofile r.db "a refused study's index" || return 1
    headless "$FIX/encoders/roberta" rsent || return 1
    py -c 'import struct
ids = [3 + i * 7 % 36 for i in range(200)]
open("small.bin", "wb").write(struct.pack("<256i", 20240520, 1, len(ids), *[0] * 253) +
                              struct.pack("<%dH" % len(ids), *ids))'
    hs capture --model rsent --data small.bin --batch 2 --seq-len 8 --max-batches 1 --out r.h5
    expect_rc 0 "capture on a headless roberta" || return 1
    mkdir -p task && cp bert/* task/ &&
        sed -i 's/"BertForMaskedLM"/"BertForTokenClassification"/' task/config.json || return 1
    expect_refused 1 info "BertForTokenClassification: this task head is not implemented" --model task
}

run_checks train_preset_bert_learns eval_every3_equals_torch analyses_on_padded_documents \
    maps_of_an_encoder causal_only_commands_refuse headless_encoders_run_without_logits
