#!/usr/bin/env python3
"""The headscope side of bench/python.sh: run_with_cache of every
hook_pattern of a GPT-2-shaped model (hs.Model.new("gpt2", ...): the model
bench_python builds in C, same seed) on one sequence, through the Python
package, and the plain forward model(ids).

    PYTHONPATH=python /usr/bin/python3 bench/python_hs.py --config 12,768,12,50257,256 \\
        --reps 7 --threads 2 [--save DIR]

Prints one JSON line: median seconds of run_with_cache (run_with_cache_s)
and of model(ids) (forward_s) after one warm-up each, and every repetition's.
--save DIR writes the model, the ids (ids.npy) and the cached patterns
(patterns.npy, (L, H, T, T)) for bench/python_torch.py's cross-check.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import headscope as hs  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="12,768,12,50257,256")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--save")
    a = ap.parse_args()
    L, d, H, V, T = (int(v) for v in a.config.split(","))
    hs.set_threads(a.threads)
    m = hs.Model.new("gpt2", seed=a.seed, n_layer=L, d_model=d, n_head=H, vocab_size=V,
                     n_ctx=max(T, 1024))
    ids = np.random.default_rng(a.seed).integers(0, V, size=(1, T)).astype(np.int32)
    names = ["blocks.%d.attn.hook_pattern" % l for l in range(L)]
    cache_s, fwd_s = [], []
    for r in range(a.reps + 1):  # r = 0: the warm-up
        t0 = time.perf_counter()
        logits, cache = m.run_with_cache(ids, names=names)
        t1 = time.perf_counter()
        plain = m(ids)
        t2 = time.perf_counter()
        if r:
            cache_s.append(t1 - t0)
            fwd_s.append(t2 - t1)
    assert np.array_equal(logits, plain)
    if a.save:
        m.save(a.save)
        np.save(os.path.join(a.save, "ids.npy"), ids)
        np.save(os.path.join(a.save, "patterns.npy"), np.stack([cache[n][0] for n in names]))
        np.save(os.path.join(a.save, "logits.npy"), logits[0])
    print(json.dumps({"impl": "headscope_python", "L": L, "d": d, "H": H, "V": V, "T": T,
                      "threads": hs.get_threads(), "run_with_cache_s": float(np.median(cache_s)),
                      "forward_s": float(np.median(fwd_s)), "run_with_cache_s_all": cache_s,
                      "forward_s_all": fwd_s}))


if __name__ == "__main__":
    main()
