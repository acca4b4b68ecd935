"""Oracle head ablations and head importance for headscope (SPEC §5).

Provenance
----------
For the checkpoints tests/fixtures/models/gpt2_tiny and
tests/fixtures/models/llama_gqa, computes in float64 the clean evaluation
loss, the per-head loss deltas of the zero / mean / resample ablations and the
Michel et al. (2019) head importance, and writes them to
tests/fixtures/ablate_oracle.txt.

* Reference maths: the PyTorch reference implementations of
  scripts/oracle/gen_models.py (gpt2_forward, llama_forward, read_safetensors,
  token_losses), reached through scripts/oracle/gen_maps.py (imported by
  path, as gen_scores.py does; its model and token loaders too). Those
  forwards call the module-level `causal_attend` once per layer, and its
  output is the per-head z (B,H,T,dh) right before the output projection
  (c_proj / o_proj). This script swaps in `intervening_attend` (below), a copy
  of the reference's attention maths that can replace z of a layer and
  multiply it by per-sequence head gates. Nothing here uses the C code.
* Self-checks (assertions) before anything is written: without intervention
  the swapped forward equals the reference forward (1e-12, in fact bit-equal);
  replacing z by the clean z gives a delta of exactly 0 for every head; zero
  ablation through the wrapper equals zeroing that head's input slice of the
  output-projection weight (pins the head layout of z); the gate gradient of
  one sequence's summed loss equals the gradient of the batch's summed loss
  (sequences are independent) and a central finite difference (1e-6 relative).
* Data: the llm.c shard tests/fixtures/models/gpt2_tiny/eval.bin (256 int32
  header, then uint16 tokens). B=2, T=8, 2 batches; batch i reads tokens
  [i*B*T, i*B*T + B*T + 1): inputs the first B*T, targets the last B*T, each
  viewed as (B,T). Same tokens for both models (vocabulary 48). This is what
  `--data eval.bin --batch 2 --seq-len 8 --max-batches 2` reads.
* dtype float64, torch.set_num_threads(1) (set by gen_models on import).
* regenerate (from the repo root; writes the file, prints nothing):
      /usr/bin/python3 scripts/oracle/gen_ablate.py
  Running it twice gives byte-identical files.

Definitions (SPEC §5), n = B*batches = 4 sequences
--------------------------------------------------
* per-sequence loss: mean cross-entropy over its T positions; clean_loss = mean
  over sequences.
* ablation of head (l,h), only that head of that layer changed, everything
  downstream recomputed:
    zero      z[b,t,h,:] <- 0
    mean      z[b,t,h,:] <- mean of the clean z[.,.,h,:] of layer l over all n
              sequences and T positions of the evaluation data
    resample  z[i,t,h,:] <- clean z[(i+1) mod B, t, h, :] of the same batch
  loss_delta_<kind>[l,h] = mean over sequences of (ablated - clean per-sequence
  loss); stderr_<kind> = sample std (n-1) of those differences / sqrt(n).
* importance: gates xi[b,l,h] = 1 multiply z of head h of layer l in sequence
  b; L_n = SUM of the T token losses of sequence n; g = dL_n/dxi[n,l,h];
  importance_raw = mean_n |g|, stderr_importance_raw = std(|g|) / sqrt(n);
  importance[l,:] = importance_raw[l,:] / ||importance_raw[l,:]||_2 and
  stderr_importance the raw stderr divided by the same norm.

Output format (tests/fixture.h): '#' comments, then per model 'case NAME',
'int B/T/batches/L/H', 'tensor clean_loss 1 1', then 'tensor X 2 L H' (values
'%.17g' row-major [l][h], 8 a line) for X in loss_delta_zero, stderr_zero,
loss_delta_mean, stderr_mean, loss_delta_resample, stderr_resample,
importance_raw, stderr_importance_raw, importance, stderr_importance; 'end'.
"""
import importlib.util
import math
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
MODELS = os.path.join(ROOT, "tests", "fixtures", "models")
OUT = os.path.join(ROOT, "tests", "fixtures", "ablate_oracle.txt")
SHARD = os.path.join(MODELS, "gpt2_tiny", "eval.bin")

B, T, BATCHES = 2, 8, 2
KINDS = ("zero", "mean", "resample")


def load_maps_oracle():
    """gen_maps.py as a module: the reference model code it loaded and its
    checkpoint and shard readers."""
    spec = importlib.util.spec_from_file_location("gen_maps", os.path.join(HERE, "gen_maps.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # main() is guarded; importing only defines functions
    return mod


gmaps = load_maps_oracle()
gm = gmaps.gm
DT = gm.DT
ORIGINAL_ATTEND = gm.causal_attend

# ---------------------------------------------------------------------------
# Intervention wrapper. Copied from gen_models.causal_attend (the reference
# attention); the reference forwards call it once per layer, in layer order,
# and pass its (B,H,T,dh) result straight to the output projection, so this is
# z before c_proj / o_proj. For llama, k and v arrive already expanded with
# repeat_interleave(H/G), i.e. query head h reads kv head h // (H/G).
# Kept independent of the C implementation.
STATE = {"layer": 0, "edit": None, "gates": None, "record": None}


def intervening_attend(q, k, v):
    """q (B,H,T,dh), k/v (B,H,T,dh) -> z (B,H,T,dh); causal, scale 1/sqrt(dh).
    STATE["record"]: list, gets the clean z of every layer (before edits);
    STATE["edit"]: f(layer, z) -> z, replaces z of a layer;
    STATE["gates"]: (B,L,H) tensor, z[b,h] *= gates[b,layer,h] (after the edit)."""
    Tn, dh = q.shape[-2], q.shape[-1]
    s = q @ k.transpose(-1, -2) / math.sqrt(dh)
    blocked = torch.ones(Tn, Tn, dtype=torch.bool).triu(1)
    z = s.masked_fill(blocked, float("-inf")).softmax(-1) @ v
    layer = STATE["layer"]
    STATE["layer"] += 1
    if STATE["record"] is not None:
        STATE["record"].append(z.detach().clone())
    if STATE["edit"] is not None:
        z = STATE["edit"](layer, z)
    if STATE["gates"] is not None:
        z = z * STATE["gates"][:, layer, :, None, None]
    return z


def run_model(m, idx, edit=None, gates=None, record=None):
    """Logits (B,T,V) of model m with the intervention installed for one forward."""
    STATE.update(layer=0, edit=edit, gates=gates, record=record)
    gm.causal_attend = intervening_attend
    try:
        logits = m["fwd"](m["W"], m["c"], idx)
    finally:
        gm.causal_attend = ORIGINAL_ATTEND
    assert STATE["layer"] == m["L"], (STATE["layer"], m["L"])
    STATE.update(layer=0, edit=None, gates=None, record=None)
    return logits


def replace_head(layer, head, value):
    """edit: z[:, head] of `layer` <- value (broadcast to (B,T,dh))."""
    def edit(l, z):
        if l != layer:
            return z
        z = z.clone()
        z[:, head] = value
        return z
    return edit
# ---------------------------------------------------------------------------


def batches(tokens):
    out = []
    for i in range(BATCHES):
        buf = tokens[i * B * T:i * B * T + B * T + 1]
        out.append((buf[:-1].view(B, T), buf[1:].view(B, T)))
    return out


def load_model(name, fwd, lkey, hkey):
    c, W = gmaps.load_model(name)
    return {"name": name, "fwd": fwd, "c": c, "W": W, "L": c[lkey], "H": c[hkey]}


def seq_losses(m, x, y, **kw):
    """(B,) per-sequence mean token loss."""
    return gm.token_losses(run_model(m, x, **kw), y).mean(1)


def mean_stderr(v):
    """v (n, ...) -> mean and sample-std/sqrt(n) over the first axis."""
    return v.mean(0), v.std(0, unbiased=True) / math.sqrt(v.shape[0])


def ablations(m, data, clean_z, zmean):
    """{kind: (n, L, H) per-sequence loss differences}."""
    L, H = m["L"], m["H"]
    clean = [seq_losses(m, x, y) for x, y in data]
    out = {k: torch.zeros(B * BATCHES, L, H, dtype=DT) for k in KINDS}
    for l in range(L):
        for h in range(H):
            for i, (x, y) in enumerate(data):
                zl = clean_z[i][l][:, h]  # (B,T,dh), clean z of this batch
                values = {"zero": 0.0, "mean": zmean[l][h],
                          "resample": zl.roll(-1, 0)}  # row j <- row (j+1) mod B
                for k in KINDS:
                    d = seq_losses(m, x, y, edit=replace_head(l, h, values[k])) - clean[i]
                    out[k][i * B:(i + 1) * B, l, h] = d
    return out


def gate_grads(m, data):
    """(n, L, H): g[n,l,h] = dL_n/dxi[n,l,h], L_n the summed token loss of sequence n."""
    gs = []
    for x, y in data:
        xi = torch.ones(B, m["L"], m["H"], dtype=DT, requires_grad=True)
        total = gm.token_losses(run_model(m, x, gates=xi), y).sum()  # = sum_n L_n
        gs.append(torch.autograd.grad(total, xi)[0])
    return torch.cat(gs)


def self_check(m, data, clean_z, g):
    L, H, W = m["L"], m["H"], m["W"]
    dh = clean_z[0][0].shape[-1]
    for i, (x, y) in enumerate(data):
        ref = m["fwd"](W, m["c"], x)
        # 1. no intervention (and unit gates) == the reference forward
        assert torch.allclose(run_model(m, x), ref, rtol=0, atol=1e-12)
        ones = torch.ones(B, L, H, dtype=DT)
        assert torch.allclose(run_model(m, x, gates=ones), ref, rtol=0, atol=1e-12)
        clean = seq_losses(m, x, y)
        for l in range(L):
            for h in range(H):
                # 2. z <- clean z: delta exactly 0
                d = seq_losses(m, x, y, edit=replace_head(l, h, clean_z[i][l][:, h])) - clean
                assert float(d.abs().max()) <= 1e-12, (m["name"], l, h, d)
                # 3. zero ablation == zeroing the head's input slice of the output projection
                W0 = dict(W)
                if m["name"].startswith("gpt2"):
                    key = f"h.{l}.attn.c_proj.weight"  # Conv1D [in, out]
                    W0[key] = W[key].clone()
                    W0[key][h * dh:(h + 1) * dh, :] = 0
                else:
                    key = f"model.layers.{l}.self_attn.o_proj.weight"  # [out, in]
                    W0[key] = W[key].clone()
                    W0[key][:, h * dh:(h + 1) * dh] = 0
                a = gm.token_losses(m["fwd"](W0, m["c"], x), y).mean(1)
                b = seq_losses(m, x, y, edit=replace_head(l, h, 0.0))
                assert torch.allclose(a, b, rtol=0, atol=1e-12), (m["name"], l, h)
    # 4. importance gradient: one sequence alone, and a central finite difference
    x, y = data[1]
    n, l, h, eps = 1, L - 1, 2, 1e-5

    def L_n(xi):
        return gm.token_losses(run_model(m, x, gates=xi), y)[n].sum()

    xi = torch.ones(B, L, H, dtype=DT, requires_grad=True)
    gn = torch.autograd.grad(L_n(xi), xi)[0]
    assert float(gn[1 - n].abs().max()) == 0.0  # other sequence's gates do not touch L_n
    assert torch.allclose(gn[n], g[B + n], rtol=1e-12, atol=1e-14)
    with torch.no_grad():
        up, dn = torch.ones(B, L, H, dtype=DT), torch.ones(B, L, H, dtype=DT)
        up[n, l, h] += eps
        dn[n, l, h] -= eps
        fd = (L_n(up) - L_n(dn)) / (2 * eps)
    assert abs(float(fd) - float(gn[n, l, h])) <= 1e-6 * abs(float(gn[n, l, h])), (fd, gn[n, l, h])
    assert abs(float(gn[n, l, h])) > 1e-3  # a non-trivial gradient


def model_case(m, tokens):
    data = batches(tokens)
    L, H = m["L"], m["H"]
    with torch.no_grad():
        clean_z = []  # [batch][layer] (B,H,T,dh)
        clean = []
        for x, y in data:
            rec = []
            clean.append(seq_losses(m, x, y, record=rec))
            clean_z.append(rec)
        clean = torch.cat(clean)  # (n,)
        # mean over every sequence and position: (L, H, dh)
        zmean = [torch.cat([clean_z[i][l] for i in range(BATCHES)]).mean((0, 2)) for l in range(L)]
        deltas = ablations(m, data, clean_z, zmean)
    g = gate_grads(m, data)
    self_check(m, data, clean_z, g)

    out = {"clean_loss": clean.mean().reshape(1)}
    for k in KINDS:
        mu, se = mean_stderr(deltas[k])
        out["loss_delta_" + k], out["stderr_" + k] = mu, se
    raw, raw_se = mean_stderr(g.abs())
    norm = raw.norm(dim=1, keepdim=True)  # (L,1), per-layer L2 norm
    out.update({"importance_raw": raw, "stderr_importance_raw": raw_se,
                "importance": raw / norm, "stderr_importance": raw_se / norm})
    # sanity: every ablation changes the loss somewhere; deltas are not all equal
    for k in KINDS:
        assert float(out["loss_delta_" + k].abs().max()) > 1e-3, (m["name"], k)
    assert torch.allclose(out["importance"].norm(dim=1), torch.ones(L, dtype=DT), rtol=0, atol=1e-14)
    return out


def main():
    tokens = gmaps.read_tokens(SHARD, BATCHES * B * T + 1)
    fx = gm.Fixture()
    for name, fwd, lkey, hkey in [("gpt2_tiny", gm.gpt2_forward, "n_layer", "n_head"),
                                  ("llama_gqa", gm.llama_forward, "num_hidden_layers", "num_attention_heads")]:
        m = load_model(name, fwd, lkey, hkey)
        assert m["c"]["vocab_size"] == 48 and int(tokens.max()) < 48
        out = model_case(m, tokens)
        fx.case(name, {"B": B, "T": T, "batches": BATCHES, "L": m["L"], "H": m["H"]}, out)
    header = [
        "# headscope head-ablation / head-importance oracle; generated by scripts/oracle/gen_ablate.py",
        f"# torch {torch.__version__}, float64, num_threads=1; reference maths: scripts/oracle/gen_models.py",
        "# (gpt2_forward / llama_forward with causal_attend swapped for a copy that edits/gates z)",
        "# regenerate: /usr/bin/python3 scripts/oracle/gen_ablate.py (from the repo root)",
        "# models: tests/fixtures/models/NAME; tokens: tests/fixtures/models/gpt2_tiny/eval.bin,",
        "# B=2 T=8, batch i reads tokens[i*B*T : i*B*T+B*T+1] (inputs first B*T, targets last B*T), 2 batches;",
        "# n = 4 sequences; per-sequence loss = mean over its T positions; clean_loss = mean over sequences;",
        "# loss_delta_K[l][h] = mean over sequences of (ablated - clean), stderr_K = std(n-1)/sqrt(n);",
        "# K: zero (z<-0), mean (z<-clean mean over all sequences and positions), resample (seq i <- seq",
        "# (i+1) mod B of the same batch, clean z); importance_raw = mean_n |dL_n/dxi[n,l,h]| with L_n the",
        "# summed token loss of sequence n; importance = importance_raw / ||importance_raw[l,:]||_2",
    ]
    fx.write(OUT, header)


if __name__ == "__main__":
    main()
