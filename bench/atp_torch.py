#!/usr/bin/env python3
"""PyTorch CPU baseline for `headscope atp --site z` and `headscope circuit
--method eap-ig`: the same estimates (SPEC §15) written as a PyTorch user
writes them, eager, float32.

What it measures
----------------
--what atp: attribution patching of every head's z, denoising: one clean
forward recording z (the input of the output projection, every head), one
corrupt forward and its backward from the summed logit difference with z
kept as a leaf of the graph; atp_z[l][h] = mean over prompts of
sum_{t,i} (z_clean - z_corrupt) dLD/dz, divided by mean LD_clean - mean
LD_corrupt. 2 forwards, 1 backward.

--what eap-ig: edge attribution patching with integrated gradients on
EAP-IG's graph: nodes `input` (the embedding sum), `a{l}.h{h}` (z_h W_o^h),
`m{l}`; receivers `a{l}.h{h}<q|k|v>`, `m{l}`, `logits`. Each receiver reads
its own copy of the residual (the heads' q, k and v inputs split per head,
as EAP-IG's split_qkv_input), so the gradient at a copy is the gradient
through that receiver alone. Score of u -> v: mean over prompts of
(a_u,corrupt - a_u,clean) . dLD/d(input of v), the gradient averaged over
m steps with the embeddings e_corrupt + (k/m)(e_clean - e_corrupt), k =
0..m-1. 2 forwards recording the nodes, then m forwards and backwards.

Model: bench/train_torch.py's GPT (learned positions, pre-LayerNorm, biases,
GELU (tanh) 4d MLP, tied unembedding), weights --weights FILE. Times: the
whole estimate, medians of --repeats, wall (perf_counter) and CPU
(process_time). --threads N: torch.set_num_threads(N).

Output: one JSON line {"impl":"torch","what":..,"threads":..,"wall_s":..,
"cpu_s":..}; --dump FILE writes {"atp_z": [[..H..]..L..]} or {"eap_ig":
{"SENDER>RECEIVER": score}}.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from patch_torch import load_train_torch  # noqa: E402 (bench/train_torch.py's GPT)


def keep(t):
    """t with its gradient kept: a leaf of the graph where nothing before it
    needs one (the weights are frozen), else a node that retains it."""
    if t.requires_grad:
        t.retain_grad()
    else:
        t.requires_grad_(True)
    return t


def atp_z(model, clean, corrupt, ld, L, H, dh):
    zs = [None] * L
    mode = {"keep": False}
    # the embeddings as the graph's leaf, so that every z is a node of it
    emb = model.wte.register_forward_hook(lambda mod, inp, out: keep(out) if mode["keep"] else out)

    def make_hook(layer):
        def hook(module, inputs):
            z = inputs[0]
            zs[layer] = keep(z) if mode["keep"] else z
        return hook

    handles = [blk.attn.o_proj.register_forward_pre_hook(make_hook(l))
               for l, blk in enumerate(model.blocks)]
    with torch.no_grad():
        ld_clean = ld(model(clean)).double()
        z_clean = [z.detach() for z in zs]
    mode["keep"] = True
    out_corrupt = ld(model(corrupt))
    out_corrupt.sum().backward()
    for hd in handles + [emb]:
        hd.remove()
    span = ld_clean.mean() - out_corrupt.detach().double().mean()
    B, T = clean.shape
    res = []
    for l in range(L):
        dz = (z_clean[l] - zs[l].detach()) * zs[l].grad
        res.append([float(v) for v in
                    (dz.view(B, T, H, dh).sum(dim=(1, 3)).double().mean(0) / span)])
    model.zero_grad(set_to_none=True)
    return res


def split_forward(model, emb, H, dh, want_grads):
    """The model from the embeddings with every receiver's input its own
    tensor: returns the logits, the node outputs [input, a{l}.h{h}..., m{l}]
    as (B,T,d) tensors and the receivers' inputs (leaves of the graph when
    want_grads)."""
    nodes, recv = [("input", emb)], []
    x = emb
    for l, blk in enumerate(model.blocks):
        att = blk.attn
        B, T, d = x.shape
        xs = x.unsqueeze(2).expand(B, T, 3 * H, d).clone()  # q, k, v inputs of every head
        if want_grads:
            keep(xs)
        recv.append((l, "qkv", xs))
        n = blk.ln_1(xs)
        wq = att.q_proj.weight.view(H, dh, d)
        wk = att.k_proj.weight.view(H, dh, d)
        wv = att.v_proj.weight.view(H, dh, d)
        q = torch.einsum("bthd,hed->bhte", n[:, :, :H], wq) + att.q_proj.bias.view(1, H, 1, dh)
        k = torch.einsum("bthd,hed->bhte", n[:, :, H:2 * H], wk) + att.k_proj.bias.view(1, H, 1, dh)
        v = torch.einsum("bthd,hed->bhte", n[:, :, 2 * H:], wv) + att.v_proj.bias.view(1, H, 1, dh)
        s = (q @ k.transpose(-2, -1)) * att.scale
        s = s.masked_fill(att.mask[:T, :T], float("-inf"))
        z = F.softmax(s, dim=-1) @ v  # (B,H,T,dh)
        wo = att.o_proj.weight.view(d, H, dh)
        heads = torch.einsum("bhte,dhe->bhtd", z, wo)  # each head's output into the residual
        for h in range(H):
            nodes.append(("a%d.h%d" % (l, h), heads[:, h]))
        x = x + heads.sum(1) + att.o_proj.bias
        xm = x.clone()
        if want_grads:
            keep(xm)
        recv.append((l, "m", xm))
        mo = blk.mlp(blk.ln_2(xm))
        nodes.append(("m%d" % l, mo))
        x = x + mo
    xf = x.clone()
    if want_grads:
        keep(xf)
    recv.append((len(model.blocks), "logits", xf))
    logits = model.ln_f(xf) @ model.wte.weight.t()
    return logits, nodes, recv


def eap_ig(model, clean, corrupt, ld, L, H, dh, steps):
    B, T = clean.shape
    pos = torch.arange(T)
    with torch.no_grad():
        e_clean = model.wte(clean) + model.wpe(pos)
        e_corrupt = model.wte(corrupt) + model.wpe(pos)
        _, n_clean, _ = split_forward(model, e_clean, H, dh, False)
        _, n_corrupt, _ = split_forward(model, e_corrupt, H, dh, False)
    names = [n for n, _ in n_clean]
    # (U, B*T*d): each sender's corrupt - clean output
    delta = torch.stack([(c - a).reshape(-1) for (_, a), (_, c) in zip(n_clean, n_corrupt)])
    grads = None
    for k in range(steps):
        emb = (e_corrupt + (k / steps) * (e_clean - e_corrupt)).detach()
        logits, _, recv = split_forward(model, emb, H, dh, True)
        ld(logits).sum().backward()
        g = []
        for l, kind, t in recv:
            if kind == "qkv":
                g += [t.grad[:, :, j].reshape(-1) for j in range(3 * H)]
            else:
                g.append(t.grad.reshape(-1))
        g = torch.stack(g)
        grads = g if grads is None else grads + g
        model.zero_grad(set_to_none=True)
    grads /= steps
    scores = (delta @ grads.t()) / B  # (U, R): mean over prompts
    rnames, rlayer = [], []
    for l in range(L):
        for part in "qkv":
            for h in range(H):
                rnames.append("a%d.h%d<%s>" % (l, h, part))
                rlayer.append((l, 0))
        rnames.append("m%d" % l)
        rlayer.append((l, 1))
    rnames.append("logits")
    rlayer.append((L, 0))
    # a sender's (layer, stage): input before all, a head at (l, 0), an MLP at (l, 1)
    slayer = [(-1, 1)] + [(l, 0) for l in range(L) for _ in range(H)] + [(l, 1) for l in range(L)]
    snames = ["input"] + ["a%d.h%d" % (l, h) for l in range(L) for h in range(H)] + \
             ["m%d" % l for l in range(L)]
    order = {n: i for i, n in enumerate(names)}
    out = {}
    for sn, sl in zip(snames, slayer):
        row = scores[order[sn]]
        for j, (rn, rl) in enumerate(zip(rnames, rlayer)):
            if sl < rl:
                out["%s>%s" % (sn, rn)] = float(row[j])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--what", required=True, choices=["atp", "eap-ig"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--config", required=True, help="L,d,H,T (T: the model's n_ctx)")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--prompts", required=True, help="JSONL of clean_ids/corrupt_ids/answer_id/wrong_id")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ig-steps", type=int, default=5)
    ap.add_argument("--dump")
    args = ap.parse_args()
    L, d, H, n_ctx = (int(v) for v in args.config.split(","))
    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    tt = load_train_torch()
    model = tt.GPT(args.vocab, L, d, H, H, n_ctx)
    model.load_state_dict(torch.load(args.weights, map_location="cpu"))
    model = model.float().eval()
    for p in model.parameters():
        p.requires_grad_(False)
    rows = [json.loads(line) for line in open(args.prompts) if line.strip()]
    clean = torch.tensor([r["clean_ids"] for r in rows])
    corrupt = torch.tensor([r["corrupt_ids"] for r in rows])
    ans = torch.tensor([r["answer_id"] for r in rows])
    wrong = torch.tensor([r["wrong_id"] for r in rows])
    idx = torch.arange(len(rows))

    def ld(logits):
        last = logits[:, -1, :]
        return last[idx, ans] - last[idx, wrong]

    times, cpu, result = [], [], None
    for _ in range(max(1, args.repeats)):
        t0, c0 = time.perf_counter(), time.process_time()
        if args.what == "atp":
            result = {"atp_z": atp_z(model, clean, corrupt, ld, L, H, d // H)}
        else:
            result = {"eap_ig": eap_ig(model, clean, corrupt, ld, L, H, d // H, args.ig_steps)}
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    if args.dump:
        with open(args.dump, "w") as f:
            json.dump(result, f)
            f.write("\n")
    print("[atp_torch] %s: %d prompts, runs %s s" %
          (args.what, len(rows), ", ".join("%.2f" % t for t in times)), file=sys.stderr)
    print(json.dumps({"impl": "torch", "what": args.what, "threads": args.threads,
                      "prompts": len(rows), "wall_s": round(statistics.median(times), 6),
                      "cpu_s": round(statistics.median(cpu), 6)}, separators=(",", ":")),
          flush=True)


if __name__ == "__main__":
    main()
