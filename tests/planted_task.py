"""A planted task for tests/test_task_heads.sh (SPEC §16): a
GPT2ForSequenceClassification of 2 layers x 4 heads in which one head
alone carries the label, and its task file.

usage: planted_task.py DIR N   (writes DIR/config.json, DIR/model.safetensors,
DIR/task.jsonl of N examples; prints the planted "layer head")

The task: the label is 1 when the first token is A (id 3), 0 when it is B
(id 4); the other 2..7 tokens are fillers (5..19). The last token has to
read the first, which only attention can do. The weights are set by hand
(random elsewhere, seed 7):
* embeddings: a token-identity feature in dim 2 (+3 for A, -3 for B), a
  position-0 feature in dim 3 (+4), small random values in dims 4..15;
* layer 1, head 2: the query is a constant (its bias), the key reads dim 3,
  so every position attends to position 0; the value reads dim 2 and W_o
  writes it to dims 0 and 1 as (+c, -c);
* every other head and both MLPs write nothing into dims 0..3 (their
  output rows there are 0), so nothing else carries the label or disturbs
  what the planted head reads;
* score reads dims 0 and 1: class 1 (+s, -s), class 0 (-s, +s).
So zeroing the planted head takes the label away (the logits go to 0),
and any other head changes the final norm's scale alone.
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts",
                                "oracle"))
import gen_classifiers as G  # noqa: E402  (its safetensors writer)

D, H, L, V, NPOS = 16, 4, 2, 20, 16
A, B_TOK = 3, 4
PLANT = (1, 2)


def main():
    out, n = sys.argv[1], int(sys.argv[2])
    os.makedirs(out, exist_ok=True)
    r = np.random.default_rng(7)
    dh = D // H
    W = {}
    wte = np.zeros((V, D))
    wte[:, 4:] = r.normal(0, 0.3, (V, D - 4))
    wte[A, 2], wte[B_TOK, 2] = 3, -3
    wpe = np.zeros((NPOS, D))
    wpe[:, 4:] = r.normal(0, 0.3, (NPOS, D - 4))
    wpe[0, 3] = 4
    W["transformer.wte.weight"], W["transformer.wpe.weight"] = wte, wpe
    for l in range(L):
        p = "transformer.h.%d." % l
        for ln in ("ln_1", "ln_2"):
            W[p + ln + ".weight"], W[p + ln + ".bias"] = np.ones(D), np.zeros(D)
        qkv = r.normal(0, 0.3, (D, 3 * D))  # Conv1D: x @ W, columns q | k | v
        qkv[0:4, :] = 0  # no head reads dims 0..3, but the planted one below
        bias = np.zeros(3 * D)
        proj = r.normal(0, 0.3, (D, D))
        proj[:, 0:4] = 0  # no head writes dims 0..3, but the planted one below
        if l == PLANT[0]:
            h = PLANT[1]
            q, k, v = h * dh, D + h * dh, 2 * D + h * dh
            qkv[:, q:q + dh] = 0
            qkv[:, k:k + dh] = 0
            qkv[:, v:v + dh] = 0
            bias[q] = 12.0       # a constant query
            qkv[3, k] = 1.0      # the key: the position-0 feature
            qkv[2, v] = 1.0      # the value: the token-identity feature
            proj[v - 2 * D, 0], proj[v - 2 * D, 1] = 1.5, -1.5
        W[p + "attn.c_attn.weight"], W[p + "attn.c_attn.bias"] = qkv, bias
        W[p + "attn.c_proj.weight"], W[p + "attn.c_proj.bias"] = proj, np.zeros(D)
        fc = r.normal(0, 0.3, (D, 4 * D))
        fc[0:4, :] = 0
        fp = r.normal(0, 0.3, (4 * D, D))
        fp[:, 0:4] = 0
        W[p + "mlp.c_fc.weight"], W[p + "mlp.c_fc.bias"] = fc, np.zeros(4 * D)
        W[p + "mlp.c_proj.weight"], W[p + "mlp.c_proj.bias"] = fp, np.zeros(D)
    W["transformer.ln_f.weight"], W["transformer.ln_f.bias"] = np.ones(D), np.zeros(D)
    score = np.zeros((2, D))
    score[1, 0], score[1, 1] = 1.0, -1.0
    score[0] = -score[1]
    W["score.weight"] = score
    G.write_st(os.path.join(out, "model.safetensors"),
               {k: torch.from_numpy(np.asarray(v, dtype=np.float64)) for k, v in W.items()})
    config = {
        "architectures": ["GPT2ForSequenceClassification"], "model_type": "gpt2",
        "vocab_size": V, "n_positions": NPOS, "n_embd": D, "n_layer": L, "n_head": H,
        "n_inner": 4 * D, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
        "pad_token_id": 0, "id2label": {"0": "B", "1": "A"}, "label2id": {"B": 0, "A": 1},
    }
    json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=1)
    with open(os.path.join(out, "task.jsonl"), "w") as f:
        for i in range(n):
            label = int(r.integers(2))
            ids = [A if label else B_TOK] + [int(x) for x in r.integers(5, V, r.integers(2, 8))]
            f.write(json.dumps({"ids": ids, "label": label}) + "\n")
    print(*PLANT)


main()
