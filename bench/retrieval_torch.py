#!/usr/bin/env python3
"""The torch side of bench/retrieval.sh: SPEC §18's copy-rule loop in
PyTorch eager, on a Llama checkpoint in the Hugging Face layout (BF16 read
with numpy, computed in float32 as bench/scale_torch.py loads it): the
prompt (the haystack's first N byte tokens with the needle at floor(D N /
100), then the question) prefilled into a KV cache in chunks of 512 query
rows (eager attention: a chunk's scores against every cached key, then the
softmax), then |answer| + 8 greedy steps; after the prefill and each step
the argmax of every head's last attention row against the needle span and
the token emitted. Then what `retrieval` also computes of each run: the
next-token loss of the haystack's first N tokens (the same forward over N
rows in chunks of 512, every row's logits). Its numbers: the wall time of
each run, of its prefill and of its steps, of the haystack's loss (and the
loss, to compare), and the peak RSS.

    /usr/bin/python3 bench/retrieval_torch.py --model DIR --haystack FILE \\
        --needle S --question S --answer S --lengths 2048,4096 --depth 50 --threads 2

Prints one JSON line per length.
"""
import argparse
import json
import resource
import time

import torch

from scale_torch import load, rotate_half

CHUNK = 512


class Llama:
    def __init__(self, cfg, w):
        self.cfg, self.w = cfg, w
        self.H, self.G = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.dh = cfg["hidden_size"] // self.H
        self.eps = cfg["rms_norm_eps"]
        self.inv = 1.0 / (cfg.get("rope_theta", 10000.0)
                          ** (torch.arange(0, self.dh, 2).float() / self.dh))

    def norm(self, x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * g

    def forward(self, ids, cache, pos0, every_row=False):
        """Rows ids at positions pos0.. over the cache (appended); logits of
        the last row (every_row: of every row) and each layer's (H, keys)
        attention of the last row."""
        w, H, G, dh = self.w, self.H, self.G, self.dh
        T = ids.shape[0]
        ang = torch.outer(torch.arange(pos0, pos0 + T).float(), self.inv)
        emb = torch.cat((ang, ang), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        x = w["model.embed_tokens.weight"][ids]
        rows = []
        for l in range(self.cfg["num_hidden_layers"]):
            p = "model.layers.%d." % l
            h = self.norm(x, w[p + "input_layernorm.weight"])
            q = (h @ w[p + "self_attn.q_proj.weight"].T).view(T, H, dh).transpose(0, 1)
            k = (h @ w[p + "self_attn.k_proj.weight"].T).view(T, G, dh).transpose(0, 1)
            v = (h @ w[p + "self_attn.v_proj.weight"].T).view(T, G, dh).transpose(0, 1)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            ck, cv = cache[l]
            ck[:, pos0:pos0 + T], cv[:, pos0:pos0 + T] = k, v
            S = pos0 + T
            kk = ck[:, :S].repeat_interleave(H // G, dim=0)
            vv = cv[:, :S].repeat_interleave(H // G, dim=0)
            s = (q @ kk.transpose(1, 2)) / dh ** 0.5
            s += torch.full((T, S), float("-inf")).triu(pos0 + 1)
            a = torch.softmax(s, dim=-1)
            rows.append(a[:, -1])
            z = (a @ vv).transpose(0, 1).reshape(T, H * dh)
            x = x + z @ w[p + "self_attn.o_proj.weight"].T
            h = self.norm(x, w[p + "post_attention_layernorm.weight"])
            g = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].T)
            x = x + (g * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
        x = self.norm(x if every_row else x[-1:], w["model.norm.weight"])
        lm = w.get("lm_head.weight", w["model.embed_tokens.weight"])
        logits = x @ lm.T
        return (logits if every_row else logits[0]), rows


def run(model, hay, needle, question, answer, n, depth):
    off = int(depth * n // 100)
    prompt = hay[:off] + needle + hay[off:n] + question
    steps = len(answer) + 8
    total = len(prompt) + steps
    L, G, dh = model.cfg["num_hidden_layers"], model.G, model.dh
    cache = [(torch.zeros(G, total, dh), torch.zeros(G, total, dh)) for _ in range(L)]
    seq = list(prompt)
    copied = set()
    t0 = time.perf_counter()
    for i in range(0, len(prompt), CHUNK):
        logits, rows = model.forward(torch.tensor(prompt[i:i + CHUNK]), cache, i)
    t1 = time.perf_counter()
    for step in range(steps):
        tok = int(logits.argmax())
        for l, r in enumerate(rows):
            for h, j in enumerate(r.argmax(-1).tolist()):
                if off <= j < off + len(needle) and seq[j] == tok:
                    copied.add((l, h, j))
        seq.append(tok)
        if step + 1 < steps:
            logits, rows = model.forward(torch.tensor([tok]), cache, len(seq) - 1)
    t2 = time.perf_counter()
    return {"length": n, "run_s": t2 - t0, "prefill_s": t1 - t0,
            "step_tokens_per_s": (steps - 1) / (t2 - t1), "copies": len(copied)}


def haystack_loss(model, hay, n):
    """The mean next-token loss of hay[:n] (targets hay[1:n + 1]), as
    `retrieval` records it (haystack_loss), and its seconds."""
    L, G, dh = model.cfg["num_hidden_layers"], model.G, model.dh
    cache = [(torch.zeros(G, n, dh), torch.zeros(G, n, dh)) for _ in range(L)]
    t0, total = time.perf_counter(), 0.0
    for i in range(0, n, CHUNK):
        logits, _ = model.forward(torch.tensor(hay[i:min(i + CHUNK, n)]), cache, i, every_row=True)
        targets = torch.tensor(hay[i + 1:min(i + CHUNK, n) + 1])
        total += float(torch.nn.functional.cross_entropy(logits, targets, reduction="sum"))
    return total / n, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--haystack", required=True)
    ap.add_argument("--needle", required=True)
    ap.add_argument("--question", required=True)
    ap.add_argument("--answer", required=True)
    ap.add_argument("--lengths", required=True)
    ap.add_argument("--depth", type=float, default=50)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg, w = load(a.model, torch.float32)
    model = Llama(cfg, w)
    hay = list(open(a.haystack, "rb").read())
    with torch.no_grad():
        for n in map(int, a.lengths.split(",")):
            r = run(model, hay, list(a.needle.encode()), list(a.question.encode()),
                    a.answer.encode(), n, a.depth)
            r["haystack_loss"], r["haystack_loss_s"] = haystack_loss(model, hay, n)
            r.update({"impl": "torch_eager_float32", "threads": a.threads,
                      "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss})
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
