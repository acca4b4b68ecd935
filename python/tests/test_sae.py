"""Sparse autoencoders from Python (SPEC §19): hs.SAE.open of the five
SAELens directories of tests/fixtures/sae (its configuration, and its
weights equal to the safetensors file read here byte by byte), encode and
decode against the float64 oracle of scripts/oracle/gen_sae.py
(oracle.json's "encode" vectors), encode of cache["z", L] equal to encode
of its head-major flattening, hs.features equal to `headscope features`
row for row and to the oracle's frequency, mean_act, head_share and top
examples, and the refusals of bad directories naming the file."""

import json
import os
import shutil
import sqlite3
import struct
import unittest

import numpy as np

from util import FIX, MODELS, TOL, TempDir, cli, err, hs

SAE_DIR = os.path.join(FIX, "sae")
DATA = os.path.join(SAE_DIR, "data.bin")
with open(os.path.join(SAE_DIR, "oracle.json")) as _f:
    ORACLE = json.load(_f)
CASES = {c["name"]: c for c in ORACLE["cases"]}

# tests/test_sae.c's: an encoder's outputs within this much of their row's
# largest entry (at least 1) of the float64 oracle
ENC_TOL = 2e-5 if hs.dtype == np.float32 else 1e-10


def sae_path(case):
    return os.path.join(FIX, case["sae"])


def model_path(case):
    return os.path.join(FIX, case["model"])


def safetensors(path):
    """{name: float64 array} of a safetensors file (F32, F16, BF16), read
    without the library: 8-byte header length, JSON header, data."""
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    out = {}
    for name, t in json.loads(b[8:8 + n]).items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        raw = b[8 + n + lo:8 + n + hi]
        if t["dtype"] == "BF16":
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(raw, {"F32": "<f4", "F16": "<f2"}[t["dtype"]])
        out[name] = a.astype(np.float64).reshape(t["shape"])
    return out


def feature_rows(db, run=None):
    """The feature tables of a run (the latest when None), as the index holds them."""
    with sqlite3.connect(db) as c:
        if run is None:
            run = c.execute("select max(run_id) from runs").fetchone()[0]
        q = lambda sql: c.execute(sql, (run,)).fetchall()
        return {
            "metrics": q("select feature, layer, head, metric, value from feature_metrics "
                         "where run_id=? order by feature, layer, head, metric"),
            "examples": q("select feature, seq, position, value from feature_examples "
                          "where run_id=? order by feature, value desc, seq, position"),
            "dfa": q("select feature, seq, position, layer, head, source, value from feature_dfa "
                     "where run_id=? order by feature, seq, position, layer, head, source"),
            "params": dict(q("select key, value from run_params where run_id=?")),
            "run": c.execute("select kind, status from runs where run_id=?", (run,)).fetchone(),
        }


def close_to_row_max(test, got, want, what):
    """Each row of got within ENC_TOL of its largest oracle entry (at least 1)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    test.assertEqual(got.shape, want.shape, what)
    for r in range(want.shape[0]):
        big = max(1.0, np.abs(want[r]).max())
        e = np.abs(got[r] - want[r]).max()
        test.assertLessEqual(e, ENC_TOL * big, "%s row %d: error %g" % (what, r, e))


class Open(unittest.TestCase):
    def test_open_reads_the_configuration_and_the_weights(self):
        self.assertEqual(len(CASES), 5)
        for name, c in CASES.items():
            with self.subTest(name), hs.SAE.open(sae_path(c)) as sae:
                self.assertEqual((sae.d_in, sae.d_sae), (c["d_in"], c["d_sae"]))
                self.assertEqual(sae.hook_name, c["hook"])
                self.assertEqual(sae.architecture, c["architecture"])
                self.assertEqual(sae.k, c["k"])
                self.assertIs(sae.apply_b_dec_to_input, c["apply_b_dec_to_input"])
                self.assertEqual(sae.path, os.path.abspath(sae_path(c)))
                st = safetensors(os.path.join(sae_path(c), "sae_weights.safetensors"))
                shapes = {"W_enc": (c["d_in"], c["d_sae"]), "W_dec": (c["d_sae"], c["d_in"]),
                          "b_enc": (c["d_sae"],), "b_dec": (c["d_in"],),
                          "threshold": (c["d_sae"],)}
                for t, shape in shapes.items():
                    a = getattr(sae, t)
                    if t == "threshold" and c["architecture"] != "jumprelu":
                        self.assertIsNone(a)
                        continue
                    self.assertEqual(a.shape, shape, t)
                    self.assertEqual(a.dtype, hs.dtype, t)
                    # F32 and BF16 values are exact in either build
                    self.assertTrue(np.array_equal(a, st[t].astype(hs.dtype)), t)
                    self.assertFalse(a.flags.writeable, t)

    def test_bind_checks_the_model(self):
        c = CASES["gpt2_z_standard"]
        with hs.SAE.open(sae_path(c)) as sae, hs.Model.open(model_path(c)) as m:
            self.assertIs(sae.bind(m), sae)
            small = hs.Model.new("gpt2", n_layer=1, d_model=16, n_head=4, vocab_size=64)
            with self.assertRaisesRegex(hs.Error, "hook_name.*blocks.1.attn.hook_z.*1 layers"):
                sae.bind(small)
            wide = hs.Model.new("gpt2", n_layer=2, d_model=32, n_head=4, vocab_size=64)
            with self.assertRaisesRegex(hs.Error, "cfg.json: d_in 16 does not match"):
                sae.bind(wide)


class EncodeDecode(unittest.TestCase):
    def test_encode_and_decode_equal_the_oracle(self):
        for name, c in CASES.items():
            with self.subTest(name), hs.SAE.open(sae_path(c)) as sae:
                e = c["encode"]
                x = np.array(e["x"])
                f, pre = sae.encode(x, return_pre=True)
                self.assertEqual((f.dtype, pre.dtype), (hs.dtype, hs.dtype))
                close_to_row_max(self, pre, e["pre"], name + " pre")
                close_to_row_max(self, f, e["f"], name + " f")
                # which features fire is exact (topk's ties, jumprelu's threshold)
                self.assertTrue(np.array_equal(f > 0, np.array(e["f"]) > 0), name)
                close_to_row_max(self, sae.decode(f), e["x_hat"], name + " x_hat")
                close_to_row_max(self, sae.decode(np.array(e["f"])), e["x_hat"],
                                 name + " x_hat of the oracle's f")
                # one row, and rows in any leading shape, alike
                self.assertTrue(np.array_equal(sae.encode(x[1]), f[1]))
                self.assertTrue(np.array_equal(sae.encode(x[None, :, None, :])[0, :, 0], f))
                self.assertEqual(sae.encode(np.zeros((0, sae.d_in))).shape, (0, sae.d_sae))

    def test_encode_of_the_z_cache_equals_its_flattening(self):
        c = CASES["gpt2_z_standard"]
        ids = hs.read_tokens(DATA)[:2 * 8].reshape(2, 8)
        with hs.SAE.open(sae_path(c)) as sae, hs.Model.open(model_path(c)) as m:
            _, cache = m.run_with_cache(ids, names=["blocks.1.attn.hook_z"])
            z = cache["z", 1]
            self.assertEqual(z.shape, (2, 8, c["heads"], c["head_dim"]))
            f = sae.encode(z)
            self.assertEqual(f.shape, (2, 8, sae.d_sae))
            flat = z.reshape(2, 8, c["heads"] * c["head_dim"])  # head-major: h * dh + i
            self.assertTrue(np.array_equal(f, sae.encode(flat)))
            f2, pre = sae.encode(z, return_pre=True)
            self.assertTrue(np.array_equal(f2, f))
            self.assertEqual(pre.shape, f.shape)
            self.assertEqual(sae.decode(f).shape, (2, 8, sae.d_in))
            with self.assertRaisesRegex(ValueError, "last dimension must be 16"):
                sae.encode(z[..., :3])
            with self.assertRaisesRegex(ValueError, "last dimension must be 24"):
                sae.decode(z)

    def test_encode_over_the_data_gives_the_oracles_frequency(self):
        """The features of every token of the data (6 sequences of 8), from
        the cache, fire as often as the oracle's."""
        for name in ("gpt2_z_standard", "llama_z_topk", "gpt2_resid_topk"):
            c = CASES[name]
            ids = hs.read_tokens(DATA)[:ORACLE["batches"] * ORACLE["batch"] * ORACLE["seq_len"]]
            ids = ids.reshape(-1, ORACLE["seq_len"])
            with self.subTest(name), hs.SAE.open(sae_path(c)) as sae, \
                    hs.Model.open(model_path(c)) as m:
                _, cache = m.run_with_cache(ids, names=[sae.hook_name])
                f = sae.encode(cache[sae.hook_name]).reshape(-1, sae.d_sae)
                self.assertEqual(f.shape[0], c["features"]["tokens"])
                self.assertLess(err((f > 0).mean(axis=0), c["features"]["frequency"]), TOL)


class Features(TempDir, unittest.TestCase):
    def run_both(self, name, **kw):
        """headscope features and hs.features on the oracle's data, each
        into its own index; (the command's JSON, its rows, the Result, its rows)."""
        c = CASES[name]
        cdb, pdb = self.path(name + "_cli.db"), self.path(name + "_py.db")
        args = ["features", "--model", model_path(c), "--sae", sae_path(c), "--data", DATA,
                "--batch", ORACLE["batch"], "--seq-len", ORACLE["seq_len"],
                "--top", ORACLE["top"], "--db", cdb, "--json"]
        want = json.loads(cli(*args))
        with hs.Model.open(model_path(c)) as m:
            r = hs.features(m, sae_path(c), data=DATA, batch=ORACLE["batch"],
                            seq_len=ORACLE["seq_len"], top=ORACLE["top"], db=pdb, **kw)
        return want, feature_rows(cdb), r, feature_rows(pdb)

    def test_features_equal_the_command_and_the_oracle(self):
        for name in ("gpt2_z_standard", "gpt2_resid_topk"):
            with self.subTest(name):
                c = CASES[name]
                want, crows, r, prows = self.run_both(name)
                # the command's own study: the same rows, bit for bit
                for table in ("metrics", "examples", "dfa", "params"):
                    self.assertEqual(crows[table], prows[table], table)
                self.assertEqual(prows["run"], ("features", "complete"))
                self.assertTrue(r.run_id)
                for k in ("tokens", "d_sae", "alive", "examples", "dfa_rows"):
                    self.assertEqual(getattr(r, k), want[k], k)
                self.assertEqual(r.top_feature, want["top_feature"]["feature"])
                self.assertAlmostEqual(r.l0, want["l0"], places=5)
                self.assertAlmostEqual(r.top_frequency, want["top_feature"]["frequency"],
                                       places=5)
                self.assertEqual(r.texts["hook"], c["hook"])
                # the oracle's numbers
                o = c["features"]
                self.assertEqual(r.tokens, o["tokens"])
                L = c["layer"]
                byf = {}
                for f, layer, head, metric, value in prows["metrics"]:
                    self.assertEqual(layer, L)
                    byf[(f, head, metric)] = np.nan if value is None else value
                freq = [byf[(f, -1, "frequency")] for f in range(c["d_sae"])]
                self.assertLess(err(freq, o["frequency"]), TOL)
                # mean_act: NULL for a feature that never fires
                mean = [byf[(f, -1, "mean_act")] for f in range(c["d_sae"])]
                fired = [v is not None for v in o["mean_act"]]
                self.assertEqual(fired, [not np.isnan(v) for v in mean])
                self.assertLess(err(np.array(mean)[fired],
                                    [v for v in o["mean_act"] if v is not None]), TOL)
                if o["head_share"] is None:
                    self.assertFalse([k for k in byf if k[2] == "head_share"])
                else:
                    share = [[byf[(f, h, "head_share")] for h in range(c["heads"])]
                             for f in range(c["d_sae"])]
                    self.assertLess(err(share, o["head_share"]), TOL)
                for f in range(c["d_sae"]):
                    got = [(s, p) for g, s, p, _ in prows["examples"] if g == f]
                    self.assertEqual(got, [(s, p) for s, p, _ in o["examples"][f]], f)
                self.assertEqual(bool(prows["dfa"]), bool(o.get("dfa")))

    def test_the_index_reads_the_feature_tables(self):
        """hs.Index's feature readers give the rows sqlite3 reads."""
        import sqlite3
        _, _, r, _ = self.run_both("gpt2_z_standard")
        db = self.path("gpt2_z_standard_py.db")
        q = sqlite3.connect(db).execute
        with hs.Index(db) as ix:
            share = ix.feature_metric(r.run_id, "head_share")
            want = q("select feature, layer, head, value from feature_metrics where run_id = ? and "
                     "metric = 'head_share' order by feature, head", (r.run_id,)).fetchall()
            self.assertEqual(list(zip(*(share[k].tolist() for k in ("feature", "layer", "head",
                                                                    "value")))), want)
            mean = ix.feature_metric(r.run_id, "mean_act")
            self.assertEqual(int(np.isnan(mean["value"]).sum()), q(
                "select count(*) from feature_metrics where run_id = ? and metric = 'mean_act' "
                "and value is null", (r.run_id,)).fetchone()[0])
            ex = ix.feature_examples(r.run_id)
            self.assertEqual(list(zip(*(ex[k].tolist() for k in ("feature", "seq", "position",
                                                                 "value")))),
                             q("select feature, seq, position, value from feature_examples where "
                               "run_id = ? order by feature, value desc, seq, position",
                               (r.run_id,)).fetchall())
            f = int(ex["feature"][0])
            dfa = ix.feature_dfa(r.run_id, f)
            rows = q("select seq, position, layer, head, source, value from feature_dfa where "
                     "run_id = ? and feature = ? order by seq, position, head, source",
                     (r.run_id, f)).fetchall()
            self.assertTrue(rows)
            self.assertEqual(list(zip(*(dfa[k].tolist() for k in ("seq", "position", "layer",
                                                                  "head", "source", "value")))),
                             rows)
            with self.assertRaises(hs.Error):
                ix._features(r.run_id, 7)

    def test_features_without_an_index_and_options(self):
        c = CASES["gpt2_z_standard"]
        with hs.Model.open(model_path(c)) as m, hs.SAE.open(sae_path(c)) as sae:
            r = hs.features(m, sae, data=DATA, batch=2, seq_len=8, top=3)
            self.assertIsNone(r.run_id)
            self.assertEqual(r.tokens, 48)
            self.assertEqual(r.examples, sum(len(e) for e in c["features"]["examples"]))
            none = hs.features(m, sae, data=DATA, batch=2, seq_len=8, top=3, dfa_examples=0)
            self.assertEqual(none.dfa_rows, 0)
            self.assertEqual(none.alive, r.alive)
            one = hs.features(m, sae, data=DATA, batch=2, seq_len=8, max_batches=1)
            self.assertEqual(one.tokens, 16)
            out = self.path("f.h5")
            w = hs.features(m, sae, data=DATA, batch=2, seq_len=8, top=3, out=out)
            self.assertTrue(os.path.isfile(out))
            self.assertEqual((w.texts["path"], w.bytes), (out, os.path.getsize(out)))
            self.assertEqual(len(w.texts["sha256"]), 64)
            with self.assertRaisesRegex(hs.Error, "--out .*f.h5 exists"):
                hs.features(m, sae, data=DATA, batch=2, seq_len=8, out=out)
            hs.features(m, sae, data=DATA, batch=2, seq_len=8, out=out, force=True)
            with self.assertRaisesRegex(hs.Error, "--top 1001"):
                hs.features(m, sae, data=DATA, batch=2, seq_len=8, top=1001)
            with self.assertRaisesRegex(hs.Error, "--dfa-examples 4"):
                hs.features(m, sae, data=DATA, batch=2, seq_len=8, top=3, dfa_examples=4)


class Refusals(TempDir, unittest.TestCase):
    def bad_cfg(self, key, value):
        """A copy of gpt2_z_standard with cfg.json's key set to value (None: deleted)."""
        d = self.path("bad")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(os.path.join(SAE_DIR, "gpt2_z_standard"), d)
        p = os.path.join(d, "cfg.json")
        with open(p) as f:
            cfg = json.load(f)
        if value is None:
            del cfg[key]
        else:
            cfg[key] = value
        with open(p, "w") as f:
            json.dump(cfg, f)
        return d

    def test_bad_directories_raise_hs_error_naming_the_file(self):
        missing = self.path("nowhere")
        with self.assertRaises(hs.Error) as cm:
            hs.SAE.open(missing)
        self.assertIn(os.path.join(missing, "cfg.json"), str(cm.exception))
        self.assertEqual(cm.exception.code, 2)  # HS_EIO
        for key, value, message in [
                ("architecture", "gated", '"architecture" "gated"'),
                ("d_sae", None, '"d_sae" must be a whole number'),
                ("normalize_activations", "expected_average_only_in",
                 '"normalize_activations" expected_average_only_in is not implemented'),
                ("architecture", "topk", 'a topk SAE needs "k"')]:
            with self.subTest(key):
                d = self.bad_cfg(key, value)
                with self.assertRaises(hs.Error) as cm:
                    hs.SAE.open(d)
                self.assertIn(os.path.join(d, "cfg.json") + ":", str(cm.exception))
                self.assertIn(message, str(cm.exception))
                self.assertEqual(cm.exception.code, 3)  # HS_EFORMAT
        d = self.bad_cfg("architecture", "jumprelu")
        with self.assertRaisesRegex(hs.Error, "sae_weights.safetensors: a jumprelu SAE needs "
                                              "the tensor \"threshold\""):
            hs.SAE.open(d)
        d = self.bad_cfg("d_in", 12)
        with self.assertRaisesRegex(hs.Error, "sae_weights.safetensors: tensor \"W_enc\" is "
                                              r"not \[12, 24\]"):
            hs.SAE.open(d)

    def test_a_refused_sae_records_no_run(self):
        db = self.path("r.db")
        with hs.Model.open(os.path.join(MODELS, "gpt2_tiny")) as m:
            with self.assertRaisesRegex(hs.Error, "nowhere/cfg.json"):
                hs.features(m, self.path("nowhere"), data=DATA, batch=2, seq_len=8, db=db)
            d = self.bad_cfg("hook_name", "blocks.7.attn.hook_z")
            with self.assertRaisesRegex(hs.Error, "cfg.json: hook_name .* the model has 2 layers"):
                hs.features(m, d, data=DATA, batch=2, seq_len=8, db=db)
            with self.assertRaisesRegex(hs.Error, "seq_len"):
                hs.features(m, os.path.join(SAE_DIR, "gpt2_z_standard"), data=DATA, batch=2,
                            seq_len=4096, db=db)
        if os.path.exists(db):
            with sqlite3.connect(db) as c:
                self.assertEqual(c.execute("select count(*) from runs").fetchone()[0], 0)

    def test_a_closed_sae(self):
        sae = hs.SAE.open(os.path.join(SAE_DIR, "gpt2_resid_topk"))
        W = sae.W_enc
        sae.close()
        self.assertEqual(W.shape, (16, 32))  # the copies stay
        with self.assertRaisesRegex(hs.Error, "closed"):
            sae.encode(np.zeros(16))


if __name__ == "__main__":
    unittest.main()
