#!/usr/bin/env python3
"""PyTorch CPU baseline for headscope's head ablations: the naive
TransformerLens-style sweep, in PyTorch eager, float32.

What it measures
----------------
What a PyTorch / TransformerLens user writes to get the per-head loss deltas
of SPEC §5 (zero and mean ablation):

    clean = loss(model, data)                           # 1 clean pass
    zmean = mean of z over data                         # 1 clean pass, hook records z
    for l in layers: for h in heads: for kind in (zero, mean):
        with a hook that overwrites z[:, :, h, :] of layer l:
            delta[kind][l][h] = loss(model, data) - clean   # 1 pass each

so 2 + 2*L*H full forward passes over the evaluation data, each pass being
sequences/batch model calls under torch.no_grad(). The whole sweep (both
clean passes and every ablated pass) is timed with time.perf_counter.

The hook: z is the per-head attention output before the output projection.
In the model of bench/train_torch.py that is the input of Attention.o_proj,
shape (B, T, H*dh) = z concatenated over heads; a forward pre-hook on o_proj
views it as (B, T, H, dh) and overwrites head h in place -- exactly the
TransformerLens hook_z idiom (`z[:, :, h, :] = 0; return z`).

Model: the GELU family of bench/train_torch.py (its GPT class, imported by
path): learned positions, pre-LayerNorm, biases, GELU (tanh) 4d MLP, tied
unembedding, G = H (multi-head attention), n_ctx = T. Weights: --weights FILE
(a float32 state dict of that GPT class saved with torch.save, e.g. the
weights the C side uses), else the class's own init after
torch.manual_seed(--seed).

Data: an llm.c token stream; batch i reads tokens[i*B*T : i*B*T + B*T + 1],
inputs the first B*T and targets the last B*T, viewed as (B, T) (SPEC §4),
sequences/B batches. --data FILE reads an llm.c shard (256 int32 header, then
uint16 tokens); otherwise the stream is sequences*T + 1 uniform random tokens
in [0, V) from torch.Generator().manual_seed(--seed).

Losses: mean next-token cross-entropy over every position (sequences are of
equal length, so this is the mean of the per-sequence losses); a delta is
ablated loss - clean loss. Mean ablation replaces z of head h in layer l by
the mean of its clean z over every sequence and position.

Threads
-------
--threads N calls torch.set_num_threads(N) (and set_num_interop_threads(1)).
The caller should ALSO set OMP_NUM_THREADS=N and OPENBLAS_NUM_THREADS=N in
the environment: torch's BLAS backend keeps its own thread pool that
torch.set_num_threads does not always control.

Output
------
One JSON line on stdout:
  {"impl":"torch_naive","threads":..,"L":..,"d":..,"H":..,"T":..,
   "sequences":..,"seconds":..,"forwards":..}
"forwards" counts full passes over the evaluation data (2 + 2*L*H).
--dump FILE writes the deltas as JSON {"zero": [[..H..]..L..], "mean": [...]}.
Diagnostics go to stderr.

Example:
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 \\
      bench/ablate_torch.py --threads 1 --config 6,256,8,256 --sequences 64
"""

import argparse
import importlib.util
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def load_train_torch():
    spec = importlib.util.spec_from_file_location("train_torch", os.path.join(HERE, "train_torch.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # main() is guarded
    return mod


def parse_config(s):
    try:
        L, d, H, T = (int(v) for v in s.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("expected L,d,H,T, got %r" % s)
    if min(L, d, H, T) <= 0 or d % H:
        raise argparse.ArgumentTypeError("need positive values and d %% H == 0: %r" % s)
    return (L, d, H, T)


def read_shard(path, n):
    with open(path, "rb") as f:
        raw = f.read()
    hdr = np.frombuffer(raw[:1024], "<i4")
    if hdr[0] != 20240520 or hdr[1] != 1:
        raise SystemExit("%s: not an llm.c token shard" % path)
    toks = np.frombuffer(raw[1024:], "<u2")
    if len(toks) != hdr[2] or len(toks) < n:
        raise SystemExit("%s: %d tokens, need %d" % (path, len(toks), n))
    return torch.tensor(toks[:n].astype(np.int64))


def make_batches(tokens, B, T, nbatch):
    out = []
    for i in range(nbatch):
        buf = tokens[i * B * T:i * B * T + B * T + 1]
        out.append((buf[:-1].view(B, T).contiguous(), buf[1:].view(B, T).contiguous()))
    return out


def eval_loss(model, batches, V):
    """Mean token loss over all batches (equal sizes: mean of batch means)."""
    tot = 0.0
    for x, y in batches:
        tot += F.cross_entropy(model(x).view(-1, V), y.view(-1)).item()
    return tot / len(batches)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--config", type=parse_config, default=(6, 256, 8, 256), help="L,d,H,T")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--sequences", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--weights", help="float32 state dict of train_torch.GPT (torch.save)")
    ap.add_argument("--data", help="llm.c token shard (default: random tokens from --seed)")
    ap.add_argument("--dump", help="write the per-head deltas as JSON")
    args = ap.parse_args()
    L, d, H, T = args.config
    B, N, V = args.batch, args.sequences, args.vocab
    if args.threads < 1 or B < 1 or N < 1 or V < 1 or N % B:
        ap.error("--threads/--batch/--sequences/--vocab must be >= 1 and --sequences a multiple of --batch")

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    print("[ablate_torch] torch %s, intra-op threads %d" % (torch.__version__, torch.get_num_threads()),
          file=sys.stderr)

    tt = load_train_torch()
    torch.manual_seed(args.seed)
    model = tt.GPT(V, L, d, H, H, T)
    if args.weights:
        model.load_state_dict(torch.load(args.weights, map_location="cpu"))
    model = model.float().eval()

    nbatch = N // B
    ntok = nbatch * B * T + 1
    if args.data:
        tokens = read_shard(args.data, ntok)
        if int(tokens.max()) >= V:
            raise SystemExit("%s: token id %d >= vocab %d" % (args.data, int(tokens.max()), V))
    else:
        tokens = torch.randint(0, V, (ntok,), generator=torch.Generator().manual_seed(args.seed))
    batches = make_batches(tokens, B, T, nbatch)
    dh = d // H

    # ---- the naive sweep, as a TransformerLens user writes it ----
    state = {"layer": None, "head": None, "value": None}
    zsum = [torch.zeros(H, dh, dtype=torch.float64) for _ in range(L)]

    def make_hook(layer):
        def hook_z(module, inputs):
            z = inputs[0].view(inputs[0].shape[0], inputs[0].shape[1], H, dh)  # (B,T,H,dh)
            if state["layer"] == "record":
                zsum[layer] += z.sum((0, 1)).double()
            elif state["layer"] == layer:
                z[:, :, state["head"], :] = state["value"]  # in place, like hook_z
            return None  # the input, edited in place
        return hook_z

    handles = [blk.attn.o_proj.register_forward_pre_hook(make_hook(l))
               for l, blk in enumerate(model.blocks)]
    deltas = {"zero": [[0.0] * H for _ in range(L)], "mean": [[0.0] * H for _ in range(L)]}
    forwards = 0
    with torch.no_grad():
        t0 = time.perf_counter()
        clean = eval_loss(model, batches, V)            # clean pass
        forwards += 1
        state["layer"] = "record"                        # clean pass recording z
        for x, _ in batches:
            model(x)
        forwards += 1
        zmean = [s / (N * T) for s in zsum]              # (H, dh) per layer
        for l in range(L):
            for h in range(H):
                for kind in ("zero", "mean"):
                    state.update(layer=l, head=h, value=0.0 if kind == "zero" else zmean[l][h].float())
                    deltas[kind][l][h] = eval_loss(model, batches, V) - clean
                    forwards += 1
        seconds = time.perf_counter() - t0
    for hd in handles:
        hd.remove()

    print("[ablate_torch] L=%d d=%d H=%d T=%d sequences=%d: clean loss %.6f, max |delta zero| %.3g"
          % (L, d, H, T, N, clean, max(abs(v) for r in deltas["zero"] for v in r)), file=sys.stderr)
    if args.dump:
        with open(args.dump, "w") as f:
            json.dump(deltas, f)
            f.write("\n")
    print(json.dumps({"impl": "torch_naive", "threads": args.threads, "L": L, "d": d, "H": H, "T": T,
                      "sequences": N, "seconds": round(seconds, 6), "forwards": forwards},
                     separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()
