#!/usr/bin/env python3
"""The torch side of bench/scale.sh: a Llama checkpoint in the Hugging Face
layout (config.json + one BF16 model.safetensors) read with numpy (no
safetensors package) and run in PyTorch as Hugging Face's LlamaForCausalLM
computes it (RMSNorm, rotary positions with rotate_half, grouped-query
attention, SwiGLU), in float32 or bfloat16; the mean next-token
cross-entropy of one sequence read from a headscope token shard.

    /usr/bin/python3 bench/scale_torch.py --model DIR --tokens FILE.bin --seq-len 512 \\
        --threads 2 [--dtype float32|bfloat16] [--reps 3]

Prints one JSON line: load_s, forward_s (median), loss, peak_rss_kb.
"""
import argparse
import json
import resource
import statistics
import struct
import time

import numpy as np
import torch


def read_tokens(path, n):
    raw = open(path, "rb").read()
    width = 2 if int.from_bytes(raw[0:4], "little") == 20240520 else 4
    ids = np.frombuffer(raw[1024:], dtype=np.uint16 if width == 2 else np.uint32)
    return torch.tensor(ids[:n].astype(np.int64))


def load(dir, dtype):
    cfg = json.load(open(dir + "/config.json"))
    path = dir + "/model.safetensors"
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
    base = 8 + n
    w = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "BF16", t["dtype"]
        a, b = t["data_offsets"]
        u = np.fromfile(path, dtype=np.uint16, count=(b - a) // 2, offset=base + a)
        x = torch.from_numpy((u.astype(np.uint32) << 16).view(np.float32)).reshape(t["shape"])
        w[name] = x.to(dtype)
    return cfg, w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def forward(cfg, w, ids, dtype):
    d, H, G = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    L, eps, dh = cfg["num_hidden_layers"], cfg["rms_norm_eps"], d // H
    T = ids.shape[0]
    inv = 1.0 / (cfg.get("rope_theta", 10000.0) ** (torch.arange(0, dh, 2).float() / dh))
    ang = torch.outer(torch.arange(T).float(), inv)
    emb = torch.cat((ang, ang), dim=-1)
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)

    def norm(x, g):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(dtype) * g

    mask = torch.full((T, T), float("-inf")).triu(1).to(dtype)
    x = w["model.embed_tokens.weight"][ids]
    for l in range(L):
        p = "model.layers.%d." % l
        h = norm(x, w[p + "input_layernorm.weight"])
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(T, H, dh).transpose(0, 1)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(T, G, dh).transpose(0, 1)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(T, G, dh).transpose(0, 1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(H // G, dim=0), v.repeat_interleave(H // G, dim=0)
        a = torch.softmax((q @ k.transpose(1, 2)) / dh ** 0.5 + mask, dim=-1)
        z = (a @ v).transpose(0, 1).reshape(T, d)
        x = x + z @ w[p + "self_attn.o_proj.weight"].T
        h = norm(x, w[p + "post_attention_layernorm.weight"])
        g = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].T)
        x = x + (g * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    x = norm(x, w["model.norm.weight"])
    lm = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    logits = (x @ lm.T).float()
    return torch.nn.functional.cross_entropy(logits[:-1], ids[1:]).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dtype = getattr(torch, a.dtype)
    t0 = time.perf_counter()
    cfg, w = load(a.model, dtype)
    load_s = time.perf_counter() - t0
    ids = read_tokens(a.tokens, a.seq_len + 1)
    times, loss = [], None
    with torch.no_grad():
        for _ in range(a.reps):
            t0 = time.perf_counter()
            loss = forward(cfg, w, ids, dtype)
            times.append(time.perf_counter() - t0)
    print(json.dumps({"impl": "torch_" + a.dtype, "threads": a.threads, "load_s": load_s,
                      "forward_s": statistics.median(times), "forward_s_all": times,
                      "loss": loss,
                      "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


if __name__ == "__main__":
    main()
