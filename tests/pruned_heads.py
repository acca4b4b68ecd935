"""Checkpoints with pruned_heads for tests/test_pruned_heads.sh, the way
transformers' prune_heads + save_pretrained makes them (SPEC §16), and the
reference that reads them the way transformers does: each layer's attention
has as many heads as its projections hold, the kept heads' rows (GPT-2's
c_attn: the columns of each q | k | v block) in ascending original order,
the output projection's columns (GPT-2's c_proj: rows) likewise.

usage:
  pruned_heads.py make SRC DST L:H,H;L:H   prune SRC's heads into DST
  pruned_heads.py same DIR SRC             DIR's tensors and pruned_heads are
                                           SRC pruned by DIR's pruned_heads
  pruned_heads.py eval DIR TASK.jsonl      {"task_loss", "accuracy"} of DIR on
                                           the task (float64, one example at a
                                           time: scripts/oracle/gen_classifiers.py)
"""
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts", "oracle"))
import torch  # noqa: E402

import gen_classifiers as G  # noqa: E402
import gen_task_metrics as M  # noqa: E402


def prune(c, W, pruned):
    """W (float64 tensors by file name) with the heads of pruned {layer: [heads]} removed."""
    gpt2 = c["model_type"] == "gpt2"
    D = c.get("n_embd", c.get("hidden_size"))
    H = c.get("n_head", c.get("num_attention_heads"))
    dh = D // H
    out = dict(W)
    for l, heads in pruned.items():
        keep = [h for h in range(H) if h not in heads]
        idx = torch.tensor([h * dh + e for h in keep for e in range(dh)], dtype=torch.long)
        for name, t in W.items():
            if gpt2:
                base = name[len("transformer."):] if name.startswith("transformer.") else name
                if base == "h.%d.attn.c_attn.weight" % l:
                    out[name] = torch.cat([t[:, b * D:(b + 1) * D][:, idx] for b in range(3)], 1)
                elif base == "h.%d.attn.c_attn.bias" % l:
                    out[name] = torch.cat([t[b * D:(b + 1) * D][idx] for b in range(3)])
                elif base == "h.%d.attn.c_proj.weight" % l:
                    out[name] = t[idx]
                continue
            pre = "encoder.layer.%d.attention." % l
            at = name.find(pre)
            if at < 0 or (at and name[at - 1] != "."):
                continue
            rest = name[at + len(pre):]
            if rest.startswith("self."):
                out[name] = t[idx]
            elif rest == "output.dense.weight":
                out[name] = t[:, idx]
    return out


def main():
    mode = sys.argv[1]
    if mode == "make":
        src, dst, spec = sys.argv[2:5]
        c = json.load(open(src + "/config.json"))
        W = G.read_st(src + "/model.safetensors")
        pruned = {int(l): [int(h) for h in hs.split(",")]
                  for l, hs in (x.split(":") for x in spec.split(";"))}
        os.makedirs(dst, exist_ok=True)
        c["pruned_heads"] = {str(l): hs for l, hs in pruned.items()}
        json.dump(c, open(dst + "/config.json", "w"), indent=1)
        G.write_st(dst + "/model.safetensors", prune(c, W, pruned))
        for f in os.listdir(src):
            if f not in ("config.json", "model.safetensors"):
                shutil.copy(os.path.join(src, f), dst)
    elif mode == "same":
        d, src = sys.argv[2:4]
        c = json.load(open(d + "/config.json"))
        pruned = {int(l): hs for l, hs in c.get("pruned_heads", {}).items()}
        assert pruned, "no pruned_heads in %s/config.json" % d
        for l, hs in pruned.items():
            assert hs == sorted(set(hs)), ("heads ascending, once", l, hs)
        want = prune(c, G.read_st(src + "/model.safetensors"), pruned)
        got = G.read_st(d + "/model.safetensors")
        bad = [k for k in want if k not in got or got[k].shape != want[k].shape or
               not torch.equal(got[k], want[k])]
        if bad:
            sys.exit("tensors differ from transformers' pruning: %s" % bad[:6])
        print(json.dumps({str(k): v for k, v in sorted(pruned.items())}, separators=(",", ":")))
    else:
        d, path = sys.argv[2:4]
        c = json.load(open(d + "/config.json"))
        W = G.read_st(d + "/model.safetensors")
        fam = c["model_type"]
        names = {v: int(k) for k, v in c["id2label"].items()}
        out, lab = [], []
        for s in open(path):
            if not s.strip():
                continue
            r = json.loads(s)
            idx = torch.tensor([r["ids"]])
            if fam in ("bert", "roberta"):
                h = G.encoder_hidden(W, c, idx, fam == "roberta")
                dense, o = (("bert.pooler.dense", "classifier") if fam == "bert"
                            else ("classifier.dense", "classifier.out_proj"))
                x = torch.tanh(h[:, 0] @ W[dense + ".weight"].T + W[dense + ".bias"])
                y = x @ W[o + ".weight"].T + W[o + ".bias"]
            else:
                h = G.gpt2_hidden(W, c, idx)
                y = h[0, G.pool_last(idx, c["pad_token_id"])] @ W["score.weight"].T
            out.append(y.reshape(-1).tolist())
            lab.append(r["label"] if isinstance(r["label"], int) else names[r["label"]])
        loss = [M.loss(0, o, y) for o, y in zip(out, lab)]
        print(json.dumps({"task_loss": sum(loss) / len(loss),
                          "accuracy": M.metric("accuracy", 0, out, lab, len(names))}))


main()
