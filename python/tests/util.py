"""What the Python suites share: where the repository, the command and the
fixtures are, the oracle fixture files' reader (tests/fixture.h's format)
and the tolerance of the oracle checks.

Run from a build (tests/CMakeLists.txt registers them):
    HEADSCOPE_LIB=build/float/libheadscope.so HEADSCOPE_BINARY=build/float/headscope \\
    PYTHONPATH=python /usr/bin/python3 -m unittest discover -s python/tests
"""

import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
FIX = os.path.join(ROOT, "tests", "fixtures")
MODELS = os.path.join(FIX, "models")
BUILD = os.environ.get("HEADSCOPE_BUILD") or os.path.join(ROOT, "build", "float")
HS = os.environ.get("HEADSCOPE_BINARY") or os.path.join(BUILD, "headscope")

sys.path.insert(0, os.path.join(ROOT, "python"))
import headscope as hs  # noqa: E402

# |a - b| / max(1, |b|): absolute error for small values, relative for large
# ones (tests/fixture.h's fx_err). 1e-5 against the float64 oracle in the
# float build; the double build meets it by orders of magnitude.
TOL = 1e-5


def err(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    if a.size == 0:
        return 0.0
    fin = np.isfinite(b)
    if not np.array_equal(np.isfinite(a), fin) or not np.array_equal(a[~fin], b[~fin]):
        return np.inf
    return float((np.abs(a[fin] - b[fin]) / np.maximum(1.0, np.abs(b[fin]))).max(initial=0))


def read_fixture(path, case):
    """Case `case` of an oracle fixture file: {"ints": {...}, name: array}."""
    out = {"ints": {}}
    with open(path) as f:
        lines = iter(f.read().split("\n"))
    inside = False
    for line in lines:
        w = line.split()
        if not w or w[0].startswith("#"):
            continue
        if w[0] == "case":
            if inside:
                break
            inside = w[1] == case
            continue
        if not inside:
            continue
        if w[0] == "int":
            out["ints"][w[1]] = int(w[2])
        elif w[0] == "tensor":
            nd = int(w[2])
            dims = [int(x) for x in w[3:3 + nd]]
            n = int(np.prod(dims))
            vals = []
            while len(vals) < n:
                vals += [float(x) for x in next(lines).split()]
            out[w[1]] = np.array(vals).reshape(dims)
    if not inside and len(out) == 1 and not out["ints"]:
        raise KeyError("no case %s in %s" % (case, path))
    return out


def cli(*args, cwd=None, check=True):
    """Runs the headscope command; its stdout."""
    p = subprocess.run([HS] + [str(a) for a in args], cwd=cwd, capture_output=True, text=True)
    if check and p.returncode:
        raise AssertionError("headscope %s: exit %d\n%s" % (" ".join(map(str, args)),
                                                           p.returncode, p.stderr))
    return p.stdout


class TempDir:
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hs_py_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.tmp, name)
