"""The oracle of tests/test_task_heads.sh: heads measured on a task (SPEC §16)
in PyTorch, float64, from the HF-shaped forwards of
scripts/oracle/gen_classifiers.py (not from headscope's code), each example
alone (no padding at all), compared with the rows headscope recorded.

usage: task_heads_oracle.py MODEL_DIR TASK.jsonl BATCH DB ABLATE_RUN IMPORTANCE_RUN

* ablate: for every head and kind, loss_delta_<kind> = the mean over examples
  of ablated - clean loss (stderr: sample sd / sqrt(n)) and
  <headline>_delta_<kind> (accuracy) with the paired jackknife; zero sets the
  head's z to 0, mean to its mean over every real position of every example,
  resample gives example i the z of example (i+1) mod B of its batch group at
  the positions the donor has; the clean model's task_loss and metrics as
  model-wide rows.
* importance: |d L_n / d xi| per head and example (xi: a gate on z at 1,
  autograd), importance_raw = its mean (stderr sd / sqrt(n)), importance =
  each layer's vector over its L2 norm.
Exits 1 naming the first rows that differ (float32 against float64: 2e-5
absolute plus 2e-4 relative).
"""
import json
import os
import sqlite3
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts", "oracle"))
import torch  # noqa: E402

import gen_classifiers as G  # noqa: E402
import gen_task_metrics as M  # noqa: E402


def model(d):
    c = json.load(open(d + "/config.json"))
    W = G.read_st(d + "/model.safetensors")
    fam = c["model_type"]
    L = c.get("num_hidden_layers", c.get("n_layer"))
    H = c.get("num_attention_heads", c.get("n_head"))

    def forward(ids, zfn=None):
        idx = torch.tensor([ids])
        if fam in ("bert", "roberta"):
            h = G.encoder_hidden(W, c, idx, fam == "roberta", zfn)
            dense, o = (("bert.pooler.dense", "classifier") if fam == "bert"
                        else ("classifier.dense", "classifier.out_proj"))
            x = torch.tanh(h[:, 0] @ W[dense + ".weight"].T + W[dense + ".bias"])
            return (x @ W[o + ".weight"].T + W[o + ".bias"])[0]
        h = (G.gpt2_hidden if fam == "gpt2" else G.llama_hidden)(W, c, idx, zfn)
        return (h[0, G.pool_last(idx, c["pad_token_id"])] @ W["score.weight"].T).reshape(-1)

    names = {v: int(k) for k, v in c["id2label"].items()}
    return forward, L, H, names, len(c["id2label"])


def main():
    d, path, B, db, ablate_run, imp_run = sys.argv[1:7]
    B = int(B)
    forward, L, H, names, K = model(d)
    rows = [json.loads(s) for s in open(path) if s.strip()]
    ids = [r["ids"] for r in rows]
    lab = [r["label"] if isinstance(r["label"], int) else names[r["label"]] for r in rows]
    n = len(rows)

    # clean outputs and every layer's z (1, H, T, dh) of each example
    zs = []

    def keep(store):
        def f(layer, z):
            store.append(z.detach().clone())
            return z
        return f

    clean = []
    for e in ids:
        store = []
        with torch.no_grad():
            clean.append(forward(e, keep(store)).tolist())
        zs.append(store)
    zmean = [sum(z[l][0].sum(1) for z in zs) / sum(len(e) for e in ids) for l in range(L)]

    def losses(out):
        return [M.loss(0, o, y) for o, y in zip(out, lab)]

    def sd_err(x):
        m = sum(x) / len(x)
        return m, (sum((v - m) ** 2 for v in x) / (len(x) - 1)) ** 0.5 / len(x) ** 0.5

    want = {}
    lc = losses(clean)
    want[(-1, -1, "task_loss")] = sd_err(lc)
    for m in ("accuracy", "f1", "mcc"):
        want[(-1, -1, m)] = (M.metric(m, 0, clean, lab, K), M.jackknife(
            [M.metric(m, 0, clean[:i] + clean[i + 1:], lab[:i] + lab[i + 1:], K)
             for i in range(n)]))
    for l in range(L):
        for h in range(H):
            for kind in ("zero", "mean", "resample"):
                out = []
                for i, e in enumerate(ids):
                    g0 = i - i % B
                    size = min(B, n - g0)
                    j = g0 + (i - g0 + 1) % size  # the donor

                    def ablate(layer, z, i=i, j=j, kind=kind):
                        if layer != l:
                            return z
                        z = z.clone()
                        if kind == "zero":
                            z[0, h] = 0
                        elif kind == "mean":
                            z[0, h] = zmean[l][h]
                        else:
                            t = min(len(ids[j]), len(e))
                            z[0, h, :t] = zs[j][l][0, h, :t]
                        return z
                    with torch.no_grad():
                        out.append(forward(e, ablate).tolist())
                want[(l, h, "loss_delta_" + kind)] = sd_err(
                    [a - b for a, b in zip(losses(out), lc)])
                want[(l, h, "accuracy_delta_" + kind)] = (
                    M.metric("accuracy", 0, out, lab, K) - M.metric("accuracy", 0, clean, lab, K),
                    M.jackknife([M.metric("accuracy", 0, out[:i] + out[i + 1:],
                                          lab[:i] + lab[i + 1:], K) -
                                 M.metric("accuracy", 0, clean[:i] + clean[i + 1:],
                                          lab[:i] + lab[i + 1:], K) for i in range(n)]))
    got = {}
    con = sqlite3.connect(db)
    for run in (ablate_run, imp_run):
        for l, h, m, v, s in con.execute(
                "select layer, head, metric, value, stderr from head_metrics where run_id = ?",
                (int(run),)):
            got[(int(run), l, h, m)] = (v, s)

    # importance: per-example gate gradients
    g_abs = [[[] for _ in range(H)] for _ in range(L)]
    for i, e in enumerate(ids):
        xi = torch.ones(L, H, requires_grad=True)
        y = forward(e, lambda layer, z: z * xi[layer][None, :, None, None])
        lo = torch.logsumexp(y, 0) - y[lab[i]]
        (g,) = torch.autograd.grad(lo, xi)
        for l in range(L):
            for h in range(H):
                g_abs[l][h].append(abs(g[l, h].item()))
    imp = {}
    for l in range(L):
        raw = [sd_err(g_abs[l][h]) for h in range(H)]
        norm = sum(r[0] ** 2 for r in raw) ** 0.5
        for h in range(H):
            imp[(l, h, "importance_raw")] = raw[h]
            imp[(l, h, "importance")] = (raw[h][0] / norm, raw[h][1] / norm)
    imp.update({k: v for k, v in want.items() if k[0] < 0})

    bad = []
    for run, table in ((int(ablate_run), want), (int(imp_run), imp)):
        for (l, h, m), (v, s) in table.items():
            g = got.get((run, l, h, m))
            if g is None:
                bad.append("run %d: no row %s of layer %d head %d" % (run, m, l, h))
                continue
            for a, b, what in ((g[0], v, "value"), (g[1], s, "stderr")):
                if abs(a - b) > 2e-5 + 2e-4 * abs(b):
                    bad.append("run %d layer %d head %d %s %s: %.9g, torch %.9g"
                               % (run, l, h, m, what, a, b))
    n_rows = len(want) + len(imp)
    if bad:
        sys.exit("%d of %d rows differ:\n  " % (len(bad), n_rows) + "\n  ".join(bad[:12]))
    print("%d rows equal torch's" % n_rows)


main()
