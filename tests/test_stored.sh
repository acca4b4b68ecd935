#!/bin/bash
# Weights as stored (SPEC §13, model/kernels/stored.h): every command that runs on
# the stored weights gives the same numbers, bit for bit, as the same
# command on their float copy (HEADSCOPE_WEIGHTS=float), for each way a
# checkpoint can hold them: F32 in place, BF16 and F16 in place, GPT-2's
# Conv1D transposed and NeoX's and Phi-3's fused rows re-laid out in BF16;
# mapped in place and copied into the model's pages.
# Usage: tests/test_stored.sh HEADSCOPE_BINARY FIXTURE_DIR [ONLY=checks]
SUITE=stored
. "$(dirname "$0")/lib.sh"

# to_bf16 SRC DST: SRC's checkpoint with every 2-D tensor rounded to BF16
# (to nearest even) and the 1-D ones kept in F32.
to_bf16() {
    mkdir -p "$2" && cp "$1/config.json" "$2/" || return 1
    py - "$1/model.safetensors" "$2/model.safetensors" <<'PY'
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
data = raw[8 + n:]
out, blobs, at = {}, [], 0
for name, t in head.items():
    if name == "__metadata__":
        continue
    a, b = t["data_offsets"]
    x = np.frombuffer(data[a:b], dtype={"F32": "<f4", "BF16": "<u2", "F16": "<f2"}[t["dtype"]])
    if t["dtype"] == "F32" and len(t["shape"]) == 2:
        u = x.view("<u4").astype(np.uint64)
        blob = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()
        dtype = "BF16"
    else:
        blob, dtype = x.tobytes(), t["dtype"]
    out[name] = {"dtype": dtype, "shape": t["shape"], "data_offsets": [at, at + len(blob)]}
    blobs.append(blob)
    at += len(blob)
h = json.dumps(out).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
}

# numbers FILE: the command's JSON without what times it or names its run
numbers() {
    py - "$1" <<'PY'
import json, sys
def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items()
                if k not in ("seconds", "tokens_per_s", "prefill_s", "step_tokens_per_s", "run_id", "db")}
    return [strip(v) for v in x] if isinstance(x, list) else x
print(json.dumps(strip(json.load(open(sys.argv[1]))), sort_keys=True))
PY
}

# same LABEL CMD...: CMD's JSON as stored and on the float copy, equal but
# for its times and run ids; with --db, its metric rows equal too.
same() {
    local label=$1 db=$2 s f
    shift 2
    rm -f s.db f.db
    hs "$@" ${db:+--db s.db}
    expect_rc 0 "$label (as stored)" || return 1
    s=$(numbers out.txt)
    HEADSCOPE_WEIGHTS=float hs "$@" ${db:+--db f.db}
    expect_rc 0 "$label (float copy)" || return 1
    f=$(numbers out.txt)
    [ -n "$s" ] && [ "$s" = "$f" ] ||
        bad "$label: output differs from the float copy's: ${s:0:200} / ${f:0:200}" || return 1
    [ -z "$db" ] && return 0
    local q="select metric, layer, head, quote(value), quote(stderr) from head_metrics order by 1, 2, 3"
    [ "$(sqlite3 s.db "$q")" = "$(sqlite3 f.db "$q")" ] ||
        bad "$label: head_metrics differ from the float copy's" || return 1
}

# prompt_tokens PROMPTS: d.bin, a token shard of PROMPTS' clean and corrupt
# ids four times over
prompt_tokens() {
    py -c 'import json, struct, sys
ids = []
for line in open(sys.argv[1]):
    r = json.loads(line); ids += r["clean_ids"] + r["corrupt_ids"]
ids *= 4
open("d.bin", "wb").write(struct.pack("<256i", 20240520, 1, len(ids), *[0] * 253) +
                          struct.pack("<%dH" % len(ids), *ids))' "$1"
}

# commands MODEL PROMPTS [few]: the commands of SPEC §13 on MODEL (few:
# eval, generate and patch only: every command runs on GPT-2's BF16 copy,
# mapped, and on Llama's BF16, copied; the layouts' own code is the load's,
# which eval, generate and patch all go through)
commands() {
    local m=$1 p=$2 few=${3:-} ids
    ids=$(py -c 'import json,sys; print(",".join(map(str, json.loads(open(sys.argv[1]).readline())["clean_ids"])))' "$p")
    prompt_tokens "$p"
    same "$m eval" "" eval --model "$m" --data d.bin --batch 2 --seq-len 6 --json || return 1
    same "$m generate" "" generate --model "$m" --prompt-ids "$ids" --max-new 4 --json ||
        return 1
    # random prompts: a weak premise (SPEC §21) is beside the point here
    same "$m patch" db patch --model "$m" --prompts "$p" --site z,resid_pre --json \
        --allow-weak-premise || return 1
    [ -n "$few" ] && return 0
    same "$m atp" db atp --model "$m" --prompts "$p" --site z,q,k,v --star --json \
        --allow-weak-premise || return 1
    same "$m dla" db dla --model "$m" --prompts "$p" --json || return 1
    same "$m logit-lens" db logit-lens --model "$m" --prompts "$p" --json || return 1
    same "$m ablate" db ablate --model "$m" --data d.bin --batch 2 --seq-len 6 --json || return 1
    same "$m importance" db importance --model "$m" --data d.bin --batch 2 --seq-len 6 --json ||
        return 1
    same "$m circuit" db circuit --model "$m" --prompts "$p" --method eap-ig --ig-steps 2 \
        --top-n 1,4 --json --allow-weak-premise || return 1
    local q="select metric, sender, receiver, quote(value) from edge_metrics order by 1, 2, 3"
    [ "$(sqlite3 s.db "$q")" = "$(sqlite3 f.db "$q")" ] ||
        bad "$m circuit: edge_metrics differ from the float copy's" || return 1
    rm -f s.h5 f.h5
    hs capture --model "$m" --data d.bin --out s.h5 --batch 2 --seq-len 6 --max-batches 2
    expect_rc 0 "$m capture (as stored)" || return 1
    HEADSCOPE_WEIGHTS=float hs capture --model "$m" --data d.bin --out f.h5 --batch 2 --seq-len 6 \
        --max-batches 2
    expect_rc 0 "$m capture (float copy)" || return 1
    py - s.h5 f.h5 <<'PY' || bad "$m capture: $(cat cmp.txt)"
import sys
import h5py
import numpy as np
a, b, bad = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r"), []
def walk(name, x):
    if isinstance(x, h5py.Dataset) and not np.array_equal(x[()], b[name][()]):
        bad.append(name)
a.visititems(walk)
open("cmp.txt", "w").write("maps differ from the float copy's: %s" % bad[:3])
sys.exit(1 if bad else 0)
PY
}

small_prompts() { # ids below 5: every fixture's vocabulary holds them
    py -c 'import json
for i in range(3):
    print(json.dumps({"clean_ids": [0, 1 + i % 2, 2, 3, 1, 2], "corrupt_ids": [0, 4, 2 + i % 2, 3, 4, 2], "answer_id": 1, "wrong_id": 4}))' >small.jsonl
}

gpt2_f32_and_bf16() {
    commands "$FIX/models/gpt2_tiny" "$FIX/causal/gpt2.jsonl" few || return 1
    to_bf16 "$FIX/models/gpt2_tiny" g16 || bad "could not write the bf16 copy" || return 1
    commands g16 "$FIX/causal/gpt2.jsonl"
}

# each place the stored weights can be kept in (checkpoint.h): read into
# the model's own pages, and in place in the mapped file, for every command
llama_bf16_and_f16() {
    small_prompts
    HEADSCOPE_WEIGHTS=copied commands "$FIX/models/llama_gqa_bf16" small.jsonl || return 1
    HEADSCOPE_WEIGHTS=mapped commands "$FIX/models/llama_gqa_f16" small.jsonl few
}

fused_rows() {
    small_prompts
    commands "$FIX/families/neox_bf16" small.jsonl few || return 1
    to_bf16 "$FIX/families3/phi3" phi3 || bad "could not write the bf16 copy" || return 1
    commands phi3 small.jsonl few
}

# The bf16 copy holds its matrices at half the float copy's bytes, and the
# memory plan's parameter bytes are what the load holds.
stored_bytes() {
    to_bf16 "$FIX/models/gpt2_tiny" g16 || return 1
    hs info --model g16 --batch 1 --seq-len 8 --json
    expect_rc 0 "info" || return 1
    local p s
    p=$(jget out.txt memory_plan parameter_bytes)
    s=$(jget out.txt memory_plan stored_bytes)
    # the file's bytes, but its position table's: widened to floats (2 bytes more each)
    expect_eq "$p" "$(py -c 'import json, struct, sys
raw = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
print(sum((b - a) * (2 if k.endswith("wpe.weight") else 1) for k, t in h.items()
          for a, b in [t["data_offsets"]]))' g16/model.safetensors)" "parameter bytes" || return 1
    expect_eq "$s" "$(($(stat -c %s g16/model.safetensors) - 8 - $(py -c 'import struct, sys
print(struct.unpack("<Q", open(sys.argv[1], "rb").read(8))[0])' g16/model.safetensors)))" \
        "stored bytes: the file's data" || return 1
}

# --compute bf16 (gemm.h): eval's loss moves from f32's by less than the
# bound's scale (activations rounded to bfloat16 in the bf16 products);
# --compute f32 is the default's, bit for bit; on a CPU without
# AVX512-BF16 bf16 is refused, and an unknown mode always.
compute_bf16() {
    local m=$FIX/models/llama_gqa_bf16 f b
    small_prompts
    prompt_tokens small.jsonl
    hs eval --model "$m" --data d.bin --batch 2 --seq-len 6 --json
    expect_rc 0 "eval" || return 1
    f=$(jget out.txt loss)
    hs eval --model "$m" --data d.bin --batch 2 --seq-len 6 --json --compute f32
    expect_rc 0 "eval --compute f32" || return 1
    expect_eq "$(jget out.txt loss)" "$f" "--compute f32 is the default" || return 1
    hs eval --model "$m" --data d.bin --batch 2 --seq-len 6 --json --compute fp8
    expect_rc 2 "--compute fp8" || return 1
    expect_grep "$ERR" "option --compute: 'fp8' is not f32 or bf16" "--compute fp8" || return 1
    hs eval --model "$m" --data d.bin --batch 2 --seq-len 6 --json --compute bf16
    if ! grep -qw avx512_bf16 /proc/cpuinfo; then
        expect_rc 2 "--compute bf16 without AVX512-BF16" || return 1
        expect_grep "$ERR" "no AVX512-BF16" "--compute bf16"
        return
    fi
    expect_rc 0 "eval --compute bf16" || return 1
    b=$(jget out.txt loss)
    py -c 'import sys; f, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(not (f != b and abs(f - b) <= 1e-3 * abs(f)))' "$f" "$b" ||
        bad "--compute bf16: loss $b against f32's $f (expected within 1e-3, and not equal: the bf16 products ran)"
}

# packed_same LABEL DB CMD...: CMD with the weights pre-packed (commands of
# many forwards: cli_prepack) and with HEADSCOPE_PREPACK=0, the GEMM pinned
# to the panels' kernel: the same JSON and rows, bit for bit.
packed_same() {
    local label=$1 db=$2 kern=avx2 s f
    shift 2
    grep -qw avx512f /proc/cpuinfo && kern=avx512
    rm -f s.db f.db
    HEADSCOPE_GEMM=$kern hs "$@" ${db:+--db s.db}
    expect_rc 0 "$label (pre-packed)" || return 1
    s=$(numbers out.txt)
    HEADSCOPE_GEMM=$kern HEADSCOPE_PREPACK=0 hs "$@" ${db:+--db f.db}
    expect_rc 0 "$label (HEADSCOPE_PREPACK=0)" || return 1
    f=$(numbers out.txt)
    [ -n "$s" ] && [ "$s" = "$f" ] || bad "$label: pre-packed differs: ${s:0:200} / ${f:0:200}" ||
        return 1
    [ -z "$db" ] && return 0
    local q="select metric, layer, head, quote(value), quote(stderr) from head_metrics order by 1, 2, 3"
    [ "$(sqlite3 s.db "$q")" = "$(sqlite3 f.db "$q")" ] ||
        bad "$label: head_metrics differ when pre-packed" || return 1
}

# Pre-packed weights (gemm.h, hs_pack_weight) in the commands that run many
# forwards (and backwards: atp, importance read the input gradients' panels
# too), BF16 and F32 as stored, at shapes the panels' edges cut: the
# numbers of the same kernel packing each weight on every call.
prepacked() {
    small_prompts
    prompt_tokens small.jsonl
    local m
    for m in "$FIX/models/llama_gqa_bf16" "$FIX/models/gpt2_tiny"; do
        packed_same "$m patch" db patch --model "$m" --prompts small.jsonl --site z --json \
            --allow-weak-premise || return 1
        packed_same "$m ablate" db ablate --model "$m" --data d.bin --batch 2 --seq-len 6 --json ||
            return 1
        packed_same "$m atp" db atp --model "$m" --prompts small.jsonl --site z --json \
            --allow-weak-premise || return 1
        packed_same "$m importance" db importance --model "$m" --data d.bin --batch 2 \
            --seq-len 6 --json || return 1
        packed_same "$m eval" "" eval --model "$m" --data d.bin --batch 1 --seq-len 6 \
            --max-batches 3 --json || return 1
    done
    if grep -qw avx512_bf16 /proc/cpuinfo; then # panels of bfloat16 pairs
        m=$FIX/models/llama_gqa_bf16
        packed_same "$m eval --compute bf16" "" eval --model "$m" --data d.bin --batch 1 \
            --seq-len 6 --max-batches 3 --compute bf16 --json || return 1
    fi
    # an eval of many batches packs (where the panels do not fit, stderr says
    # so); an eval of one does not
    local plan packed limit
    hs info --model "$m" --batch 1 --seq-len 6 --json
    plan=$(jget out.txt memory_plan eval) packed=$(jget out.txt memory_plan packed_bytes)
    limit=$((plan + packed / 2))
    HEADSCOPE_MEMORY_LIMIT=$limit hs eval --model "$m" --data d.bin --batch 1 --seq-len 6 \
        --max-batches 3 --json
    expect_rc 0 "eval of 3 batches within $limit bytes" || return 1
    expect_grep "$ERR" "eval: note: the weights are read as stored, not pre-packed" \
        "eval of 3 batches" || return 1
    HEADSCOPE_MEMORY_LIMIT=$limit hs eval --model "$m" --data d.bin --batch 1 --seq-len 6 \
        --max-batches 1 --json
    expect_rc 0 "eval of 1 batch within $limit bytes" || return 1
    [ -z "$ERR" ] || bad "eval of one batch: $ERR" || return 1
}

run_checks gpt2_f32_and_bf16 llama_bf16_and_f16 fused_rows stored_bytes compute_bf16 prepacked
