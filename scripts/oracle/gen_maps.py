"""Oracle attention maps for headscope's `capture` command (SPEC §6).

Provenance
----------
For the checkpoints tests/fixtures/models/gpt2_tiny and
tests/fixtures/models/llama_gqa, computes the post-softmax per-head attention
maps att[b, h, t, s] of every layer in float64 for one fixed token batch and
writes them to tests/fixtures/maps_oracle.txt.

* Reference maths: the PyTorch reference implementations of
  scripts/oracle/gen_models.py (gpt2_forward, llama_forward, read_safetensors),
  imported by path. Those forwards call the module-level `causal_attend`
  once per layer; this script swaps in `recording_attend` (below), a copy of
  the reference's attention maths that also keeps the softmax weights. Its
  output is asserted equal to the original `causal_attend`, and the full
  forward with the swap is asserted equal to the unpatched forward, so the
  maps are exactly the reference's. Nothing here uses the C code.
* Weights: read back from model.safetensors (F32) and converted to float64.
* Tokens: the llm.c shard tests/fixtures/models/gpt2_tiny/eval.bin (256 int32
  header, then uint16 tokens); the batch is tokens[0:16] reshaped (B=2, T=8),
  the same for both models (vocabulary 48 for both). This is what
  `headscope capture --data eval.bin --batch 2 --seq-len 8 --max-batches 1`
  reads.
* dtype float64, torch.set_num_threads(1) (set by gen_models on import).
* regenerate (from the repo root; writes the file, prints nothing):
      /usr/bin/python3 scripts/oracle/gen_maps.py
  Running it twice gives byte-identical files.

Output format (tests/fixture.h): '#' comments, then per model 'case NAME',
'int B/T/L/H', 'tensor tokens 2 B T', 'tensor att_LL 4 B H T T' (values
'%.17g', 8 a line), 'end'.
"""
import importlib.util
import json
import math
import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
MODELS = os.path.join(ROOT, "tests", "fixtures", "models")
OUT = os.path.join(ROOT, "tests", "fixtures", "maps_oracle.txt")
SHARD = os.path.join(MODELS, "gpt2_tiny", "eval.bin")

B, T = 2, 8


def load_reference():
    spec = importlib.util.spec_from_file_location("gen_models", os.path.join(HERE, "gen_models.py"))
    gm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gm)  # main() is guarded; importing only defines functions
    return gm


gm = load_reference()
DT = gm.DT

# ---------------------------------------------------------------------------
# Copied from gen_models.causal_attend (the reference attention), extended to
# record the post-softmax weights. Kept independent of the C implementation.
RECORD = []


def recording_attend(q, k, v):
    """q (B,H,T,dh), k/v (B,H,T,dh) -> (B,H,T,dh); causal, scale 1/sqrt(dh).
    Appends the (B,H,T,T) softmax weights to RECORD (one entry per layer)."""
    Tn, dh = q.shape[-2], q.shape[-1]
    s = q @ k.transpose(-1, -2) / math.sqrt(dh)
    blocked = torch.ones(Tn, Tn, dtype=torch.bool).triu(1)
    att = s.masked_fill(blocked, float("-inf")).softmax(-1)
    out = att @ v
    assert torch.equal(out, ORIGINAL_ATTEND(q, k, v))
    RECORD.append(att.detach().clone())
    return out
# ---------------------------------------------------------------------------


ORIGINAL_ATTEND = gm.causal_attend


def read_tokens(path, n):
    with open(path, "rb") as f:
        raw = f.read()
    hdr = np.frombuffer(raw[:1024], "<i4")
    assert hdr[0] == 20240520 and hdr[1] == 1 and hdr[2] >= n, hdr[:3]
    toks = np.frombuffer(raw[1024:], "<u2")
    assert len(toks) == hdr[2]
    return torch.tensor(toks[:n].astype(np.int64))


def load_model(name):
    d = os.path.join(MODELS, name)
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    W = {n: t for n, (_, t) in gm.read_safetensors(os.path.join(d, "model.safetensors")).items()}
    return c, W


def maps_of(fwd, W, c, idx):
    """Per-layer (B,H,T,T) maps; asserts the recording forward equals the reference one."""
    ref = fwd(W, c, idx)
    RECORD.clear()
    gm.causal_attend = recording_attend
    try:
        got = fwd(W, c, idx)
    finally:
        gm.causal_attend = ORIGINAL_ATTEND
    assert torch.equal(got, ref)
    maps = list(RECORD)
    RECORD.clear()
    return maps


def check_maps(maps, L, H):
    assert len(maps) == L, (len(maps), L)
    allowed = torch.ones(T, T, dtype=torch.bool).tril()
    for a in maps:
        assert a.shape == (B, H, T, T) and a.dtype == DT
        assert torch.allclose(a.sum(-1), torch.ones(B, H, T, dtype=DT), rtol=0, atol=1e-12)
        assert bool((a[..., ~allowed] == 0).all()) and bool((a[..., allowed] > 0).all())
    # not uniform (1/(t+1) on s <= t): the maps carry information
    uniform = allowed.to(DT) / allowed.to(DT).sum(-1, keepdim=True)
    assert all(float((a - uniform).abs().max()) > 1e-2 for a in maps)


def main():
    tokens = read_tokens(SHARD, B * T).view(B, T)
    cases = []
    for name, fwd, lkey, hkey in [("gpt2_tiny", gm.gpt2_forward, "n_layer", "n_head"),
                                  ("llama_gqa", gm.llama_forward, "num_hidden_layers", "num_attention_heads")]:
        c, W = load_model(name)
        assert c["vocab_size"] == 48 and int(tokens.max()) < c["vocab_size"]
        L, H = c[lkey], c[hkey]
        with torch.no_grad():
            maps = maps_of(fwd, W, c, tokens)
        check_maps(maps, L, H)
        # heads differ from each other (a GQA pair shares K but not Q)
        assert not torch.allclose(maps[0][:, 0], maps[0][:, 1])
        cases.append((name, L, H, maps))

    fx = gm.Fixture()
    for name, L, H, maps in cases:
        tensors = {"tokens": tokens.to(DT)}
        tensors.update({"att_%02d" % i: a for i, a in enumerate(maps)})
        fx.case(name, {"B": B, "T": T, "L": L, "H": H}, tensors)
    header = [
        "# headscope attention-map oracle; generated by scripts/oracle/gen_maps.py",
        f"# torch {torch.__version__}, float64, num_threads=1; reference maths: scripts/oracle/gen_models.py",
        "# (gpt2_forward / llama_forward with causal_attend recording the post-softmax weights)",
        "# regenerate: /usr/bin/python3 scripts/oracle/gen_maps.py (from the repo root)",
        "# models: tests/fixtures/models/NAME; tokens: tests/fixtures/models/gpt2_tiny/eval.bin",
        "# tokens[0:16] as (B=2, T=8), the same for both models; att_LL[b,h,t,s] = softmax over",
        "# keys s <= t of query t in head h of layer LL (0 for s > t)",
    ]
    fx.write(OUT, header)


if __name__ == "__main__":
    main()
