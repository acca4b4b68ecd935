"""The PyTorch side of bench/sae.sh, and the model, SAEs and tokens it measures.

  sae_torch.py make DIR --layers L --d D --heads H --vocab V --n-positions P
                   --layer l --d-sae M --k K --tokens N
      DIR/model: a GPT-2 of random weights in HF's layout (model.safetensors
      with Conv1D c_attn / c_proj / c_fc stored [in, out], config.json;
      matrices N(0, 0.02), LayerNorms 1 and 0, F32, seed 0); DIR/sae: a TopK
      SAE on blocks.l.attn.hook_z in SAELens's format (cfg.json,
      sae_weights.safetensors: W_dec's rows N(0, 1) scaled to unit norm,
      W_enc their transpose, b_enc 0, b_dec the mean of z over the first
      4096 tokens, apply_b_dec_to_input); DIR/sae_null: the same hook with d_sae = 2 K
      (its encode costs nothing: the forward's share of a features run);
      DIR/data.bin: an llm.c shard of N + 1 uniformly random tokens (seed 1).
  sae_torch.py features DIR --batch B --seq-len T --top N --threads t --runs R
                   [--tokens N] [--db OURS.db]
      one JSON line: the median over R runs (after a one-batch warm-up) of
      headscope features's work on the first N tokens (all: 0) in batches of
      B x T: the forward up to blocks.l.attn.hook_z (the layers below whole,
      layer l's attention to z; as SAELens's stop_at_layer), the encode
      (x - b_dec) W_enc + b_enc a block of 2^24 / d_sae rows at a time (the
      rows headscope encodes at once), topk, relu, and the statistics kept on
      the fly: per feature the active count and the sum of its activations
      (frequency, mean_act), the top N (value, token) examples merged batch by
      batch (ties to the earlier token), head_share from W_dec; with the time
      of each part, tokens/s, the encode GEMM's GFLOP/s (2 tokens d_in d_sae
      over the GEMM's own seconds) and the process's peak RSS (getrusage,
      KiB); with --db, the agreement with headscope's rows in OURS.db
      (frequency, mean_act, the top examples).
  sae_torch.py train DIR --batch B --seq-len T --d-sae M --k K --steps S
                   --threads t --runs R [--aux-k A] [--dead-tokens N]
      one JSON line: the median over R runs (after a warm-up step) of
      train-sae's loop: activations from forwards to the hook (wrapping over
      the data) through a shuffled buffer of 16 steps' tokens, b_dec at the
      first batch's geometric median (Weiszfeld, 20 iterations), then per
      step of B x T rows: TopK(relu((x - b_dec) W_enc + b_enc)), x_hat by
      embedding_bag, loss = mean ||x_hat - x||^2 + AuxK / 32 (the dead
      latents' top A), torch autograd with EleutherAI sparsify's sparse
      encoder backward (gradients of the selected latents only, index_add_),
      the decoder gradient's parallel part removed, torch.optim.Adam (0.9,
      0.999), the decoder rows renormalised -- as headscope train-sae; its
      tokens/s (forwards included), the time of the forwards and of the steps
      (the encode GEMM's alone too), the last step's MSE and the peak RSS.

Everything in float32 (torch 1.13 has no scaled_dot_product_attention: the
attention is q k^T / sqrt(dh), the causal mask, softmax, v). The weights are
read tensor by tensor (np.fromfile), so the peak RSS holds one copy of them.
"""
import argparse
import json
import math
import os
import resource
import sqlite3
import statistics
import struct
import time

import numpy as np
import torch
import torch.nn.functional as F

from st_io import write_st


# ---- make ------------------------------------------------------------------------

def make(a):
    g = torch.Generator().manual_seed(0)
    d, V, L = a.d, a.vocab, a.layers
    r = lambda *s: torch.randn(*s, generator=g) * 0.02
    W = {"wte.weight": r(V, d), "wpe.weight": r(a.n_positions, d)}
    for l in range(L):
        p = f"h.{l}."
        W[p + "ln_1.weight"], W[p + "ln_1.bias"] = torch.ones(d), torch.zeros(d)
        W[p + "attn.c_attn.weight"], W[p + "attn.c_attn.bias"] = r(d, 3 * d), torch.zeros(3 * d)
        W[p + "attn.c_proj.weight"], W[p + "attn.c_proj.bias"] = r(d, d), torch.zeros(d)
        W[p + "ln_2.weight"], W[p + "ln_2.bias"] = torch.ones(d), torch.zeros(d)
        W[p + "mlp.c_fc.weight"], W[p + "mlp.c_fc.bias"] = r(d, 4 * d), torch.zeros(4 * d)
        W[p + "mlp.c_proj.weight"], W[p + "mlp.c_proj.bias"] = r(4 * d, d), torch.zeros(d)
    W["ln_f.weight"], W["ln_f.bias"] = torch.ones(d), torch.zeros(d)
    os.makedirs(a.dir + "/model", exist_ok=True)
    write_st(a.dir + "/model/model.safetensors", W)
    json.dump({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": V,
               "n_positions": a.n_positions, "n_embd": d, "n_layer": L, "n_head": a.heads,
               "n_inner": None, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
               "tie_word_embeddings": True}, open(a.dir + "/model/config.json", "w"), indent=1)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, V, a.tokens + 1, dtype=np.uint16)
    head = np.zeros(256, "<i4")
    head[:3] = (20240520, 1, a.tokens + 1)
    with open(a.dir + "/data.bin", "wb") as f:
        f.write(head.tobytes())
        f.write(ids.astype("<u2").tobytes())
    # b_dec: the mean of z over the first (up to) 4096 tokens, so that the
    # features see z's variation rather than its (large, shared) mean: with
    # random weights the attention is near uniform and z of every token is
    # close to the same vector, which would make a handful of features fire
    # everywhere.
    m = GPT2.__new__(GPT2)
    m.c = json.load(open(a.dir + "/model/config.json"))
    m.W = W
    T = min(128, a.n_positions, a.tokens)
    B = max(1, min(4096, a.tokens) // T)
    with torch.inference_mode():
        b_dec = m.hook_z(torch.from_numpy(ids[:B * T].astype(np.int64)).view(B, T), a.layer).mean(0)
    del W, m
    for name, M in (("sae", a.d_sae), ("sae_null", 2 * a.k)):
        W_dec = torch.randn(M, d, generator=g)
        W_dec /= W_dec.norm(dim=1, keepdim=True)
        os.makedirs(f"{a.dir}/{name}", exist_ok=True)
        write_st(f"{a.dir}/{name}/sae_weights.safetensors",
                 {"W_enc": W_dec.T.contiguous(), "b_enc": torch.zeros(M), "W_dec": W_dec,
                  "b_dec": b_dec})
        json.dump({"architecture": "topk", "d_in": d, "d_sae": M, "dtype": "float32",
                   "device": "cpu", "model_name": "gpt2-random",
                   "hook_name": f"blocks.{a.layer}.attn.hook_z", "hook_layer": a.layer,
                   "hook_head_index": None, "context_size": T, "apply_b_dec_to_input": True,
                   "normalize_activations": "none", "activation_fn_kwargs": {"k": a.k}},
                  open(f"{a.dir}/{name}/cfg.json", "w"), indent=1)


# ---- the model -------------------------------------------------------------------

def read_st(path):
    """Each tensor read on its own (no second copy of the file in memory)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
    out = {}
    for k, e in head.items():
        if k == "__metadata__":
            continue
        assert e["dtype"] == "F32", (path, k)
        a, b = e["data_offsets"]
        arr = np.fromfile(path, "<f4", (b - a) // 4, offset=8 + n + a)
        out[k.replace("transformer.", "")] = torch.from_numpy(arr).reshape(e["shape"])
    return out


class GPT2:
    def __init__(self, d):
        self.c = json.load(open(d + "/config.json"))
        self.W = read_st(d + "/model.safetensors")

    def hook_z(self, ids, layer):
        """z of `layer` (B T, d) flattened head-major: the layers below whole,
        then layer's attention up to z (HF GPT2's arithmetic)."""
        W, c = self.W, self.c
        H, eps = c["n_head"], c.get("layer_norm_epsilon", 1e-5)
        B, T = ids.shape
        x = W["wte.weight"][ids] + W["wpe.weight"][:T]
        d = x.shape[-1]
        dh = d // H
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        for l in range(layer + 1):
            p = f"h.{l}."
            h = F.layer_norm(x, (d,), W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps)
            qkv = torch.addmm(W[p + "attn.c_attn.bias"], h.view(-1, d), W[p + "attn.c_attn.weight"])
            q, k, v = qkv.view(B, T, 3, H, dh).permute(2, 0, 3, 1, 4)
            s = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
            z = (torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ v)
            z = z.transpose(1, 2).reshape(B * T, d)
            if l == layer:
                return z
            x = x + torch.addmm(W[p + "attn.c_proj.bias"], z, W[p + "attn.c_proj.weight"]).view(B, T, d)
            h = F.layer_norm(x, (d,), W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
            f = F.gelu(torch.addmm(W[p + "mlp.c_fc.bias"], h.view(-1, d), W[p + "mlp.c_fc.weight"]),
                       approximate="tanh")
            x = x + torch.addmm(W[p + "mlp.c_proj.bias"], f, W[p + "mlp.c_proj.weight"]).view(B, T, d)


def shard(path):
    head = np.fromfile(path, "<i4", 256)
    assert head[0] == 20240520 and head[1] == 1, path
    return np.fromfile(path, "<u2", int(head[2]), offset=1024)


def batch_ids(tokens, i, B, T):
    return torch.from_numpy(tokens[i * B * T:(i + 1) * B * T].astype(np.int64)).view(B, T)


def hook_layer(sae_dir):
    cfg = json.load(open(sae_dir + "/cfg.json"))
    return cfg, int(cfg["hook_name"].split(".")[1])


def maxrss_kib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


# ---- features --------------------------------------------------------------------

class Stats:
    """Per feature: active count, sum of activations, top N (value, token)."""

    def __init__(self, M, N):
        self.M, self.N = M, N
        self.count = torch.zeros(M, dtype=torch.float64)
        self.sum = torch.zeros(M, dtype=torch.float64)
        self.topv = np.full((M, N), -np.inf, np.float32)
        self.topg = np.full((M, N), -1, np.int64)

    def fold(self, vals, idx, g0):
        """vals, idx (rows, k): the selected latents of tokens g0 .. g0 + rows - 1."""
        act = vals > 0
        f = idx[act]
        v = vals[act]
        self.count += torch.bincount(f, minlength=self.M).to(torch.float64)
        self.sum += torch.bincount(f, weights=v.to(torch.float64), minlength=self.M)
        tok = (torch.arange(vals.shape[0]) + g0)[:, None].expand_as(idx)[act]
        f, v, tok = f.numpy(), v.numpy(), tok.numpy()
        keep = v > self.topv[f, -1]  # beats the feature's N-th (ties: the earlier token)
        if not keep.any():
            return
        f, v, tok = f[keep], v[keep], tok[keep]
        U, inv = np.unique(f, return_inverse=True)
        N = self.N
        af = np.concatenate([np.repeat(np.arange(len(U)), N), inv])
        av = np.concatenate([self.topv[U].ravel(), v])
        ag = np.concatenate([self.topg[U].ravel(), tok])
        o = np.lexsort((ag, -av, af))  # by feature, value descending, token
        af, av, ag = af[o], av[o], ag[o]
        start = np.searchsorted(af, np.arange(len(U)))
        rank = np.arange(len(af)) - start[af]
        sel = rank < N
        self.topv[U[af[sel]], rank[sel]] = av[sel]
        self.topg[U[af[sel]], rank[sel]] = ag[sel]


def features_once(m, sae, tokens, a, layer):
    W_enc, b_enc, b_dec = sae["W_enc"], sae["b_enc"], sae["b_dec"]
    d_in, M = W_enc.shape
    k = a.k
    B, T = a.batch, a.seq_len
    n = B * T
    nb = (len(tokens) - 1) // n
    if a.tokens:
        nb = min(nb, a.tokens // n)
    block = max(1, min(n, (1 << 24) // M))
    st = Stats(M, a.top)
    tf = tg = cf = cg = 0.0
    clock, cpu = time.perf_counter, time.process_time
    t0, c0 = clock(), cpu()
    for bi in range(nb):
        ids = batch_ids(tokens, bi, B, T)
        t1, c1 = clock(), cpu()
        x = m.hook_z(ids, layer)
        tf, cf = tf + clock() - t1, cf + cpu() - c1
        for r0 in range(0, n, block):
            xc = x[r0:r0 + block] - b_dec
            t3, c3 = clock(), cpu()
            pre = torch.addmm(b_enc, xc, W_enc)
            tg, cg = tg + clock() - t3, cg + cpu() - c3
            vals, idx = pre.topk(k, dim=1, sorted=False)
            st.fold(vals, idx, bi * n + r0)
    # head_share: each head's share of W_dec's row norm
    H = m.c["n_head"]
    norms = sae["W_dec"].view(M, H, d_in // H).norm(dim=2)
    share = norms / norms.sum(1, keepdim=True)
    return st, share, {"seconds": clock() - t0, "cpu_s": cpu() - c0, "forward_s": tf,
                       "forward_cpu_s": cf, "gemm_s": tg, "gemm_cpu_s": cg, "tokens": nb * n}


def features(a):
    torch.set_num_threads(a.threads)
    cfg, layer = hook_layer(a.dir + "/sae")
    a.k = cfg["activation_fn_kwargs"]["k"] if "activation_fn_kwargs" in cfg else cfg["k"]
    m = GPT2(a.dir + "/model")
    sae = read_st(a.dir + "/sae/sae_weights.safetensors")
    tokens = shard(a.dir + "/data.bin")
    runs = []
    with torch.inference_mode():
        warm = a.tokens
        a.tokens = a.batch * a.seq_len
        features_once(m, sae, tokens, a, layer)  # the warm-up: one batch
        a.tokens = warm
        for _ in range(a.runs):
            st, share, t = features_once(m, sae, tokens, a, layer)
            runs.append(t)
    rss = maxrss_kib()
    med = sorted(runs, key=lambda t: t["seconds"])[len(runs) // 2]
    d_in, M = sae["W_enc"].shape
    N = med["tokens"]
    out = {"impl": "torch", "mode": "features", "threads": a.threads, "tokens": N,
           "seconds": med["seconds"], "walls": [t["seconds"] for t in runs],
           "cpu_s": [t["cpu_s"] for t in runs], "loop_cpu_s": med["cpu_s"],
           "tokens_per_second": N / med["seconds"], "forward_s": med["forward_s"],
           "forward_cpu_s": med["forward_cpu_s"], "gemm_s": med["gemm_s"],
           "gemm_cpu_s": med["gemm_cpu_s"],
           "rest_s": med["seconds"] - med["forward_s"] - med["gemm_s"],
           "gemm_gflops": 2.0 * N * d_in * M / med["gemm_s"] / 1e9,
           "gemm_gflops_per_cpu_s": 2.0 * N * d_in * M / med["gemm_cpu_s"] / 1e9,
           "maxrss_kib": rss,
           "torch": torch.__version__}
    if a.db:
        out.update(agree(st, share, N, a.db, a.seq_len))
    print(json.dumps(out))


def agree(st, share, tokens, db, T):
    """The largest differences from headscope's rows (frequency, mean_act,
    head_share) and the share of features whose top examples are the same
    (sequence, position) list."""
    q = sqlite3.connect(db).execute
    freq = st.count.numpy() / tokens
    mean = np.where(st.count.numpy() > 0, st.sum.numpy() / np.maximum(st.count.numpy(), 1), np.nan)
    M = len(freq)
    of = np.full(M, np.nan)
    om = np.full(M, np.nan)
    for f, metric, v in q("select feature, metric, value from feature_metrics where head = -1 "
                          "and metric in ('frequency', 'mean_act')"):
        (of if metric == "frequency" else om)[f] = np.nan if v is None else v
    hs = np.zeros_like(share.numpy())
    for f, h, v in q("select feature, head, value from feature_metrics where metric = 'head_share'"):
        hs[f, h] = v
    ex = {}
    for f, s, p, v in q("select feature, seq, position, value from feature_examples "
                        "order by feature, value desc, seq, position"):
        ex.setdefault(f, []).append((s, p))
    same = 0
    for f in range(M):
        mine = [(int(g) // T, int(g) % T) for g, v in zip(st.topg[f], st.topv[f]) if v > -np.inf]
        same += mine == ex.get(f, [])
    both = ~np.isnan(mean) & ~np.isnan(om)
    return {"max_frequency_diff": float(np.nanmax(np.abs(freq - of))),
            "max_mean_act_rel_diff": float(np.max(np.abs(mean[both] - om[both]) /
                                                  np.maximum(np.abs(om[both]), 1e-6))) if both.any() else 0.0,
            "mean_act_null_mismatch": int((np.isnan(mean) != np.isnan(om)).sum()),
            "max_head_share_diff": float(np.abs(hs - share.numpy()).max()),
            "top_examples_same": same / M}


# ---- train -----------------------------------------------------------------------

class SparsePre(torch.autograd.Function):
    """The pre-activations pre[r, idx[r, q]] of the selected latents, pre =
    xc W_encT^T + b_enc computed outside (no grad); the backward touches the
    selected latents only (EleutherAI sparsify's FusedEncoder): W_encT is
    (d_sae, d_in), the layout of F.linear."""

    @staticmethod
    def forward(ctx, xc, W_encT, b_enc, pre, idx):
        ctx.save_for_backward(xc, W_encT, idx)
        return pre.gather(1, idx)

    @staticmethod
    def backward(ctx, g):
        xc, W_encT, idx = ctx.saved_tensors
        g = g.contiguous()
        gx = F.embedding_bag(idx, W_encT, mode="sum", per_sample_weights=g)
        gW = torch.zeros_like(W_encT)
        gW.index_add_(0, idx.flatten(), (g.unsqueeze(2) * xc.unsqueeze(1)).reshape(-1, xc.shape[1]))
        gb = torch.zeros(W_encT.shape[0], dtype=g.dtype)
        gb.index_add_(0, idx.flatten(), g.flatten())
        return gx, gW, gb, None, None


def geometric_median(x, iters=20):
    x = x.double()
    m = x.mean(0)
    for _ in range(iters):
        w = 1 / (x - m).norm(dim=1).clamp_min(1e-8)
        m = (w[:, None] * x).sum(0) / w.sum()
    return m.float()


class Trainer:
    def __init__(self, d_in, M, k, a, seed):
        g = torch.Generator().manual_seed(seed)
        W_dec = torch.randn(M, d_in, generator=g)
        W_dec /= W_dec.norm(dim=1, keepdim=True)
        self.W_dec = W_dec.requires_grad_()
        self.W_encT = W_dec.detach().clone().requires_grad_()
        self.b_enc = torch.zeros(M, requires_grad=True)
        self.b_dec = torch.zeros(d_in, requires_grad=True)
        self.opt = torch.optim.Adam([self.W_encT, self.W_dec, self.b_enc, self.b_dec], lr=a.lr,
                                    betas=(0.9, 0.999), eps=1e-8)
        self.k, self.aux_k, self.dead_tokens = k, min(a.aux_k, M), a.dead_tokens
        self.since = torch.zeros(M, dtype=torch.int64)
        self.gemm_s = 0.0

    def step(self, x):
        k, n = self.k, x.shape[0]
        xc = x - self.b_dec
        t0 = time.perf_counter()
        with torch.no_grad():
            pre = F.linear(xc, self.W_encT, self.b_enc)
        self.gemm_s += time.perf_counter() - t0
        with torch.no_grad():
            _, idx = pre.topk(k, dim=1, sorted=False)
            dead = self.since >= self.dead_tokens
            ak = self.aux_k if bool(dead.any()) else 0
            if ak:
                _, aidx = pre.masked_fill(~dead, float("-inf")).topk(min(ak, int(dead.sum())), dim=1)
                idx = torch.cat([idx, aidx], 1)
        vals = SparsePre.apply(xc, self.W_encT, self.b_enc, pre, idx).relu()
        x_hat = F.embedding_bag(idx[:, :k].contiguous(), self.W_dec, mode="sum",
                                per_sample_weights=vals[:, :k].contiguous()) + self.b_dec
        e = x_hat - x
        mse = e.pow(2).sum(1).mean()
        loss = mse
        if ak:
            e_hat = F.embedding_bag(idx[:, k:].contiguous(), self.W_dec, mode="sum",
                                    per_sample_weights=vals[:, k:].contiguous())
            loss = loss + (e_hat + e.detach()).pow(2).sum(1).mean() / 32
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        with torch.no_grad():
            gd, W = self.W_dec.grad, self.W_dec
            gd -= (gd * W).sum(1, keepdim=True) * W
            self.opt.step()
            W /= W.norm(dim=1, keepdim=True)
            fired = torch.zeros_like(dead)
            fired[idx[:, :k][vals[:, :k] > 0]] = True
            self.since += n
            self.since[fired] = 0
        return float(mse)


def train_once(m, tokens, a, layer, d_in, steps):
    B, T = a.batch, a.seq_len
    n = B * T
    nbat = (len(tokens) - 1) // n
    tr = Trainer(d_in, a.d_sae, a.k, a, a.seed)
    gen = torch.Generator().manual_seed(a.seed + 7)
    cap = 16 * n
    buf = torch.empty(cap, d_in)
    filled = used = nxt = 0
    tf = 0.0
    mse = float("nan")
    t0, c0 = time.perf_counter(), time.process_time()
    for step in range(steps):
        if filled - used < n:  # refill: forwards (wrapping), then shuffle
            t1 = time.perf_counter()
            buf[:filled - used] = buf[used:filled].clone()
            filled -= used
            used = 0
            with torch.no_grad():
                while filled + n <= cap:
                    buf[filled:filled + n] = m.hook_z(batch_ids(tokens, nxt % nbat, B, T), layer)
                    nxt += 1
                    filled += n
                buf[:filled] = buf[:filled][torch.randperm(filled, generator=gen)]
            tf += time.perf_counter() - t1
        x = buf[used:used + n]
        used += n
        if step == 0:
            with torch.no_grad():
                tr.b_dec.copy_(geometric_median(x))
        mse = tr.step(x)
    secs = time.perf_counter() - t0
    return {"seconds": secs, "cpu_s": time.process_time() - c0, "forward_s": tf, "gemm_s": tr.gemm_s,
            "tokens": steps * n, "mse": mse}


def train(a):
    torch.set_num_threads(a.threads)
    _, layer = hook_layer(a.dir + "/sae")
    m = GPT2(a.dir + "/model")
    tokens = shard(a.dir + "/data.bin")
    d_in = m.c["n_embd"]
    # the warm-up: one forward and one step
    with torch.no_grad():
        x = m.hook_z(batch_ids(tokens, 0, a.batch, a.seq_len), layer)
    Trainer(d_in, a.d_sae, a.k, a, a.seed).step(x)
    del x
    runs = [train_once(m, tokens, a, layer, d_in, a.steps) for _ in range(a.runs)]
    rss = maxrss_kib()
    med = sorted(runs, key=lambda t: t["seconds"])[len(runs) // 2]
    N = med["tokens"]
    print(json.dumps({"impl": "torch", "mode": "train", "threads": a.threads, "tokens": N,
                      "seconds": med["seconds"], "walls": [t["seconds"] for t in runs],
                      "cpu_s": [t["cpu_s"] for t in runs],
                      "tokens_per_second": N / med["seconds"], "forward_s": med["forward_s"],
                      "gemm_s": med["gemm_s"],
                      "step_s": med["seconds"] - med["forward_s"],
                      "gemm_gflops": 2.0 * N * d_in * a.d_sae / med["gemm_s"] / 1e9,
                      "mse": med["mse"], "maxrss_kib": rss, "torch": torch.__version__}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["make", "features", "train"])
    ap.add_argument("dir")
    for k, v in (("layers", 12), ("d", 768), ("heads", 12), ("vocab", 50257),
                 ("n_positions", 1024), ("layer", 5), ("d_sae", 24576), ("k", 32),
                 ("tokens", 0), ("batch", 8), ("seq_len", 128), ("top", 10), ("threads", 1),
                 ("runs", 1), ("steps", 32), ("aux_k", 512), ("dead_tokens", 10000000),
                 ("seed", 1)):
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--db")
    a = ap.parse_args()
    {"make": make, "features": features, "train": train}[a.what](a)


if __name__ == "__main__":
    main()
