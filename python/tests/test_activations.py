"""run_with_cache against the float64 PyTorch oracle and the C capture.

* Every hook name of four checkpoints (GPT-2, Llama with GQA, GPT-NeoX with a
  parallel and with a sequential residual) against the hooked float64
  forwards of scripts/oracle/gen_causal.py (the oracle of `headscope patch`,
  which records every site TransformerLens users patch), within 1e-5; the
  names that oracle does not hook (hook_embed, hook_pos_embed,
  hook_attn_scores, hook_resid_post, ln_final.hook_normalized) from its own
  float64 tensors: the embedding rows, q k^T / sqrt(d_head) masked with -inf,
  the residual after the last layer and its final norm.
* The patterns and logits of the 2026 families (gemma, gemma2, gemma3_text,
  qwen3, olmo2, phi3) against tests/fixtures/families3.txt's float64 oracle
  (scripts/oracle/gen_families3.py).
* Cached patterns equal the maps `headscope capture` writes of the same
  tokens, and hs.capture's file equals the command's.
* What the cache holds is, bit for bit, what a hook of the same name sees.
"""

import os
import sys
import unittest

import numpy as np

from util import FIX, MODELS, ROOT, TOL, TempDir, cli, err, hs, read_fixture

sys.path.insert(0, os.path.join(ROOT, "scripts", "oracle"))
try:
    import torch
    import gen_causal as oracle
except ImportError as e:  # python3-torch is the oracle's
    torch = oracle = None
    WHY = str(e)

CASES = [("gpt2_tiny", "gpt2", MODELS), ("llama_gqa", "llama", MODELS),
         ("neox_par", "gpt_neox", os.path.join(FIX, "families")),
         ("neox_seq", "gpt_neox", os.path.join(FIX, "families"))]


def tokens(V, B=2, T=8, seed=3):
    return np.random.default_rng(seed).integers(0, V, size=(B, T)).astype(np.int32)


def oracle_activations(name, family, d, tok):
    """Every hook name's float64 value from the oracle's forward."""
    om = oracle.FAMILIES[family](d)
    logits, st = oracle.everything(om, torch.from_numpy(tok.astype(np.int64)))
    w, L = om.w, om.L
    rot = family != "gpt2"
    out = {}
    embed = {"gpt2": "wte.weight", "llama": "model.embed_tokens.weight",
             "gpt_neox": "gpt_neox.embed_in.weight"}[family]
    out["hook_embed"] = w[embed][torch.from_numpy(tok.astype(np.int64))]
    if family == "gpt2":
        out["hook_pos_embed"] = w["wpe.weight"][:tok.shape[1]].expand(tok.shape[0], -1, -1)
    for l in range(L):
        b = "blocks.%d." % l
        out[b + "hook_resid_pre"] = st[("resid_pre", l)]
        q, k = st[("q", l)], st[("k", l)]
        out[b + "attn.hook_" + ("rot_q" if rot else "q")] = q
        out[b + "attn.hook_" + ("rot_k" if rot else "k")] = k
        out[b + "attn.hook_v"] = st[("v", l)]
        H, G, T, dh = q.shape[2], k.shape[2], q.shape[1], q.shape[3]
        s = torch.einsum("bthd,bshd->bhts", q, k.repeat_interleave(H // G, dim=2)) / np.sqrt(dh)
        out[b + "attn.hook_attn_scores"] = s.masked_fill(
            ~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        out[b + "attn.hook_pattern"] = st[("pattern", l)]
        out[b + "attn.hook_z"] = st[("z", l)]
        out[b + "hook_attn_out"] = st[("attn_out", l)]
        out[b + "hook_mlp_out"] = st[("mlp_out", l)]
        # every family here adds both sublayers' outputs to the layer's input
        post = st[("resid_pre", l)] + st[("attn_out", l)] + st[("mlp_out", l)]
        out[b + "hook_resid_post"] = post
    if family == "gpt2":
        out["ln_final.hook_normalized"] = om.ln(post, "ln_f")
    elif family == "llama":
        out["ln_final.hook_normalized"] = om.rms(post, "model.norm")
    else:
        out["ln_final.hook_normalized"] = om.ln(post, "gpt_neox.final_layer_norm")
    return logits.numpy(), {k: v.numpy() for k, v in out.items()}


@unittest.skipIf(oracle is None, "the torch oracle is not importable")
class TorchOracle(unittest.TestCase):
    def test_every_hook_name_equals_the_float64_oracle(self):
        for name, family, base in CASES:
            d = os.path.join(base, name)
            with self.subTest(model=name), hs.Model.open(d) as m:
                tok = tokens(m.vocab_size)
                want_logits, want = oracle_activations(name, family, d, tok)
                logits, cache = m.run_with_cache(tok)
                self.assertEqual(set(cache), set(m.hook_names))
                self.assertEqual(set(want), set(m.hook_names), "the oracle covers every name")
                worst = err(logits, want_logits)
                self.assertLessEqual(worst, TOL, "logits")
                for n in m.hook_names:
                    self.assertEqual(cache[n].shape, want[n].shape, n)
                    self.assertEqual(cache[n].dtype, hs.dtype, n)
                    e = err(cache[n], want[n])
                    self.assertLessEqual(e, TOL, "%s: %s off by %g" % (name, n, e))
                    worst = max(worst, e)
                print("  %s: %d names and the logits within %.1e of the float64 oracle"
                      % (name, len(cache), worst))

    def test_hooked_oracle_equals_hooked_headscope(self):
        # the oracle's own hook (replace one head's z by zeros) against ours
        d = os.path.join(MODELS, "llama_gqa")
        om = oracle.Llama(d)
        with hs.Model.open(d) as m:
            tok = tokens(m.vocab_size)

            def zero_head(x):
                y = x.clone()
                y[:, :, 2] = 0
                return y

            want = om.forward(torch.from_numpy(tok.astype(np.int64)), {("z", 1): zero_head})

            def ours(z, hook):
                z[:, :, 2] = 0

            got = m.run_with_hooks(tok, fwd_hooks=[("blocks.1.attn.hook_z", ours)])
            self.assertLessEqual(err(got, want.numpy()), TOL)
            self.assertGreater(err(got, m(tok)), 1e-3, "the hook changed the logits")


class Families3Oracle(unittest.TestCase):
    """Patterns and logits of the families of SPEC §14 against their oracle."""

    def test_patterns_and_logits_equal_the_oracle(self):
        path = os.path.join(FIX, "families3.txt")
        for name in ("gemma", "gemma2", "gemma3", "qwen3", "olmo2", "phi3"):
            fx = read_fixture(path, name)
            B, T = fx["ints"]["B"], fx["ints"]["T"]
            tok = fx["tokens"].astype(np.int32)[:, :T]
            with self.subTest(model=name), hs.Model.open(os.path.join(FIX, "families3", name)) as m:
                names = ["blocks.%d.attn.hook_pattern" % l for l in range(m.n_layers)]
                logits, cache = m.run_with_cache(tok, names=names)
                self.assertLessEqual(err(logits, fx["logits"]), TOL, "logits")
                maps = np.stack([cache[n] for n in names])  # (L, B, H, T, T)
                e = err(maps, fx["maps"])
                self.assertLessEqual(e, TOL, "maps off by %g" % e)
                # a pattern is the softmax of the scores the same forward made
                s = m.run_with_cache(tok, names="blocks.0.attn.hook_attn_scores")[1][
                    "blocks.0.attn.hook_attn_scores"].astype(np.float64)
                p = np.exp(s - s.max(-1, keepdims=True))
                self.assertLessEqual(err(p / p.sum(-1, keepdims=True), maps[0]), TOL)


class CaptureFile(TempDir, unittest.TestCase):
    def test_cached_patterns_equal_headscope_capture(self):
        import h5py
        d = os.path.join(MODELS, "llama_gqa")
        data = os.path.join(MODELS, "llama_gqa", "train.bin")
        f = self.path("cli.h5")
        cli("capture", "--model", d, "--data", data, "--batch", 2, "--seq-len", 8,
            "--max-batches", 2, "--out", f)
        with hs.Model.open(d) as m, h5py.File(f, "r") as h:
            tok = h["tokens"][()]
            self.assertEqual(tok.shape, (4, 8))
            names = ["blocks.%d.attn.hook_pattern" % l for l in range(m.n_layers)]
            for b in (0, 2):  # the file's two batches, as the capture ran them
                _, cache = m.run_with_cache(tok[b:b + 2], names=names)
                for l, n in enumerate(names):
                    want = h["layer_%02d/attn" % l][b:b + 2]
                    self.assertTrue(np.array_equal(cache[n], want), "%s of batch %d" % (n, b))
        g = self.path("py.h5")
        with hs.Model.open(d) as m:
            r = hs.capture(m, data, g, batch=2, seq_len=8, max_batches=2)
        self.assertEqual(r.sequences, 4)
        with h5py.File(f, "r") as a, h5py.File(g, "r") as b:
            self.assertTrue(np.array_equal(a["tokens"][()], b["tokens"][()]))
            for l in range(2):
                k = "layer_%02d/attn" % l
                self.assertTrue(np.array_equal(a[k][()], b[k][()]), k)


class Cache(unittest.TestCase):
    def test_cache_holds_what_the_hooks_see(self):
        for name in ("gpt2_tiny", "llama_gqa", "hs_mixed", "llama_mqa_tied"):
            with self.subTest(model=name), hs.Model.open(os.path.join(MODELS, name)) as m:
                tok = tokens(m.vocab_size, T=9)
                logits, cache = m.run_with_cache(tok)
                seen = {}

                def keep(x, hook):
                    seen[hook.name] = x.copy()

                again = m.run_with_hooks(tok, fwd_hooks=[(lambda n: True, keep)])
                self.assertTrue(np.array_equal(logits, again))
                self.assertEqual(set(seen), set(cache))
                for n in cache:
                    self.assertTrue(np.array_equal(seen[n], cache[n]), n)

    def test_only_the_names_asked_for_are_kept(self):
        with hs.Model.open(os.path.join(MODELS, "llama_gqa")) as m:
            tok = tokens(m.vocab_size)
            _, c = m.run_with_cache(tok, names=["blocks.1.attn.hook_rot_k", "hook_embed"])
            self.assertEqual(sorted(c), ["blocks.1.attn.hook_rot_k", "hook_embed"])
            self.assertEqual(c["blocks.1.attn.hook_rot_k"].shape, (2, 8, m.n_kv_heads, m.d_head))
            _, c = m.run_with_cache(tok, names_filter=lambda n: n.endswith("hook_pattern"))
            self.assertEqual(len(c), m.n_layers)
            self.assertEqual(c["pattern", 1].shape, (2, m.n_heads, 8, 8))
            self.assertIn(("pattern", 0), c)
            _, c = m.run_with_cache(tok[0], names="blocks.0.hook_resid_post")
            self.assertEqual(c["blocks.0.hook_resid_post"].shape, (1, 8, m.d_model))

    def test_each_cache_owns_its_arrays(self):
        with hs.Model.open(os.path.join(MODELS, "gpt2_tiny")) as m:
            a = m.run_with_cache(tokens(m.vocab_size, seed=1), names="blocks.0.hook_attn_out")[1]
            keep = a["blocks.0.hook_attn_out"].copy()
            m.run_with_cache(tokens(m.vocab_size, seed=2), names="blocks.0.hook_attn_out")
            self.assertTrue(np.array_equal(a["blocks.0.hook_attn_out"], keep))
            # the arrays the forward records are views into one block (2 MiB
            # pages): aligned, disjoint, each writable without touching another
            # (hook_embed and hook_pos_embed are computed apart, from the weights)
            _, c = m.run_with_cache(tokens(m.vocab_size, T=7))
            arrays = list(c.values())
            self.assertGreater(len(arrays), 10)
            before = [x.copy() for x in arrays]
            for i, x in enumerate(arrays):
                if list(c)[i] not in ("hook_embed", "hook_pos_embed"):
                    self.assertEqual(x.ctypes.data % 64, 0, list(c)[i])
                self.assertTrue(x.flags.c_contiguous and x.flags.writeable)
                for y in arrays[i + 1:]:
                    self.assertFalse(np.shares_memory(x, y))
            arrays[3][...] = 7
            for i, (x, b) in enumerate(zip(arrays, before)):
                if i != 3:
                    self.assertTrue(np.array_equal(x, b), list(c)[i])

    def test_blocks_serve_again_only_once_nothing_holds_them(self):
        with hs.Model.open(os.path.join(MODELS, "gpt2_tiny")) as m:
            names = ["blocks.%d.attn.hook_pattern" % l for l in range(m.n_layers)]
            one, two = tokens(m.vocab_size, seed=1), tokens(m.vocab_size, seed=2)
            logits, cache = m.run_with_cache(one, names=names)
            held = [logits.copy()] + [cache[n].copy() for n in names]
            view = cache[names[1]][0, 1]  # one view keeps its whole block
            at = (logits.ctypes.data, cache[names[0]].ctypes.data)
            del cache
            # held: a logits array, a view of the cache; the new arrays are
            # elsewhere and the held ones keep their values
            logits2, cache2 = m.run_with_cache(two, names=names)
            plain = m(two)
            self.assertTrue(np.array_equal(logits2, plain))
            self.assertTrue(np.array_equal(logits, held[0]))
            self.assertTrue(np.array_equal(view, held[2][0, 1]))
            for x in [logits2, plain] + list(cache2.values()):
                self.assertFalse(np.shares_memory(x, logits) or np.shares_memory(x, view))
            self.assertFalse(np.array_equal(logits2, logits))
            # once dropped, the same memory serves the next forward of that size
            del logits, view
            logits3, cache3 = m.run_with_cache(one, names=names)
            self.assertEqual((logits3.ctypes.data, cache3[names[0]].ctypes.data), at)
            self.assertTrue(np.array_equal(logits3, held[0]))
            for i, n in enumerate(names):
                self.assertTrue(np.array_equal(cache3[n], held[1 + i]), n)
            # a forward of another size is not handed a kept block
            short = m(one[:, :5])
            self.assertEqual(short.shape, (2, 5, m.vocab_size))
            self.assertTrue(np.allclose(short, held[0][:, :5], atol=1e-5))

    def test_rotary_models_name_their_rotated_q_and_k(self):
        with hs.Model.open(os.path.join(MODELS, "llama_gqa")) as m:
            with self.assertRaisesRegex(hs.Error, "hook_rot_q"):
                m.run_with_cache(tokens(m.vocab_size), names="blocks.0.attn.hook_q")
            with self.assertRaisesRegex(hs.Error, "learned positions"):
                m.run_with_cache(tokens(m.vocab_size), names="hook_pos_embed")
        with hs.Model.open(os.path.join(MODELS, "gpt2_tiny")) as m:
            with self.assertRaisesRegex(hs.Error, "no rotary"):
                m.run_with_cache(tokens(m.vocab_size), names="blocks.0.attn.hook_rot_q")
            with self.assertRaisesRegex(hs.Error, "unknown hook name"):
                m.run_with_cache(tokens(m.vocab_size), names="blocks.0.hook_nothing")
            with self.assertRaisesRegex(hs.Error, "2 layers"):
                m.run_with_cache(tokens(m.vocab_size), names="blocks.5.hook_resid_pre")


class Config(unittest.TestCase):
    def test_config_and_sizes(self):
        import json
        for d, fam in ((os.path.join(MODELS, "gpt2_tiny"), "gpt2"),
                       (os.path.join(MODELS, "llama_gqa"), "llama"),
                       (os.path.join(FIX, "families3", "gemma2"), "gemma2"),
                       (os.path.join(FIX, "families3", "phi3"), "phi3")):
            with self.subTest(model=fam), hs.Model.open(d) as m:
                raw = json.load(open(os.path.join(d, "config.json")))
                self.assertEqual(m.family, fam)
                self.assertEqual(m.config["model_type"], raw["model_type"])
                L = raw.get("n_layer", raw.get("num_hidden_layers"))
                H = raw.get("n_head", raw.get("num_attention_heads"))
                self.assertEqual((m.n_layers, m.n_heads), (L, H))
                self.assertEqual(m.n_kv_heads, raw.get("num_key_value_heads", H))
                self.assertEqual(m.vocab_size, raw["vocab_size"])
                self.assertEqual(m.d_model, raw.get("n_embd", raw.get("hidden_size")))
                self.assertEqual(m.d_head, raw.get("head_dim", m.d_model // H))
                self.assertEqual(m.cfg.n_layers, L)
                self.assertEqual(m(tokens(m.vocab_size)).dtype, hs.dtype)
                self.assertEqual(sum(p.size for p in m.params.values()), m.n_params)

    def test_a_new_model_is_its_preset(self):
        m = hs.Model.new("gpt2", n_layer=3, d_model=32, n_head=4, vocab_size=100, n_ctx=64, seed=7)
        self.assertEqual((m.n_layers, m.d_model, m.n_heads, m.vocab_size), (3, 32, 4, 100))
        again = hs.Model.new("gpt2", n_layer=3, d_model=32, n_head=4, vocab_size=100, n_ctx=64,
                             seed=7)
        tok = tokens(100)
        self.assertTrue(np.array_equal(m(tok), again(tok)), "the seed makes the weights")
        with self.assertRaisesRegex(hs.Error, "preset"):
            hs.Model.new("no-such-preset")


if __name__ == "__main__":
    unittest.main()
