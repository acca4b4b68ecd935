"""Reading a results index (SPEC §7) through the library's readers
(store/index.h): runs, and metrics as numpy grids."""

import collections
import ctypes
import json
import os

import numpy as np

from . import _lib
from ._lib import check, enc, lib

Grid = collections.namedtuple("Grid", "value stderr n present")
Grid.__doc__ = """A metric of a run: value, stderr (NaN where absent), n
(rows' counts) and present (bool), each (layers, heads), (layers,
positions) or (layers,)."""


class Index:
    """Index(path): an existing index, opened read-only (it may be written
    by a running command meanwhile)."""

    def __init__(self, path):
        self.path = os.fsdecode(path)
        self._h = ctypes.c_void_p()
        check(lib.hs_api_index_open(ctypes.byref(self._h), enc(self.path)))

    def close(self):
        if self._h:
            lib.hs_api_index_close(self._h)
            self._h = ctypes.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def runs(self, kind=None, status=None):
        """Every run (of kind, with status) oldest first, as dicts: run_id,
        kind, status, model_path, model_sha256, data_path, data_sha256,
        args (the command line), started_at, finished_at, params."""
        out = ctypes.c_void_p()
        check(lib.hs_api_index_runs(self._h, enc(kind), enc(status), ctypes.byref(out)))
        return _lib.take_json(out.value)

    def latest(self, kind):
        """The latest complete run of kind; None when there is none."""
        v = ctypes.c_longlong()
        check(lib.hs_api_index_latest(self._h, enc(kind), ctypes.byref(v)))
        return v.value or None

    def _metric(self, run_id, metric, kind):
        out = ctypes.c_void_p()
        check(lib.hs_api_index_metric(self._h, int(run_id), enc(metric), kind, ctypes.byref(out)))
        return _lib.take_json(out.value)

    def _grid(self, run_id, metric, kind, squeeze=False):
        d = self._metric(run_id, metric, kind)
        shape = tuple(d["shape"])
        g = Grid(np.array(d["value"], dtype=np.float64).reshape(shape),
                 np.array(d["stderr"], dtype=np.float64).reshape(shape),
                 np.array(d["n"], dtype=np.int64).reshape(shape),
                 np.array(d["present"], dtype=bool).reshape(shape))
        if squeeze:
            g = Grid(*(a.reshape(-1) for a in g))
        return g

    def grid(self, run_id, metric):
        """A per-head metric of a run as (layer, head) arrays."""
        return self._grid(run_id, metric, 0)

    def positions(self, run_id, metric):
        """A per-(layer, position) metric (activation patching of the
        residual stream) as (layer, position) arrays."""
        return self._grid(run_id, metric, 1)

    def layers(self, run_id, metric):
        """A per-layer metric (rows with head -1: an MLP's dla, the logit
        lens) as (layer,) arrays."""
        return self._grid(run_id, metric, 2, squeeze=True)

    def curve(self, run_id, name):
        """A curve of a run: {"step", "x", "y"} arrays."""
        d = self._metric(run_id, name, 3)
        return {"step": np.array(d["step"], dtype=np.int64),
                "x": np.array(d["x"], dtype=np.float64), "y": np.array(d["y"], dtype=np.float64)}

    def _features(self, run_id, which, metric=None, feature=0):
        out = ctypes.c_void_p()
        check(lib.hs_api_index_features(self._h, int(run_id), which,
                                        enc(metric) if metric else None, int(feature),
                                        ctypes.byref(out)))
        d = _lib.take_json(out.value)
        return {k: np.array(v, dtype=np.float64 if k == "value" else np.int64) for k, v in d.items()}

    def feature_metric(self, run_id, metric):
        """A features run's rows of metric (SPEC §19: frequency, mean_act,
        head_share; an sae-eval run's l0, ... at feature -1) as columns:
        {"feature", "layer", "head", "value"} arrays (NaN where NULL)."""
        return self._features(run_id, 0, metric)

    def feature_examples(self, run_id):
        """Every top example: {"feature", "seq", "position", "value"}, by
        feature, then value descending."""
        return self._features(run_id, 1)

    def feature_dfa(self, run_id, feature):
        """Feature's direct feature attribution rows: {"seq", "position",
        "layer", "head", "source", "value"}."""
        return self._features(run_id, 2, feature=feature)

    def value(self, run_id, metric, layer=-1, head=-1):
        """One row (model-wide by default) as (value, stderr, n); None when absent."""
        v, s, n, found = ctypes.c_double(), ctypes.c_double(), ctypes.c_longlong(), ctypes.c_int()
        check(lib.hs_api_index_value(self._h, int(run_id), layer, head, enc(metric),
                                     ctypes.byref(v), ctypes.byref(s), ctypes.byref(n),
                                     ctypes.byref(found)))
        return (v.value, s.value, n.value) if found.value else None
