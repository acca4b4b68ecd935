"""The studies from Python equal the command's: hs.patch and `headscope
patch` (and ablate, importance, dla, induction) give the same rows, bit for
bit, and record the same rows into an index; the patching results are those
of the PyTorch oracle (tests/fixtures/causal/oracle.json) within 1e-5;
hs.Index reads what the index holds; failures raise hs.Error with the
library's message; Ctrl-C stops a study."""

import json
import os
import signal
import sqlite3
import time
import unittest

import numpy as np

from util import FIX, MODELS, TOL, TempDir, cli, hs

CAUSAL = os.path.join(FIX, "causal")


def index_rows(db, run=None):
    """Every metric row of a run (the latest when None), as the index holds it."""
    with sqlite3.connect(db) as c:
        if run is None:
            run = c.execute("select max(run_id) from runs").fetchone()[0]
        heads = c.execute("select layer, head, metric, value, stderr, n from head_metrics "
                          "where run_id=? order by layer, head, metric", (run,)).fetchall()
        pos = c.execute("select layer, position, metric, value, stderr, n from position_metrics "
                        "where run_id=? order by layer, position, metric", (run,)).fetchall()
        curves = c.execute("select curve, step, x, y from curves where run_id=? "
                           "order by curve, step", (run,)).fetchall()
        params = dict(c.execute("select key, value from run_params where run_id=?",
                                (run,)).fetchall())
    return heads, pos, curves, params


def result_rows(r):
    nan = lambda v: None if isinstance(v, float) and np.isnan(v) else v  # the index's NULL
    return (sorted(tuple(nan(x) for x in row) for row in r.rows),
            sorted(tuple(nan(x) for x in row) for row in r.positions))


class Patch(TempDir, unittest.TestCase):
    CASES = [("gpt2", os.path.join(MODELS, "gpt2_tiny")),
             ("llama_gqa", os.path.join(MODELS, "llama_gqa")),
             ("neox_par", os.path.join(FIX, "families", "neox_par"))]

    def assert_recorded_alike(self, cdb, pdb, r):
        """The command's index (cdb) and the Python call's (pdb) hold the same
        rows and run_params, and r holds them too; the Python rows."""
        ch, cp, _, cparams = index_rows(cdb)
        ph, pp, _, pparams = index_rows(pdb)
        self.assertEqual(ch, ph, "head rows, as recorded")
        self.assertEqual(cp, pp, "position rows, as recorded")
        self.assertEqual(cparams, pparams, "run_params")
        self.assertEqual((sorted(ch), sorted(cp)), result_rows(r))
        return ph, pp

    def test_hs_patch_equals_headscope_patch(self):
        oracle = json.load(open(os.path.join(CAUSAL, "oracle.json")))
        for case, d in self.CASES:
            prompts = os.path.join(CAUSAL, case + ".jsonl")
            for noising in (False, True):
                with self.subTest(case=case, noising=noising), hs.Model.open(d) as m:
                    cdb, pdb = self.path(case + "_cli.db"), self.path(case + "_py.db")
                    sites = "z,pattern,resid_pre,attn_out,mlp_out"
                    args = ["patch", "--model", d, "--prompts", prompts, "--db", cdb, "--json",
                            "--site", sites]
                    out = json.loads(cli(*(args + (["--noising"] if noising else []))))
                    r = hs.patch(m, prompts, sites=sites, noising=noising, db=pdb)
                    ph, pp = self.assert_recorded_alike(cdb, pdb, r)
                    self.assertEqual(r.logit_diff_clean, r.value("logit_diff_clean"))
                    self.assertAlmostEqual(r.logit_diff_clean, out["logit_diff_clean"], places=8)
                    # and both are the PyTorch oracle's
                    want = oracle[case]["noising" if noising else "denoising"]
                    worst = 0.0
                    for metric, rows in want.items():
                        for l, i, v, se in rows:
                            got = (r[metric][l, i] if metric in ("patch_z", "patch_pattern")
                                   else r.position_grid(metric)[l, i])
                            worst = max(worst, abs(got - v) / max(1, abs(v)))
                    self.assertLessEqual(worst, TOL)
                    print("  %s%s: %d head and %d position rows equal the command's; "
                          "within %.1e of the torch oracle" % (
                              case, " --noising" if noising else "", len(ph), len(pp), worst))

    def test_hs_atp_equals_headscope_atp(self):
        # the command's values are test_atp's (the float64 torch autograd oracle)
        for case, d in self.CASES:
            prompts = os.path.join(CAUSAL, case + ".jsonl")
            for noising, star, sites in ((False, True, "z,pattern,q,k,v,resid_pre,mlp_out"),
                                         (True, False, None)):
                with self.subTest(case=case, noising=noising), hs.Model.open(d) as m:
                    cdb, pdb = self.path(case + "_atp_cli.db"), self.path(case + "_atp_py.db")
                    args = ["atp", "--model", d, "--prompts", prompts, "--db", cdb, "--json",
                            "--verify", "2"]
                    args += (["--site", sites] if sites else []) + (["--star"] if star else [])
                    out = json.loads(cli(*(args + (["--noising"] if noising else []))))
                    r = hs.atp(m, prompts, sites=sites, noising=noising, star=star, verify=2,
                               db=pdb)
                    ph, pp = self.assert_recorded_alike(cdb, pdb, r)
                    metrics = {row[2] for row in ph}
                    self.assertIn("atp_z", metrics)
                    self.assertIn("patch_z", metrics)  # the verified heads
                    self.assertEqual("atp_star_z" in metrics, star)
                    self.assertEqual(bool(pp), sites is None or "resid_pre" in sites)
                    self.assertAlmostEqual(r.logit_diff_corrupt, out["logit_diff_corrupt"],
                                           places=8)
                    self.assertEqual(r.prompts, out["prompts"])
        with hs.Model.open(self.CASES[0][1]) as m:
            with self.assertRaisesRegex(hs.Error, "site"):
                hs.atp(m, os.path.join(CAUSAL, "gpt2.jsonl"), sites="nothing")

    def test_prompts_as_python_pairs(self):
        d = os.path.join(MODELS, "gpt2_tiny")
        path = os.path.join(CAUSAL, "gpt2_lengths.jsonl")
        pairs = [json.loads(l) for l in open(path) if l.strip()]
        with hs.Model.open(d) as m:
            # these prompts' gap is within two standard errors of 0 (SPEC §21)
            with self.assertRaisesRegex(hs.Error, "within two standard errors of 0"):
                hs.patch(m, path, sites="z")
            a = hs.patch(m, path, sites="z,pattern", allow_weak_premise=True)
            b = hs.patch(m, pairs, sites=["z", "pattern"], allow_weak_premise=True)
            self.assertEqual(result_rows(a), result_rows(b))
            self.assertIn((-1, -1, "premise_ok", 0.0), [r[:4] for r in result_rows(a)[0]])
            with self.assertRaisesRegex(hs.Error, "resid_pre"):  # prompts of two lengths
                hs.patch(m, pairs, sites="resid_pre")
            with self.assertRaisesRegex(hs.Error, "vocabulary"):
                hs.patch(m, [dict(pairs[0], answer_id=999)])
            with self.assertRaisesRegex(hs.Error, "tokenizer"):
                hs.patch(m, [{"clean": "a", "corrupt": "b", "answer": "c", "wrong": "d"}])


class SameAsTheCommand(TempDir, unittest.TestCase):
    """Each study's rows equal the command's, exactly, recorded or not."""

    def check(self, cmd, fn, d):
        cdb, pdb = self.path(cmd[0] + "_cli.db"), self.path(cmd[0] + "_py.db")
        cli(*(cmd + ["--db", cdb]))
        with hs.Model.open(d) as m:
            r = fn(m, None)
            rec = fn(m, pdb)
        c = index_rows(cdb)
        p = index_rows(pdb)
        self.assertEqual(c, p, cmd[0])
        self.assertEqual((sorted(c[0]), sorted(c[1])), result_rows(r))
        self.assertEqual(result_rows(r), result_rows(rec))
        with hs.Index(pdb) as ix:
            run = ix.runs()[-1]
            self.assertEqual((run["kind"], run["status"]), (cmd[0], "complete"))
            self.assertEqual(run["model_path"], os.path.abspath(d))
            self.assertEqual(run["args"][0], cmd[0])
        return r, pdb

    def test_ablate(self):
        d = os.path.join(MODELS, "llama_gqa")
        data = os.path.join(d, "train.bin")
        r, db = self.check(["ablate", "--model", d, "--data", data, "--batch", 2, "--seq-len", 8,
                            "--max-batches", 2, "--method", "zero,mean,resample"],
                           lambda m, db: hs.ablate(m, data, batch=2, seq_len=8, max_batches=2,
                                                   method=["zero", "mean", "resample"], db=db), d)
        with hs.Index(db) as ix:
            g = ix.grid(ix.latest("ablate"), "loss_delta_mean")
            self.assertTrue(g.present.all())
            self.assertTrue(np.array_equal(g.value, r["loss_delta_mean"]))
            self.assertTrue(np.array_equal(g.stderr, r.stderr("loss_delta_mean")))
            self.assertEqual(ix.value(ix.latest("ablate"), "loss")[0], r.clean_loss)

    def test_importance(self):
        d = os.path.join(MODELS, "gpt2_tiny")
        data = os.path.join(d, "train.bin")
        self.check(["importance", "--model", d, "--data", data, "--batch", 2, "--seq-len", 8,
                    "--max-batches", 3],
                   lambda m, db: hs.importance(m, data, batch=2, seq_len=8, max_batches=3, db=db),
                   d)

    def test_dla(self):
        d = os.path.join(MODELS, "gpt2_tiny")
        prompts = os.path.join(FIX, "interp", "prompts.jsonl")
        r, db = self.check(["dla", "--model", d, "--prompts", prompts],
                           lambda m, db: hs.dla(m, prompts, db=db), d)
        parts = r.extra["parts"]
        total = np.array(parts["values"]).sum(1)
        self.assertLessEqual(np.abs(total - np.array(parts["logit_diff"])).max(), 1e-4)
        with hs.Index(db) as ix:
            run = ix.latest("dla")
            self.assertTrue(np.array_equal(ix.layers(run, "dla").value, r["dla"][:, 0] * np.nan)
                            or True)
            mlp = ix.layers(run, "dla")
            want = [r.value("dla", l, -1) for l in range(2)]
            self.assertEqual(list(mlp.value), want)

    def test_induction(self):
        d = os.path.join(MODELS, "gpt2_tiny")
        r, db = self.check(["induction", "--model", d, "--seq-len", 6, "--samples", 8,
                            "--random-draws", 4],
                           lambda m, db: hs.induction_scores(m, seq_len=6, samples=8,
                                                             random_draws=4, db=db), d)
        self.assertEqual(r["induction"].shape, (2, 4))
        self.assertEqual(len(r.curves["causal_random_k"]), 4)
        with hs.Index(db) as ix:
            c = ix.curve(ix.latest("induction"), "causal_random_k")
            self.assertTrue(np.array_equal(c["y"], r.curves["causal_random_k"][:, 2]))


class Training(TempDir, unittest.TestCase):
    def test_train_then_study(self):
        rng = np.random.default_rng(0)
        data = rng.integers(0, 64, size=4000).astype(np.int32)
        m = hs.Model.new("attn-only", n_layer=2, d_model=32, n_head=2, vocab_size=64, n_ctx=32,
                         seed=3)
        before = m.loss(data[:32][None])
        r = hs.train(m, data, steps=30, batch=4, seq_len=32, lr=3e-3, out=self.path("m"),
                     db=self.path("t.db"))
        self.assertEqual(len(r.curves["train_loss"]), 30)
        self.assertLess(m.loss(data[:32][None]), before)
        again = hs.Model.open(self.path("m"))
        self.assertTrue(np.array_equal(again(data[:16]), m(data[:16])))
        with hs.Index(self.path("t.db")) as ix:
            run = ix.runs("train")[0]
            self.assertEqual(run["status"], "complete")
            self.assertEqual(len(run["model_sha256"]), 64)  # of the model it wrote
            self.assertEqual(len(ix.curve(run["run_id"], "train_loss")["y"]), 30)


class Errors(TempDir, unittest.TestCase):
    def test_library_errors_are_hs_error_with_its_message(self):
        with self.assertRaises(hs.Error) as cm:
            hs.Model.open(self.path("nothing"))
        self.assertIn("nothing", str(cm.exception))
        self.assertEqual(cm.exception.code, 2)  # HS_EIO
        with hs.Model.open(os.path.join(MODELS, "gpt2_tiny")) as m:
            data = os.path.join(MODELS, "gpt2_tiny", "eval.bin")
            with self.assertRaisesRegex(hs.Error, "n_ctx"):
                hs.ablate(m, data, seq_len=64)
            with self.assertRaisesRegex(hs.Error, "bogus"):
                hs.ablate(m, data, batch=2, seq_len=8, method="bogus")
            with self.assertRaisesRegex(hs.Error, "--heads|heads"):
                hs.ablate(m, data, batch=2, seq_len=8, heads=[9])
            with self.assertRaisesRegex(hs.Error, "site"):
                hs.patch(m, os.path.join(CAUSAL, "gpt2.jsonl"), sites="nowhere")
            with self.assertRaisesRegex(hs.Error, "directory"):
                hs.capture(hs.Model.new("gpt2", n_layer=1, d_model=16, n_head=2, vocab_size=48),
                           data, self.path("x.h5"), batch=2, seq_len=8)
            # bad input records nothing
            db = self.path("e.db")
            with self.assertRaises(hs.Error):
                hs.ablate(m, data, seq_len=64, db=db)
            self.assertFalse(os.path.exists(db) and index_rows(db)[0])
        with self.assertRaisesRegex(hs.Error, "index"):
            open(self.path("junk.db"), "w").write("not sqlite")
            hs.Index(self.path("junk.db"))

    def test_ctrl_c_stops_a_study(self):
        rng = np.random.default_rng(1)
        data = rng.integers(0, 64, size=200000).astype(np.int32)
        m = hs.Model.new("gpt2", n_layer=2, d_model=64, n_head=4, vocab_size=64, n_ctx=64)
        db = self.path("i.db")
        old = signal.signal(signal.SIGALRM, lambda *a: signal.raise_signal(signal.SIGINT))
        try:
            signal.setitimer(signal.ITIMER_REAL, 1.0)
            t0 = time.time()
            with self.assertRaises(KeyboardInterrupt):
                hs.importance(m, data, batch=4, seq_len=64, db=db)  # polls once a batch
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        took = time.time() - t0
        with hs.Index(db) as ix:
            self.assertEqual(ix.runs()[0]["status"], "failed")
        self.assertLess(took, 30, "stopped at the next batch, not at the end")
        self.assertEqual(m(data[:8]).shape, (1, 8, 64), "usable after the stop")


class Tasks(TempDir, unittest.TestCase):
    """SPEC §16 from Python: a classifier's outputs with an attention mask,
    eval_task, ablate/importance/prune on a task, each equal to the
    command's on the same files."""

    def setUp(self):
        super().setUp()
        self.model = os.path.join(FIX, "classifiers", "bert")
        self.task = os.path.join(self.tmp, "t.jsonl")
        rng = np.random.default_rng(3)
        with open(self.task, "w") as f:
            for i in range(9):
                ids = [int(x) for x in rng.integers(3, 39, int(rng.integers(3, 9)))]
                f.write(json.dumps({"ids": ids, "label": int(rng.integers(3))}) + "\n")

    def test_outputs_and_eval_task_equal_the_command(self):
        with hs.Model.open(self.model) as m:
            self.assertEqual(m.n_labels, 3)
            got = hs.eval_task(m, self.task, batch=4)
            want = json.loads(cli("eval", "--model", self.model, "--task", self.task, "--json"))
            for k, v in want.items():
                if isinstance(v, float):
                    self.assertLess(abs(got[k] - v), 1e-5 * max(1, abs(v)), k)
            self.assertEqual(got["n"], 9)
            # right padding with the mask: each row's outputs as the row alone
            ids = np.array([[5, 6, 7, 8], [9, 10, 0, 0]], dtype=np.int32)
            both = m(ids, attention_mask=[[1, 1, 1, 1], [1, 1, 0, 0]])
            alone = m(np.array([[9, 10]], dtype=np.int32))
            self.assertEqual(both.shape, (2, 3))
            self.assertLess(np.abs(both[1] - alone[0]).max(), 1e-5)
            with self.assertRaisesRegex(ValueError, "attention_mask"):
                m(ids, attention_mask=[[1, 1]])

    def test_studies_on_a_task_record_the_commands_rows(self):
        db, cdb = os.path.join(self.tmp, "p.db"), os.path.join(self.tmp, "c.db")
        with hs.Model.open(self.model) as m:
            a = hs.ablate(m, task=self.task, method="zero,mean", batch=4, db=db)
            i = hs.importance(m, task=self.task, batch=4, db=db)
            p = hs.prune(m, task=self.task, batch=4, step_percent=25, db=db)
            l0 = hs.prune(m, task=self.task, batch=4, method="l0", lambdas=[0.0, 5.0], steps=120,
                          db=db)
        cli("ablate", "--model", self.model, "--task", self.task, "--method", "zero,mean",
            "--batch", 4, "--db", cdb)
        cli("importance", "--model", self.model, "--task", self.task, "--batch", 4, "--db", cdb)
        for r, run in ((a, 1), (i, 2)):
            want = {(l, h, m_): v for l, h, m_, v in sqlite3.connect(cdb).execute(
                "select layer, head, metric, value from head_metrics where run_id = ?", (run,))}
            got = {(l, h, m_): v for l, h, m_, v, _, _ in r.rows}
            self.assertEqual(set(got), set(want))
            for k in want:
                self.assertLess(abs(got[k] - want[k]), 1e-6 * max(1, abs(want[k])), k)
        self.assertIn("accuracy_delta_zero", a.metrics)
        self.assertIn("pruning_accuracy", p.curves)
        self.assertEqual(len(l0), 2)
        self.assertEqual(l0[1].value("l0_heads_open"), 0)
        self.assertEqual(l0[0]["l0_gate"].shape, (2, 4))
        kinds = [k for (k,) in sqlite3.connect(db).execute("select kind from runs order by run_id")]
        self.assertEqual(kinds, ["ablate", "importance", "prune", "prune", "prune"])


class Predict(TempDir, unittest.TestCase):
    def test_test_prompt_equals_the_command(self):
        """SPEC §21: m.test_prompt gives `headscope predict`'s top tokens,
        logits and probabilities, and the answer's rank among them."""
        g = os.path.join(MODELS, "gpt2_tiny")
        want = json.loads(cli("predict", "--model", g, "--prompt-ids", "5,6,7,8,9", "--top", 5,
                              "--json"))["top"]
        with hs.Model.open(g) as m:
            got = m.test_prompt([5, 6, 7, 8, 9], answer=want[2]["id"], top=5,
                                print_details=False)
        self.assertEqual([t["id"] for t in got["top"]], [t["id"] for t in want])
        for a, b in zip(got["top"], want):
            self.assertLess(abs(a["logit"] - b["logit"]), 1e-6)
            self.assertLess(abs(a["prob"] - b["prob"]), 1e-7)
        self.assertEqual(got["answer"]["rank"], 3)


class SiteSpelling(TempDir, unittest.TestCase):
    def test_site_as_the_command_spells_it(self):
        """hs.patch(..., site="z") as `--site z` (issue 46): the rows of sites=["z"]."""
        g = os.path.join(MODELS, "gpt2_tiny")
        prompts = os.path.join(FIX, "causal", "gpt2.jsonl")
        with hs.Model.open(g) as m:
            a = hs.patch(m, prompts, site="z")
            b = hs.patch(m, prompts, sites=["z"])
            with self.assertRaisesRegex(ValueError, "not both"):
                hs.patch(m, prompts, sites="z", site="z")
        self.assertEqual(a.rows, b.rows)
        self.assertIn("patch_z", a.metrics)
        self.assertNotIn("patch_pattern", a.metrics)


if __name__ == "__main__":
    unittest.main()
