#!/usr/bin/env python3
"""Writes a Llama-shaped checkpoint in the Hugging Face layout, BF16, for the
benchmarks and tests at real sizes (bench/info.sh, bench/scale.sh,
tests/test_families.sh): DIR/config.json and one DIR/model.safetensors.

    scripts/llama_bf16.py DIR D_MODEL D_FF LAYERS HEADS KV_HEADS VOCAB TIED FILL [--counts FILE]

FILL: `holes` (every tensor a hole of a sparse file: zeros, no disk),
`o_proj` (holes but each o_proj, random: every head live), or `random`
(every tensor random but the norms, whose weights are 1). The random values
are one block of bf16 numbers of magnitude 1/128 to 1/64 and random sign,
repeated. --counts FILE: one line "parameters float32_bytes stored_bytes
loaded_bytes", counted from the shapes (loaded: what headscope holds with
the weights as stored, the matrices in bf16 and the norms in float32).
"""
import json
import os
import struct
import sys


def main():
    args = sys.argv[1:]
    counts = None
    if "--counts" in args:
        i = args.index("--counts")
        counts = args[i + 1]
        del args[i:i + 2]
    if len(args) != 9 or args[8] not in ("holes", "o_proj", "random"):
        sys.exit(__doc__)
    dir, fill = args[0], args[8]
    d, f, L, H, G, V, tied = map(int, args[1:8])
    os.makedirs(dir, exist_ok=True)
    json.dump({"model_type": "llama", "hidden_size": d, "intermediate_size": f,
               "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": G,
               "vocab_size": V, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
               "rope_theta": 500000.0, "tie_word_embeddings": bool(tied)},
              open(dir + "/config.json", "w"))
    kv = d // H * G
    shapes = [("model.embed_tokens.weight", [V, d]), ("model.norm.weight", [d])]
    if not tied:
        shapes.append(("lm_head.weight", [V, d]))
    for l in range(L):
        p = "model.layers.%d." % l
        shapes += [(p + "input_layernorm.weight", [d]), (p + "post_attention_layernorm.weight", [d]),
                   (p + "self_attn.q_proj.weight", [d, d]), (p + "self_attn.k_proj.weight", [kv, d]),
                   (p + "self_attn.v_proj.weight", [kv, d]), (p + "self_attn.o_proj.weight", [d, d]),
                   (p + "mlp.gate_proj.weight", [f, d]), (p + "mlp.up_proj.weight", [f, d]),
                   (p + "mlp.down_proj.weight", [d, f])]
    head, at = {}, 0
    for name, shape in shapes:
        n = 2 * shape[0] * (shape[1] if len(shape) > 1 else 1)
        head[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [at, at + n]}
        at += n
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)  # as the safetensors writer pads it: the data 8-byte aligned
    r = os.urandom(1 << 21)
    block = bytes(b for i in range(0, len(r), 2) for b in (r[i], (r[i + 1] & 0x80) | 0x3c))
    with open(dir + "/model.safetensors", "wb") as out:
        out.write(struct.pack("<Q", len(h)) + h)
        out.truncate(8 + len(h) + at)
        for name, shape in shapes:
            a, b = head[name]["data_offsets"]
            if fill == "holes" or (fill == "o_proj" and not name.endswith("o_proj.weight")):
                continue
            out.seek(8 + len(h) + a)
            if name.endswith("norm.weight"):
                out.write(b"\x80\x3f" * ((b - a) // 2))
                continue
            n = b - a
            while n > 0:
                k = min(n, len(block))
                out.write(block[:k])
                n -= k
    if counts:
        loaded = sum(n * (2 if len(shape) == 2 else 4)
                     for shape in (s for _, s in shapes)
                     for n in [shape[0] * (shape[1] if len(shape) > 1 else 1)])
        print(at // 2, 2 * at, at, loaded, file=open(counts, "w"))


if __name__ == "__main__":
    main()
