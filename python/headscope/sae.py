"""Sparse autoencoders in SAELens's format (SPEC §19) through the library
(analyze/sae.h): SAE.open(dir), its configuration and weights, encode and
decode on arrays of activations, and the `features` study."""

import ctypes
import os
import threading

import numpy as np

from . import _lib
from ._lib import Error, check, enc, lib
from .studies import _argv, _run, _Tokens

_TENSORS = ("W_enc", "W_dec", "b_enc", "b_dec", "threshold")


class SAE:
    """A sparse autoencoder read by the library from a directory in
    SAELens's format (cfg.json and sae_weights.safetensors, F32, F16 or
    BF16; every key and tensor checked, a failure raising hs.Error naming
    the file):

        sae = hs.SAE.open("sae/")
        sae.d_in, sae.d_sae, sae.hook_name, sae.architecture, sae.k
        f = sae.encode(cache["z", 1])        # [batch, pos, d_sae]
        x_hat = sae.decode(f)                # [batch, pos, d_in]

    The weights are copies in the build's precision (hs.dtype), read-only:
    W_enc [d_in, d_sae], W_dec [d_sae, d_in], b_enc, b_dec, and threshold
    (a jumprelu's; None otherwise). encode and decode use the library's own
    (hs_sae_encode, hs_sae_decode), the functions the studies call."""

    def __init__(self, handle, path):
        self._h = ctypes.c_void_p(handle)
        self._lock = threading.Lock()
        self.path = os.path.abspath(os.fsdecode(path))
        self.hook_name = lib.hs_api_sae_hook(self._h).decode()
        self.architecture = lib.hs_api_sae_architecture(self._h).decode()
        self.d_in = self._int("d_in")
        self.d_sae = self._int("d_sae")
        self.k = self._int("k") or None
        self.apply_b_dec_to_input = bool(self._int("apply_b_dec_to_input"))
        self.dtype = _lib.dtype
        self._weights = {}

    @classmethod
    def open(cls, path):
        """The SAE of directory path (SAELens's save_model layout)."""
        h = ctypes.c_void_p()
        check(lib.hs_api_sae_open(ctypes.byref(h), enc(os.fsdecode(path))))
        return cls(h.value, path)

    def _handle(self):
        if not self._h:
            raise Error("the SAE is closed")
        return self._h

    def _int(self, key):
        v = ctypes.c_longlong()
        check(lib.hs_api_sae_int(self._handle(), enc(key), ctypes.byref(v)))
        return v.value

    def close(self):
        """Frees the library's copy (the weights' arrays handed out stay)."""
        with self._lock:
            if self._h:
                lib.hs_api_sae_free(self._h)
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

    def __repr__(self):
        return "<headscope.SAE %s on %s: d_in %d, d_sae %d%s, %s>" % (
            self.architecture, self.hook_name, self.d_in, self.d_sae,
            ", k %d" % self.k if self.k else "", self.path)

    # ---- weights ----

    def _tensor(self, name):
        """A copy of tensor name, made once and kept read-only: writing it
        would not change what encode computes."""
        if name == "threshold" and self.architecture != "jumprelu":
            return None
        if name not in self._weights:
            data, rows, cols = _lib.P_real(), ctypes.c_int(), ctypes.c_int()
            with self._lock:
                check(lib.hs_api_sae_tensor(self._handle(), enc(name), ctypes.byref(data),
                                            ctypes.byref(rows), ctypes.byref(cols)))
                shape = (rows.value, cols.value) if cols.value else (rows.value,)
                a = np.ctypeslib.as_array(data, shape=shape).copy()
            a.flags.writeable = False
            self._weights[name] = a
        return self._weights[name]

    W_enc = property(lambda self: self._tensor("W_enc"), doc="[d_in, d_sae]")
    W_dec = property(lambda self: self._tensor("W_dec"), doc="[d_sae, d_in]")
    b_enc = property(lambda self: self._tensor("b_enc"), doc="[d_sae]")
    b_dec = property(lambda self: self._tensor("b_dec"), doc="[d_in]")
    threshold = property(lambda self: self._tensor("threshold"),
                         doc="[d_sae], a jumprelu's; None for the others")

    # ---- encode, decode ----

    def _rows(self, x, width, what, heads=False):
        """x [..., width] (with heads, also [..., head, d_head] with head *
        d_head = width: a hook_z cache entry, flattened head-major as
        SAELens reads z) as contiguous rows of the build's precision, and
        its leading shape."""
        a = np.asarray(x)
        if a.dtype.kind not in "fiub":
            raise TypeError("%s: %s must be numbers, not %s" % (self.path, what, a.dtype))
        if heads and a.ndim >= 2 and a.shape[-1] != width and a.shape[-2] * a.shape[-1] == width:
            a = a.reshape(a.shape[:-2] + (width,))
        if a.ndim == 0 or a.shape[-1] != width:
            raise ValueError("%s: %s of shape %s: its last dimension must be %d%s" % (
                self.path, what, tuple(np.shape(x)), width,
                " (or its last two head x d_head = %d)" % width if heads else ""))
        lead = a.shape[:-1]
        return np.ascontiguousarray(a, dtype=self.dtype).reshape(-1, width), lead

    def encode(self, x, return_pre=False):
        """The features f [..., d_sae] of activations x [..., d_in], or of
        a hook_z entry [batch, pos, head, d_head] (cache["z", L]), whose last
        two dimensions are flattened head-major into d_in. return_pre: (f,
        pre), pre the encoder's output before the activation (x' W_enc +
        b_enc, x' = x - b_dec when apply_b_dec_to_input)."""
        rows, lead = self._rows(x, self.d_in, "x", heads=True)
        n = rows.shape[0]
        pre = np.empty((n, self.d_sae), dtype=self.dtype)
        f = np.empty((n, self.d_sae), dtype=self.dtype)
        with self._lock:
            check(lib.hs_api_sae_encode(self._handle(), _lib.real_ptr(rows), n,
                                        _lib.real_ptr(pre), _lib.real_ptr(f)))
        f = f.reshape(lead + (self.d_sae,))
        return (f, pre.reshape(lead + (self.d_sae,))) if return_pre else f

    def decode(self, f):
        """The reconstruction x_hat = f W_dec + b_dec [..., d_in] of
        features f [..., d_sae] (d_in flat: reshape a hook_z SAE's to
        [..., head, d_head] if wanted)."""
        rows, lead = self._rows(f, self.d_sae, "f")
        n = rows.shape[0]
        x_hat = np.empty((n, self.d_in), dtype=self.dtype)
        with self._lock:
            check(lib.hs_api_sae_decode(self._handle(), _lib.real_ptr(rows), n,
                                        _lib.real_ptr(x_hat)))
        return x_hat.reshape(lead + (self.d_in,))

    def bind(self, model):
        """Checks that the SAE reads a hook of model, as the studies check
        it (hs.Error naming hook_name or d_in: a hook the model lacks, a
        layer beyond it, a width other than d_in); returns self."""
        site, layer = ctypes.c_int(), ctypes.c_int()
        with model._lock, self._lock:
            check(lib.hs_api_sae_bind(self._handle(), model._handle(), ctypes.byref(site),
                                      ctypes.byref(layer)))
        return self


def features(model, sae, data, batch=4, seq_len=None, max_batches=0, top=10, dfa_examples=None,
             out=None, force=False, db=None):
    """An SAE's features on a model's data (`headscope features`, its own
    study: the same numbers). sae: the SAE's directory (or an SAE: its
    directory is read again, as the command reads it); data: a token
    shard's path or ids. Per feature frequency, mean_act and (a hook_z
    SAE's) head_share, its top examples and their direct feature
    attribution (dfa_examples: of each feature's first K examples; None:
    all, 0: none) go to the index db= into feature_metrics,
    feature_examples and feature_dfa of the run (r.run_id); out= also
    writes the activations in CSR (an HDF5 file). The Result holds the
    summary: r.tokens, r.d_sae, r.alive, r.l0, r.examples, r.dfa_rows,
    r.top_feature, r.top_frequency, r.texts["hook"]."""
    sae_dir = os.path.abspath(sae.path if isinstance(sae, SAE) else os.fsdecode(sae))
    toks = _Tokens(data)
    out = os.path.abspath(os.fsdecode(out)) if out is not None else None
    dfa = -1 if dfa_examples is None else int(dfa_examples)
    argv = _argv("features", model, [
        ("sae", sae_dir), ("data", toks.arg), ("top", top),
        ("dfa_examples", dfa_examples), ("out", out), ("force", force), ("batch", batch),
        ("seq_len", seq_len), ("max_batches", max_batches or None)])
    return _run("features", model, lib.hs_api_features, lambda env: (
        model._handle(), toks.h, env, batch, seq_len or 0, max_batches, enc(sae_dir), top, dfa,
        enc(out), int(force)), db, argv)
