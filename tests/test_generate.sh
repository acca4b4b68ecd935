#!/bin/bash
# generate and convert end to end: --json output and cache bytes equal to
# kv-bytes (a global, a sliding-window and an MLA model), greedy and seeded
# sampling repeat, refusals naming the id, the context or the option;
# convert's k/v tensors equal the group means numpy computes from the
# original files (gpt2's fused c_attn, llama's k_proj/v_proj), G = H keeps
# the loss exactly, and the converted model uptrains with train --init.
# Usage: tests/test_generate.sh HEADSCOPE_BINARY FIXTURE_DIR [ONLY=checks]
SUITE=generate
. "$(dirname "$0")/lib.sh"

# model PRESET DIR [KEY=VALUE...]: a small model trained for one step.
model() {
    local preset=$1 dir=$2
    shift 2
    shard train 60 || return 1
    [ -s "$dir/model.safetensors" ] && return 0
    hs train --preset "$preset" d_model=32 n_ctx=48 "$@" --data train.bin --out "$dir" --steps 1 \
        --batch 2 --seq-len 16
    expect_rc 0 "train --preset $preset" || return 1
}

# kv-bytes of DIR for T positions in bytes of hs_real (4 float, 8 double
# builds): generate's cache must be one of the two, the same for both runs.
cache_matches_kv_bytes() {
    local dir=$1 T=$2 got=$3 e1
    hs kv-bytes --model "$dir" --seq-len "$T" --bytes 1 --json
    e1=$(jget out.txt kv_bytes)
    [ "$got" = $((e1 * 4)) ] || [ "$got" = $((e1 * 8)) ] ||
        bad "$dir: cache_bytes $got is not kv-bytes ($e1 per byte of element) x 4 or 8"
}

generate_json_and_cache_bytes() {
    model gpt2 gpt2 || return 1
    hs generate --model gpt2 --prompt-ids 1,2,3 --max-new 9 --json
    expect_rc 0 "generate --json" || return 1
    local ids new cb
    ids=$(jget out.txt ids) new=$(jget out.txt new_ids) cb=$(jget out.txt cache_bytes)
    expect_eq "$(py -c 'import json,sys; print(len(json.loads(sys.argv[1])))' "$ids")" 12 "ids" || return 1
    expect_eq "$(py -c 'import json,sys; print(len(json.loads(sys.argv[1])))' "$new")" 9 "new_ids" || return 1
    expect_eq "${ids:0:7}" "[1,2,3," "ids start with the prompt" || return 1
    py -c 'import json,sys; sys.exit(0 if json.load(open("out.txt"))["tokens_per_s"] > 0 else 1)' ||
        bad "tokens_per_s not positive" || return 1
    cache_matches_kv_bytes gpt2 12 "$cb" || return 1
    # as text, both streams into one file: the text's line whole, then the
    # stats line of its own
    "$HS" generate --model gpt2 --prompt-ids 1,2,3 --max-new 9 >both.txt 2>&1 ||
        bad "generate as text" || return 1
    expect_eq "$(wc -l <both.txt) $(sed -n 1p both.txt | grep -c '^generate:')" "2 0" \
        "the text, then the stats line: $(cat both.txt)" || return 1
    expect_grep "$(sed -n 2p both.txt)" "generate: 9 new tokens, " "the stats line" || return 1
    # a window of 8 over 30 positions: a ring of 8
    model mistral mistral window=8 || return 1
    hs generate --model mistral --prompt-ids 5,6,7,8,9,10,11,12,13,14 --max-new 20 --json
    expect_rc 0 "generate mistral" || return 1
    cache_matches_kv_bytes mistral 30 "$(jget out.txt cache_bytes)" || return 1
}

# An MLA model caches its latent and rope key only: generate's cache_bytes
# equals kv-bytes --model and the kv-bytes --mla-latent/--mla-rope line for
# the same shape (2 layers, kv_lora_rank 32, qk_rope_head_dim 8).
generate_mla_cache_is_the_latent() {
    model mla mla q_lora_rank=24 || return 1
    hs generate --model mla --prompt-ids 3,1,4,1,5 --max-new 11 --json
    expect_rc 0 "generate mla" || return 1
    local cb a
    cb=$(jget out.txt cache_bytes) a=$(jget out.txt ids)
    cache_matches_kv_bytes mla 16 "$cb" || return 1
    hs kv-bytes --layers 2 --kv-heads 1 --head-dim 1 --seq-len 16 --bytes 1 --mla-latent 32 \
        --mla-rope 8 --json
    expect_rc 0 "kv-bytes --mla-latent" || return 1
    local e1
    e1=$(jget out.txt mla_bytes)
    expect_eq "$e1" $((2 * 16 * (32 + 8))) "the mla line" || return 1
    [ "$cb" = $((e1 * 4)) ] || [ "$cb" = $((e1 * 8)) ] ||
        bad "mla: cache_bytes $cb is not kv-bytes --mla-latent 32 --mla-rope 8 ($e1 per byte) x 4 or 8" ||
        return 1
    hs generate --model mla --prompt-ids 3,1,4,1,5 --max-new 11 --json
    expect_eq "$(jget out.txt ids)" "$a" "mla greedy repeats" || return 1
}

greedy_and_seeded_sampling_repeat() {
    model llama llama || return 1
    local a b
    hs generate --model llama --prompt-ids 4,5 --max-new 12 --json
    a=$(jget out.txt ids)
    hs generate --model llama --prompt-ids 4,5 --max-new 12 --json
    expect_eq "$(jget out.txt ids)" "$a" "greedy repeats" || return 1
    hs generate --model llama --prompt-ids 4,5 --max-new 12 --temperature 1.5 --top-k 20 --seed 7 --json
    expect_rc 0 "sampling" || return 1
    b=$(jget out.txt ids)
    hs generate --model llama --prompt-ids 4,5 --max-new 12 --temperature 1.5 --top-k 20 --seed 7 --json
    expect_eq "$(jget out.txt ids)" "$b" "a seed repeats its draws" || return 1
    # byte-level model: text prompt without a tokenizer, text out
    hs generate --model llama --prompt "The " --max-new 4
    expect_rc 0 "byte-level --prompt" || return 1
    expect_grep "$OUT" "The " "prompt text echoed" || return 1
}

generate_refusals() {
    model gpt2 gpt2 || return 1
    expect_refused 1 generate "256" --model gpt2 --prompt-ids 1,256 --max-new 2 || return 1
    expect_refused 1 generate "context of 48" --model gpt2 --prompt-ids 1,2 --max-new 47 || return 1
    expect_refused 2 generate "--prompt-ids" --model gpt2 --prompt-ids 1,x || return 1
    expect_refused 2 generate "--prompt" --model gpt2 || return 1
    expect_refused 2 generate "--temperature" --model gpt2 --prompt-ids 1 --top-k 3 || return 1
}

# numpy reading the safetensors files: the converted k/v rows are the means
# of each group of the original's heads.
convert_tensor_means() {
    model gpt2 gpt2 || return 1
    model llama llama || return 1
    local src G
    for src in gpt2 llama; do
        for G in 2 1; do
            hs convert --model "$src" --kv-heads "$G" --out "$src.g$G" --json
            expect_rc 0 "convert $src --kv-heads $G" || return 1
            py - "$src" "$src.g$G" "$G" >check.txt 2>&1 <<'PYEOF' || bad "$src G=$G: $(tail -3 check.txt)" || return 1
import json, struct, sys
import numpy as np
src, dst, G = sys.argv[1], sys.argv[2], int(sys.argv[3])
def load(d):
    raw = open(d + "/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        assert v["dtype"] == "F32", v["dtype"]
        out[k] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=np.float32).reshape(v["shape"])
    return out, json.load(open(d + "/config.json"))
s, sc = load(src)
t, tc = load(dst)
assert tc["model_type"] == ("headscope" if sc["model_type"] == "gpt2" else sc["model_type"])
worst = 0.0
for l in range(100):
    if sc["model_type"] == "gpt2":
        if "h.%d.attn.c_attn.weight" % l not in s:
            break
        d = sc["n_embd"]; H = sc["n_head"]
        w = s["h.%d.attn.c_attn.weight" % l].astype(np.float64)   # Conv1D [in, 3d]
        b = s["h.%d.attn.c_attn.bias" % l].astype(np.float64)
        k, v = w[:, d:2 * d].T, w[:, 2 * d:].T                     # (d out, d in)
        bk, bv = b[d:2 * d], b[2 * d:]
        name = "h.%d.attn.%s_proj.%s"
    else:
        if "model.layers.%d.self_attn.k_proj.weight" % l not in s:
            break
        H = sc["num_key_value_heads"]
        k = s["model.layers.%d.self_attn.k_proj.weight" % l].astype(np.float64)
        v = s["model.layers.%d.self_attn.v_proj.weight" % l].astype(np.float64)
        bk = bv = None
        name = "model.layers.%d.self_attn.%s_proj.%s"
    dh = k.shape[0] // H
    r = H // G
    for x, which, kind in ((k, "k", "weight"), (v, "v", "weight"), (bk, "k", "bias"), (bv, "v", "bias")):
        if x is None:
            continue
        want = x.reshape(G, r, dh, -1).mean(axis=1).reshape(G * dh, -1).squeeze()
        got = t[name % (l, which, kind)].astype(np.float64)
        assert got.shape == want.shape, (got.shape, want.shape)
        worst = max(worst, np.abs(got - want).max())
assert l > 0, "no layers read"
assert worst < 1e-6, worst
print("ok", worst)
PYEOF
        done
    done
}

convert_all_heads_keeps_loss() {
    model gpt2 gpt2 || return 1
    model gpt_neox neox || return 1
    local src
    for src in gpt2 neox; do
        hs convert --model "$src" --kv-heads 4 --out "$src.g4"
        expect_rc 0 "convert $src --kv-heads 4" || return 1
        hs eval --model "$src" --data train.bin --seq-len 16 --max-batches 3 --json
        local a b
        a=$(jget out.txt loss)
        hs eval --model "$src.g4" --data train.bin --seq-len 16 --max-batches 3 --json
        b=$(jget out.txt loss)
        expect_eq "$b" "$a" "$src: loss after convert --kv-heads = heads" || return 1
    done
    # and a converted model uptrains
    hs convert --model gpt2 --kv-heads 2 --out gpt2.g2
    hs train --init gpt2.g2 --data train.bin --out gpt2.g2.up --steps 2 --batch 2 --seq-len 16
    expect_rc 0 "train --init on the converted model" || return 1
}

convert_refusals() {
    model gpt2 gpt2 || return 1
    expect_refused 1 convert "--kv-heads 3 does not divide layer 0" --model gpt2 --kv-heads 3 --out g3 || return 1
    expect_nofile g3/model.safetensors "refused conversion" || return 1
    hs convert --model gpt2 --kv-heads 2 --out g2
    expect_refused 1 convert "exists" --model gpt2 --kv-heads 2 --out g2 || return 1
    hs convert --model gpt2 --kv-heads 1 --out g2 --force
    expect_rc 0 "convert --force" || return 1
    expect_refused 2 convert "--kv-heads" --model gpt2 --out g5 || return 1
}

# experiment gqa: the uptraining table's rows in --json and in the index.
experiment_gqa_table() {
    model gpt2 gpt2 || return 1
    hs experiment gqa --model gpt2 --data train.bin --db runs.db --original-steps 20 --kv-heads 2,1 \
        --batch 2 --seq-len 16 --max-batches 4 --json
    expect_rc 0 "experiment gqa" || return 1
    expect_eq "$(jget out.txt uptrain_steps)" 1 "5% of 20 steps" || return 1
    local names
    names=$(py -c 'import sqlite3,sys
c = sqlite3.connect("runs.db")
print(",".join(r[0] for r in c.execute("select metric from head_metrics where layer = -1 order by metric")))')
    expect_eq "$names" "val_loss_kv_heads_1,val_loss_kv_heads_1_uptrained,val_loss_kv_heads_2,val_loss_kv_heads_2_uptrained,val_loss_mha,val_loss_mha_uptrained" \
        "index rows" || return 1
    expect_refused 2 experiment "--kv-heads 3" gqa --model gpt2 --data train.bin --db r2.db \
        --original-steps 20 --kv-heads 3 --batch 2 --seq-len 16 || return 1
    expect_nofile r2.db "refused experiment" || return 1
}

run_checks experiment_gqa_table generate_json_and_cache_bytes generate_mla_cache_is_the_latent \
    greedy_and_seeded_sampling_repeat generate_refusals \
    convert_tensor_means convert_all_heads_keeps_loss convert_refusals
