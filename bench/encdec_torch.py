"""The PyTorch side of bench/encdec.sh, and the model and pairs it measures.

  encdec_torch.py make DIR --layers L --d D --heads H --dkv K --ff F --vocab V
                   --pairs N --src S --tgt T
      a T5ForConditionalGeneration of random weights (T5 v1.0: ReLU MLP, tied
      head; N(0, 0.05) matrices, relative-bias tables N(0, 1), F32, seed 0) in
      HF's names, and DIR/pairs.jsonl: N pairs of S source and T target ids
      (each ending in eos 1), DIR/pairs_small.jsonl its first N/4 pairs cut to
      S/2 and T/2 ids (the ablation's)
  encdec_torch.py run DIR --mode eval|ablate|generate --batch B --threads t --runs R
                   [--max-new N]
      one JSON line: the median seconds over R runs (after one warm-up) of
      eval: the pooled teacher-forced loss of pairs.jsonl, B pairs a forward;
      ablate: every head of every attention type zeroed in turn (a head mask
      on z, as transformers' head_mask) on pairs_small.jsonl, the encoder's
      output reused for the decoder's and the cross-attention's heads;
      generate: the greedy loop of the first pair's source with its own cache
      (the decoder's self-attention keys and values appended each step, the
      cross-attention's projected once), N new tokens at most, stopping after
      eos -- with the loss, the largest ablation delta or the ids, so that
      bench/encdec.sh can check both sides computed the same thing.

The arithmetic is modeling_t5.py's, in float32 under torch.inference_mode:
the attention as q k^T + position bias, softmax, v (torch 1.13 has no
scaled_dot_product_attention), the bias computed once per forward.
"""
import argparse
import json
import math
import os
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from st_io import read_st, write_st


def make(a):
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g) * 0.05
    W = {"shared.weight": r(a.vocab, a.d)}
    inner = a.heads * a.dkv
    for stack in ("encoder", "decoder"):
        W[f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = \
            torch.randn(32, a.heads, generator=g)
        for l in range(a.layers):
            kinds = ["SelfAttention"] + (["EncDecAttention"] if stack == "decoder" else [])
            for i, kind in enumerate(kinds):
                p = f"{stack}.block.{l}.layer.{i}."
                W[p + "layer_norm.weight"] = torch.ones(a.d)
                for m in "qkv":
                    W[p + f"{kind}.{m}.weight"] = r(inner, a.d)
                W[p + f"{kind}.o.weight"] = r(a.d, inner)
            p = f"{stack}.block.{l}.layer.{len(kinds)}."
            W[p + "layer_norm.weight"] = torch.ones(a.d)
            W[p + "DenseReluDense.wi.weight"] = r(a.ff, a.d)
            W[p + "DenseReluDense.wo.weight"] = r(a.d, a.ff)
        W[f"{stack}.final_layer_norm.weight"] = torch.ones(a.d)
    os.makedirs(a.dir, exist_ok=True)
    write_st(a.dir + "/model.safetensors", W)
    json.dump({"architectures": ["T5ForConditionalGeneration"], "model_type": "t5",
               "d_model": a.d, "d_kv": a.dkv, "d_ff": a.ff, "num_layers": a.layers,
               "num_heads": a.heads, "vocab_size": a.vocab, "feed_forward_proj": "relu",
               "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
               "decoder_start_token_id": 0, "eos_token_id": 1, "pad_token_id": 0,
               "layer_norm_epsilon": 1e-6, "is_encoder_decoder": True},
              open(a.dir + "/config.json", "w"))
    rng = np.random.default_rng(1)
    with open(a.dir + "/pairs.jsonl", "w") as f, open(a.dir + "/pairs_small.jsonl", "w") as s:
        for i in range(a.pairs):
            src = rng.integers(2, a.vocab, a.src - 1).tolist() + [1]
            tgt = rng.integers(2, a.vocab, a.tgt - 1).tolist() + [1]
            f.write(json.dumps({"source_ids": src, "target_ids": tgt}) + "\n")
            if i < max(1, a.pairs // 4):
                s.write(json.dumps({"source_ids": src[:a.src // 2 - 1] + [1],
                                    "target_ids": tgt[:a.tgt // 2 - 1] + [1]}) + "\n")


class T5:
    def __init__(self, d):
        self.c = json.load(open(d + "/config.json"))
        self.W = read_st(d + "/model.safetensors")
        self.H, self.E = self.c["num_heads"], self.c["num_layers"]

    def bucket(self, rel, bidirectional):
        nb, md = 32, 128
        out = torch.zeros_like(rel)
        if bidirectional:
            nb //= 2
            out += (rel > 0).to(torch.long) * nb
            rel = torch.abs(rel)
        else:
            rel = -torch.min(rel, torch.zeros_like(rel))
        exact = nb // 2
        large = exact + (torch.log(rel.float() / exact) / math.log(md / exact)
                         * (nb - exact)).to(torch.long)
        large = torch.min(large, torch.full_like(large, nb - 1))
        return out + torch.where(rel < exact, rel, large)

    def bias(self, stack, q0, q_len, k_len, bidirectional):
        ctx = torch.arange(q0, q0 + q_len)[:, None]
        mem = torch.arange(k_len)[None, :]
        b = self.bucket(mem - ctx, bidirectional)
        t = self.W[f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
        return t[b].permute(2, 0, 1).unsqueeze(0)

    def norm(self, x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))

    def attn(self, x, kv, p, bias, mask, gate=None, cache=None):
        W, H = self.W, self.H
        B, n, _ = x.shape
        q = F.linear(x, W[p + ".q.weight"]).view(B, n, H, -1).transpose(1, 2)
        kv = x if kv is None else kv
        if isinstance(kv, tuple):  # cross keys and values, projected once
            k, v = kv
        else:
            k = F.linear(kv, W[p + ".k.weight"]).view(B, -1, H, q.shape[-1]).transpose(1, 2)
            v = F.linear(kv, W[p + ".v.weight"]).view(B, -1, H, q.shape[-1]).transpose(1, 2)
            if cache is not None:
                if cache:
                    k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
                cache[:] = [k, v]
        s = q @ k.transpose(-1, -2)
        if bias is not None:
            s = s + bias
        if mask is not None:
            s = s + mask
        z = torch.softmax(s, -1) @ v
        if gate is not None:
            z = z * gate.view(1, H, 1, 1)
        return F.linear(z.transpose(1, 2).reshape(B, n, -1), W[p + ".o.weight"])

    def ff(self, x, p):
        W = self.W
        y = F.relu(F.linear(self.norm(x, W[p + "layer_norm.weight"]), W[p + "DenseReluDense.wi.weight"]))
        return x + F.linear(y, W[p + "DenseReluDense.wo.weight"])

    def encode(self, src, pad_mask, gates=None):
        W, S = self.W, src.shape[1]
        h = W["shared.weight"][src]
        bias = self.bias("encoder", 0, S, S, True)
        for l in range(self.E):
            p = f"encoder.block.{l}.layer.0."
            g = gates.get(("enc", l)) if gates else None
            h = h + self.attn(self.norm(h, W[p + "layer_norm.weight"]), None, p + "SelfAttention",
                              bias, pad_mask, g)
            h = self.ff(h, f"encoder.block.{l}.layer.1.")
        return self.norm(h, W["encoder.final_layer_norm.weight"])

    def decode(self, dec, enc, pad_mask, gates=None):
        W, T = self.W, dec.shape[1]
        h = W["shared.weight"][dec]
        causal = torch.full((T, T), float("-inf")).triu(1)
        bias = self.bias("decoder", 0, T, T, False) + causal
        for l in range(self.E):
            p = f"decoder.block.{l}.layer."
            g = gates.get(("dec", l)) if gates else None
            h = h + self.attn(self.norm(h, W[p + "0.layer_norm.weight"]), None,
                              p + "0.SelfAttention", bias, None, g)
            g = gates.get(("cross", l)) if gates else None
            x = self.norm(h, W[p + "1.layer_norm.weight"])
            h = h + self.attn(x, enc, p + "1.EncDecAttention", None, pad_mask, g)
            h = self.ff(h, p + "2.")
        h = self.norm(h, W["decoder.final_layer_norm.weight"]) * self.c["d_model"] ** -0.5
        return h @ W["shared.weight"].T


def batches(pairs, B):
    for i in range(0, len(pairs), B):
        chunk = pairs[i:i + B]
        S = max(len(s) for s, _ in chunk)
        T = max(len(t) for _, t in chunk)
        src = torch.tensor([s + [0] * (S - len(s)) for s, _ in chunk])
        tgt = torch.tensor([t + [-100] * (T - len(t)) for _, t in chunk])
        dec = torch.tensor([[0] + [0 if x == -100 else x for x in row[:-1]] for row in tgt.tolist()])
        mask = torch.where(src == 0, float("-inf"), 0.0)[:, None, None, :]
        yield src, dec, tgt, mask


def losses(m, data, gates=None, encs=None):
    total, count = 0.0, 0
    for i, (src, dec, tgt, mask) in enumerate(data):
        enc = encs[i] if encs is not None else m.encode(src, mask, gates)
        logits = m.decode(dec, enc, mask, gates)
        total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                                       ignore_index=-100, reduction="sum"))
        count += int((tgt != -100).sum())
    return total / count


def ablate(m, data):
    clean = losses(m, data)
    encs = [m.encode(src, mask) for src, _, _, mask in data]
    worst = -1e9
    for typ in ("enc", "dec", "cross"):
        for l in range(m.E):
            for h in range(m.H):
                gate = torch.ones(m.H)
                gate[h] = 0
                loss = losses(m, data, {(typ, l): gate}, None if typ == "enc" else encs)
                worst = max(worst, loss - clean)
    return worst


def generate(m, src, max_new):
    W, T = m.W, max_new
    enc = m.encode(src, None)
    cross = []
    for l in range(m.E):
        p = f"decoder.block.{l}.layer.1.EncDecAttention"
        k = F.linear(enc, W[p + ".k.weight"]).view(1, -1, m.H, m.c["d_kv"]).transpose(1, 2)
        v = F.linear(enc, W[p + ".v.weight"]).view(1, -1, m.H, m.c["d_kv"]).transpose(1, 2)
        cross.append((k, v))
    full_bias = m.bias("decoder", 0, T, T, False)
    caches = [[] for _ in range(m.E)]
    ids = [0]
    for pos in range(T):
        h = W["shared.weight"][torch.tensor([[ids[-1]]])]
        bias = full_bias[:, :, pos:pos + 1, :pos + 1]
        for l in range(m.E):
            p = f"decoder.block.{l}.layer."
            h = h + m.attn(m.norm(h, W[p + "0.layer_norm.weight"]), None, p + "0.SelfAttention",
                           bias, None, cache=caches[l])
            h = h + m.attn(m.norm(h, W[p + "1.layer_norm.weight"]), cross[l],
                           p + "1.EncDecAttention", None, None)
            h = m.ff(h, p + "2.")
        h = m.norm(h, W["decoder.final_layer_norm.weight"]) * m.c["d_model"] ** -0.5
        ids.append(int(torch.argmax(h[0, -1] @ W["shared.weight"].T)))
        if ids[-1] == 1:
            break
    return ids


def run(a):
    torch.set_num_threads(a.threads)
    m = T5(a.dir)
    name = "pairs_small.jsonl" if a.mode == "ablate" else "pairs.jsonl"
    pairs = [(j["source_ids"], j["target_ids"]) for j in map(json.loads, open(f"{a.dir}/{name}"))]
    data = list(batches(pairs, a.batch))
    walls, out = [], None
    with torch.inference_mode():
        for r in range(a.runs + 1):
            t0 = time.perf_counter()
            if a.mode == "eval":
                out = {"loss": losses(m, data)}
            elif a.mode == "ablate":
                out = {"max_delta": ablate(m, data)}
            else:
                out = {"ids": generate(m, torch.tensor([pairs[0][0]]), a.max_new)}
            if r:
                walls.append(time.perf_counter() - t0)
    out.update(impl="torch", mode=a.mode, threads=a.threads, seconds=statistics.median(walls),
               walls=walls)
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["make", "run"])
    ap.add_argument("dir")
    for k, v in (("layers", 6), ("d", 512), ("heads", 8), ("dkv", 64), ("ff", 2048),
                 ("vocab", 32128), ("pairs", 16), ("src", 64), ("tgt", 64), ("batch", 8),
                 ("threads", 1), ("runs", 3), ("max_new", 64)):
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    ap.add_argument("--mode", default="eval")
    a = ap.parse_args()
    make(a) if a.what == "make" else run(a)


if __name__ == "__main__":
    main()
