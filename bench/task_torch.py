"""The PyTorch side of bench/task.sh, and the model and task it measures.

  task_torch.py make DIR TASK.jsonl --layers L --d D --heads H --ff F --vocab V
                 --examples N --seq-len T
      a BertForSequenceClassification of random weights (N(0, 0.02), F32,
      seed 0; 2 labels) and N examples of T ids ([CLS] ... [SEP], label 0/1)
  task_torch.py run DIR TASK.jsonl --mode eval|importance --batch B --threads t --runs R
      one JSON line: the median seconds over R runs (after one warm-up) of
      the classifier over the task -- eval: the forward under no_grad,
      the faster of transformers' BertModel arithmetic written out (the
      attention as q k^T, softmax, v) and torch's fused encoder layer
      (nn.TransformerEncoderLayer's fast path, the same post-LN layer);
      importance: Michel et al.'s loop as transformers users run it (a head
      mask of ones requiring grad, one forward and backward per batch, each
      example's loss summed so that its gate gradient is its own) -- with
      the task loss, the accuracy and (importance) every head's mean |g|, so
      that bench/task.sh can check both sides computed the same thing.
"""
import argparse
import json
import math
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from st_io import read_st, write_st


def make(a):
    g = torch.Generator().manual_seed(0)
    W = {}
    r = lambda *s: torch.randn(*s, generator=g) * 0.02
    p = "bert."
    W[p + "embeddings.word_embeddings.weight"] = r(a.vocab, a.d)
    W[p + "embeddings.position_embeddings.weight"] = r(512, a.d)
    W[p + "embeddings.token_type_embeddings.weight"] = r(2, a.d)
    W[p + "embeddings.LayerNorm.weight"], W[p + "embeddings.LayerNorm.bias"] = torch.ones(a.d), torch.zeros(a.d)
    for l in range(a.layers):
        q = f"{p}encoder.layer.{l}."
        for n, (o, i) in {"attention.self.query": (a.d, a.d), "attention.self.key": (a.d, a.d),
                          "attention.self.value": (a.d, a.d), "attention.output.dense": (a.d, a.d),
                          "intermediate.dense": (a.ff, a.d), "output.dense": (a.d, a.ff)}.items():
            W[q + n + ".weight"], W[q + n + ".bias"] = r(o, i), torch.zeros(o)
        for n in ("attention.output.LayerNorm", "output.LayerNorm"):
            W[q + n + ".weight"], W[q + n + ".bias"] = torch.ones(a.d), torch.zeros(a.d)
    W[p + "pooler.dense.weight"], W[p + "pooler.dense.bias"] = r(a.d, a.d), torch.zeros(a.d)
    W["classifier.weight"], W["classifier.bias"] = r(2, a.d), torch.zeros(2)
    import os
    os.makedirs(a.dir, exist_ok=True)
    write_st(a.dir + "/model.safetensors", W)
    json.dump({"architectures": ["BertForSequenceClassification"], "model_type": "bert",
               "vocab_size": a.vocab, "hidden_size": a.d, "num_hidden_layers": a.layers,
               "num_attention_heads": a.heads, "intermediate_size": a.ff, "hidden_act": "gelu",
               "max_position_embeddings": 512, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
               "pad_token_id": 0, "id2label": {"0": "no", "1": "yes"},
               "label2id": {"no": 0, "yes": 1}}, open(a.dir + "/config.json", "w"), indent=1)
    rng = np.random.default_rng(1)
    with open(a.task, "w") as f:
        for i in range(a.examples):
            ids = [101] + [int(x) for x in rng.integers(1000, a.vocab, a.seq_len - 2)] + [102]
            f.write(json.dumps({"ids": ids, "label": int(rng.integers(2))}) + "\n")


class Bert:
    def __init__(self, d):
        c = json.load(open(d + "/config.json"))
        self.W = read_st(d + "/model.safetensors")
        self.L, self.D, self.H = c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"]
        self.eps = c["layer_norm_eps"]
        self.fused = None

    def w(self, n):
        return self.W["bert." + n] if "bert." + n in self.W else self.W[n]

    def embed(self, ids):
        x = (self.w("embeddings.word_embeddings.weight")[ids] +
             self.w("embeddings.position_embeddings.weight")[:ids.shape[1]] +
             self.w("embeddings.token_type_embeddings.weight")[0])
        return F.layer_norm(x, (self.D,), self.w("embeddings.LayerNorm.weight"),
                            self.w("embeddings.LayerNorm.bias"), self.eps)

    def head(self, x):
        pooled = torch.tanh(F.linear(x[:, 0], self.w("pooler.dense.weight"), self.w("pooler.dense.bias")))
        return F.linear(pooled, self.W["classifier.weight"], self.W["classifier.bias"])

    def forward(self, ids, gates=None):
        """transformers' BertModel arithmetic; gates (L, B, H) multiply each head's output."""
        B, T = ids.shape
        H, dh = self.H, self.D // self.H
        x = self.embed(ids)
        lin = lambda y, n: F.linear(y, self.w(n + ".weight"), self.w(n + ".bias"))
        for l in range(self.L):
            p = f"encoder.layer.{l}."
            sp = lambda y: y.view(B, T, H, dh).transpose(1, 2)
            q, k, v = (sp(lin(x, p + "attention.self." + s)) for s in ("query", "key", "value"))
            z = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dh), -1) @ v
            if gates is not None:
                z = z * gates[l][:, :, None, None]
            z = z.transpose(1, 2).reshape(B, T, self.D)
            x = F.layer_norm(lin(z, p + "attention.output.dense") + x, (self.D,),
                             self.w(p + "attention.output.LayerNorm.weight"),
                             self.w(p + "attention.output.LayerNorm.bias"), self.eps)
            h = F.gelu(lin(x, p + "intermediate.dense"))
            x = F.layer_norm(lin(h, p + "output.dense") + x, (self.D,),
                             self.w(p + "output.LayerNorm.weight"),
                             self.w(p + "output.LayerNorm.bias"), self.eps)
        return self.head(x)

    def build_fused(self):
        """The same layers as torch's nn.TransformerEncoderLayer (its inference fast path)."""
        if self.fused is None:
            self.fused = []
            for l in range(self.L):
                p = f"encoder.layer.{l}."
                m = torch.nn.TransformerEncoderLayer(self.D, self.H, self.w(p + "intermediate.dense.weight").shape[0],
                                                     dropout=0.0, activation="gelu", batch_first=True,
                                                     layer_norm_eps=self.eps, norm_first=False)
                sa = m.self_attn
                sa.in_proj_weight.data = torch.cat([self.w(p + "attention.self." + s + ".weight")
                                                    for s in ("query", "key", "value")])
                sa.in_proj_bias.data = torch.cat([self.w(p + "attention.self." + s + ".bias")
                                                  for s in ("query", "key", "value")])
                sa.out_proj.weight.data = self.w(p + "attention.output.dense.weight")
                sa.out_proj.bias.data = self.w(p + "attention.output.dense.bias")
                m.linear1.weight.data, m.linear1.bias.data = self.w(p + "intermediate.dense.weight"), self.w(p + "intermediate.dense.bias")
                m.linear2.weight.data, m.linear2.bias.data = self.w(p + "output.dense.weight"), self.w(p + "output.dense.bias")
                m.norm1.weight.data, m.norm1.bias.data = self.w(p + "attention.output.LayerNorm.weight"), self.w(p + "attention.output.LayerNorm.bias")
                m.norm2.weight.data, m.norm2.bias.data = self.w(p + "output.LayerNorm.weight"), self.w(p + "output.LayerNorm.bias")
                self.fused.append(m.eval())

    def forward_fused(self, ids):
        x = self.embed(ids)
        for m in self.fused:
            x = m(x)
        return self.head(x)


def run(a):
    torch.set_num_threads(a.threads)
    m = Bert(a.dir)
    rows = [json.loads(s) for s in open(a.task) if s.strip()]
    ids = torch.tensor([r["ids"] for r in rows])
    lab = torch.tensor([r["label"] for r in rows])
    batches = [(ids[i:i + a.batch], lab[i:i + a.batch]) for i in range(0, len(rows), a.batch)]
    res = {"impl": "torch", "mode": a.mode, "threads": a.threads, "batch": a.batch}

    def numbers(logits):
        ce = F.cross_entropy(logits, lab, reduction="none")
        return {"task_loss": ce.mean().item(),
                "accuracy": (logits.argmax(-1) == lab).double().mean().item()}

    if a.mode == "eval":
        m.build_fused()
        best = None
        for name, fwd in (("manual", m.forward), ("fused", m.forward_fused)):
            times = []
            for rep in range(a.runs + 1):
                t0 = time.perf_counter()
                with torch.no_grad():
                    logits = torch.cat([fwd(x) for x, _ in batches])
                if rep:
                    times.append(time.perf_counter() - t0)
            med = statistics.median(times)
            res[name + "_seconds"] = med
            if best is None or med < best[0]:
                best = (med, name, logits)
        res.update(seconds=best[0], best=best[1], **numbers(best[2]))
    else:
        times = []
        for rep in range(a.runs + 1):
            t0 = time.perf_counter()
            g_abs = torch.zeros(m.L, m.H, dtype=torch.float64)
            logits = []
            for x, y in batches:
                gates = torch.ones(m.L, x.shape[0], m.H, requires_grad=True)
                out = m.forward(x, gates)
                F.cross_entropy(out, y, reduction="sum").backward()
                g_abs += gates.grad.abs().sum(1).double()
                logits.append(out.detach())
            if rep:
                times.append(time.perf_counter() - t0)
        res.update(seconds=statistics.median(times), **numbers(torch.cat(logits)))
        res["importance_raw"] = (g_abs / len(rows)).tolist()
    res["runs"] = a.runs
    print(json.dumps(res))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what")
    ap.add_argument("dir")
    ap.add_argument("task")
    for k, v in (("layers", 12), ("d", 768), ("heads", 12), ("ff", 3072), ("vocab", 30522),
                 ("examples", 256), ("seq_len", 128), ("batch", 32), ("threads", 1), ("runs", 3)):
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    ap.add_argument("--mode", default="eval")
    a = ap.parse_args()
    make(a) if a.what == "make" else run(a)


main()
