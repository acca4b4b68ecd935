"""Oracle head scores for headscope (SPEC §5): induction, duplicate-token,
previous-token (with standard errors) and the Olsson et al. copying score.

Provenance
----------
For the checkpoints tests/fixtures/models/gpt2_tiny and
tests/fixtures/models/llama_gqa, computes in float64 the per-head scores of
every layer and writes them to tests/fixtures/scores_oracle.txt.

* Reference maths: the PyTorch reference implementations of
  scripts/oracle/gen_models.py (gpt2_forward, llama_forward, read_safetensors,
  Fixture), reached through scripts/oracle/gen_maps.py, imported by path. The
  forwards call the module-level `causal_attend` once per layer; this script
  swaps in gen_maps.py's `recording_attend`, a copy of the reference attention
  that also keeps the post-softmax weights att[b, h, t, s] (asserted equal to
  the original). Nothing here uses the C code.
* Weights: read back from model.safetensors (F32) and converted to float64.
* Sequences: torch.manual_seed(77); r = torch.randint(0, 48, (N=3, T=6));
  seq = r ++ r (length 2T = 12), the same batch (B = N) for both models.
* Pattern scores, per layer l and head h, each a mean over the N samples of a
  per-sample value, with stderr = sample std (ddof 1) over the N values / sqrt(N):
    induction       per-sample mean over i in 0..T-2 of att[T+i, i+1]
    duplicate_token per-sample mean over i in 0..T-1 of att[T+i, i]
    prev_token      per-sample mean over t in 1..2T-1 of att[t, t-1]
* copying (row-vector convention, norms and biases ignored): W_E [V,d] token
  embedding, W_V^h [d,dh] value columns of head h's KV head (kv = h // (H/G)),
  W_O^h [dh,d] rows of the output projection fed by head h, W_U [d,V]
  unembedding (gpt2_tiny: wte.T, tied; llama_gqa: lm_head.weight.T). The
  eigenvalues of the V x V circuit W_E W_V W_O W_U (numpy.linalg.eigvals) are
  checked against those of the dh x dh product W_O W_U W_E W_V (nonzero
  spectra agree to 1e-8); copying = sum(Re lambda) / sum(|lambda|) over the
  small product's eigenvalues.
* dtype float64, torch.set_num_threads(1) (set by gen_models on import).
* regenerate (from the repo root; writes the file, prints nothing):
      /usr/bin/python3 scripts/oracle/gen_scores.py
  Running it twice gives byte-identical files.

Output format (tests/fixture.h): '#' comments, then per model 'case NAME',
'int N/T/L/H', 'tensor tokens 2 N 2T', then 'tensor NAME 2 L H' for induction,
stderr_induction, duplicate_token, stderr_duplicate_token, prev_token,
stderr_prev_token, copying (values '%.17g', row-major [l][h]), 'end'.
"""
import importlib.util
import math
import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
OUT = os.path.join(ROOT, "tests", "fixtures", "scores_oracle.txt")

N, T, SEED, VOCAB = 3, 6, 77, 48


def load_maps_oracle():
    """gen_maps.py as a module: its recording attention (a copy of the
    reference attention that keeps the softmax weights) and the reference
    model code it loaded."""
    spec = importlib.util.spec_from_file_location("gen_maps", os.path.join(HERE, "gen_maps.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # main() is guarded; importing only defines functions
    return mod


gmaps = load_maps_oracle()
gm = gmaps.gm
DT = gm.DT
RECORD = gmaps.RECORD
recording_attend = gmaps.recording_attend
ORIGINAL_ATTEND = gmaps.ORIGINAL_ATTEND


load_model = gmaps.load_model
maps_of = gmaps.maps_of  # asserts the recording forward equals the reference one


def sequences():
    torch.manual_seed(SEED)
    r = torch.randint(0, VOCAB, (N, T))
    return torch.cat([r, r], 1)


def mean_stderr(per_sample):
    """per_sample (N, L, H) -> mean, sample std (ddof 1) / sqrt(N), both (L, H)."""
    a = per_sample.numpy()
    return a.mean(0), a.std(0, ddof=1) / math.sqrt(a.shape[0])


def pattern_scores(maps, L, H):
    """maps: L tensors (N, H, 2T, 2T) -> {name: (L, H) array}."""
    A = torch.stack(maps, 1)  # (N, L, H, 2T, 2T)
    assert A.shape == (N, L, H, 2 * T, 2 * T)
    assert torch.allclose(A.sum(-1), torch.ones(N, L, H, 2 * T, dtype=DT), rtol=0, atol=1e-12)
    ind = torch.stack([A[..., T + i, i + 1] for i in range(T - 1)], -1).mean(-1)
    dup = torch.stack([A[..., T + i, i] for i in range(T)], -1).mean(-1)
    prev = torch.stack([A[..., t, t - 1] for t in range(1, 2 * T)], -1).mean(-1)
    # cross-check against explicit loops for one entry
    for l in range(L):
        for h in range(H):
            for b in range(N):
                a = A[b, l, h]
                assert abs(sum(float(a[T + i, i + 1]) for i in range(T - 1)) / (T - 1) - float(ind[b, l, h])) < 1e-15
                assert abs(sum(float(a[T + i, i]) for i in range(T)) / T - float(dup[b, l, h])) < 1e-15
                assert abs(sum(float(a[t, t - 1]) for t in range(1, 2 * T)) / (2 * T - 1) - float(prev[b, l, h])) < 1e-15
    out = {}
    for name, per in [("induction", ind), ("duplicate_token", dup), ("prev_token", prev)]:
        m, se = mean_stderr(per)
        out[name], out["stderr_" + name] = m, se
    return out


def ov_matrices(name, W, c, l, h):
    """(W_E [V,d], W_V^h [d,dh], W_O^h [dh,d], W_U [d,V]) as float64 numpy."""
    if name == "gpt2_tiny":
        d, H = c["n_embd"], c["n_head"]
        dh = d // H
        p = f"h.{l}.attn."
        WE = W["wte.weight"]
        WV = W[p + "c_attn.weight"][:, 2 * d + h * dh:2 * d + (h + 1) * dh]  # G = H: kv = h
        WO = W[p + "c_proj.weight"][h * dh:(h + 1) * dh, :]
        WU = W["wte.weight"].T
    else:
        d, H, G = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        dh, kv = d // H, h // (H // G)
        p = f"model.layers.{l}.self_attn."
        WE = W["model.embed_tokens.weight"]
        WV = W[p + "v_proj.weight"][kv * dh:(kv + 1) * dh, :].T
        WO = W[p + "o_proj.weight"][:, h * dh:(h + 1) * dh].T
        WU = (W["model.embed_tokens.weight"] if c["tie_word_embeddings"] else W["lm_head.weight"]).T
    mats = [m.numpy().astype(np.float64) for m in (WE, WV, WO, WU)]
    assert mats[1].shape == (d, dh) and mats[2].shape == (dh, d)
    return mats


def spectrum_key(z):
    return sorted(z.tolist(), key=lambda x: (round(x.real, 9), round(x.imag, 9)))


def copying_score(WE, WV, WO, WU):
    dh = WV.shape[1]
    big = np.linalg.eigvals(WE @ WV @ WO @ WU)
    small = np.linalg.eigvals(WO @ WU @ WE @ WV)
    assert big.shape == (WE.shape[0],) and small.shape == (dh,)
    scale = max(1.0, float(np.abs(small).max()))
    assert float(np.abs(small).min()) > 1e-6 * scale  # small product full rank
    nz = big[np.argsort(-np.abs(big), kind="stable")[:dh]]  # the dh nonzero eigenvalues
    rest = big[np.argsort(-np.abs(big), kind="stable")[dh:]]
    assert float(np.abs(rest).max()) < 1e-8 * scale
    for a, b in zip(spectrum_key(nz), spectrum_key(small)):
        assert abs(a - b) < 1e-8 * scale, (a, b)
    s = float(np.sum(small.real) / np.sum(np.abs(small)))
    s_big = float(np.sum(big.real) / np.sum(np.abs(big)))
    assert abs(s - s_big) < 1e-8
    assert -1.0 <= s <= 1.0
    return s


def main():
    seq = sequences()
    assert seq.shape == (N, 2 * T) and torch.equal(seq[:, :T], seq[:, T:])
    fx = gm.Fixture()
    for name, fwd, lkey, hkey in [("gpt2_tiny", gm.gpt2_forward, "n_layer", "n_head"),
                                  ("llama_gqa", gm.llama_forward, "num_hidden_layers", "num_attention_heads")]:
        c, W = load_model(name)
        assert c["vocab_size"] == VOCAB
        L, H = c[lkey], c[hkey]
        with torch.no_grad():
            maps = maps_of(fwd, W, c, seq)
        assert len(maps) == L
        sc = pattern_scores(maps, L, H)
        cop = np.array([[copying_score(*ov_matrices(name, W, c, l, h)) for h in range(H)] for l in range(L)])
        tensors = {"tokens": seq.to(DT)}
        for k in ["induction", "stderr_induction", "duplicate_token", "stderr_duplicate_token",
                  "prev_token", "stderr_prev_token"]:
            tensors[k] = torch.from_numpy(np.ascontiguousarray(sc[k], dtype=np.float64))
        tensors["copying"] = torch.from_numpy(cop)
        for k, t in tensors.items():
            assert k == "tokens" or tuple(t.shape) == (L, H), k
        fx.case(name, {"N": N, "T": T, "L": L, "H": H}, tensors)
    header = [
        "# headscope head-score oracle (SPEC section 5); generated by scripts/oracle/gen_scores.py",
        f"# torch {torch.__version__}, numpy {np.__version__}, float64, num_threads=1; reference maths:",
        "# scripts/oracle/gen_models.py (gpt2_forward / llama_forward, causal_attend recording the maps)",
        "# regenerate: /usr/bin/python3 scripts/oracle/gen_scores.py (from the repo root)",
        f"# models: tests/fixtures/models/NAME; tokens: torch.manual_seed({SEED}); r = torch.randint(0, 48, (N, T));",
        "# seq = r ++ r (N x 2T), batch B = N for both models. Scores [l][h]: mean over samples of the",
        "# per-sample mean of att[T+i, i+1] (i < T-1, induction), att[T+i, i] (i < T, duplicate_token),",
        "# att[t, t-1] (1 <= t < 2T, prev_token); stderr_* = std(ddof=1) over samples / sqrt(N).",
        "# copying = sum(Re lambda) / sum(|lambda|), lambda = eigvals(W_O^h W_U W_E W_V^h) (numpy), norms and",
        "# biases ignored; equal to the nonzero spectrum of the V x V circuit W_E W_V^h W_O^h W_U",
    ]
    fx.write(OUT, header)


if __name__ == "__main__":
    main()
