"""The SentencePiece side of bench/tokenizer.sh: trains two models on TEXT
with Debian's python3-sentencepiece (a Llama-2-style BPE: 8,000 pieces, byte
fallback, identity normalizer, extra whitespace kept; a T5-style Unigram:
8,000 pieces, nmt_nfkc), writes the Unigram one as a tokenizer.json too (as
transformers converts T5's: tests/gen_spm_fixtures.py), then times
sentencepiece's encode of the whole text, REPS times each (the median, one
call on the whole text as headscope's), printing one JSON line per model.

    /usr/bin/python3 bench/tokenizer_spm.py TEXT OUTDIR REPS
"""
import json
import os
import statistics
import sys
import time

import sentencepiece as spm

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from gen_spm_fixtures import charsmap_of, hf_json  # noqa: E402

text_path, out, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(text_path, encoding="utf-8") as f:
    text = f.read()
for name, kw in [("bpe", dict(model_type="bpe", byte_fallback=True, remove_extra_whitespaces=False,
                              normalization_rule_name="identity", character_coverage=0.9999)),
                 ("uni", dict(model_type="unigram"))]:
    prefix = os.path.join(out, name)
    spm.SentencePieceTrainer.train(input=text_path, model_prefix=prefix, vocab_size=8000,
                                   minloglevel=2, num_threads=2, input_sentence_size=200000,
                                   hard_vocab_limit=False,
                                   **kw)
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    if name == "uni":
        with open(prefix + ".json", "w", encoding="utf-8") as f:
            json.dump(hf_json(sp, charsmap_of(prefix + ".model"), "t5"), f)
    times, n = [], 0
    for _ in range(reps):
        t0 = time.perf_counter()
        n = len(sp.encode(text))
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    b = len(text.encode())
    print(json.dumps({"tokenizer": "sentencepiece " + name, "bytes": b, "tokens": n, "reps": reps,
                      "median_s": med, "mb_per_s": b / med / 1e6}))
