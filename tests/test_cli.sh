#!/usr/bin/env bash
# End-to-end checks of the headscope command (SPEC §8): exit codes, messages,
# files written, the run index, and values against the PyTorch references.
#
# usage: tests/test_cli.sh HEADSCOPE_BINARY FIXTURE_DIR
# Prints "ok NAME" or "FAIL NAME: reason" per check, then "N passed, M failed";
# exits 1 if any check failed.
set -u

SUITE=cli
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
GPT2="$FIX/models/gpt2_tiny"
command -v sqlite3 >/dev/null || { echo "sqlite3 is required" >&2; exit 2; }

# ---- helpers -------------------------------------------------------------------

q() { sqlite3 "$1" "$2"; }


TINY=(--preset attn-only n_layer=2 n_head=4 d_model=32)


# ---- 1. tokens -------------------------------------------------------------------

# --repeat-share plants, in the chosen share of the sequences of T, one
# segment of --repeat-len tokens followed by itself; the rest is the input.
tokens_repeats() {
    text corpus.txt 100
    hs tokens --in corpus.txt --out r.bin --repeat-share 1 --seq-len 32 --repeat-len 4:8 --json
    expect_rc 0 "tokens --repeat-share 1" || return 1
    py - corpus.txt r.bin "$(jget out.txt planted)" <<'EOF' >check.txt 2>&1 || bad "planted segments: $(tail -c 300 check.txt)" || return 1
import sys
import numpy as np
text = np.frombuffer(open(sys.argv[1], "rb").read(), np.uint8).astype(np.int64)
raw = open(sys.argv[2], "rb").read()
tok = np.frombuffer(raw[1024:], "<u2").astype(np.int64)
assert len(tok) == len(text)
T, n = 32, len(tok) // 32
assert int(sys.argv[3]) == n, (sys.argv[3], n)
# copying text over text can leave it as it was, but not in most sequences
assert sum((tok[i * T:(i + 1) * T] != text[i * T:(i + 1) * T]).any() for i in range(n)) > 0.9 * n
for i in range(n):
    x, y = tok[i * T:(i + 1) * T], text[i * T:(i + 1) * T]
    changed = np.nonzero(x != y)[0]
    # a copy x[p+L..p+2L) == x[p..p+L) for some L in 4..8 covering every change
    ok = any(np.array_equal(x[p + L:p + 2 * L], x[p:p + L]) and
             all(p + L <= c < p + 2 * L for c in changed)
             for L in range(4, 9) for p in range(0, T - 2 * L + 1))
    assert ok, (i, x, y)
assert np.array_equal(tok[n * T:], text[n * T:])  # the tail past the last sequence is untouched
EOF
    hs tokens --in corpus.txt --out h.bin --repeat-share 0.5 --seq-len 32 --json
    expect_rc 0 "tokens --repeat-share 0.5" || return 1
    local planted total
    planted=$(jget out.txt planted)
    total=$(( $(jget out.txt tokens) / 32 ))
    [ "$planted" -gt $((total / 4)) ] && [ "$planted" -lt $((3 * total / 4)) ] ||
        bad "--repeat-share 0.5 planted $planted of $total" || return 1
    hs tokens --in corpus.txt --out x.bin --repeat-share 0.5
    expect_rc 2 "--repeat-share without --seq-len" || return 1
    hs tokens --in corpus.txt --out x.bin --repeat-share 0.5 --seq-len 16 --repeat-len 4:9
    expect_rc 2 "--repeat-len beyond T/2" || return 1
    expect_grep "$ERR" "--repeat-len" "message names the option" || return 1
    hs tokens --in corpus.txt --out x.bin --repeat-share 1.5 --seq-len 16
    expect_rc 2 "--repeat-share above 1" || return 1
    expect_nofile x.bin "rejected tokens" || return 1
}

tokens_shard() {
    text corpus.txt 100
    local bytes
    bytes=$(fsize corpus.txt)
    [ "$bytes" -gt 2000 ] || bad "corpus.txt has only $bytes bytes" || return 1
    hs tokens --in corpus.txt --out corpus.bin --json
    expect_rc 0 "tokens --json" || return 1
    expect_eq "$(jget out.txt tokens)" "$bytes" "--json tokens" || return 1
    expect_eq "$(jget out.txt vocab_size)" 256 "--json vocab_size" || return 1
    expect_eq "$(fsize corpus.bin)" $((1024 + 2 * bytes)) "shard size (1024 + 2*bytes)" || return 1
    # Header: magic 20240520, version 1, count; then the bytes as uint16.
    py - corpus.bin corpus.txt <<'EOF' || bad "shard header or tokens differ from the input bytes" || return 1
import struct, sys
b = open(sys.argv[1], "rb").read()
t = open(sys.argv[2], "rb").read()
magic, version, count = struct.unpack("<3i", b[:12])
toks = struct.unpack("<%dH" % count, b[1024:])
sys.exit(0 if (magic, version, count) == (20240520, 1, len(t)) and bytes(toks) == t else 1)
EOF
    local before
    before=$(sha corpus.bin)
    printf 'other text\n' >other.txt
    hs tokens --in other.txt --out corpus.bin
    expect_rc 1 "tokens over an existing shard without --force" || return 1
    expect_grep "$ERR" "headscope: tokens:" "message prefix" || return 1
    expect_grep "$ERR" "corpus.bin" "message names the file" || return 1
    expect_eq "$(sha corpus.bin)" "$before" "shard after the refused overwrite" || return 1
    hs tokens --in other.txt --out corpus.bin --force
    expect_rc 0 "tokens --force" || return 1
    expect_eq "$(fsize corpus.bin)" $((1024 + 2 * 11)) "size after --force" || return 1
    expect_eq "$(ls | grep -c tmp)" 0 "temporary files left" || return 1
}

# ---- 2. eval against the PyTorch reference --------------------------------------

eval_reference() {
    hs eval --model "$GPT2" --data "$GPT2/eval.bin" --batch 2 --seq-len 8 --json
    expect_rc 0 "eval" || return 1
    local loss se
    loss=$(jget out.txt loss) || bad "eval --json is not JSON with loss: $OUT" || return 1
    se=$(jget out.txt stderr) || bad "eval --json has no stderr: $OUT" || return 1
    close "$loss" 4.027285852 1e-5 || bad "loss $loss, PyTorch 4.027285852" || return 1
    close "$se" 0.09867153868 1e-5 || bad "stderr $se, PyTorch 0.09867153868" || return 1
    expect_eq "$(jget out.txt batches)" 2 "batches" || return 1
    expect_eq "$(jget out.txt tokens)" 32 "tokens (2 batches of 2x8)" || return 1
}

# ---- 3. info ---------------------------------------------------------------------

info_gpt2() {
    hs info --model "$GPT2" --json
    expect_rc 0 "info --json" || return 1
    expect_eq "$(jget out.txt model_type)" gpt2 "model_type" || return 1
    expect_eq "$(jget out.txt n_layer)" 2 "n_layer" || return 1
    expect_eq "$(jget out.txt n_head)" "[4,4]" "n_head" || return 1
    local want
    want=$(py -c 'import json, math, struct, sys
f = open(sys.argv[1], "rb")
n = struct.unpack("<Q", f.read(8))[0]
h = json.loads(f.read(n))
print(sum(math.prod(v["shape"]) for k, v in h.items() if k != "__metadata__"))' \
        "$GPT2/model.safetensors") || bad "cannot read the safetensors header" || return 1
    expect_eq "$(jget out.txt parameters)" "$want" "parameters (sum of tensor sizes)" || return 1
    hs info --model "$GPT2"
    expect_rc 0 "info (text)" || return 1
    expect_grep "$OUT" "parameters   $want" "text output" || return 1
}

# ---- 4. train with validation and the run index -------------------------------

train_index() {
    shard train 120 || return 1
    shard val 40 || return 1
    hs train "${TINY[@]}" --data train.bin --out run --steps 30 --batch 4 --seq-len 32 \
        --val val.bin --db runs.db --json
    expect_rc 0 "train" || return 1
    expect_file run/config.json || return 1
    expect_file run/model.safetensors || return 1
    expect_eq "$(ls run | tr '\n' ' ')" "config.json model.safetensors " "files in --out" || return 1
    local id final first
    id=$(jget out.txt run_id) || bad "train --json has no run_id: $OUT" || return 1
    expect_eq "$(jget out.txt steps)" 30 "--json steps" || return 1
    expect_eq "$(q runs.db 'select count(*) from runs')" 1 "runs" || return 1
    expect_eq "$(q runs.db "select status from runs where run_id=$id")" complete "status" || return 1
    local dsha
    dsha=$(q runs.db "select data_sha256 from runs where run_id=$id")
    [ -n "$dsha" ] || bad "data_sha256 is empty" || return 1
    expect_eq "$dsha" "$(sha train.bin)" "data_sha256" || return 1
    expect_eq "$(q runs.db "select model_sha256 from runs where run_id=$id")" \
        "$(sha run/model.safetensors)" "model_sha256" || return 1
    expect_eq "$(q runs.db "select count(*) from curves where run_id=$id and curve='train_loss'")" 30 \
        "train_loss rows" || return 1
    expect_eq "$(q runs.db "select min(step)||'-'||max(step) from curves where curve='train_loss'")" \
        1-30 "train_loss steps" || return 1
    [ "$(q runs.db "select count(*) from curves where run_id=$id and curve='val_loss'")" -ge 1 ] ||
        bad "no val_loss rows" || return 1
    expect_eq "$(q runs.db "select count(*) from artifacts where run_id=$id and complete=1 and sha256='$(sha run/model.safetensors)'")" \
        1 "complete artifact with the model's sha256" || return 1
    expect_eq "$(q runs.db 'PRAGMA journal_mode')" wal "journal_mode" || return 1
    expect_eq "$(q runs.db 'PRAGMA user_version')" 6 "user_version" || return 1
    final=$(jget out.txt final_loss)
    first=$(q runs.db "select y from curves where run_id=$id and curve='train_loss' and step=1")
    py -c 'import math,sys; a,b=map(float,sys.argv[1:]); sys.exit(0 if math.isfinite(a) and a < b - 0.1 else 1)' \
        "$final" "$first" || bad "final loss $final is not below the first train_loss $first" || return 1
    close "$(q runs.db "select y from curves where curve='train_loss' and step=30")" "$final" 1e-5 ||
        bad "last curve point differs from final_loss $final" || return 1
}

# ---- 5. continue training from a checkpoint -------------------------------------

train_init() {
    shard train 120 || return 1
    hs train "${TINY[@]}" --data train.bin --out first --steps 10 --batch 4 --seq-len 32
    expect_rc 0 "first train" || return 1
    hs train --init first --data train.bin --out second --steps 10 --batch 4 --seq-len 32 --json
    expect_rc 0 "train --init" || return 1
    expect_file second/model.safetensors || return 1
    # --out creates missing parents, and refuses a path through a file
    hs train --init first --data train.bin --out runs/a/b --steps 1 --batch 4 --seq-len 32
    expect_rc 0 "train --out runs/a/b" || return 1
    expect_file runs/a/b/model.safetensors || return 1
    touch plain
    hs train --init first --data train.bin --out plain/model --steps 1 --batch 4 --seq-len 32
    expect_rc 1 "train --out through a file" || return 1
    expect_grep "$ERR" "plain" "message names the path" || return 1
    expect_eq "$(cat second/config.json)" "$(cat first/config.json)" "config.json of the continued model" || return 1
    if cmp -s first/model.safetensors second/model.safetensors; then
        bad "the continued checkpoint equals its start"
        return 1
    fi
    hs eval --model second --data train.bin --batch 4 --seq-len 32 --max-batches 4 --json
    expect_rc 0 "eval of the continued model" || return 1
    local loss
    loss=$(jget out.txt loss)
    close "$loss" 3 3 || bad "eval loss '$loss' is not a finite loss in [0, 6]" || return 1
}

# ---- 6. determinism ----------------------------------------------------------------

train_deterministic() {
    shard train 120 || return 1
    local s
    for s in a b; do
        hs train "${TINY[@]}" --data train.bin --out "$s" --steps 20 --batch 4 --seq-len 32 \
            --seed 7 --threads 1
        expect_rc 0 "train $s" || return 1
    done
    cmp -s a/model.safetensors b/model.safetensors ||
        bad "two runs with --seed 7 --threads 1 differ" || return 1
    hs train "${TINY[@]}" --data train.bin --out c --steps 20 --batch 4 --seq-len 32 --seed 8 --threads 1
    expect_rc 0 "train --seed 8" || return 1
    if cmp -s a/model.safetensors c/model.safetensors; then
        bad "--seed 8 gives the same model as --seed 7"
        return 1
    fi
}

# ---- 7. bad input ----------------------------------------------------------------

# refuse CODE CMD PATTERN ARGS...: exits CODE, "headscope: CMD:" and PATTERN on
# stderr, nothing on stdout, and creates neither the out directory nor a database.
refuse() {
    local code=$1 cmd=$2 pat=$3
    shift 3
    rm -rf out db.sqlite
    expect_refused "$code" "$cmd" "$pat" "$@" || return 1
    local what="$cmd $*"
    [ ! -e out ] || bad "$what: created out/ ($(ls out | tr '\n' ' '))" || return 1
    [ ! -e db.sqlite ] || bad "$what: created the database" || return 1
}

bad_input() {
    shard train 120 || return 1
    local T=(--data train.bin --out out --steps 5 --batch 4 --seq-len 16)
    refuse 2 train "unknown option '--bogus'" "${TINY[@]}" "${T[@]}" --bogus || return 1
    refuse 2 train "--data FILE" "${TINY[@]}" --out out --db db.sqlite || return 1
    refuse 2 eval "--data, --text, --task or --pairs" --model "$GPT2" || return 1
    refuse 2 train "nosuch" --preset nosuch "${T[@]}" --db db.sqlite || return 1
    refuse 2 train 'override n_head=abc: "n_head" must be' --preset attn-only n_head=abc "${T[@]}" --db db.sqlite || return 1
    refuse 2 train 'override n_head=4x' --preset attn-only n_head=4x "${T[@]}" || return 1
    refuse 2 train 'override n_head=0: "n_head" must be a positive integer' --preset attn-only n_head=0 "${T[@]}" || return 1
    refuse 2 train "--lr must be positive" "${TINY[@]}" "${T[@]}" --lr 0 --db db.sqlite || return 1
    refuse 2 train "--steps" "${TINY[@]}" "${T[@]}" --steps 0 || return 1
    refuse 1 eval "missing/config.json" --model missing --data train.bin || return 1
    refuse 1 train "missing/config.json" --init missing "${T[@]}" --db db.sqlite || return 1
    refuse 1 info "missing/config.json" --model missing || return 1
    printf 'this is plain text, not a token shard; it is long enough for a header.%.0s' {1..40} >plain.txt
    refuse 1 train "plain.txt" "${TINY[@]}" --data plain.txt --out out --db db.sqlite || return 1
    refuse 1 eval "plain.txt" --model "$GPT2" --data plain.txt || return 1
    printf 'short' >short.txt
    "$HS" tokens --in short.txt --out short.bin >/dev/null 2>&1 || bad "tokens short.bin" || return 1
    refuse 1 train "short.bin: fewer than one batch" "${TINY[@]}" --data short.bin --out out --seq-len 16 || return 1
    # the message says how many tokens there are, and what fits (SPEC §21)
    refuse 1 train "short.bin: fewer than one batch of 1 x 16 (+1) tokens: it holds 5 (at --batch 1, a --seq-len of at most 4 fits)" \
        "${TINY[@]}" --data short.bin --out out --seq-len 16 --batch 1 || return 1
    refuse 1 train "short.bin: fewer than one batch" "${TINY[@]}" --data train.bin --val short.bin --out out --seq-len 16 || return 1
    refuse 1 eval "short.bin: " --model "$GPT2" --data short.bin --seq-len 8 || return 1
    refuse 2 train "--seq-len 512 exceeds the model's n_ctx=256" "${TINY[@]}" --data train.bin --out out --seq-len 512 || return 1
    refuse 2 eval "--seq-len 32 exceeds the model's n_ctx=16" --model "$GPT2" --data train.bin --seq-len 32 || return 1
    # An existing checkpoint is kept, byte for byte.
    hs train "${TINY[@]}" --data train.bin --out keep --steps 3 --batch 4 --seq-len 16
    expect_rc 0 "train into keep" || return 1
    local s1 c1
    s1=$(sha keep/model.safetensors)
    c1=$(sha keep/config.json)
    hs train "${TINY[@]}" --data train.bin --out keep --steps 3 --batch 4 --seq-len 16 --seed 9
    expect_rc 1 "train into an existing --out" || return 1
    expect_grep "$ERR" "headscope: train: keep/model.safetensors" "message names the file" || return 1
    expect_grep "$ERR" "--force" "message suggests --force" || return 1
    expect_eq "$(sha keep/model.safetensors)" "$s1" "model.safetensors after the refusal" || return 1
    expect_eq "$(sha keep/config.json)" "$c1" "config.json after the refusal" || return 1
    hs train "${TINY[@]}" --data train.bin --out keep --steps 3 --batch 4 --seq-len 16 --seed 9 --force
    expect_rc 0 "train --force into keep" || return 1
    [ "$(sha keep/model.safetensors)" != "$s1" ] || bad "--force did not replace the model" || return 1
}

# ---- 8. SIGINT ---------------------------------------------------------------------

# curve_rows DB: DB holds a curve point.
curve_rows() {
    local n
    n=$(sqlite3 "$1" "select count(*) from curves" 2>/dev/null) || return 1
    [ "${n:-0}" -gt 0 ]
}

train_sigint() {
    shard train 120 || return 1
    start_bg "$HS" train --preset attn-only n_layer=1 n_head=2 d_model=16 --data train.bin --out run \
        --steps 100000 --batch 2 --seq-len 16 --db runs.db
    # Wait until steps are recorded (curve points flush every 64 steps): by then
    # the handler is installed and training is under way.
    wait_until 600 "training steps recorded in runs.db" curve_rows runs.db || return 1
    stop_bg INT || return 1
    expect_rc 1 "train after SIGINT" || return 1
    expect_grep "$ERR" "headscope: train: " "message prefix" || return 1
    expect_grep "$ERR" "interrupted" "message" || return 1
    expect_eq "$(ls run | tr '\n' ' ')" "config.json model.safetensors " "files in --out" || return 1
    hs info --model run --json
    expect_rc 0 "info on the interrupted checkpoint" || return 1
    expect_eq "$(jget out.txt n_layer)" 1 "n_layer of the interrupted checkpoint" || return 1
    expect_eq "$(q runs.db 'select status from runs')" failed "run status" || return 1
    expect_eq "$(q runs.db 'PRAGMA integrity_check')" ok "integrity_check" || return 1
    expect_eq "$(q runs.db 'select model_sha256 from runs')" "$(sha run/model.safetensors)" \
        "model_sha256 of the saved step" || return 1
}

# ---- 9. help -------------------------------------------------------------------------

help_text() {
    hs help
    expect_rc 0 "help" || return 1
    local c
    for c in help version info tokens train eval kv-bytes; do
        printf '%s\n' "$OUT" | grep -qE "^  $c +[A-Z]" || bad "help does not list $c" || return 1
    done
    for c in info tokens train eval kv-bytes; do
        hs help "$c"
        expect_rc 0 "help $c" || return 1
        expect_grep "$OUT" "usage: headscope $c" "help $c" || return 1
        expect_grep "$OUT" "example: headscope $c" "help $c" || return 1
        hs "$c" --help
        expect_rc 0 "$c --help" || return 1
        expect_grep "$OUT" "usage: headscope $c" "$c --help" || return 1
    done
    # every command documents its options, --json among them, and an example
    for c in info tokens train eval capture maps plot ablate importance prune induction patterns \
        experiment report kv-bytes; do
        hs help "$c"
        expect_rc 0 "help $c" || return 1
        expect_grep "$OUT" "--json" "help $c" || return 1
        expect_grep "$OUT" "example: headscope $c" "help $c" || return 1
    done
    hs help train
    expect_grep "$OUT" "--steps N" "help train" || return 1
    expect_grep "$OUT" "example: headscope train" "help train" || return 1
    hs help nosuch
    expect_rc 2 "help nosuch" || return 1
    expect_grep "$ERR" "headscope: help: unknown command 'nosuch'" "help nosuch" || return 1
    hs nosuch
    expect_rc 2 "headscope nosuch" || return 1
    expect_grep "$ERR" "unknown command 'nosuch'" "headscope nosuch" || return 1
    hs
    expect_rc 2 "headscope with no arguments" || return 1
    expect_grep "$ERR" "usage: headscope COMMAND" "headscope with no arguments" || return 1
    hs version
    expect_rc 0 "version" || return 1
    expect_grep "$OUT" "headscope " "version" || return 1
}

# ---- 10. kv-bytes ---------------------------------------------------------------------

kv_bytes() {
    local a=(--layers 80 --head-dim 128 --seq-len 2048 --json)
    hs kv-bytes "${a[@]}" --kv-heads 8
    expect_rc 0 "kv-bytes" || return 1
    expect_eq "$(jget out.txt kv_bytes)" 671088640 "kv_bytes, 8 KV heads" || return 1
    close "$(jget out.txt kv_gib)" 0.625 1e-6 || bad "kv_gib $(jget out.txt kv_gib), expected 0.625" || return 1
    hs kv-bytes "${a[@]}" --kv-heads 64
    expect_rc 0 "kv-bytes --kv-heads 64" || return 1
    expect_eq "$(jget out.txt kv_bytes)" 5368709120 "kv_bytes, 64 KV heads" || return 1
    hs kv-bytes --layers 80 --head-dim 128 --seq-len 2048
    expect_rc 2 "kv-bytes without --kv-heads" || return 1
    expect_grep "$ERR" "headscope: kv-bytes: " "kv-bytes without --kv-heads" || return 1
}

# A command that cannot fit says so before it starts (SPEC §13): the
# memory plan of `info --batch B --seq-len T` is what eval and train hold at
# once, to the byte, so a machine of exactly that size (HEADSCOPE_MEMORY_LIMIT
# standing for its memory and swap) runs them and one byte less refuses them,
# naming what did not fit, with nothing on stdout and no output left.
memory_plan_is_enforced() {
    local fwd train lim EVAL="$GPT2/eval.bin"
    hs info --model "$GPT2" --batch 2 --seq-len 8 --json
    expect_rc 0 "info --batch 2 --seq-len 8" || return 1
    fwd=$(jget out.txt memory_plan eval)
    train=$(jget out.txt memory_plan train)
    HEADSCOPE_MEMORY_LIMIT=$fwd hs eval --model "$GPT2" --data "$EVAL" --batch 2 --seq-len 8
    expect_rc 0 "eval within a limit of its plan, $fwd bytes" || return 1
    HEADSCOPE_MEMORY_LIMIT=$((fwd - 1)) hs eval --model "$GPT2" --data "$EVAL" --batch 2 --seq-len 8
    expect_rc 1 "eval under a limit one byte below its plan" || return 1
    expect_grep "$ERR" "activations: " "eval: what did not fit" || return 1
    expect_grep "$ERR" "(HEADSCOPE_MEMORY_LIMIT)" "eval: the machine's figure named" || return 1
    expect_eq "$OUT" "" "eval refused: stdout" || return 1
    HEADSCOPE_MEMORY_LIMIT=$train hs train --init "$GPT2" --data "$EVAL" --batch 2 --seq-len 8 \
        --steps 1 --out t1
    expect_rc 0 "train within a limit of its plan, $train bytes" || return 1
    HEADSCOPE_MEMORY_LIMIT=$((train - 1)) hs train --init "$GPT2" --data "$EVAL" --batch 2 \
        --seq-len 8 --steps 1 --out t2
    expect_rc 1 "train one byte below its plan" || return 1
    expect_nofile t2 "train refused" || return 1
    # below the parameters: info (headers only) still runs, capture refuses
    for lim in 10K 0.01M; do
        HEADSCOPE_MEMORY_LIMIT=$lim hs info --model "$GPT2"
        expect_rc 0 "info under a limit of $lim" || return 1
        HEADSCOPE_MEMORY_LIMIT=$lim hs capture --model "$GPT2" --data "$EVAL" --batch 2 \
            --seq-len 8 --out c.h5
        expect_rc 1 "capture under a limit of $lim" || return 1
        expect_grep "$ERR" "model parameters: " "capture $lim: what did not fit" ||
            return 1
        expect_nofile c.h5 "capture refused" || return 1
    done
    HEADSCOPE_MEMORY_LIMIT=lots hs eval --model "$GPT2" --data "$EVAL" --batch 2 --seq-len 8
    expect_rc 1 "a limit that is not a size" || return 1
    expect_grep "$ERR" "HEADSCOPE_MEMORY_LIMIT: 'lots' is not a size" "the bad limit named" || return 1
}

run_checks tokens_shard tokens_repeats eval_reference info_gpt2 train_index train_init train_deterministic \
    bad_input train_sigint help_text kv_bytes memory_plan_is_enforced
