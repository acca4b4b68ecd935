#!/usr/bin/env python3
"""PyTorch CPU baseline for `headscope patch --site z`: the loop a
TransformerLens user writes, in PyTorch eager, float32.

What it measures
----------------
Denoising activation patching of every head's z (SPEC §11) over a prompts
file of clean/corrupt pairs of one length, all prompts in one batch:

    clean_logits, cache = run_with_cache(clean)     # 1 pass, records z of every layer
    corrupt_logits = model(corrupt)                  # 1 pass
    for l in layers: for h in heads:
        with a hook on z of layer l that writes cache[l][:, :, h] into head h:
            LD_patched = LD(model(corrupt))          # 1 pass each
    patch_z[l][h] = (mean LD_patched - mean LD_corrupt) / (mean LD_clean - mean LD_corrupt)

so 2 + L*H full forwards. LD = logit[answer] - logit[wrong] at the last
position. The hook is the TransformerLens hook_z idiom: a forward pre-hook on
the output projection (its input is z of every head, (B, T, H*dh)) that
overwrites head h in place. The whole loop (both plain passes included) is
timed with time.perf_counter (wall) and time.process_time (CPU time of the
process: on a shared machine the work done, where wall time also counts the
waits for a core); --repeats N runs it N times and reports the medians.

Model: bench/train_torch.py's GPT (learned positions, pre-LayerNorm, biases,
GELU (tanh) 4d MLP, tied unembedding), weights --weights FILE (a float32
state dict saved with torch.save, e.g. the checkpoint the C side reads).

Threads: --threads N calls torch.set_num_threads(N); the caller should also
set OMP_NUM_THREADS and OPENBLAS_NUM_THREADS.

Output: one JSON line {"impl":"torch_loop","threads":..,"prompts":..,
"wall_s":..,"cpu_s":..,"forwards":..}; --dump FILE writes {"patch_z": [[..H..]..L..]}.
"""

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def load_train_torch():
    spec = importlib.util.spec_from_file_location("train_torch", os.path.join(HERE, "train_torch.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--config", required=True, help="L,d,H,T (T: the model's n_ctx)")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--prompts", required=True, help="JSONL of clean_ids/corrupt_ids/answer_id/wrong_id")
    ap.add_argument("--repeats", type=int, default=3)
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
    rows = [json.loads(line) for line in open(args.prompts) if line.strip()]
    clean = torch.tensor([r["clean_ids"] for r in rows])
    corrupt = torch.tensor([r["corrupt_ids"] for r in rows])
    ans = torch.tensor([r["answer_id"] for r in rows])
    wrong = torch.tensor([r["wrong_id"] for r in rows])
    idx = torch.arange(len(rows))
    dh = d // H

    def ld(logits):
        last = logits[:, -1, :]
        return last[idx, ans] - last[idx, wrong]

    state = {"mode": None, "layer": None, "head": None}
    cache = [None] * L

    def make_hook(layer):
        def hook_z(module, inputs):
            z = inputs[0].view(inputs[0].shape[0], inputs[0].shape[1], H, dh)
            if state["mode"] == "record":
                cache[layer] = z.clone()
            elif state["mode"] == "patch" and state["layer"] == layer:
                z[:, :, state["head"], :] = cache[layer][:, :, state["head"], :]
            return None
        return hook_z

    handles = [blk.attn.o_proj.register_forward_pre_hook(make_hook(l))
               for l, blk in enumerate(model.blocks)]
    times, cpu = [], []
    result = None
    with torch.no_grad():
        for _ in range(max(1, args.repeats)):
            t0, c0 = time.perf_counter(), time.process_time()
            state["mode"] = "record"
            ld_clean = ld(model(clean)).double()
            state["mode"] = None
            ld_corrupt = ld(model(corrupt)).double()
            span = ld_clean.mean() - ld_corrupt.mean()
            out = [[0.0] * H for _ in range(L)]
            state["mode"] = "patch"
            for l in range(L):
                for h in range(H):
                    state.update(layer=l, head=h)
                    out[l][h] = float((ld(model(corrupt)).double().mean() - ld_corrupt.mean()) / span)
            state["mode"] = None
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            result = out
    for hd in handles:
        hd.remove()
    if args.dump:
        with open(args.dump, "w") as f:
            json.dump({"patch_z": result}, f)
            f.write("\n")
    print("[patch_torch] %d prompts, %d forwards per sweep, runs %s s" %
          (len(rows), 2 + L * H, ", ".join("%.2f" % t for t in times)), file=sys.stderr)
    print(json.dumps({"impl": "torch_loop", "threads": args.threads, "prompts": len(rows),
                      "wall_s": round(statistics.median(times), 6),
                      "cpu_s": round(statistics.median(cpu), 6), "forwards": 2 + L * H},
                     separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()
