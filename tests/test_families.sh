#!/bin/bash
# The gpt_neox, mistral and qwen2 families end to end: a model of each
# family trained from its preset is written in its Hugging Face form and
# every study runs on it (train, eval, capture, ablate, induction); info
# shows the family's particulars and kv-bytes --model reads its shape.
# Usage: tests/test_families.sh HEADSCOPE_BINARY FIXTURE_DIR [ONLY=checks]
SUITE=families
SCRIPTS=$(cd "$(dirname "$0")/../scripts" && pwd) # before lib.sh moves to the scratch directory
. "$(dirname "$0")/lib.sh"

data() {
    [ -s train.bin ] && return 0
    for i in $(seq 1 100); do echo "The quick brown fox jumps over the lazy dog $i times."; done >text.txt
    hs tokens --in text.txt --out train.bin
    expect_rc 0 "tokens"
}

# studies FAMILY: train the preset, check its config.json, run every study.
studies() {
    local fam=$1 small=(--batch 2 --seq-len 16 --max-batches 1)
    data || return 1
    hs train --preset "$fam" d_model=32 n_ctx=64 --data train.bin --out "$fam" --steps 2 --batch 2 \
        --seq-len 16 --json
    expect_rc 0 "train --preset $fam" || return 1
    expect_eq "$(py -c "import json,sys; print(json.load(open(sys.argv[1]))['model_type'])" \
        "$fam/config.json")" "$fam" "model_type written" || return 1
    hs eval --model "$fam" --data train.bin "${small[@]}" --json
    expect_rc 0 "eval $fam" || return 1
    hs capture --model "$fam" --data train.bin --out "$fam.h5" "${small[@]}"
    expect_rc 0 "capture $fam" || return 1
    expect_file "$fam.h5" || return 1
    hs ablate --model "$fam" --data train.bin --db a.db "${small[@]}" --json
    expect_rc 0 "ablate $fam" || return 1
    hs induction --model "$fam" --db i.db --seq-len 6 --samples 4 --json
    expect_rc 0 "induction $fam" || return 1
    hs train --init "$fam" --data train.bin --out "$fam.2" --steps 1 --batch 2 --seq-len 16
    expect_rc 0 "train --init $fam" || return 1
    cmp -s "$fam/config.json" "$fam.2/config.json" || bad "train --init changed config.json"
}

gpt_neox_studies() { studies gpt_neox; }
qwen2_studies() { studies qwen2; }
mistral_studies() { studies mistral; }

info_particulars() {
    hs info --model "$FIX/families/neox_par"
    expect_rc 0 "info gpt_neox" || return 1
    expect_grep "$OUT" "rotary on 2 of 8 dims" "rotary dims" || return 1
    expect_grep "$OUT" "parallel" "parallel residual" || return 1
    hs info --model "$FIX/families/mistral_w3" --json
    expect_rc 0 "info mistral" || return 1
    expect_eq "$(jget out.txt window)" 3 "window" || return 1
    hs info --model "$FIX/families/llama3_sharded" --json
    expect_rc 0 "info on a sharded checkpoint" || return 1
    expect_eq "$(jget out.txt rope_scaling)" llama3 "rope_scaling" || return 1
}

kv_bytes_model() {
    # mistral_w3: 2 layers x 2 kv heads x dh 4, window 3: 2*2*2*min(T,3)*4*E
    hs kv-bytes --model "$FIX/families/mistral_w3" --seq-len 100 --bytes 2 --json
    expect_rc 0 "kv-bytes --model" || return 1
    expect_eq "$(jget out.txt kv_bytes)" 192 "windowed cache" || return 1
    hs kv-bytes --model "$FIX/families/qwen2" --seq-len 100 --bytes 2 --json
    expect_eq "$(jget out.txt kv_bytes)" 6400 "global cache" || return 1
    hs kv-bytes --model "$FIX/families/qwen2" --layers 2 --seq-len 100
    expect_rc 2 "--model with --layers" || return 1
}

# info reads headers only (SPEC §13): a 2.1 GB BF16 Llama checkpoint (a
# sparse file of zeros: no disk) is described in well under the 4.2 GB its
# float parameters would take, every head dead (W_o all zero, read whole),
# and its memory plan counts those parameters as loaded (the matrices in
# bf16 as the file holds them, the norms as floats).
info_reads_headers() {
    "$PY" "$SCRIPTS/llama_bf16.py" big 1024 2816 2 16 4 500000 0 holes --counts want.txt ||
        bad "could not write the sparse checkpoint" || return 1
    local rss plan want
    read -r -a want <want.txt
    /usr/bin/time -f '%M' -o rss.txt "$HS" info --model big --batch 1 --seq-len 64 --json \
        >out.txt 2>err.txt
    expect_eq "$?" 0 "info on the sparse checkpoint ($(head -c 300 err.txt))" || return 1
    rss=$(tail -n1 rss.txt)
    [ "$rss" -lt 300000 ] || bad "info took $rss KB resident (its float parameters: 4.2 GB)" ||
        return 1
    expect_eq "$(jget out.txt parameters)" "${want[0]}" "parameters" || return 1
    expect_eq "$(jget out.txt dead_heads | tr -cd '[' | wc -c)" 33 "every head dead" || return 1
    plan=$(py -c 'import json, sys
p = json.load(open("out.txt"))["memory_plan"]
print(p["parameter_bytes"], p["stored_bytes"], p["forward"] > p["parameter_bytes"])')
    expect_eq "$plan" "${want[3]} ${want[2]} True" "memory plan" || return 1
}

run_checks gpt_neox_studies qwen2_studies mistral_studies info_particulars kv_bytes_model \
    info_reads_headers
