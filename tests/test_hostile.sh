#!/usr/bin/env bash
# End-to-end checks of hostile model and data files (issue 16): each input is
# made here (a FIFO, configs with numbers no model has, a tiny safetensors
# claiming huge shapes, a model whose weights are NaN) and each command must
# refuse it with a one-line error naming the file or the value, exit 1, leave
# no half-written output, print valid JSON, and mark its run `failed`.
#
# usage: tests/test_hostile.sh HEADSCOPE_BINARY FIXTURE_DIR
# Prints "ok NAME" or "FAIL NAME: reason" per check, then "N passed, M failed";
# exits 1 if any check failed.
set -u

SUITE=hostile
SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$SRC/tests/lib.sh"

command -v sqlite3 >/dev/null || { echo "sqlite3 is required" >&2; exit 2; }

# ---- helpers -------------------------------------------------------------------

GPT2=$FIX/models/gpt2_tiny

# model NAME [SRC]: a copy of the fixture SRC (gpt2_tiny) in ./NAME.
model() { mkdir -p "$1" && cp "${2:-$GPT2}/config.json" "${2:-$GPT2}/model.safetensors" "$1/"; }

# edit_config DIR PY_EXPR: config.json of DIR rewritten by a Python
# expression over the parsed object c (e.g. 'c.update(n_embd=10**9)').
edit_config() {
    py -c 'import json, sys
p = sys.argv[1] + "/config.json"
c = json.load(open(p))
exec(sys.argv[2])
open(p, "w").write(json.dumps(c))' "$1" "$2"
}

# hst ARGS...: hs under an outer limit: a command that blocks (a FIFO) fails
# the check instead of hanging the suite (status 124).
hst() {
    timeout 60 "$HS" "$@" >out.txt 2>err.txt
    RC=$?
    OUT=$(cat out.txt)
    ERR=$(cat err.txt)
}

# refused CMD PATTERN ARGS...: exit 1 (not a signal, not a hang), one line on
# stderr starting "headscope: CMD: " and holding PATTERN, nothing on stdout.
refused() {
    local cmd=$1 pat=$2
    shift 2
    hst "$cmd" "$@"
    expect_rc 1 "$cmd $*" || return 1
    expect_grep "$(head -n1 err.txt)" "headscope: $cmd: " "$cmd: message prefix" || return 1
    expect_grep "$ERR" "$pat" "$cmd: message" || return 1
    [ "$(wc -l <err.txt)" -eq 1 ] || bad "$cmd: more than one line on stderr: $ERR" || return 1
    [ -z "$OUT" ] || bad "$cmd: wrote to stdout: $OUT"
}

# no_wrapped: the last message holds no wrapped (negative) size.
no_wrapped() {
    ! grep -qE '(=|\[|,)-[0-9]' err.txt || bad "wrapped number in: $ERR"
}

# json_ok FILE: FILE is one valid JSON object (python's json rejects NaN only
# when asked: parse_constant refuses NaN and Infinity).
json_ok() {
    py -c 'import json, sys
def bad(x): raise ValueError("not JSON: " + x)
json.load(open(sys.argv[1]), parse_constant=bad)' "$1" 2>/dev/null ||
        bad "not valid JSON: $(head -c 300 "$1")"
}

# status DB: the status of every run, in order.
status() { sqlite3 "$1" "SELECT group_concat(status, ',') FROM (SELECT status FROM runs ORDER BY run_id)"; }

# nan_model DIR: gpt2_tiny with every weight NaN (the safetensors data section
# rewritten in place; header unchanged).
nan_model() {
    model "$1"
    py -c 'import struct, sys
p = sys.argv[1] + "/model.safetensors"
d = bytearray(open(p, "rb").read())
h = struct.unpack("<Q", d[:8])[0]
n = (len(d) - 8 - h) // 4
d[8 + h:] = struct.pack("<f", float("nan")) * n
open(p, "wb").write(bytes(d))' "$1"
}

# ---- checks --------------------------------------------------------------------

# A FIFO (or a directory) where a file is read: refused at once, naming the
# file; before, `eval` blocked for ever on a FIFO config.json.
fifo_inputs() {
    model m
    rm m/config.json && mkfifo m/config.json
    refused eval "m/config.json: not a regular file (a FIFO)" --model m --data "$GPT2/eval.bin" \
        --batch 1 || return 1
    refused info "not a regular file" --model m || return 1
    model s
    rm s/model.safetensors && mkfifo s/model.safetensors
    refused eval "s/model.safetensors: not a regular file (a FIFO)" --model s \
        --data "$GPT2/eval.bin" --batch 1 || return 1
    mkfifo shard.bin
    refused eval "shard.bin: not a regular file (a FIFO)" --model "$GPT2" --data shard.bin \
        --batch 1 || return 1
    mkdir dir.bin
    refused eval "dir.bin: not a regular file (a directory)" --model "$GPT2" --data dir.bin \
        --batch 1
}

# n_head 0 without head_dim divided by zero (SIGFPE); it stays a format error.
zero_heads() {
    model z "$FIX/models/tinylm_h4"
    edit_config z 'c["n_head"] = 0; c.pop("head_dim", None); c.pop("n_kv_head", None)'
    refused info '"n_head" must be a positive integer' --model z
}

# Numbers no model has: 1e300 heads (a float -> int overflow), gpt2's n_embd
# 1e9 (4 n_embd overflowed: "d_ff=-294967296"), non-finite numbers.
huge_numbers() {
    model g
    edit_config g 'c["n_embd"] = 10**9'
    refused info "n_embd=1000000000 is too large" --model g || return 1
    no_wrapped || return 1
    model h "$FIX/models/hs_mixed"
    edit_config h 'c["n_head"] = [4, 1e300]'
    refused info '"n_head"[1] must be an integer in 1..1024' --model h || return 1
    no_wrapped || return 1
    model e
    py -c 'import sys; p = sys.argv[1]; t = open(p).read()
open(p, "w").write(t.replace("\"layer_norm_epsilon\": 1e-05", "\"layer_norm_epsilon\": 1e999"))' \
        e/config.json
    refused info '"layer_norm_epsilon" must be a finite number' --model e
}

# Sizes beyond the checkpoint: vocab, n_positions or d_ff of 1e9 over a 32 KB
# file once tried to allocate 4-64 GB before reading it. Under a 2 GB address
# space the refusal must name the tensor, not an allocation.
sizes_beyond_file() {
    local key tensor
    for key in vocab_size:wte.weight n_positions:wpe.weight n_inner:h.0.mlp.c_fc.weight; do
        tensor=${key#*:} key=${key%%:*}
        rm -rf v && model v
        edit_config v "c['$key'] = 10**9"
        # (AddressSanitizer reserves terabytes of shadow: no limit under it)
        (under_asan || ulimit -v 2000000 && exec "$HS" info --model v) >out.txt 2>err.txt
        RC=$?
        ERR=$(cat err.txt)
        expect_rc 1 "info with $key 1e9" || return 1
        expect_grep "$ERR" "v/model.safetensors: tensor $tensor has shape" "$key 1e9" || return 1
    done
}

# A tiny safetensors whose header claims a tensor of 1e9 x 16 floats.
tiny_file_huge_shape() {
    model t
    py -c 'import json, struct, sys
p = sys.argv[1] + "/model.safetensors"
h = json.dumps({"wte.weight": {"dtype": "F32", "shape": [10**9, 16],
                               "data_offsets": [0, 64 * 10**9]}}).encode()
open(p, "wb").write(struct.pack("<Q", len(h)) + h + bytes(64))' t
    refused info "model.safetensors" --model t
}

# NaN weights: eval exited 0 printing "loss nan" and invalid JSON; ablate
# recorded NULL metrics in a run marked complete.
nan_weights() {
    nan_model n
    local D=$GPT2/eval.bin
    refused eval "the loss of sequence 0 is NaN" --model n --data "$D" --batch 1 --json || return 1
    hst eval --model n --data "$D" --batch 1 --json --allow-nonfinite
    expect_rc 0 "eval --allow-nonfinite" || return 1
    json_ok out.txt || return 1
    expect_eq "$(jget out.txt loss)" "None" "eval --allow-nonfinite: loss" || return 1
    refused ablate "is NaN: the model's weights or inputs are not finite" --model n --data "$D" \
        --db x.db --batch 2 --seq-len 8 --json || return 1
    expect_eq "$(status x.db)" "failed" "ablate run status" || return 1
    expect_eq "$(sqlite3 x.db 'SELECT count(*) FROM head_metrics')" "0" "ablate rows" || return 1
    hst ablate --model n --data "$D" --db x.db --batch 2 --seq-len 8 --json --allow-nonfinite
    expect_rc 0 "ablate --allow-nonfinite" || return 1
    json_ok out.txt || return 1
    expect_eq "$(status x.db)" "failed,complete" "ablate --allow-nonfinite run status" || return 1
    refused importance "is NaN" --model n --data "$D" --db x.db --batch 2 --seq-len 8 || return 1
    refused patterns "is NaN" --model n --data "$D" --db x.db --batch 2 --seq-len 8 || return 1
    refused prune "is NaN" --model n --data "$D" --db x.db --batch 2 --seq-len 8 --out p ||
        return 1
    expect_nofile p/model.safetensors "prune of a NaN model" || return 1
    refused induction "is NaN" --model n --db x.db --samples 4 --batch 2 --random-draws 2 ||
        return 1
    expect_eq "$(status x.db)" "failed,complete,failed,failed,failed,failed" "run statuses" ||
        return 1
    # generate printed tokens picked from NaN logits and exited 0
    refused generate "logits not finite at step 1" --model n --prompt-ids 1,2 --max-new 3 ||
        return 1
    # training from NaN weights diverges: always an error, no checkpoint
    refused train "loss is nan" --init n --data "$D" --batch 2 --seq-len 8 --steps 2 --out o \
        --db t.db --json || return 1
    expect_eq "$(status t.db)" "failed" "train run status" || return 1
    expect_nofile o/model.safetensors "train from NaN weights"
}

# A sequence length beyond a rotary model's context (max_position_embeddings
# 16 here) is refused as it is for learned positions: once only `generate`
# refused it, and `eval --seq-len 32` exited 0. One check, every command:
# a usage error (exit 2) naming --seq-len and the context, nothing recorded.
seq_len_beyond_context() {
    local L=$FIX/models/llama_gqa D=$FIX/models/gpt2_tiny/eval.bin cmd
    for cmd in eval ablate importance prune patterns logit-lens; do
        hst "$cmd" --model "$L" --data "$D" --db s.db --batch 1 --seq-len 32
        [ "$cmd" = eval ] && hst eval --model "$L" --data "$D" --batch 1 --seq-len 32
        expect_rc 2 "$cmd --seq-len 32 on a 16-position rotary model" || return 1
        expect_grep "$ERR" "--seq-len 32 exceeds the model's n_ctx=16" "$cmd: message" ||
            return 1
    done
    hst capture --model "$L" --data "$D" --out m.h5 --batch 1 --seq-len 32
    expect_rc 2 "capture --seq-len 32" || return 1
    expect_grep "$ERR" "exceeds the model's n_ctx=16" "capture: message" || return 1
    hst train --init "$L" --data "$D" --out t --steps 1 --batch 1 --seq-len 32
    expect_rc 2 "train --init --seq-len 32" || return 1
    expect_grep "$ERR" "--seq-len 32 exceeds the model's n_ctx=16" "train: message" || return 1
    expect_nofile s.db "refused runs" || return 1
    expect_nofile m.h5 "refused capture"
}

# plant NAME...: each NAME a symlink to ./victim (a file that must never
# change), and the names the writers once used beside it: NAME.tmp,
# .NAME.tmp and NAME.tmp.PID for the next 400 process ids (they are
# predictable: an attacker plants them all).
plant() {
    py - "$PWD/victim" "$(sh -c 'echo $$')" "$@" <<'PY'
import os, sys
victim, pid = sys.argv[1], int(sys.argv[2]) + 1
for n in sys.argv[3:]:
    d, b = os.path.split(n)
    os.makedirs(d or ".", exist_ok=True)
    names = [n + ".tmp", os.path.join(d, "." + b + ".tmp")]
    names += ["%s.tmp.%d" % (n, p) for p in range(pid, pid + 400)]
    for m in names:
        if os.path.lexists(m):
            os.unlink(m)
        os.symlink(victim, m)
PY
}

# victim_intact WHAT: ./victim holds what it held.
victim_intact() { expect_eq "$(cat victim)" "precious" "the file behind the links after $1"; }

# Every writer creates its temporaries exclusively under unpredictable names
# and moves them into place: a link planted at any name it once used (or at
# the output itself) is never written through. (Before: report's
# .index.html.tmp, view's .data.js.tmp and OUT.tmp.PID of tokens, capture,
# train, convert and prune --out all overwrote the link's target.)
planted_symlinks() {
    printf precious >victim
    printf 'some text to tokenize, twice: some text to tokenize' >text.txt
    plant s/x.bin
    hst tokens --in text.txt --out s/x.bin
    expect_rc 0 "tokens beside planted links" || return 1
    victim_intact tokens || return 1
    plant s/m.h5
    hst capture --model "$GPT2" --data "$FIX/models/gpt2_tiny/eval.bin" --out s/m.h5 --batch 1 \
        --seq-len 8 --max-batches 1 --db s/x.db
    expect_rc 0 "capture beside planted links" || return 1
    victim_intact capture || return 1
    plant s/t/model.safetensors s/t/config.json s/c/model.safetensors s/c/config.json \
        s/p/model.safetensors s/p/config.json
    hst train --preset gpt2 n_layer=1 d_model=16 n_head=2 --data "$FIX/models/gpt2_tiny/train.bin" \
        --out s/t --steps 1 --batch 1 --seq-len 8
    expect_rc 0 "train beside planted links" || return 1
    victim_intact train || return 1
    hst convert --model s/t --kv-heads 1 --out s/c
    expect_rc 0 "convert beside planted links" || return 1
    victim_intact convert || return 1
    hst prune --model "$GPT2" --data "$FIX/models/gpt2_tiny/eval.bin" --db s/x.db --batch 1 \
        --seq-len 8 --max-batches 1 --out s/p
    expect_rc 0 "prune --out beside planted links" || return 1
    victim_intact "prune --out" || return 1
    plant s/r/index.html s/v/index.html s/v/viewer.js s/v/viewer.css s/v/maps.bin s/v/maps.js \
        s/v/data.js s/g.png
    ln -sf "$PWD/victim" s/r/index.html
    hst report --db s/x.db --out s/r
    expect_rc 0 "report beside planted links" || return 1
    victim_intact report || return 1
    hst view --maps s/m.h5 --out s/v
    expect_rc 0 "view beside planted links" || return 1
    victim_intact view || return 1
    hst plot map --maps s/m.h5 --layer 0 --head 0 --out s/g.png
    expect_rc 0 "plot beside planted links" || return 1
    victim_intact plot || return 1
    [ ! -L s/r/index.html ] || bad "report's page is still the planted link"
}

# info's memory plan where B x T overflows the activations' size: once it
# printed the parameters' size alone on every line, as if nothing more were
# needed; the commands themselves refuse such a batch.
info_plan_overflows() {
    cp -r "$FIX/models/llama_gqa" big || return 1
    sed -i 's/"max_position_embeddings": 16/"max_position_embeddings": 16777216/' big/config.json
    hst info --model big --batch 2147483647 --seq-len 16777216
    expect_rc 0 "info with an overflowing plan" || return 1
    expect_eq "$(grep -c ' overflows  (' out.txt)" 5 "plan lines that overflow" || return 1
    hst info --model big --batch 2147483647 --seq-len 16777216 --json
    json_ok out.txt || return 1
    expect_eq "$(jget out.txt memory_plan train)" overflows "--json plan" || return 1
    hst info --model big --batch 2 --seq-len 16 --json
    expect_eq "$(jget out.txt memory_plan eval | grep -c '^[0-9][0-9]*$')" 1 "a plan that fits" || return 1
}

# A checkpoint of a task head other than SPEC §16's sequence classifiers
# (GPT2ForTokenClassification: the body's hidden states into a per-token
# classifier, no language-model head) was read as GPT-2's language model,
# its classifier ignored; it is refused naming the class, for decoders and
# encoders alike.
task_heads_are_refused() {
    local a d
    for a in GPT2ForTokenClassification:models/gpt2_tiny LlamaForQuestionAnswering:models/llama_gqa \
        BertForQuestionAnswering:encoders/bert; do
        d=${a#*:}
        rm -rf m && cp -r "$FIX/$d" m || return 1
        py - m/config.json "${a%%:*}" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["architectures"] = [sys.argv[2]]
json.dump(c, open(sys.argv[1], "w"))
PY
        hs info --model m
        expect_rc 1 "${a%%:*}" && expect_grep "$ERR" "${a%%:*}: this task head is not implemented" \
            "${a%%:*}" || return 1
    done
}

# planted_symlinks (the writers' temporaries, no parsing) under the slow tier's clang ASan only
fast_asan && SKIP="${SKIP:-} planted_symlinks"
run_checks fifo_inputs zero_heads huge_numbers sizes_beyond_file tiny_file_huge_shape nan_weights \
    seq_len_beyond_context planted_symlinks info_plan_overflows task_heads_are_refused
