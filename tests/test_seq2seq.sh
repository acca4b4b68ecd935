#!/bin/bash
# The encoder-decoders of SPEC §17 end to end: eval --pairs on the torch
# oracle's checkpoints (scripts/oracle/gen_seq2seq.py) equals torch's pooled
# loss and stderr at any --batch; text pairs tokenize as their ids (eos
# appended once, whether the tokenizer adds it or not) and capture with
# both sides' token strings; capture --pairs writes every map of every type
# as torch computes it; generate --source
# stops after eos, its text = its ids; eval --bleu scores the greedy
# outputs; ablate --pairs keys its rows by attention type; importance and
# prune --pairs measure and prune heads of every type; train --pairs
# learns a reversal; info shows the
# two stacks; bad pairs and the commands that run one stack are refused, saying
# why.
# Usage: tests/test_seq2seq.sh HEADSCOPE_BINARY FIXTURE_DIR [ONLY=checks]
SUITE=seq2seq
. "$(dirname "$0")/lib.sh"
S2S="$FIX/seq2seq"

# want NAME KEY: the fixture's value of tensor KEY (one number) of case NAME
want() {
    awk -v n="$1" -v k="$2" '$1 == "case" { c = $2 } c == n && $1 == "tensor" && $2 == k {
        getline; print; exit }' "$FIX/seq2seq.txt"
}

# close A B TOL WHAT: |A - B| <= TOL |B|
close() {
    py -c 'import sys; a, b, t = map(float, sys.argv[1:4]); sys.exit(abs(a - b) > t * abs(b))' \
        "$1" "$2" "$3" || bad "$4: $1, expected $2"
}

eval_pairs_equals_torch() {
    local n loss
    for n in t5 flan_t5 bart marian; do
        for b in 1 2; do
            hs eval --model "$S2S/$n" --pairs "$S2S/$n/pairs.jsonl" --batch $b --json
            expect_rc 0 "eval --pairs $n --batch $b" || return 1
            loss=$(jget out.txt loss) || return 1
            close "$loss" "$(want $n loss)" 2e-6 "$n loss at --batch $b" || return 1
            close "$(jget out.txt stderr)" "$(want $n stderr)" 2e-5 "$n stderr" || return 1
            expect_eq "$(jget out.txt tokens)" 11 "$n target tokens" || return 1
            expect_eq "$(jget out.txt sequences)" 2 "$n pairs" || return 1
        done
    done
    hs eval --model "$S2S/t5" --pairs "$S2S/t5/pairs.jsonl"
    expect_grep "$OUT" "loss 3.82" "eval --pairs text output" || return 1
}

# A Unigram tokenizer.json over the t5 fixture's 40 ids: <pad> 0, </s> 1,
# <unk> 2, then ▁a .. ▁z; with_eos: its post-processor appends </s>.
tokenizer() {
    py - "$1" "$2" <<'PYEOF'
import json, sys
out, with_eos = sys.argv[1], sys.argv[2] == "1"
vocab = [["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0]]
vocab += [["\u2581" + chr(ord("a") + i), -1.0 - i / 100] for i in range(26)]
vocab += [["x%d" % i, -20.0] for i in range(40 - len(vocab))]
meta = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
tok = {"version": "1.0", "truncation": None, "padding": None,
       "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False,
                         "rstrip": False, "normalized": False, "special": True}
                        for i, c in enumerate(["<pad>", "</s>", "<unk>"])],
       "normalizer": None, "pre_tokenizer": meta, "post_processor": None, "decoder": meta,
       "model": {"type": "Unigram", "unk_id": 2, "vocab": vocab, "byte_fallback": False}}
if with_eos:
    tok["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A", "type_id": 0}},
                   {"SpecialToken": {"id": "</s>", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "</s>", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 0}},
                 {"SpecialToken": {"id": "</s>", "type_id": 0}}],
        "special_tokens": {"</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}}
json.dump(tok, open(out, "w"))
PYEOF
}

text_pairs_tokenize_as_their_ids() {
    mkdir -p t5 && cp "$S2S/t5/config.json" "$S2S/t5/model.safetensors" t5/ || return 1
    printf '{"source": "a b c d", "target": "e f"}\n{"source": "g h", "target": "i j k"}\n' \
        >text.jsonl
    # ▁a is id 3: "a b c d" -> 3 4 5 6 and eos 1
    printf '%s\n%s\n' '{"source_ids": [3, 4, 5, 6, 1], "target_ids": [7, 8, 1]}' \
        '{"source_ids": [9, 10, 1], "target_ids": [11, 12, 13, 1]}' >ids.jsonl
    hs eval --model t5 --pairs ids.jsonl --json
    expect_rc 0 "eval of the ids pairs" || return 1
    local want_loss
    want_loss=$(jget out.txt loss) || return 1
    for eos in 0 1; do
        tokenizer t5/tokenizer.json $eos || bad "could not write tokenizer.json" || return 1
        hs eval --model t5 --pairs text.jsonl --json
        expect_rc 0 "eval of the text pairs (post-processor eos: $eos)" || return 1
        expect_eq "$(jget out.txt loss)" "$want_loss" "text pairs (eos $eos) = their ids" ||
            return 1
        expect_eq "$(jget out.txt tokens)" 7 "target tokens with eos $eos" || return 1
    done
    # capture of text pairs: the token strings of both sides, the masks
    hs capture --model t5 --pairs text.jsonl --out text.h5
    expect_rc 0 "capture of text pairs" || return 1
    py - <<'PYEOF' || bad "capture --pairs token strings and masks" || return 1
import h5py
f = h5py.File("text.h5", "r")
src = [[x.decode() for x in row] for row in f["source_token_text"][()]]
tgt = [[x.decode() for x in row] for row in f["target_token_text"][()]]
assert src == [[" a", " b", " c", " d", "</s>"], [" g", " h", "</s>", "<pad>", "<pad>"]], src
assert tgt == [["<pad>", " e", " f", "<pad>"], ["<pad>", " i", " j", " k"]], tgt
assert (f["source_tokens_text"][()] == f["source_token_text"][()]).all()
assert f["target_mask"][()].tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
assert f["source_mask"][()].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
PYEOF
    hs maps text.h5
    expect_grep "$OUT" "cross  1     [2, 4, 4, 5]" "maps: the cross maps as target rows x source keys" ||
        return 1
    expect_refused 1 plot "holds an encoder-decoder's maps" map --maps text.h5 --layer 0 \
        --head 0 --out m.png || return 1
}

info_shows_the_stacks() {
    hs info --model "$S2S/flan_t5"
    expect_rc 0 "info on t5" || return 1
    expect_grep "$OUT" "encoder of 2 layers, then a decoder of 3 with cross-attention" \
        "info's stacks" || return 1
    expect_grep "$OUT" "relative position buckets" "info's features" || return 1
    hs info --model "$S2S/bart" --batch 2 --seq-len 8
    expect_grep "$OUT" "memory plan  not computed for an encoder-decoder" "info's plan" || return 1
    hs info --model "$S2S/marian" --json
    expect_eq "$(jget out.txt decoder_layers)" 3 "info --json decoder_layers" || return 1
    expect_eq "$(jget out.txt positional)" sinusoid "marian's positions" || return 1
    expect_eq "$(jget out.txt activation)" silu "marian's swish" || return 1
}

bad_pairs_and_one_stack_commands_refuse() {
    printf '{"source_ids": [3, 4, 2]}\n' >half.jsonl
    expect_refused 1 eval "half.jsonl:1: a pair has \"target\"" --model "$S2S/bart" \
        --pairs half.jsonl || return 1
    printf '{"source_ids": [3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3], "target_ids": [3, 2]}\n' \
        >long.jsonl
    expect_refused 1 eval "longer than the model's 12 positions" --model "$S2S/bart" \
        --pairs long.jsonl || return 1
    expect_refused 1 eval "longer than --seq-len 4" --model "$S2S/t5" --seq-len 4 \
        --pairs "$S2S/t5/pairs.jsonl" || return 1
    expect_refused 1 eval "need an encoder-decoder model" --model "$FIX/models/gpt2_tiny" \
        --pairs "$S2S/t5/pairs.jsonl" || return 1
    py -c 'import struct
ids = [3 + i % 30 for i in range(300)]
open("d.bin", "wb").write(struct.pack("<256i", 20240520, 1, len(ids), *[0] * 253) +
                          struct.pack("<%dH" % len(ids), *ids))'
    expect_refused 1 eval "an encoder-decoder model (t5)" --model "$S2S/t5" --data d.bin \
        --batch 2 --seq-len 8 || return 1
    expect_refused 1 capture "encoder-decoder" --model "$S2S/bart" --data d.bin --batch 2 \
        --seq-len 8 --out m.h5 || return 1
    expect_nofile m.h5 "a refused capture's file" || return 1
    expect_refused 1 generate "--max-new 13 exceeds the model's 12 decoder positions" \
        --model "$S2S/marian" --source-ids 3,4 --max-new 13 || return 1
}

# The fixture's gen1 of flan_t5: pair 1's source decodes to [start] 35 3 eos.
generate_source_stops_after_eos() {
    hs generate --model "$S2S/flan_t5" --source-ids 22,19,10,29,36,1 --json
    expect_rc 0 "generate --source-ids" || return 1
    expect_eq "$(jget out.txt ids)" "[0,35,3,1]" "ids: [start] + new, eos kept" || return 1
    expect_eq "$(jget out.txt new_ids)" "[35,3,1]" "new_ids" || return 1
    hs generate --model "$S2S/flan_t5" --source-ids 22,19,10,29,36,1 --max-new 2 --json
    expect_eq "$(jget out.txt ids)" "[0,35,3]" "--max-new 2" || return 1
    hs generate --model "$S2S/t5" --source-ids 22,14,31,16,16,10,9,26,1 --json
    expect_eq "$(py -c 'import json; print(len(json.load(open("out.txt"))["new_ids"]))')" 64 \
        "the default --max-new of a source (no eos met)" || return 1
    mkdir -p tk && cp "$S2S/t5/config.json" "$S2S/t5/model.safetensors" tk/ || return 1
    tokenizer tk/tokenizer.json 0 || return 1
    hs generate --model tk --source "a b c d" --json
    local from_text
    from_text=$(jget out.txt ids) || return 1
    hs generate --model tk --source-ids 3,4,5,6,1 --json
    expect_eq "$(jget out.txt ids)" "$from_text" "--source text = its ids and eos" || return 1
    local want_text
    want_text=$(py -c 'import json
ids = json.load(open("out.txt"))["new_ids"]
piece = lambda i: "\u2581" + chr(ord("a") + i - 3) if 3 <= i < 29 else "x%d" % (i - 29)
print("".join(piece(i) for i in ids if i > 2).replace("\u2581", " ").strip())') || return 1
    hs generate --model tk --source "a b c d"
    expect_eq "$OUT" "$want_text" "the answer's text: the new ids without special tokens" ||
        return 1
    expect_refused 2 generate "--source does not apply with --prompt-ids or --source-ids" --model tk \
        --source-ids 3,1 --source "a" || return 1
}

# BLEU of the greedy outputs: 100 against references that are those outputs'
# text (rebuilt from generate's ids and the vocabulary), less with the
# references swapped; the loss beside it unchanged.
bleu_scores_the_greedy_outputs() {
    mkdir -p bl && cp "$S2S/t5/config.json" "$S2S/t5/model.safetensors" bl/ || return 1
    tokenizer bl/tokenizer.json 1 || return 1
    local srcs=("a b c d" "g h i" "k l m n o")
    : >refs.txt
    for s in "${srcs[@]}"; do
        hs generate --model bl --source "$s" --json
        expect_rc 0 "generate --source '$s'" || return 1
        py -c 'import json, sys
ids = json.load(open("out.txt"))["new_ids"]
piece = lambda i: "\u2581" + chr(ord("a") + i - 3) if 3 <= i < 29 else "x%d" % (i - 29)
text = "".join(piece(i) for i in ids if i > 2).replace("\u2581", " ").strip()
assert len(text.split()) >= 4, text
print(text)' >>refs.txt || bad "the outputs of '$s' are too short for 4-grams" || return 1
    done
    py -c 'import json, sys
srcs, refs = sys.argv[1:4], open("refs.txt").read().splitlines()
with open("same.jsonl", "w") as f:
    for s, r in zip(srcs, refs):
        f.write(json.dumps({"source": s, "target": r}) + "\n")
with open("swapped.jsonl", "w") as f:
    for s, r in zip(srcs, refs[1:] + refs[:1]):
        f.write(json.dumps({"source": s, "target": r}) + "\n")' "${srcs[@]}" || return 1
    hs eval --model bl --pairs same.jsonl --bleu --json
    expect_rc 0 "eval --pairs --bleu" || return 1
    expect_eq "$(jget out.txt bleu)" 100 "BLEU against the outputs themselves" || return 1
    local loss
    loss=$(jget out.txt loss) || return 1
    hs eval --model bl --pairs same.jsonl --json
    expect_eq "$(jget out.txt loss)" "$loss" "the loss beside BLEU" || return 1
    hs eval --model bl --pairs swapped.jsonl --bleu --json
    py -c 'import json; b = json.load(open("out.txt"))["bleu"]; assert 0 <= b < 100, b' ||
        bad "BLEU against swapped references: $OUT" || return 1
    hs eval --model bl --pairs same.jsonl --bleu
    expect_grep "$OUT" "bleu 100.0000" "eval --bleu text output" || return 1
    expect_refused 2 eval "--bleu needs --pairs" --model bl --data x.bin --bleu || return 1
}

# ablate --pairs: every head of every attention type, rows keyed by attn;
# the report's table by type.
ablate_pairs_rows_by_attention_type() {
    want flan_t5 loss >want.txt
    hs ablate --model "$S2S/flan_t5" --pairs "$S2S/flan_t5/pairs.jsonl" --db ab.db --method zero \
        --json
    expect_rc 0 "ablate --pairs" || return 1
    expect_grep "$OUT" '"attn":"' "ablate --pairs: the largest delta's attention type" || return 1
    py -c 'import sqlite3
db = sqlite3.connect("ab.db")
rows = db.execute("SELECT attn, count(*), max(layer) FROM head_metrics WHERE metric ="
                  " \"loss_delta_zero\" GROUP BY attn ORDER BY attn").fetchall()
assert rows == [("cross", 12, 2), ("dec", 12, 2), ("enc", 8, 1)], rows
(loss,), = db.execute("SELECT value FROM head_metrics WHERE metric = \"loss\" AND"
                      " attn = \"self\" AND layer = -1").fetchall()
assert abs(loss - float(open("want.txt").read())) < 2e-6 * loss, loss' 2>&1 ||
        bad "ablate --pairs rows" || return 1
    hs report --db ab.db --out rep
    expect_rc 0 "report on an encoder-decoder's ablation" || return 1
    py -c 'import re
t = re.sub("<[^>]+>", " ", open("rep/index.html").read())
assert "Zero ablation by attention type" in t, t[:300]
for name in ("encoder self-attention", "decoder self-attention", "(cross) attention"):
    assert name in t, name' || bad "the report's table by attention type" || return 1
    expect_refused 2 ablate "--pairs: an encoder-decoder's heads are zero-ablated only" \
        --model "$S2S/t5" --pairs "$S2S/t5/pairs.jsonl" --db ab2.db || return 1
    expect_refused 2 ablate "instead of --data" --model "$S2S/t5" \
        --pairs "$S2S/t5/pairs.jsonl" --data x.bin --db ab2.db --method zero || return 1
}

# importance --pairs: every head of every type, importance_raw = torch's
# mean over pairs of |dL_n/dxi| (imp_raw_TYPE); prune --pairs --attn cross
# prunes cross-attention heads alone, and the model it writes has the loss
# of its last step; the refusals of what pairs do not take.
importance_and_prune_pairs_by_type() {
    hs importance --model "$S2S/flan_t5" --pairs "$S2S/flan_t5/pairs.jsonl" --db im.db \
        --batch 2 --json
    expect_rc 0 "importance --pairs" || return 1
    expect_grep "$OUT" '"least_important":{"attn":"' "importance --pairs: the least's type" ||
        return 1
    py - "$FIX/seq2seq.txt" <<'PYEOF' || bad "importance --pairs rows" || return 1
import sqlite3, sys
want, case, key = {}, None, None
lines = open(sys.argv[1]).read().split("\n")
for i, line in enumerate(lines):
    w = line.split()
    if w[:1] == ["case"]:
        case = w[1]
    elif case == "flan_t5" and w[:1] == ["tensor"] and w[1].startswith("imp_raw_"):
        H = int(w[4])
        vals = list(map(float, lines[i + 1].split()))
        for k, v in enumerate(vals):
            want[(w[1][8:], k // H, k % H)] = v
db = sqlite3.connect("im.db")
got = {(a, l, h): v for a, l, h, v in db.execute(
    "SELECT attn, layer, head, value FROM head_metrics WHERE metric = 'importance_raw'")}
assert set(got) == set(want) and len(got) == 32, sorted(got)
for k, v in want.items():
    assert abs(got[k] - v) <= 2e-4 * max(1e-3, abs(v)), (k, got[k], v)
norm = db.execute("SELECT count(*) FROM head_metrics WHERE metric = 'importance'").fetchone()
assert norm == (32,), norm
PYEOF
    hs prune --model "$S2S/flan_t5" --pairs "$S2S/flan_t5/pairs.jsonl" --db pr.db --batch 2 \
        --attn cross --step-percent 25 --max-percent 50 --out pruned --json
    expect_rc 0 "prune --pairs --attn cross" || return 1
    expect_eq "$(jget out.txt pruned)" 6 "cross heads pruned (50% of 12)" || return 1
    hs eval --model pruned --pairs "$S2S/flan_t5/pairs.jsonl" --json
    expect_rc 0 "eval of the pruned encoder-decoder" || return 1
    py - "$(jget out.txt loss)" <<'PYEOF' || bad "prune --pairs mask and curve" || return 1
import sqlite3, sys
db = sqlite3.connect("pr.db")
rows = db.execute("SELECT attn, sum(value), count(*) FROM head_metrics WHERE metric = 'pruned'"
                  " GROUP BY attn").fetchall()
assert rows == [("cross", 6.0, 12)], rows
curve = db.execute("SELECT x, y FROM curves WHERE curve = 'pruning' ORDER BY step").fetchall()
assert [x for x, _ in curve] == [0, 0.25, 0.5], curve
assert abs(curve[-1][1] - float(sys.argv[1])) < 1e-6 * curve[-1][1], (curve, sys.argv[1])
PYEOF
    # Voita et al.'s L0 gates on the cross-attention alone: a penalty that
    # closes every gate leaves the loss of the model without those heads
    # (the pruning curve's last point at 100%)
    hs prune --model "$S2S/flan_t5" --pairs "$S2S/flan_t5/pairs.jsonl" --db l0.db --batch 2 \
        --attn cross --method l0 --lambda 0,50 --steps 100 --lr 0.2
    expect_rc 0 "prune --pairs --method l0" || return 1
    hs prune --model "$S2S/flan_t5" --pairs "$S2S/flan_t5/pairs.jsonl" --db l0.db --batch 2 \
        --attn cross --step-percent 100 --max-percent 100
    expect_rc 0 "prune --pairs --attn cross --max-percent 100" || return 1
    py - <<'PYEOF' || bad "prune --pairs --method l0 rows" || return 1
import sqlite3
db = sqlite3.connect("l0.db")
runs = [r for r, in db.execute("SELECT run_id FROM runs ORDER BY run_id")]
for run, closed_all in zip(runs[:2], (False, True)):
    (attn, count, open_), = db.execute("SELECT attn, count(*), sum(value > 0) FROM head_metrics"
                                       " WHERE run_id = ? AND metric = 'l0_gate' GROUP BY attn",
                                       (run,)).fetchall()
    assert (attn, count) == ("cross", 12) and (open_ == 0 or not closed_all), (run, open_)
    (n,), = db.execute("SELECT value FROM head_metrics WHERE run_id = ? AND metric ="
                       " 'l0_heads_open'", (run,)).fetchall()
    assert n == open_, (run, n, open_)
(closed,), = db.execute("SELECT value FROM head_metrics WHERE run_id = ? AND metric = 'loss'",
                        (runs[1],)).fetchall()
(last,), = db.execute("SELECT y FROM curves WHERE run_id = ? AND curve = 'pruning' AND x = 1",
                      (runs[2],)).fetchall()
assert abs(closed - last) < 1e-6 * last, (closed, last)
PYEOF
    expect_refused 2 prune '"foo" is not an attention type' --model "$S2S/t5" \
        --pairs "$S2S/t5/pairs.jsonl" --db pr2.db --attn enc,foo || return 1
    expect_refused 2 prune "--attn needs --pairs" --model "$S2S/t5" --data x.bin \
        --db pr2.db --attn enc || return 1
    expect_refused 2 prune "written dense" --model "$S2S/t5" --pairs "$S2S/t5/pairs.jsonl" \
        --db pr2.db --out p2 --structural || return 1
}

# train --config --pairs: a Marian-shaped model learns to reverse id
# sequences (validation loss falls below a fifth of the first), the saved
# checkpoint reloads with the last validation's loss, and generate reverses;
# what --pairs does not take is refused.
train_pairs_learns_to_reverse() {
    py - "$S2S/marian/config.json" <<'PYEOF' || bad "the reversal data" || return 1
import json, random, sys
cfg = json.load(open(sys.argv[1]))
cfg.update(d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64, decoder_layers=2,
           max_position_embeddings=16)
json.dump(cfg, open("rev.json", "w"))
rng = random.Random(7)
def pair():
    s = [rng.randint(3, 12) for _ in range(rng.randint(2, 5))]
    return json.dumps({"source_ids": s + [0], "target_ids": s[::-1] + [0]}) + "\n"
open("rev_train.jsonl", "w").write("".join(pair() for _ in range(600)))
open("rev_val.jsonl", "w").write("".join(pair() for _ in range(64)))
PYEOF
    hs train --config rev.json --pairs rev_train.jsonl --val-pairs rev_val.jsonl --steps 600 \
        --batch 16 --lr 3e-3 --warmup 40 --val-every 60 --out rev --db tr.db --json
    expect_rc 0 "train --pairs" || return 1
    hs eval --model rev --pairs rev_val.jsonl --batch 16 --json
    expect_rc 0 "eval of the trained encoder-decoder" || return 1
    py - "$(jget out.txt loss)" <<'PYEOF' || bad "train --pairs curves" || return 1
import sqlite3, sys
db = sqlite3.connect("tr.db")
val = [y for y, in db.execute("SELECT y FROM curves WHERE curve = 'val_loss' ORDER BY step")]
assert len(val) == 10 and val[-1] < val[0] / 5, val
assert abs(val[-1] - float(sys.argv[1])) < 1e-5 * val[-1], (val[-1], sys.argv[1])
PYEOF
    hs generate --model rev --source-ids 3,5,7,11,0 --json
    expect_eq "$(jget out.txt new_ids)" "[11,7,5,3,0]" "the trained model reverses" || return 1
    expect_refused 2 train "--data does not apply with --pairs" --config rev.json --pairs rev_train.jsonl \
        --data x.bin --out r2 || return 1
    expect_refused 2 train "exactly one of --preset P, --config FILE and --init DIR" \
        --config rev.json --preset gpt2 --pairs rev_train.jsonl --out r2 || return 1
    expect_refused 1 train "need an encoder-decoder model" --preset gpt2 \
        --pairs rev_train.jsonl --out r3 || return 1
}

# Marian's stored sinusoid tables are checked against the formula.
stored_sinusoids_checked() {
    mkdir -p mar && cp "$S2S/marian"/* mar/ || return 1
    py - <<'PYEOF2' || bad "could not edit the table" || return 1
import json, struct
raw = bytearray(open("mar/model.safetensors", "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
e = json.loads(raw[8:8 + n])["model.decoder.embed_positions.weight"]
at = 8 + n + e["data_offsets"][0] + 4 * (3 * e["shape"][1] + 5)  # row 3, column 5
raw[at:at + 4] = struct.pack("<f", 0.25)
open("mar/model.safetensors", "wb").write(raw)
PYEOF2
    expect_refused 1 eval "model.decoder.embed_positions.weight row 3 column 5 is 0.25" \
        --model mar --pairs "$S2S/marian/pairs.jsonl" || return 1
}

# capture --pairs: every map of every type = torch's where real, exactly 0
# where padding holds it, and both token sequences (h5py reads the file).
# patterns --pairs: every statistic of every head of every type equals its
# definition computed here from torch's float64 maps of the fixture (per
# pair over its real queries, then over pairs); --maps of capture --pairs
# gives the same rows.
patterns_pairs_by_type_equal_torch_maps() {
    local n delim
    for n in t5 bart; do
        delim=$(py -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["source_ids"][1])' \
            "$S2S/$n/pairs.jsonl") || return 1
        hs patterns --model "$S2S/$n" --pairs "$S2S/$n/pairs.jsonl" --db "p$n.db" --batch 2 \
            --delim "$delim" --control --seed 2 --json
        expect_rc 0 "patterns --pairs $n" || return 1
        py - "p$n.db" "$FIX/seq2seq.txt" "$n" "$delim" <<'PYEOF' || bad "patterns --pairs $n" || return 1
import sqlite3, sys
import numpy as np
db, fixture, name, delim = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
want, case, lines = {}, None, open(fixture).read().splitlines()
for i, line in enumerate(lines):
    w = line.split()
    if w[:1] == ["case"]:
        case = w[1]
    elif case == name and w[:1] == ["tensor"]:
        dims = [int(x) for x in w[3:3 + int(w[2])]]
        want[w[1]] = np.array([float(x) for x in lines[i + 1].split()]).reshape(dims)
src, dec, tgt = want["src"], want["dec"], want["tgt"]
# a source's real keys: those query 0 of the encoder's first map attends to
ns = np.array([int((want["enc_maps"][0, b, 0, 0] > 0).sum()) for b in range(len(src))])
nt = (tgt >= 0).sum(1)
def stats(a, t, keys, tok):
    a = a[:keys]
    p = a[a > 0]
    return {"entropy": -(p * np.log(p)).sum(),
            "self": a[t] if t < keys else 0, "prev_token": a[t - 1] if 1 <= t <= keys else 0,
            "next_token": a[t + 1] if t + 1 < keys else 0, "first_token": a[0],
            "delim": sum(a[s] for s in range(keys) if tok[s] == delim),
            "distance": sum(a[s] * abs(t - s) for s in range(keys))}
rows = sqlite3.connect(db).execute(
    "select attn, layer, head, metric, value, stderr, n from head_metrics where run_id = 1 "
    "and layer >= 0").fetchall()
got = {(r[0], r[1], r[2], r[3]): r[4:] for r in rows}
checked = 0
for attn, kind in (("enc", "enc_maps"), ("dec", "dec_maps"), ("cross", "cross_maps")):
    maps = want[kind]
    for l in range(maps.shape[0]):
        for h in range(maps.shape[2]):
            per = {}
            for b in range(len(src)):
                nq = ns[b] if attn == "enc" else nt[b]
                acc = {}
                for t in range(nq):
                    keys = t + 1 if attn == "dec" else ns[b]
                    for k, v in stats(maps[l, b, h, t], t, keys, dec[b] if attn == "dec" else src[b]).items():
                        acc[k] = acc.get(k, 0) + v
                for k, v in acc.items():
                    per.setdefault(k, []).append(v / nq)
            for k, v in per.items():
                v = np.array(v)
                value, se, count = got[(attn, l, h, k)]
                assert abs(value - v.mean()) < 2e-5, (attn, l, h, k, value, v.mean())
                assert abs(se - v.std(ddof=1) / np.sqrt(len(v))) < 2e-5, (attn, l, h, k, "stderr")
                assert count == len(v)
                checked += 1
            value = got[(attn, l, h, "sink")][0]
            assert abs(value - np.mean(per["first_token"])) < 2e-5, (attn, l, h, "sink")
assert checked == len([k for k in got if not k[3].startswith("sink") and
                       not k[3].endswith("_control")]), checked
names = {r[0] for r in sqlite3.connect(db).execute(
    "select distinct metric from head_metrics where run_id = 1")}
assert {"sink_rate", "sink_rate_control", "entropy_control"} <= names, names
PYEOF
        hs capture --model "$S2S/$n" --pairs "$S2S/$n/pairs.jsonl" --out "p$n.h5" --batch 1
        expect_rc 0 "capture --pairs $n for patterns" || return 1
        hs patterns --maps "p$n.h5" --db "p$n.db" --delim "$delim"
        expect_rc 0 "patterns --maps of an encoder-decoder's file" || return 1
        expect_eq "$(sqlite3 "p$n.db" "select count(*) from head_metrics a join head_metrics b
            using (attn, layer, head, metric) where a.run_id = 1 and b.run_id = 2
            and abs(a.value - b.value) < 1e-6 and abs(a.stderr - b.stderr) < 1e-6")" \
            "$(sqlite3 "p$n.db" "select count(*) from head_metrics where run_id = 2")" \
            "patterns --maps = --pairs ($n)" || return 1
    done
    expect_refused 2 patterns "--js-out: not implemented for an encoder-decoder" \
        --model "$S2S/t5" --pairs "$S2S/t5/pairs.jsonl" --db p.db --js-out js.csv || return 1
    expect_refused 2 patterns "--sink-positions: not implemented" --maps pt5.h5 --db p.db \
        --sink-positions 2 || return 1
}

capture_pairs_maps_equal_torch() {
    local n
    for n in t5 bart; do
        hs capture --model "$S2S/$n" --pairs "$S2S/$n/pairs.jsonl" --out "$n.h5" --batch 2 --json
        expect_rc 0 "capture --pairs $n" || return 1
        py - "$n.h5" "$FIX/seq2seq.txt" "$n" <<'PYEOF2' || bad "capture --pairs $n: the maps" || return 1
import sys
import h5py
import numpy as np
path, fixture, name = sys.argv[1:4]
want, case, lines = {}, None, open(fixture).read().splitlines()
for i, line in enumerate(lines):
    w = line.split()
    if w[:1] == ["case"]:
        case = w[1]
    elif case == name and w[:1] == ["tensor"]:
        dims = [int(x) for x in w[3:3 + int(w[2])]]
        want[w[1]] = np.array([float(x) for x in lines[i + 1].split()]).reshape(dims)
f = h5py.File(path, "r")
assert f.attrs["complete"] == 1
src, dec = f["source_tokens"][()], f["target_tokens"][()]
ns = f["source_mask"][()].sum(1)
nt = (want["tgt"] >= 0).sum(1)
# the decoder inputs: [start] + target[:-1], then pad (HF's batch shift puts the eos
# in the first padded position: a position no real one sees)
real_dec = np.arange(dec.shape[1])[None, :] < nt[:, None]
assert (src == want["src"]).all() and (np.where(real_dec, dec - want["dec"], 0) == 0).all()
real = lambda rows, keys: np.array([[[[q < rows[b] and k < keys[b] for k in range(keys_n)]
                                     for q in range(rows_n)]] for b in range(len(rows))])
for kind, group, dsname, rows, keys in (("enc_maps", "encoder", "attn", ns, ns),
                                        ("dec_maps", "decoder", "attn", nt, nt),
                                        ("cross_maps", "decoder", "cross", nt, ns)):
    for l in range(want[kind].shape[0]):
        got = f[f"{group}/layer_{l:02d}/{dsname}"][()]
        rows_n, keys_n = got.shape[2], got.shape[3]
        keep = real(rows, keys)
        ref = want[kind][l]
        assert np.abs(np.where(keep, got - ref, 0)).max() < 2e-5, (kind, l)
        assert (np.where(keep, 0, got) == 0).all(), (kind, l, "padding")
PYEOF2
    done
    expect_refused 1 capture "no --layers, --heads or --queries" --model "$S2S/t5" \
        --pairs "$S2S/t5/pairs.jsonl" --out x.h5 --layers 0 || return 1
    expect_nofile x.h5 "a refused capture's file" || return 1
}

run_checks eval_pairs_equals_torch capture_pairs_maps_equal_torch patterns_pairs_by_type_equal_torch_maps stored_sinusoids_checked ablate_pairs_rows_by_attention_type importance_and_prune_pairs_by_type train_pairs_learns_to_reverse generate_source_stops_after_eos bleu_scores_the_greedy_outputs text_pairs_tokenize_as_their_ids info_shows_the_stacks \
    bad_pairs_and_one_stack_commands_refuse
