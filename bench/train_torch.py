#!/usr/bin/env python3
"""PyTorch CPU baseline for headscope's trainer: training-step and inference
throughput of the "headscope" GELU model family in PyTorch eager, float32.

What it measures
----------------
For each --config L,d,H,G,T, a model with that shape is built (fixed seed) and
fed one fixed random token batch of shape (B, T+1) (inputs = tokens[:, :-1],
targets = tokens[:, 1:]).

* Training: each step is
      opt.zero_grad(set_to_none=True); logits = model(x);
      loss = F.cross_entropy(logits, y); loss.backward(); opt.step()
  timed with time.perf_counter.  --warmup untimed steps, then the median over
  --steps timed steps -> train_step_ms, train_tok_s = B*T / median_seconds.
* Inference: under torch.no_grad(), forward + loss on the same batch;
  --warmup untimed reps, then the median over --steps reps -> eval_ms,
  eval_tok_s = B*T / median_seconds.

Model ("headscope" GELU family, GPT-2-like with grouped-query attention)
----------------------------------------------------------------------
* vocab V (default 256, byte-level), token embedding wte (V, d), learned
  position embedding wpe (n_ctx = T, d).
* L pre-LayerNorm blocks:  x = x + attn(ln_1(x));  x = x + mlp(ln_2(x)).
* final ln_f, tied unembedding: logits = ln_f(x) @ wte^T (no bias).
* LayerNorm: eps 1e-5, with weight and bias.
* Attention: q_proj (d -> H*dh), k_proj and v_proj (d -> G*dh),
  o_proj (H*dh -> d), all nn.Linear with bias; dh = d/H; causal; scale
  1/sqrt(dh).  For G < H, K/V are expanded with repeat_interleave(H//G, dim=1)
  (the natural PyTorch user's GQA).  Plain eager formulation: q @ k^T * scale,
  masked_fill(-inf) with the causal mask, softmax, @ v (no
  F.scaled_dot_product_attention, which torch 1.13 does not have anyway).
* MLP: fc (d -> 4d, bias) -> GELU tanh approximation
  (F.gelu(x, approximate='tanh')) -> proj (4d -> d, bias).
* Loss: F.cross_entropy over all B*T positions (mean).
* Optimizer: torch.optim.Adam(lr=1e-4, betas=(0.9, 0.999), eps=1e-8).
* Init: normal(0, 0.02) for all weights (embeddings and Linear weights),
  zero biases; LayerNorm weight 1, bias 0.

Threads
-------
--threads N calls torch.set_num_threads(N) (and set_num_interop_threads(1)
where allowed).  The caller should ALSO pin threads through the environment,
OMP_NUM_THREADS=N and OPENBLAS_NUM_THREADS=N, because torch's BLAS backend
keeps its own thread pool that torch.set_num_threads does not always control.

Output
------
One JSON object per config on stdout, e.g.
  {"impl":"torch","threads":1,"L":2,"d":128,"H":4,"G":4,"T":128,"B":4,
   "V":256,"params":..,"train_step_ms":..,"train_tok_s":..,"eval_ms":..,
   "eval_tok_s":..}
Nothing else is written to stdout; diagnostics go to stderr.

Example:
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 \\
      bench/train_torch.py --threads 1 --config 2,128,4,4,128 \\
      --config 4,256,8,2,256 --batch 4 --steps 10 --warmup 2
"""

import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, d, H, G, T):
        super().__init__()
        self.H, self.G, self.dh = H, G, d // H
        self.q_proj = nn.Linear(d, H * self.dh, bias=True)
        self.k_proj = nn.Linear(d, G * self.dh, bias=True)
        self.v_proj = nn.Linear(d, G * self.dh, bias=True)
        self.o_proj = nn.Linear(H * self.dh, d, bias=True)
        self.scale = 1.0 / math.sqrt(self.dh)
        self.register_buffer(
            "mask", torch.ones(T, T, dtype=torch.bool).triu(1), persistent=False
        )

    def forward(self, x):
        B, T, _ = x.shape
        H, G, dh = self.H, self.G, self.dh
        q = self.q_proj(x).view(B, T, H, dh).transpose(1, 2)  # (B,H,T,dh)
        k = self.k_proj(x).view(B, T, G, dh).transpose(1, 2)  # (B,G,T,dh)
        v = self.v_proj(x).view(B, T, G, dh).transpose(1, 2)
        if G < H:
            k = k.repeat_interleave(H // G, dim=1)
            v = v.repeat_interleave(H // G, dim=1)
        att = (q @ k.transpose(-2, -1)) * self.scale
        att = att.masked_fill(self.mask[:T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v  # (B,H,T,dh)
        y = y.transpose(1, 2).contiguous().view(B, T, H * dh)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, 4 * d, bias=True)
        self.proj = nn.Linear(4 * d, d, bias=True)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d, H, G, T):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = Attention(d, H, G, T)
        self.ln_2 = nn.LayerNorm(d, eps=1e-5)
        self.mlp = MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, V, L, d, H, G, T):
        super().__init__()
        self.wte = nn.Embedding(V, d)
        self.wpe = nn.Embedding(T, d)
        self.blocks = nn.ModuleList([Block(d, H, G, T) for _ in range(L)])
        self.ln_f = nn.LayerNorm(d, eps=1e-5)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, 0.02)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, idx):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        x = self.ln_f(x)
        return x @ self.wte.weight.t()  # tied unembedding, (B,T,V)


def parse_config(s):
    try:
        L, d, H, G, T = (int(v) for v in s.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("expected L,d,H,G,T, got %r" % s)
    if min(L, d, H, G, T) <= 0 or d % H or H % G:
        raise argparse.ArgumentTypeError(
            "need positive values, d %% H == 0 and H %% G == 0: %r" % s
        )
    return (L, d, H, G, T)


def bench_config(cfg, B, V, steps, warmup, threads):
    L, d, H, G, T = cfg
    torch.manual_seed(1234)
    model = GPT(V, L, d, H, G, T)
    model.train()  # no dropout anywhere: train/eval are numerically identical
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8)

    g = torch.Generator().manual_seed(42)
    tokens = torch.randint(0, V, (B, T + 1), generator=g, dtype=torch.long)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def train_step():
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, V), y.view(-1))
        loss.backward()
        opt.step()
        return loss

    times = []
    loss = None
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        loss = train_step()
        t1 = time.perf_counter()
        if i >= warmup:
            times.append(t1 - t0)
    train_s = statistics.median(times)
    print(
        "[train_torch] L=%d d=%d H=%d G=%d T=%d B=%d: last train loss %.4f"
        % (L, d, H, G, T, B, loss.item()),
        file=sys.stderr,
    )

    times = []
    with torch.no_grad():
        for i in range(warmup + steps):
            t0 = time.perf_counter()
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, V), y.view(-1))
            t1 = time.perf_counter()
            if i >= warmup:
                times.append(t1 - t0)
    eval_s = statistics.median(times)

    ntok = B * T
    return {
        "impl": "torch",
        "threads": threads,
        "L": L,
        "d": d,
        "H": H,
        "G": G,
        "T": T,
        "B": B,
        "V": V,
        "params": params,
        "train_step_ms": round(train_s * 1e3, 4),
        "train_tok_s": round(ntok / train_s, 2),
        "eval_ms": round(eval_s * 1e3, 4),
        "eval_tok_s": round(ntok / eval_s, 2),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--config", type=parse_config, action="append",
                    help="L,d,H,G,T (repeatable)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    if not args.config:
        ap.error("at least one --config L,d,H,G,T is required")
    if args.threads < 1 or args.batch < 1 or args.vocab < 1 or args.steps < 1 \
            or args.warmup < 0:
        ap.error("--threads/--batch/--vocab/--steps must be >= 1, --warmup >= 0")

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    print("[train_torch] torch %s, intra-op threads %d"
          % (torch.__version__, torch.get_num_threads()), file=sys.stderr)

    for cfg in args.config:
        res = bench_config(cfg, args.batch, args.vocab, args.steps, args.warmup,
                           args.threads)
        print(json.dumps(res, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()
