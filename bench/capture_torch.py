#!/usr/bin/env python3
"""The natural Python capture workflow, for comparison with `headscope capture`.

A PyTorch user who wants every per-head attention map on disk runs the model
forward with the maps kept (here: bench/train_torch.py's model, whose attention
modules stash their post-softmax maps), then writes them with h5py in the same
layout headscope uses (SPEC §6): /tokens int32 [N,T] and /layer_LL/attn
[N,H,T,T], chunked (1,1,T,T), extendible on N, float32 or float16, optionally
shuffle+gzip at the same level. One batch at a time, as capture does.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/capture_torch.py \\
        --threads 1 --config 4,256,8,512 --batch 2 --batches 8 --out /tmp/t.h5 --dtype f16

Prints one JSON line with the same keys as bench_capture (forward_s: the same
forward without writing anything; capture_s: forward + conversion + h5py).
"""
import argparse
import json
import os
import sys
import time

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_torch  # noqa: E402  (the model definition shared with bench/train.sh)


def keep_maps(model):
    """Make every attention module stash its maps (what a user would patch in)."""
    store = []
    softmax = torch.nn.functional.softmax

    def stash(x, dim=-1, **kw):
        y = softmax(x, dim=dim, **kw)
        if x.dim() == 4:
            store.append(y)
        return y

    return store, stash


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--config", default="4,256,8,512")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--dtype", choices=["f32", "f16"], default="f32")
    ap.add_argument("--compress", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    L, d, H, T = (int(v) for v in a.config.split(","))
    B, K = a.batch, a.batches
    torch.manual_seed(0)
    model = train_torch.GPT(a.vocab, L, d, H, H, T).eval()
    tok = torch.randint(0, a.vocab, (K, B, T))

    with torch.no_grad():
        model(tok[0])  # warm-up
        t0 = time.perf_counter()
        for k in range(K):
            model(tok[k])
        forward_s = time.perf_counter() - t0

        store, stash = keep_maps(model)
        dtype = np.float16 if a.dtype == "f16" else np.float32
        kw = dict(compression="gzip", compression_opts=a.compress, shuffle=True) if a.compress else {}
        t0 = time.perf_counter()
        train_torch.F.softmax = stash  # the attention modules call F.softmax
        with h5py.File(a.out, "w") as f:
            f.attrs["format"] = "headscope-maps"
            f.attrs["version"] = 1
            f.attrs["seq_len"] = T
            f.attrs["complete"] = 0
            toks = f.create_dataset("tokens", (0, T), maxshape=(None, T), dtype=np.int32,
                                    chunks=(64, T))
            dsets = [f.create_dataset(f"layer_{l:02d}/attn", (0, H, T, T),
                                      maxshape=(None, H, T, T), chunks=(1, 1, T, T),
                                      dtype=dtype, **kw) for l in range(L)]
            n = 0
            for k in range(K):
                store.clear()
                model(tok[k])
                toks.resize(n + B, axis=0)
                toks[n:n + B] = tok[k].numpy().astype(np.int32)
                for l, att in enumerate(store):
                    dsets[l].resize(n + B, axis=0)
                    dsets[l][n:n + B] = att.numpy().astype(dtype)
                n += B
            f.attrs["complete"] = 1
        train_torch.F.softmax = torch.nn.functional.softmax
        capture_s = time.perf_counter() - t0
    maps = K * B * L * H
    mb = maps * T * T * (2 if a.dtype == "f16" else 4) / 1e6
    print(json.dumps({"impl": "torch_h5py", "threads": a.threads, "L": L, "d": d, "H": H, "T": T,
                      "B": B, "batches": K, "dtype": a.dtype, "compress": a.compress,
                      "forward_s": round(forward_s, 4), "capture_s": round(capture_s, 4),
                      "maps_per_s": round(maps / capture_s, 1), "mb_per_s": round(mb / capture_s, 1),
                      "file_mb": round(os.path.getsize(a.out) / 1e6, 1)}))


if __name__ == "__main__":
    main()
