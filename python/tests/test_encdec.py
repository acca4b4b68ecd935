"""An encoder-decoder from Python (SPEC §17): hs.Model.open of the t5,
flan_t5, bart and marian fixtures, m(src, decoder_input) and run_with_cache
under TransformerLens's HookedEncoderDecoder names, against the float64
PyTorch reference of scripts/oracle/gen_seq2seq.py (tests/fixtures/seq2seq.txt:
logits, the pooled loss, every map of every type); the shapes of q, k, v
and z; the refusals."""
import os
import unittest

import numpy as np

from util import FIX, TOL, err, hs, read_fixture

S2S = os.path.join(FIX, "seq2seq")
TXT = os.path.join(FIX, "seq2seq.txt")


class EncoderDecoder(unittest.TestCase):
    def case(self, name):
        fx = read_fixture(TXT, name)
        m = hs.Model.open(os.path.join(S2S, name))
        self.addCleanup(m.close)
        src = fx["src"].astype(np.int32)
        dec = fx["dec"].astype(np.int32)
        tgt = fx["tgt"].astype(np.int32)
        return fx, m, src, dec, tgt

    def test_logits_loss_and_every_map_equal_torch(self):
        for name in ("t5", "flan_t5", "bart", "marian"):
            with self.subTest(name):
                fx, m, src, dec, tgt = self.case(name)
                self.assertTrue(m.encoder_decoder)
                self.assertEqual(m.n_encoder_layers, fx["ints"]["E"])
                self.assertEqual(m.n_decoder_layers, fx["ints"]["D"])
                logits = m(src, dec)
                self.assertLess(err(logits, fx["logits"]), 5e-5)
                loss = m(src, dec, return_type="loss", targets=tgt)
                self.assertLess(abs(loss - fx["loss"][0]), 5e-5 * fx["loss"][0])
                both = m(src, dec, return_type="both", targets=tgt)
                self.assertLess(err(both[0], fx["logits"]), 5e-5)
                out, cache = m.run_with_cache(src, decoder_input=dec,
                                              names=lambda n: n.endswith("hook_pattern"))
                self.assertLess(err(out, fx["logits"]), 5e-5)
                E, D = m.n_encoder_layers, m.n_decoder_layers
                self.assertEqual(len(cache), E + 2 * D)
                for l in range(E):
                    self.assertLess(err(cache["encoder.%d.attn.hook_pattern" % l],
                                        fx["enc_maps"][l]), 5e-5)
                for l in range(D):
                    self.assertLess(err(cache["decoder.%d.attn.hook_pattern" % l],
                                        fx["dec_maps"][l]), 5e-5)
                    self.assertLess(err(cache["decoder.%d.cross_attn.hook_pattern" % l],
                                        fx["cross_maps"][l]), 5e-5)

    def test_q_k_v_z_shapes_and_z_from_the_pattern(self):
        fx, m, src, dec, _ = self.case("bart")
        B, S = src.shape
        T = dec.shape[1]
        _, cache = m.run_with_cache(src, decoder_input=dec, names=[
            "decoder.1.cross_attn.hook_q", "decoder.1.cross_attn.hook_k",
            "decoder.1.cross_attn.hook_v", "decoder.1.cross_attn.hook_z",
            "decoder.1.cross_attn.hook_pattern", "encoder.0.attn.hook_z"])
        H, dh = m.heads_per_layer[0], m.d_head
        self.assertEqual(cache["decoder.1.cross_attn.hook_q"].shape, (B, T, H, dh))
        self.assertEqual(cache["decoder.1.cross_attn.hook_k"].shape, (B, S, H, dh))
        self.assertEqual(cache["decoder.1.cross_attn.hook_v"].shape, (B, S, H, dh))
        self.assertEqual(cache["encoder.0.attn.hook_z"].shape, (B, S, H, dh))
        # z = pattern v, head by head: the cross-attention's keys are the source's
        p = cache["decoder.1.cross_attn.hook_pattern"].astype(np.float64)
        v = cache["decoder.1.cross_attn.hook_v"].astype(np.float64)
        z = np.einsum("bhts,bshd->bthd", p, v)
        self.assertLess(err(cache["decoder.1.cross_attn.hook_z"], z), 1e-5)
        self.assertEqual(len(m.hook_names), 5 * (m.n_encoder_layers + 2 * m.n_decoder_layers))

    def test_refusals(self):
        fx, m, src, dec, tgt = self.case("t5")
        with self.assertRaisesRegex(ValueError, "decoder_input"):
            m(src)
        with self.assertRaisesRegex(ValueError, "targets"):
            m(src, dec, return_type="loss")
        with self.assertRaisesRegex(KeyError, "not a hook of this encoder-decoder"):
            m.run_with_cache(src, decoder_input=dec, names="blocks.0.attn.hook_pattern")
        with self.assertRaisesRegex(KeyError, "not a hook"):
            m.run_with_cache(src, decoder_input=dec, names="encoder.9.attn.hook_z")
        with self.assertRaisesRegex(hs.Error, "not implemented"):
            m.run_with_hooks(src, fwd_hooks=[])
        bad = src.copy()
        bad[0, 0] = 10 ** 6
        with self.assertRaisesRegex(hs.Error, "outside the vocabulary"):
            m(bad, dec)
        one = hs.Model.open(os.path.join(FIX, "models", "gpt2_tiny"))
        self.addCleanup(one.close)
        with self.assertRaisesRegex(ValueError, "decoder_input: for an encoder-decoder"):
            one([[1, 2]], [[1, 2]])


if __name__ == "__main__":
    unittest.main()
