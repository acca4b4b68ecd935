#!/bin/bash
# Multi-head latent attention end to end: a model trained from the mla
# preset runs every head-level study (eval, capture, ablate, importance,
# patterns, induction with its OV copying score, dense pruning, train
# --init; structural pruning is refused); info shows its latent cache and
# kv-bytes --model prints the bytes kv-bytes --mla-latent/--mla-rope gives.
# Usage: tests/test_mla.sh HEADSCOPE_BINARY FIXTURE_DIR [ONLY=checks]
SUITE=mla
. "$(dirname "$0")/lib.sh"

data() {
    [ -s train.bin ] && return 0
    for i in $(seq 1 100); do echo "The quick brown fox jumps over the lazy dog $i times."; done >text.txt
    hs tokens --in text.txt --out train.bin
    expect_rc 0 "tokens"
}

mla_studies() {
    local small=(--batch 2 --seq-len 16 --max-batches 1)
    data || return 1
    hs train --preset mla d_model=32 n_ctx=64 q_lora_rank=24 --data train.bin --out mla \
        --steps 2 --batch 2 --seq-len 16 --json
    expect_rc 0 "train --preset mla" || return 1
    expect_eq "$(py -c "import json,sys; print(json.load(open(sys.argv[1]))['attention'])" \
        mla/config.json)" mla "attention written" || return 1
    hs eval --model mla --data train.bin "${small[@]}" --json
    expect_rc 0 "eval" || return 1
    hs capture --model mla --data train.bin --out mla.h5 "${small[@]}"
    expect_rc 0 "capture" || return 1
    expect_file mla.h5 || return 1
    hs ablate --model mla --data train.bin --db a.db "${small[@]}" --json
    expect_rc 0 "ablate" || return 1
    hs importance --model mla --data train.bin --db a.db "${small[@]}" --json
    expect_rc 0 "importance" || return 1
    hs patterns --model mla --data train.bin --db a.db "${small[@]}" --json
    expect_rc 0 "patterns" || return 1
    hs induction --model mla --db i.db --seq-len 6 --samples 4 --json
    expect_rc 0 "induction" || return 1
    hs prune --model mla --data train.bin --db a.db "${small[@]}" --out pruned
    expect_rc 0 "prune --out (dense)" || return 1
    hs info --model pruned
    expect_grep "$OUT" "W_o columns all zero" "pruned heads are dead heads" || return 1
    expect_refused 1 prune "not implemented for attention \"mla\"" --model mla \
        --data train.bin --db a.db "${small[@]}" --out spruned --structural || return 1
    expect_nofile spruned "refused structural pruning" || return 1
    hs train --init mla --data train.bin --out mla.2 --steps 1 --batch 2 --seq-len 16
    expect_rc 0 "train --init" || return 1
    cmp -s mla/config.json mla.2/config.json || bad "train --init changed config.json"
}

mla_cache_bytes() {
    # the mla_q fixture: 2 layers, kv_lora_rank 8, qk_rope_head_dim 4
    hs info --model "$FIX/mla/mla_q" --json
    expect_rc 0 "info" || return 1
    expect_eq "$(jget out.txt kv_cache_bytes_per_token_f32)" 96 "latent cache per token" || return 1
    expect_eq "$(jget out.txt attention)" mla "attention" || return 1
    hs info --model "$FIX/mla/mla_q"
    expect_grep "$OUT" "multi-head latent (mla): kv_lora_rank 8" "info text" || return 1
    hs kv-bytes --model "$FIX/mla/mla_q" --seq-len 100 --batch 3 --bytes 4 --json
    expect_rc 0 "kv-bytes --model" || return 1
    local from_model
    from_model=$(jget out.txt kv_bytes)
    hs kv-bytes --layers 2 --kv-heads 1 --head-dim 1 --seq-len 100 --batch 3 --bytes 4 \
        --mla-latent 8 --mla-rope 4 --json
    expect_eq "$(jget out.txt mla_bytes)" "$from_model" "kv-bytes --model = --mla-latent line" || return 1
    expect_eq "$from_model" 28800 "(8 + 4) x 4 bytes x 100 tokens x 3 x 2 layers" || return 1
}

run_checks mla_studies mla_cache_bytes
