#!/usr/bin/env python3
"""PyTorch baseline for `headscope generate`: greedy decoding of a llama-family
checkpoint (config.json + model.safetensors as headscope writes it) with a
PyTorch KV cache, written independently from the Hugging Face Llama
definition.

Model (HF LlamaForCausalLM): embed_tokens; per layer x += o_proj(attn(
RMSNorm(x))), x += down_proj(silu(gate_proj(h)) * up_proj(h)) with h =
RMSNorm(x); RoPE rotate-half with base rope_theta on q and k; K/V of the
num_key_value_heads heads, expanded with repeat_interleave for the scores
(the usual PyTorch GQA); final RMSNorm; lm_head (or tied embed_tokens).
Weights are read with numpy from the safetensors file (F32 or BF16) into
torch tensors of --dtype.

Decoding, as headscope's: the prompt in one forward (causal mask), then one
token per step; the cache is past_key_values as Hugging Face keeps it: per
layer K and V of shape (1, G, S, dh), grown with torch.cat each step.
Greedy: torch.argmax (the first maximum: ties to the lowest id). The
timed span is the prefill plus every step (the last new token is not fed),
tokens_per_s = max_new / seconds, step_tokens_per_s = (max_new - 1) / (the
steps' seconds), as headscope's; the median over --runs runs after one
warm-up run. --dtype bfloat16 holds weights and activations in bfloat16
(float32: BF16 files widened exactly).

Output: one JSON object {"impl":"torch","dtype":D,"threads":N,"tokens_per_s":x,
"step_tokens_per_s":y,"runs":[...],"ids":[prompt + new]} on stdout.

  OMP_NUM_THREADS=1 /usr/bin/python3 bench/generate_torch.py --model DIR \\
      --prompt-ids 1,2,3 --max-new 128 --threads 1 --runs 5
"""
import argparse
import json
import math
import statistics
import struct
import time

import numpy as np
import torch


def load(dirname, dtype):
    """The tensors (F32, or BF16 widened exactly) as dtype"""
    cfg = json.load(open(dirname + "/config.json"))
    path = dirname + "/model.safetensors"
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
    w = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] in ("F32", "BF16"), (k, v["dtype"])
        a, b = v["data_offsets"]
        if v["dtype"] == "F32":
            arr = np.fromfile(path, dtype=np.float32, count=(b - a) // 4, offset=8 + n + a)
        else:
            u = np.fromfile(path, dtype=np.uint16, count=(b - a) // 2, offset=8 + n + a)
            arr = (u.astype(np.uint32) << 16).view(np.float32)
        w[k] = torch.from_numpy(arr.reshape(v["shape"])).to(dtype)
    return cfg, w


class Llama:
    def __init__(self, cfg, w):
        assert cfg["model_type"] in ("llama", "mistral", "qwen2") and not cfg.get("rope_scaling")
        self.L = cfg["num_hidden_layers"]
        self.H = cfg["num_attention_heads"]
        self.G = cfg.get("num_key_value_heads", self.H)
        self.d = cfg["hidden_size"]
        self.dh = cfg.get("head_dim") or self.d // self.H
        self.eps = cfg["rms_norm_eps"]
        self.w = w
        self.lm = w.get("lm_head.weight", w["model.embed_tokens.weight"])
        theta = cfg.get("rope_theta", 10000.0)
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, self.dh, 2, dtype=torch.float32) / self.dh))

    def rms(self, x, wt):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * wt

    def rope(self, x, pos):  # x (1, heads, n, dh)
        freqs = torch.outer(pos.float(), self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        half = self.dh // 2
        rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rot * sin

    def forward(self, ids, pos0, past):
        n = ids.shape[0]
        x = self.w["model.embed_tokens.weight"][ids].unsqueeze(0)  # (1, n, d)
        pos = torch.arange(pos0, pos0 + n)
        for l in range(self.L):
            p = "model.layers.%d." % l
            h = self.rms(x, self.w[p + "input_layernorm.weight"])
            q = (h @ self.w[p + "self_attn.q_proj.weight"].T).view(1, n, self.H, self.dh).transpose(1, 2)
            k = (h @ self.w[p + "self_attn.k_proj.weight"].T).view(1, n, self.G, self.dh).transpose(1, 2)
            v = (h @ self.w[p + "self_attn.v_proj.weight"].T).view(1, n, self.G, self.dh).transpose(1, 2)
            q, k = self.rope(q, pos), self.rope(k, pos)
            if past[l] is not None:
                k = torch.cat((past[l][0], k), dim=2)
                v = torch.cat((past[l][1], v), dim=2)
            past[l] = (k, v)
            kr = k.repeat_interleave(self.H // self.G, dim=1)
            vr = v.repeat_interleave(self.H // self.G, dim=1)
            s = (q @ kr.transpose(-1, -2)) / math.sqrt(self.dh)
            if n > 1:
                S = k.shape[2]
                mask = torch.arange(S).unsqueeze(0) > (pos.unsqueeze(1))
                s = s.masked_fill(mask, float("-inf"))
            z = (torch.softmax(s, dim=-1) @ vr).transpose(1, 2).reshape(1, n, self.H * self.dh)
            x = x + z @ self.w[p + "self_attn.o_proj.weight"].T
            h = self.rms(x, self.w[p + "post_attention_layernorm.weight"])
            g = torch.nn.functional.silu(h @ self.w[p + "mlp.gate_proj.weight"].T)
            u = h @ self.w[p + "mlp.up_proj.weight"].T
            x = x + (g * u) @ self.w[p + "mlp.down_proj.weight"].T
        x = self.rms(x[0, -1], self.w["model.norm.weight"])
        return x @ self.lm.T


def generate(model, prompt, max_new):
    """ids, seconds in all, seconds of the prefill"""
    past = [None] * model.L
    out = list(prompt)
    t0 = time.perf_counter()
    with torch.no_grad():
        logits = model.forward(torch.tensor(prompt), 0, past)
        t1 = time.perf_counter()
        for i in range(max_new):
            nxt = int(torch.argmax(logits))
            out.append(nxt)
            if i + 1 < max_new:
                logits = model.forward(torch.tensor([nxt]), len(out) - 1, past)
    return out, time.perf_counter() - t0, t1 - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-ids", required=True)
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                    help="weights and activations (BF16 files widened exactly for float32)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    cfg, w = load(a.model, getattr(torch, a.dtype))
    model = Llama(cfg, w)
    prompt = [int(x) for x in a.prompt_ids.split(",")]
    generate(model, prompt, min(a.max_new, 4))  # warm-up
    runs, steps, ids = [], [], None
    for _ in range(a.runs):
        ids, sec, prefill = generate(model, prompt, a.max_new)
        runs.append(a.max_new / sec)
        if a.max_new > 1:  # the steps alone: one forward per new token but the first
            steps.append((a.max_new - 1) / (sec - prefill))
    print(json.dumps({"impl": "torch", "dtype": a.dtype, "threads": a.threads,
                      "tokens_per_s": statistics.median(runs),
                      "step_tokens_per_s": statistics.median(steps) if steps else None,
                      "runs": runs, "ids": ids}))


if __name__ == "__main__":
    main()
