"""The Python workflow for Clark-style pattern statistics, for bench/patterns.sh:
run the model keeping every layer's full (B, H, T, T) attention maps (what
output_attentions=True gives), then reduce them with tensor ops. Same
checkpoint (the PyTorch reference forward of scripts/oracle/gen_models.py, in
float32), same tokens, same statistics as `headscope patterns` (SPEC §5).

    /usr/bin/python3 bench/patterns_torch.py --model DIR --data FILE.bin --seq-len T \
        --batches N [--threads N] [--mem-limit-gib G] [--stats-out FILE]

Prints one JSON line: wall seconds, peak RSS (MiB), or "oom": true when the
maps did not fit under --mem-limit-gib (RLIMIT_AS).
"""
import argparse
import importlib.util
import json
import math
import os
import resource
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "gen_models", os.path.join(HERE, "..", "scripts", "oracle", "gen_models.py"))
gm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gm)

MAPS = []


def keeping_attend(q, k, v):
    """gen_models.causal_attend, keeping the softmax weights (output_attentions)."""
    Tn, dh = q.shape[-2], q.shape[-1]
    s = q @ k.transpose(-1, -2) / math.sqrt(dh)
    blocked = torch.ones(Tn, Tn, dtype=torch.bool).triu(1)
    att = s.masked_fill(blocked, float("-inf")).softmax(-1)
    MAPS.append(att)
    return att @ v


def stats(att):
    """(B,H,T,T) -> dict of (H,) means over queries and sequences."""
    T = att.shape[-1]
    t = torch.arange(T)
    ent = -(att * torch.log(att.clamp_min(1e-45))).sum(-1)
    out = {
        "entropy": ent,
        "self": att.diagonal(0, -2, -1),
        "prev_token": torch.cat([torch.zeros(att.shape[:2] + (1,)), att.diagonal(-1, -2, -1)], -1),
        "next_token": torch.cat([att.diagonal(1, -2, -1), torch.zeros(att.shape[:2] + (1,))], -1),
        "first_token": att[..., 0],
        "distance": (att * (t[:, None] - t[None, :]).abs().to(att.dtype)).sum(-1),
    }
    return {k: v.mean(-1).mean(0) for k, v in out.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--batches", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--mem-limit-gib", type=float, default=0)
    ap.add_argument("--stats-out")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_default_dtype(torch.float32)
    with open(os.path.join(a.model, "config.json")) as f:
        c = json.load(f)
    W = {n: t.float() for n, (_, t) in
         gm.read_safetensors(os.path.join(a.model, "model.safetensors")).items()}
    raw = open(a.data, "rb").read()
    toks = np.frombuffer(raw[1024:], "<u2").astype(np.int64)
    T = a.seq_len
    if a.mem_limit_gib:
        lim = int(a.mem_limit_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    gm.causal_attend = keeping_attend
    gm.DT = torch.float32  # the reference's RoPE tables, in the benchmark's precision
    res = {"impl": "torch_full_maps", "T": T, "threads": a.threads, "batches": a.batches}
    t0 = time.perf_counter()
    sums = None
    try:
        with torch.no_grad():
            for b in range(a.batches):
                idx = torch.from_numpy(toks[b * T:(b + 1) * T].copy()).reshape(1, T)
                MAPS.clear()
                gm.hs_forward(W, c, idx)
                s = [stats(m) for m in MAPS]
                sums = s if sums is None else [{k: x[k] + y[k] for k in x} for x, y in zip(sums, s)]
                MAPS.clear()
    except (RuntimeError, MemoryError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        if not isinstance(e, MemoryError) and "alloc" not in msg and "memory" not in msg:
            raise
        res.update(oom=True, error=msg[:120])
    res["seconds"] = time.perf_counter() - t0
    res["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if sums is not None and "oom" not in res and a.stats_out:
        with open(a.stats_out, "w") as f:
            for l, s in enumerate(sums):
                for k, v in s.items():
                    for h, x in enumerate(v.tolist()):
                        f.write(f"{l} {h} {k} {x / a.batches:.9g}\n")
    print(json.dumps(res))


if __name__ == "__main__":
    sys.exit(main())
