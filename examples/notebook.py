# %% [markdown]
# # Induction heads from Python, with headscope
#
# A 2-layer attention-only model trained here, on sequences of repeated
# random chunks (nothing is downloaded): find its induction heads, look at
# one's attention pattern, patch and ablate it, and read the results back
# from the index. Each `# %%` is a cell (Jupyter, VS Code); run whole as
#
#     PYTHONPATH=python /usr/bin/python3 examples/notebook.py
#
# from a checkout after `cmake --build build/float` (or anywhere once
# `cmake --install` has put the package into dist-packages). A minute or
# two of training at two threads (NOTEBOOK_STEPS=N trains N steps).

# %%
import os
import sys
import tempfile

import numpy as np

try:
    import headscope as hs
except ImportError:  # a checkout: the package in python/, its library in build/float
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import headscope as hs

work = tempfile.mkdtemp(prefix="headscope_notebook_")
db = os.path.join(work, "runs.db")  # every study below records a run here
STEPS = int(os.environ.get("NOTEBOOK_STEPS", 2000))
print("headscope", hs.__version__, "from", hs.library_path, "| arrays:", hs.dtype)

# %% [markdown]
# ## Data: repeated random chunks
# Each sequence is chunks of 8-24 random tokens, each followed by its own
# copy: the second copy is predictable only by looking back for the token
# after the earlier occurrence of the current one -- what an induction head
# does. The chunks' lengths vary, so no fixed-offset head can do it instead.

# %%
V, T = 64, 64
rng = np.random.default_rng(0)


def repeated_chunks():
    out = []
    while len(out) < T:
        chunk = list(rng.integers(0, V, size=rng.integers(8, 25)))
        out += chunk + chunk
    return out[:T]


train_bin = os.path.join(work, "train.bin")
hs.write_tokens(train_bin, np.concatenate([repeated_chunks() for _ in range(3000)]))

# %% [markdown]
# ## A model, trained here
# One head in layer 0 (room for a previous-token head), eight in layer 1.
# `hs.train` is `headscope train`: the checkpoint goes to `out`, the loss
# curve into the index.

# %%
model = hs.Model.new("attn-only", seed=1, vocab_size=V, n_ctx=T, n_head=[1, 8], head_dim=32,
                     initializer_range=0.1)
print(model)
trained = hs.train(model, train_bin, steps=STEPS, batch=16, seq_len=T, lr=3e-3,
                   out=os.path.join(work, "model"), db=db)
curve = trained.curves["train_loss"]  # (step, tokens seen, loss)
print("loss by step:", ", ".join("%d: %.2f" % (s, l) for s, _, l in curve[::STEPS // 8]),
      "| final %.3f" % trained.final_loss)

# %% [markdown]
# ## Find the induction heads
# `hs.induction_scores` is `headscope induction`: the scores on random
# r ++ r sequences, the same scores of a randomly initialised copy (the
# control), the OV copying score, and a causal check -- the loss on the
# repeated half with the top head ablated against random heads. (A model
# with several induction heads, as this one grows, loses little when one is
# ablated -- the others cover for it -- and a random draw may hit the
# previous-token head the circuit needs: the check then withholds the
# verdict, which the scores alone would not.)

# %%
ind = hs.induction_scores(model, seq_len=24, samples=32, db=db)
np.set_printoptions(precision=2, suppress=True)
print("induction score per (layer, head):\n", ind["induction"])
print("the random-init control:\n", ind["induction_control"])
print("previous-token score, layer 0:", ind["prev_token"][0, :1])
(L, H, score), = ind.top("induction", 1)
print("top induction head: L%dH%d, score %.2f (control %.2f); causal check: ablating it adds "
      "%.2f nats to the repeated half, a random head %.2f +- %.2f; established: %s"
      % (L, H, score, ind["induction_control"][L, H], ind.causal_targeted,
         ind.causal_random_mean, ind.causal_random_std, bool(ind.established)))

# %% [markdown]
# ## Look at its pattern
# On r ++ r, query t of the second copy attends to key t - |r| + 1: the token
# after the earlier occurrence of the current one (the induction stripe).

# %%
half = 24
r = rng.integers(0, V, size=half)
ids = np.concatenate([r, r])[None]
logits, cache = model.run_with_cache(ids, names=["blocks.%d.attn.hook_pattern" % L,
                                                 "blocks.0.attn.hook_pattern"])
pat = cache["pattern", L][0, H]  # [query, key], TransformerLens's shape [batch, head, q, k]
stripe = np.array([pat[t, t - half + 1] for t in range(half, 2 * half)])
print("mean attention on the induction stripe: %.2f (uniform would be %.2f)"
      % (stripe.mean(), np.mean([1 / (t + 1) for t in range(half, 2 * half)])))
prev = cache["pattern", 0][0, 0]
print("layer 0 head 0 on the previous token: %.2f" % np.mean([prev[t, t - 1] for t in range(1, 2 * half)]))
shades = " .:-=+*#%@"
print("L%dH%d, queries 24..47 (rows) x keys 0..47 (columns), darker = more attention:" % (L, H))
for t in range(half, 2 * half, 2):
    print("  " + "".join(shades[min(9, int(p * 10))] for p in pat[t]))
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.imshow(pat, cmap="Blues", vmin=0, vmax=1)
    plt.xlabel("key")
    plt.ylabel("query")
    plt.title("L%dH%d on r ++ r" % (L, H))
    plt.savefig(os.path.join(work, "pattern.png"), dpi=80)
    print("figure:", os.path.join(work, "pattern.png"))
except ImportError:
    pass

# %% [markdown]
# ## Patch it
# Clean: r ++ r[:k], whose next token is r[k]. Corrupt: the same with the
# first copy's r[k] replaced by another token x, so that copying now
# predicts x. The logit difference logit[r[k]] - logit[x] is positive on
# clean, negative on corrupt. `hs.patch` is `headscope patch`: each head's z
# of the clean run patched into the corrupt run, as a fraction of the
# clean - corrupt difference it restores.

# %%
k = 12
pairs = []
for _ in range(24):
    r = rng.integers(0, V, size=half)
    x = (r[k] + 1 + rng.integers(0, V - 1)) % V
    clean = np.concatenate([r, r[:k]])
    corrupt = clean.copy()
    corrupt[k] = x
    pairs.append({"clean_ids": clean, "corrupt_ids": corrupt, "answer_id": int(r[k]),
                  "wrong_id": int(x)})
patched = hs.patch(model, pairs, sites="z,resid_pre", db=db)
print("logit difference: clean %.2f, corrupt %.2f"
      % (patched.logit_diff_clean, patched.logit_diff_corrupt))
print("patch_z (fraction restored) per (layer, head):\n", patched["patch_z"])
print("patching resid_pre of layer 1, by position (the first copy's r[k] is position %d):\n" % k,
      patched.position_grid("patch_resid_pre")[1])

# %% [markdown]
# The same patch by hand, TransformerLens style: cache the clean run's z,
# hook the corrupt run to put the head's clean z back.

# %%
clean = np.stack([p["clean_ids"] for p in pairs])
corrupt = np.stack([p["corrupt_ids"] for p in pairs])
ans = np.array([p["answer_id"] for p in pairs])
wrong = np.array([p["wrong_id"] for p in pairs])


def logit_diff(lg):
    last = lg[:, -1, :]
    return float(np.mean(last[np.arange(len(ans)), ans] - last[np.arange(len(ans)), wrong]))


_, clean_cache = model.run_with_cache(clean, names="blocks.%d.attn.hook_z" % L)
clean_z = clean_cache["blocks.%d.attn.hook_z" % L]


def put_back(z, hook):  # z: [batch, pos, head, d_head]
    z[:, :, H] = clean_z[:, :, H]


ld_c, ld_k = logit_diff(model(clean)), logit_diff(model(corrupt))
ld_p = logit_diff(model.run_with_hooks(corrupt, fwd_hooks=[("blocks.%d.attn.hook_z" % L, put_back)]))
print("by hand: L%dH%d restores %.2f of the logit difference (hs.patch: %.2f)"
      % (L, H, (ld_p - ld_k) / (ld_c - ld_k), patched["patch_z"][L, H]))

# %% [markdown]
# Attribution patching estimates every head's patch_z from one forward of
# each run and one backward (`hs.atp` is `headscope atp`); verify=3 patches
# its three largest heads exactly, beside the estimate.

# %%
est = hs.atp(model, pairs, sites="z", verify=3, db=db)
print("atp_z (the estimate) per (layer, head):\n", est["atp_z"])
print("L%dH%d: atp_z %.2f, patch_z %.2f" % (L, H, est["atp_z"][L, H], patched["patch_z"][L, H]))

# %% [markdown]
# ## Ablate it
# Zero the head's z on r ++ r and look at the loss on the second copy.

# %%
batch = np.stack([np.concatenate([r, r]) for r in rng.integers(0, V, size=(16, half))])


def second_half_loss(fwd_hooks=()):
    per_token = model.run_with_hooks(batch, fwd_hooks=fwd_hooks, return_type="loss",
                                     per_token=True)  # [batch, pos - 1]
    return float(per_token[:, half:].mean())


def zero(head):
    def fn(z, hook):
        z[:, :, head] = 0
    return fn


print("loss on the repeated half: %.3f; L%dH%d zeroed %.3f; another layer-%d head zeroed %.3f"
      % (second_half_loss(), L, H, second_half_loss([("blocks.%d.attn.hook_z" % L, zero(H))]), L,
         second_half_loss([("blocks.%d.attn.hook_z" % L, zero((H + 1) % 8))])))

# %% [markdown]
# ## Read it back
# Every study above recorded a run; `hs.Index` reads runs and metrics as
# numpy arrays (as `headscope report` and `headscope plot` read them).

# %%
with hs.Index(db) as ix:
    for run in ix.runs():
        print("run %d: %s (%s)" % (run["run_id"], run["kind"], run["status"]))
    grid = ix.grid(ix.latest("induction"), "induction")
    assert np.array_equal(grid.value, ind["induction"], equal_nan=True)
    print("induction grid from the index equals the study's:", grid.value.shape)
print("files in", work)
