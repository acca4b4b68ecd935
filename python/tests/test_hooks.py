"""run_with_hooks: hooks that change nothing change nothing, bit for bit; a
hook that raises propagates its exception and leaves the model usable;
zeroing a head's hook_z is `headscope ablate --method zero` of that head;
the sites the Python side adds (hook_embed with learned positions,
hook_attn_scores, ln_final.hook_normalized) act as TransformerLens's; an
encoder without its masked-LM head runs hooks and refuses logits."""

import gc
import os
import threading
import time
import unittest

import numpy as np

from util import FIX, MODELS, TOL, TempDir, cli, err, hs

ALL = ["gpt2_tiny", "llama_gqa", "llama_mqa_tied", "hs_mixed", "hs_post_gelu", "tinylm_h4"]
FAMILIES3 = ["gemma", "gemma2", "gemma3", "qwen3", "olmo2", "phi3"]


def open_all():
    for n in ALL:
        yield n, hs.Model.open(os.path.join(MODELS, n))
    for n in FAMILIES3:
        yield n, hs.Model.open(os.path.join(FIX, "families3", n))
    yield "mla_q", hs.Model.open(os.path.join(FIX, "mla", "mla_q"))


def tokens(V, B=2, T=12, seed=5):
    return np.random.default_rng(seed).integers(0, V, size=(B, T)).astype(np.int32)


class Identity(unittest.TestCase):
    def test_unchanging_hooks_leave_the_logits_bit_identical(self):
        for name, m in open_all():
            with self.subTest(model=name), m:
                tok = tokens(m.vocab_size, T=min(12, m.n_ctx))
                plain = m(tok)
                calls = []

                def same(x, hook):
                    calls.append(hook.name)
                    return x

                def copy(x, hook):
                    return x.copy()

                def inplace(x, hook):
                    x[...] = x.copy()

                for fn in (same, copy, inplace, lambda x, hook: None):
                    got = m.run_with_hooks(tok, fwd_hooks=[(lambda n: True, fn)])
                    self.assertTrue(np.array_equal(plain, got), "%s: %s" % (name, fn.__name__))
                self.assertEqual(calls, m.hook_names, "every hook once, in forward order")
                both = m.run_with_hooks(tok, return_type="both",
                                        fwd_hooks=[(lambda n: True, same)])
                self.assertTrue(np.array_equal(plain, both[0]))
                self.assertEqual(both[1], m.loss(tok))


class Raising(unittest.TestCase):
    def test_a_raising_hook_propagates_and_the_model_stays_usable(self):
        class Boom(Exception):
            pass

        with hs.Model.open(os.path.join(MODELS, "llama_gqa")) as m:
            tok = tokens(m.vocab_size)
            plain = m(tok)
            seen = []
            for name in ("hook_embed", "blocks.0.attn.hook_attn_scores",
                         "blocks.1.attn.hook_pattern", "blocks.1.hook_mlp_out",
                         "ln_final.hook_normalized"):
                err_ = Boom(name)

                def boom(x, hook):
                    raise err_

                def after(x, hook):
                    seen.append(hook.name)

                later = [] if name.startswith("ln_final") else [("blocks.1.hook_resid_post",
                                                                  after)]
                with self.assertRaises(Boom) as cm:
                    m.run_with_hooks(tok, fwd_hooks=[(name, boom)] + later)
                self.assertIs(cm.exception, err_, "the hook's own exception object")
                self.assertEqual(seen, [], "the forward stopped at the raising hook")
                self.assertTrue(np.array_equal(m(tok), plain), "usable after " + name)
                _, c = m.run_with_cache(tok, names="blocks.1.attn.hook_pattern")
                self.assertEqual(c["blocks.1.attn.hook_pattern"].shape, (2, 4, 12, 12))
            with self.assertRaisesRegex(ValueError, "shape"):
                m.run_with_hooks(tok, fwd_hooks=[("blocks.0.hook_attn_out",
                                                  lambda x, h: x[:, :1])])
            with self.assertRaises(KeyboardInterrupt):  # not only Exception
                m.run_with_hooks(tok, fwd_hooks=[("blocks.0.attn.hook_z",
                                                  lambda x, h: (_ for _ in ()).throw(
                                                      KeyboardInterrupt()))])
            self.assertTrue(np.array_equal(m(tok), plain))
            with self.assertRaisesRegex(hs.Error, "outside vocabulary"):
                m(np.full((1, 4), m.vocab_size))
            self.assertTrue(np.array_equal(m(tok), plain))


class AblateEquals(TempDir, unittest.TestCase):
    def test_zeroing_one_heads_z_equals_headscope_ablate_zero(self):
        d = os.path.join(MODELS, "gpt2_tiny")
        data = self.path("eval.bin")
        B, T, nb = 2, 8, 3
        hs.write_tokens(data, tokens(48, B=1, T=B * T * nb + 5, seed=11))
        db = self.path("a.db")
        with hs.Model.open(d) as m:
            ids = hs.read_tokens(data)
            for l, h in ((0, 1), (1, 3)):
                out = cli("ablate", "--model", d, "--data", data, "--db", db, "--batch", B,
                          "--seq-len", T, "--max-batches", nb, "--layers", l, "--heads", h,
                          "--method", "zero", "--json")
                import json
                run = json.loads(out)["run_id"]
                with hs.Index(db) as ix:
                    want = ix.value(run, "loss_delta_zero", l, h)

                def zero(z, hook, h=h):
                    z[:, :, h, :] = 0

                deltas = []
                for i in range(nb):  # SPEC §4's batches: B*T+1 tokens from i*B*T
                    chunk = ids[i * B * T:i * B * T + B * T + 1]
                    x, y = chunk[:-1].reshape(B, T), chunk[1:].reshape(B, T)
                    clean = m.loss(x, targets=y, per_token=True).astype(np.float64).mean(1)
                    ablated = m.run_with_hooks(x, fwd_hooks=[("blocks.%d.attn.hook_z" % l, zero)],
                                               return_type="loss", targets=y, per_token=True)
                    deltas += list(ablated.astype(np.float64).mean(1) - clean)
                self.assertEqual(want[2], len(deltas))
                self.assertLessEqual(abs(np.mean(deltas) - want[0]), TOL,
                                     "L%dH%d: hook %.9g, ablate %.9g" % (l, h, np.mean(deltas),
                                                                         want[0]))
                print("  L%dH%d: hooked hook_z %.9f, headscope ablate %.9f (|diff| %.1e, %d "
                      "sequences)" % (l, h, np.mean(deltas), want[0], abs(np.mean(deltas) - want[0]),
                                      len(deltas)))
                se = np.std(deltas, ddof=1) / np.sqrt(len(deltas))
                self.assertLessEqual(abs(se - want[1]), TOL)
                # hs.ablate is the command's study: the same numbers exactly
                r = hs.ablate(m, data, batch=B, seq_len=T, max_batches=nb, layers=[l], heads=[h])
                self.assertEqual(r["loss_delta_zero"][l, h], want[0])


class Sites(unittest.TestCase):
    def test_hook_embed_and_pos_embed_with_learned_positions(self):
        with hs.Model.open(os.path.join(MODELS, "gpt2_tiny")) as m:
            tok = tokens(m.vocab_size, T=8)
            _, c = m.run_with_cache(tok, names=["hook_embed", "hook_pos_embed",
                                                "blocks.0.hook_resid_pre"])
            self.assertTrue(np.array_equal(c["hook_embed"] + c["hook_pos_embed"],
                                           c["blocks.0.hook_resid_pre"]))
            self.assertTrue(np.array_equal(c["hook_embed"], m.params["wte.weight"][tok]))
            seen = {}

            def zero(x, hook):
                return np.zeros_like(x)

            def keep(x, hook):
                seen[hook.name] = x.copy()

            m.run_with_hooks(tok, fwd_hooks=[("hook_embed", zero),
                                             ("blocks.0.hook_resid_pre", keep)])
            self.assertTrue(np.array_equal(seen["blocks.0.hook_resid_pre"], c["hook_pos_embed"]))
            m.run_with_hooks(tok, fwd_hooks=[("hook_pos_embed", zero), ("hook_embed", keep),
                                             ("blocks.0.hook_resid_pre", keep)])
            self.assertTrue(np.array_equal(seen["blocks.0.hook_resid_pre"], c["hook_embed"]))
        with hs.Model.open(os.path.join(MODELS, "llama_gqa")) as m:  # no positions: the same tensor
            tok = tokens(m.vocab_size, T=8)
            _, c = m.run_with_cache(tok, names=["hook_embed", "blocks.0.hook_resid_pre"])
            self.assertTrue(np.array_equal(c["hook_embed"], c["blocks.0.hook_resid_pre"]))

    def test_attn_scores_feed_the_softmax(self):
        with hs.Model.open(os.path.join(MODELS, "llama_gqa")) as m:
            tok = tokens(m.vocab_size, T=8)
            seen = {}

            def bias(s, hook):
                s[:, :, :, 0] += 3.0  # toward the first key (always visible)
                s[:, :, 0, 5] = 100.0  # a key query 0 may not see: stays masked
                seen["s"] = s.copy()

            def keep(p, hook):
                seen["p"] = p.copy()

            out = m.run_with_hooks(tok, fwd_hooks=[("blocks.1.attn.hook_attn_scores", bias),
                                                   ("blocks.1.attn.hook_pattern", keep)])
            s = seen["s"].astype(np.float64)
            s[:, :, 0, 5] = -np.inf
            e = np.exp(s - s.max(-1, keepdims=True))
            self.assertLessEqual(err(seen["p"], e / e.sum(-1, keepdims=True)), 1e-6)
            self.assertTrue(np.all(seen["p"][:, :, 0, 1:] == 0))
            self.assertGreater(err(out, m(tok)), 1e-3)

    def test_ln_final_feeds_the_unembedding(self):
        with hs.Model.open(os.path.join(MODELS, "gpt2_tiny")) as m:  # tied, no lm_head bias
            tok = tokens(m.vocab_size, T=8)
            plain, loss = m(tok, return_type="both")
            twice = m.run_with_hooks(tok, fwd_hooks=[("ln_final.hook_normalized",
                                                      lambda x, h: 2 * x)])
            self.assertTrue(np.array_equal(twice, 2 * plain), "a power of two scales exactly")
            same, l2 = m.run_with_hooks(tok, return_type="both",
                                        fwd_hooks=[("ln_final.hook_normalized", lambda x, h: x)])
            self.assertTrue(np.array_equal(same, plain))
            self.assertEqual(l2, loss)
            zero_loss = m.run_with_hooks(tok, return_type="loss",
                                         fwd_hooks=[("ln_final.hook_normalized",
                                                     lambda x, h: 0 * x)])
            self.assertAlmostEqual(zero_loss, np.log(m.vocab_size), places=5)

    def test_hook_names_and_returns(self):
        with hs.Model.open(os.path.join(MODELS, "llama_gqa")) as m:
            tok = tokens(m.vocab_size, T=8)
            got = []

            def fn(x, hook):
                got.append((hook, hook.name, hook.layer(), isinstance(hook, str)))

            m.run_with_hooks(tok, fwd_hooks=[("blocks.1.attn.hook_v", fn), ("hook_embed", fn)])
            self.assertEqual(got, [("hook_embed", "hook_embed", 0, True),
                                   ("blocks.1.attn.hook_v", "blocks.1.attn.hook_v", 1, True)])
            import torch

            def half(z, hook):  # a torch tensor back, as TransformerLens hooks return
                return torch.from_numpy(z.astype(np.float64)) * 0.5

            a = m.run_with_hooks(tok, fwd_hooks=[("blocks.0.attn.hook_z", half)])
            b = m.run_with_hooks(tok, fwd_hooks=[("blocks.0.attn.hook_z",
                                                  lambda z, h: z * np.float32(0.5))])
            self.assertTrue(np.array_equal(a, b))

    def test_loss_is_transformer_lens_next_token_loss(self):
        with hs.Model.open(os.path.join(MODELS, "gpt2_tiny")) as m:
            tok = tokens(m.vocab_size, T=8)
            lg = m(tok).astype(np.float64)
            lp = lg - np.log(np.exp(lg - lg.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
                - lg.max(-1, keepdims=True)
            want = -np.take_along_axis(lp[:, :-1], tok[:, 1:, None], -1)[..., 0]
            self.assertLessEqual(err(m.loss(tok, per_token=True), want), 1e-5)
            self.assertAlmostEqual(m.loss(tok), want.mean(), places=5)


class Lifetime(TempDir, unittest.TestCase):
    """The hostile-input round's Python rows: a model's storage, its close()
    and its forward against views, hooks and threads; ids beyond int32."""

    def test_params_views_keep_the_model_alive(self):
        # 1 MiB of parameters: memory the allocator gives back to the system
        m = hs.Model.new("gpt2", seed=3, n_layer=1, d_model=64, n_head=2, vocab_size=4096)
        w = m.params["wte.weight"]
        want = w.astype(np.float64).sum()
        del m
        gc.collect()
        self.assertEqual(w.astype(np.float64).sum(), want)  # once a SIGSEGV
        m = hs.Model.new("gpt2", seed=3, n_layer=1, d_model=64, n_head=2, vocab_size=4096)
        w = m.params["wte.weight"]
        m.close()
        self.assertEqual(w.astype(np.float64).sum(), want, "a view outlives close() too")

    def test_a_closed_model_says_so(self):
        m = hs.Model.open(os.path.join(MODELS, "gpt2_tiny"))
        tok = tokens(m.vocab_size, T=8)
        m.close()
        calls = {"params": lambda: m.params, "shape_of": lambda: m.shape_of("hook_embed"),
                 "save": lambda: m.save(self.path("s")), "forward": lambda: m(tok),
                 "ablate": lambda: hs.ablate(m, np.tile(tok.reshape(-1), 4), batch=1, seq_len=4)}
        for what, call in calls.items():
            with self.subTest(call=what), self.assertRaisesRegex(hs.Error, "the model is closed"):
                call()
        m.close()  # twice: nothing happens

    def test_close_from_a_hook_is_refused_and_from_a_thread_waits(self):
        with hs.Model.open(os.path.join(MODELS, "llama_gqa")) as m:
            tok = tokens(m.vocab_size)
            plain = m(tok)
            with self.assertRaisesRegex(hs.Error, "close\\(\\) from a hook"):
                m.run_with_hooks(tok, fwd_hooks=[("blocks.0.hook_resid_pre",
                                                  lambda x, h: m.close())])
            self.assertTrue(np.array_equal(m(tok), plain), "usable after the refusal")
            with self.assertRaisesRegex(hs.Error, "cannot run the model it hooks"):
                m.run_with_hooks(tok, fwd_hooks=[("blocks.0.hook_resid_pre",
                                                  lambda x, h: m(tok))])  # once blocked
            started, out = threading.Event(), {}

            def slow(x, hook):
                started.set()
                time.sleep(0.3)

            t = threading.Thread(target=lambda: out.setdefault(
                "logits", m.run_with_hooks(tok, fwd_hooks=[("blocks.0.hook_resid_pre", slow)])))
            t.start()
            started.wait()
            m.close()  # waits for the forward (once a use after free)
            t.join()
            self.assertTrue(np.array_equal(out["logits"], plain))
            with self.assertRaisesRegex(hs.Error, "the model is closed"):
                m(tok)

    def test_ids_beyond_int32_are_refused_naming_them(self):
        with hs.Model.open(os.path.join(MODELS, "gpt2_tiny")) as m:
            for bad in (3 + 2 ** 32, 2 ** 63, -2 ** 40):
                with self.subTest(id=bad), self.assertRaisesRegex(hs.Error, str(bad)):
                    m(np.array([[1, 2, bad]], dtype=np.uint64 if bad > 0 else np.int64))
            with self.assertRaisesRegex(hs.Error, str(2 ** 64)):
                m([[1, 2, 2 ** 64]])
            with self.assertRaisesRegex(hs.Error, str(3 + 2 ** 32)):
                m.loss(tokens(m.vocab_size, T=4), targets=np.full((2, 4), 3 + 2 ** 32))
            with self.assertRaisesRegex(hs.Error, "answer_id %d" % (3 + 2 ** 32)):
                hs.dla(m, [{"clean_ids": [1, 2], "corrupt_ids": [1, 3], "answer_id": 3 + 2 ** 32,
                            "wrong_id": 4}])

    def test_the_forward_of_a_rotary_model_stops_at_its_context(self):
        with hs.Model.open(os.path.join(MODELS, "llama_gqa")) as m:  # n_ctx 16
            m(tokens(m.vocab_size, T=m.n_ctx))
            with self.assertRaisesRegex(hs.Error, "exceeds the model's n_ctx=16"):
                m(tokens(m.vocab_size, T=m.n_ctx + 1))  # once ran


class Headless(TempDir, unittest.TestCase):
    def test_an_encoder_without_its_head_runs_hooks_and_refuses_logits(self):
        """SPEC §16: a BERT whose config names BertModel is the encoder alone:
        run_with_cache (return_type None) gives the full model's activations,
        a forward that asks for logits is refused saying why."""
        src = os.path.join(FIX, "encoders", "bert")
        d = os.path.join(self.tmp, "sent")
        os.makedirs(d)
        with open(os.path.join(src, "config.json")) as f:
            text = f.read().replace('"BertForMaskedLM"', '"BertModel"')
        with open(os.path.join(d, "config.json"), "w") as f:
            f.write(text)
        os.symlink(os.path.join(src, "model.safetensors"), os.path.join(d, "model.safetensors"))
        ids = np.array([[2, 5, 6, 7, 3]], dtype=np.int32)
        names = ["blocks.1.attn.hook_pattern", "blocks.1.hook_resid_post"]
        with hs.Model.open(src) as full, hs.Model.open(d) as m:
            _, want = full.run_with_cache(ids, names=names)
            out, got = m.run_with_cache(ids, names=names, return_type=None)
            self.assertIsNone(out)
            for n in names:
                self.assertTrue(np.array_equal(got[n], want[n]), n)
            with self.assertRaisesRegex(hs.Error, "headless encoder"):
                m(ids)


if __name__ == "__main__":
    unittest.main()
