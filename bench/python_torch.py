#!/usr/bin/env python3
"""The PyTorch side of bench/python.sh: the same GPT-2 forward written in
torch (float32, inference mode) keeping every layer's post-softmax pattern
as TransformerLens's run_with_cache does with a names filter of the
patterns (the hook stores the tensor; nothing is copied), on the model and
ids bench/python_hs.py saved (the GPT-2 layout of model.safetensors: Conv1D
c_attn / c_proj / c_fc, gelu_new, pre-LayerNorm, tied wte).

    /usr/bin/python3 bench/python_torch.py --model DIR --reps 7 --threads 2

Prints one JSON line: the median seconds of the forward with the patterns
kept (run_with_cache_s), every repetition's, and the largest differences of
the patterns and logits from headscope's (DIR/patterns.npy, logits.npy).
"""
import argparse
import json
import math
import os
import struct
import time

import numpy as np
import torch
import torch.nn.functional as F


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    out = {}
    for name, e in hdr.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", name
        a, b = e["data_offsets"]
        arr = np.frombuffer(raw[8 + n + a:8 + n + b], dtype="<f4").reshape(e["shape"])
        out[name.replace("transformer.", "")] = torch.from_numpy(arr.copy())
    return out


def forward(w, c, ids, cache):
    L, H, eps = c["n_layer"], c["n_head"], c.get("layer_norm_epsilon", 1e-5)
    B, T = ids.shape
    x = w["wte.weight"][ids] + w["wpe.weight"][:T]
    d = x.shape[-1]
    dh = d // H
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        p = "h.%d." % l
        h = F.layer_norm(x, (d,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = torch.addmm(w[p + "attn.c_attn.bias"], h.view(-1, d), w[p + "attn.c_attn.weight"])
        q, k, v = qkv.view(B, T, 3, H, dh).permute(2, 0, 3, 1, 4)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
        pattern = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)
        cache["blocks.%d.attn.hook_pattern" % l] = pattern  # the hook keeps the tensor
        z = (pattern @ v).transpose(1, 2).reshape(B * T, d)
        x = x + torch.addmm(w[p + "attn.c_proj.bias"], z, w[p + "attn.c_proj.weight"]).view(B, T, d)
        h = F.layer_norm(x, (d,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        f = F.gelu(torch.addmm(w[p + "mlp.c_fc.bias"], h.view(-1, d), w[p + "mlp.c_fc.weight"]),
                   approximate="tanh")
        x = x + torch.addmm(w[p + "mlp.c_proj.bias"], f, w[p + "mlp.c_proj.weight"]).view(B, T, d)
    x = F.layer_norm(x, (d,), w["ln_f.weight"], w["ln_f.bias"], eps)
    return x @ w["wte.weight"].T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    c = json.load(open(os.path.join(a.model, "config.json")))
    w = read_safetensors(os.path.join(a.model, "model.safetensors"))
    ids = torch.from_numpy(np.load(os.path.join(a.model, "ids.npy")).astype(np.int64))
    times = []
    with torch.inference_mode():
        for r in range(a.reps + 1):  # r = 0: the warm-up
            cache = {}
            t0 = time.perf_counter()
            logits = forward(w, c, ids, cache)
            t1 = time.perf_counter()
            if r:
                times.append(t1 - t0)
    want = np.load(os.path.join(a.model, "patterns.npy"))
    got = np.stack([cache["blocks.%d.attn.hook_pattern" % l][0].numpy() for l in range(c["n_layer"])])
    print(json.dumps({"impl": "torch", "threads": torch.get_num_threads(),
                      "torch": torch.__version__, "run_with_cache_s": float(np.median(times)),
                      "run_with_cache_s_all": times,
                      "max_pattern_diff": float(np.abs(got - want).max()),
                      "max_logit_diff": float(np.abs(logits[0].numpy() -
                                                     np.load(os.path.join(a.model, "logits.npy"))).max())}))


if __name__ == "__main__":
    main()
