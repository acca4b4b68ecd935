"""The oracle of tests/test_task_heads.sh's train --task check: a classifier
fixture fine-tuned in PyTorch (float64, the HF-shaped forwards of
scripts/oracle/gen_classifiers.py, no dropout) as SPEC §16 says `train
--task` does -- each step the next B examples of the task file in order,
wrapping, their mean task loss, torch.optim.Adam (lr, betas 0.9/0.999, eps
1e-8) on every parameter -- then the mean task loss of the trained model
over the whole task.

usage: task_train_oracle.py MODEL_DIR TASK.jsonl B STEPS LR   (prints the loss)
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts", "oracle"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import gen_classifiers as G  # noqa: E402


def main():
    d, path, B, steps, lr = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    c = json.load(open(d + "/config.json"))
    W = {k: v.clone().requires_grad_(True) for k, v in G.read_st(d + "/model.safetensors").items()}
    fam = c["model_type"]
    rows = [json.loads(s) for s in open(path) if s.strip()]

    def out(ids):
        idx = torch.tensor([ids])
        if fam in ("bert", "roberta"):
            h = G.encoder_hidden(W, c, idx, fam == "roberta")
            dense, o = (("bert.pooler.dense", "classifier") if fam == "bert"
                        else ("classifier.dense", "classifier.out_proj"))
            x = torch.tanh(h[:, 0] @ W[dense + ".weight"].T + W[dense + ".bias"])
            return (x @ W[o + ".weight"].T + W[o + ".bias"]).reshape(-1)
        h = (G.gpt2_hidden if fam == "gpt2" else G.llama_hidden)(W, c, idx)
        return (h[0, G.pool_last(idx, c["pad_token_id"])] @ W["score.weight"].T).reshape(-1)

    def loss(r):
        return F.cross_entropy(out(r["ids"])[None], torch.tensor([r["label"]]))

    opt = torch.optim.Adam(list(W.values()), lr=lr)
    nxt = 0
    for _ in range(steps):
        batch = [rows[(nxt + b) % len(rows)] for b in range(B)]
        nxt = (nxt + B) % len(rows)
        opt.zero_grad()
        (sum(loss(r) for r in batch) / B).backward()
        opt.step()
    with torch.no_grad():
        print("%.12g" % (sum(loss(r).item() for r in rows) / len(rows)))


main()
