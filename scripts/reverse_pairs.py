#!/usr/bin/env python3
"""A toy translation task from a text (README's encoder-decoder study):
runs of the text's 400 most common words between punctuation, cut into
phrases of 3 to 8 words, each paired with its words in reverse order.

    python3 scripts/reverse_pairs.py CORPUS OUTDIR

writes OUTDIR/train.jsonl and val.jsonl (SPEC section 17's pairs, the first
500 shuffled phrases held out), tokenizer.json (a Unigram model of one piece
per word, <pad> 0, </s> 1, <unk> 2) and config.json (a Marian-shaped model:
2 + 2 layers, 4 heads each, d_model 64, sinusoidal positions up to 16).
Deterministic: the phrases are cut and shuffled with a seeded generator.
Python's standard library only."""
import collections
import json
import os
import random
import re
import sys

corpus, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
text = re.findall(r"[a-z]+|[.!?;:,\n]", open(corpus, errors="replace").read().lower())
top = [w for w, _ in collections.Counter(t for t in text if t.isalpha()).most_common(400)]
keep, rng, rows, run = set(top), random.Random(1), set(), []
for t in text + ["."]:
    if t in keep:
        run.append(t)
        continue
    while len(run) >= 3:
        n = min(len(run), rng.randint(3, 8))
        rows.add(" ".join(run[:n]))
        run = run[n:]
    run = []
rows = sorted(rows)
rng.shuffle(rows)


def pair(s):
    return json.dumps({"source": s, "target": " ".join(s.split()[::-1])}) + "\n"


with open(os.path.join(out, "train.jsonl"), "w") as f:
    f.writelines(map(pair, rows[500:]))
with open(os.path.join(out, "val.jsonl"), "w") as f:
    f.writelines(map(pair, rows[:500]))
pieces = [["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0]] + [["\u2581" + w, -1.0] for w in top]
meta = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
special = [{"id": i, "content": p[0], "special": True, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False} for i, p in enumerate(pieces[:3])]
with open(os.path.join(out, "tokenizer.json"), "w") as f:
    json.dump({"version": "1.0", "added_tokens": special, "normalizer": None,
               "pre_tokenizer": meta, "post_processor": None, "decoder": meta,
               "model": {"type": "Unigram", "unk_id": 2, "vocab": pieces,
                         "byte_fallback": False}}, f)
V = len(pieces)
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump({"model_type": "marian", "architectures": ["MarianMTModel"], "vocab_size": V,
               "decoder_vocab_size": V, "d_model": 64, "encoder_layers": 2,
               "decoder_layers": 2, "encoder_attention_heads": 4,
               "decoder_attention_heads": 4, "encoder_ffn_dim": 256, "decoder_ffn_dim": 256,
               "max_position_embeddings": 16, "activation_function": "swish",
               "scale_embedding": True, "pad_token_id": 0, "eos_token_id": 1,
               "decoder_start_token_id": 0, "init_std": 0.02,
               "share_encoder_decoder_embeddings": True, "is_encoder_decoder": True}, f,
              indent=1)
print(f"{len(rows)} phrases of the {V - 3} commonest words: {len(rows) - 500} to train on, "
      f"500 held out", file=sys.stderr)
