"""The C library behind the package: finding libheadscope.so, loading it
with ctypes and declaring the functions of api/hs_api.h (and the few of the
library's own headers the package calls directly).

Where the library is found, first hit wins:

1. ``$HEADSCOPE_LIB``: the .so itself, or a directory holding
   ``libheadscope.so`` (a build folder such as ``build/double``);
2. beside this file: the package as ``cmake --install`` puts it, with the
   .so in the package directory;
3. ``build/float/libheadscope.so`` of the source tree this package lies in
   (``python/headscope`` -> ``../../build/float``): ``PYTHONPATH=python``
   in a checkout after ``cmake --build build/float``.
"""

import ctypes
import json
import os

import numpy as np

LIB_NAME = "libheadscope.so"


class Error(Exception):
    """A failure of the headscope library: its message (hs_last_error())
    and its status (``code``: 1 invalid argument, 2 I/O, 3 format, 4 out of
    memory, 5 interrupted)."""

    def __init__(self, message, code=1):
        super().__init__(message)
        self.code = code


def _candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    env = os.environ.get("HEADSCOPE_LIB")
    if env:
        return [os.path.join(env, LIB_NAME) if os.path.isdir(env) else env], True
    return [os.path.join(here, LIB_NAME),
            os.path.normpath(os.path.join(here, "..", "..", "build", "float", LIB_NAME))], False


def _load():
    paths, from_env = _candidates()
    for p in paths:
        if os.path.isfile(p):
            # Idle OpenMP threads sleep instead of spinning (the command's
            # default too, hs_runtime_init): libgomp reads this when it loads.
            os.environ.setdefault("OMP_WAIT_POLICY", "passive")
            return ctypes.CDLL(p), p
    where = "$HEADSCOPE_LIB=" + paths[0] if from_env else " or ".join(paths)
    raise ImportError("headscope: no %s at %s (build it: cmake --build build/float, or set "
                      "HEADSCOPE_LIB to the .so or its folder)" % (LIB_NAME, where))


lib, path = _load()

c_int, c_ll, c_size, c_double, c_char_p, c_void_p = (ctypes.c_int, ctypes.c_longlong,
                                                     ctypes.c_size_t, ctypes.c_double,
                                                     ctypes.c_char_p, ctypes.c_void_p)
P = ctypes.POINTER

lib.hs_api_real_bytes.restype = c_int
REAL_BYTES = lib.hs_api_real_bytes()
dtype = np.dtype(np.float32 if REAL_BYTES == 4 else np.float64)
c_real = ctypes.c_float if REAL_BYTES == 4 else ctypes.c_double
P_real = P(c_real)
P_i32 = P(ctypes.c_int32)

HOOK_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_int, c_int, P_real, c_int, c_int, c_int, c_int)

# name: (restype, argtypes)
_SIGS = {
    "hs_last_error": (c_char_p, []),
    "hs_set_threads": (None, [c_int]),
    "hs_get_threads": (c_int, []),
    "hs_api_version": (c_char_p, []),
    "hs_api_free": (None, [c_void_p]),
    "hs_api_site_count": (c_int, []),
    "hs_api_site_name": (c_char_p, [c_int]),
    "hs_api_model_open": (c_int, [P(c_void_p), c_char_p]),
    "hs_api_model_new": (c_int, [P(c_void_p), c_char_p, P(c_char_p), c_int, ctypes.c_ulonglong]),
    "hs_api_model_save": (c_int, [c_void_p, c_char_p]),
    "hs_api_model_free": (None, [c_void_p]),
    "hs_api_model_config": (c_void_p, [c_void_p]),
    "hs_api_model_int": (c_int, [c_void_p, c_char_p, P(c_ll)]),
    "hs_api_model_family": (c_char_p, [c_void_p]),
    "hs_api_model_heads": (c_int, [c_void_p, c_int, P(c_int), P(c_int)]),
    "hs_api_model_tensor_count": (c_int, [c_void_p]),
    "hs_api_model_tensor": (c_int, [c_void_p, c_int, P(c_char_p), P(P_real), P(c_int), P(c_int),
                                    P(c_int)]),
    "hs_api_site_shape": (c_int, [c_void_p, c_int, c_int, c_int, c_int, P(c_int)]),
    "hs_api_tokens_read": (c_int, [P(c_void_p), c_char_p]),
    "hs_api_tokens_wrap": (c_int, [P(c_void_p), P_i32, c_size]),
    "hs_api_tokens_count": (c_size, [c_void_p]),
    "hs_api_tokens_ids": (P_i32, [c_void_p]),
    "hs_api_tokens_free": (None, [c_void_p]),
    "hs_api_tokens_write": (c_int, [c_char_p, P_i32, c_size]),
    "hs_api_prompts_load": (c_int, [P(c_void_p), c_char_p, c_char_p, c_char_p, c_void_p]),
    "hs_api_prompts_new": (c_int, [P(c_void_p)]),
    "hs_api_prompts_add": (c_int, [c_void_p, P_i32, P_i32, c_int, c_int, c_int]),
    "hs_api_prompts_count": (c_int, [c_void_p]),
    "hs_api_prompts_free": (None, [c_void_p]),
    "hs_api_forward_new": (c_int, [P(c_void_p), c_void_p]),
    "hs_api_s2s_forward": (c_int, [c_void_p, P_i32, c_int, P_i32, c_int, c_int, P_i32, P_real,
                                   P_real, P(c_double), P(c_int), P(c_int), P(c_int), P(P_real),
                                   P(c_size), c_int]),
    "hs_api_forward_free": (None, [c_void_p]),
    "hs_api_forward_clear": (None, [c_void_p]),
    "hs_api_forward_record": (c_int, [c_void_p, c_int, c_int, P_real, c_size]),
    "hs_api_forward_hook": (c_int, [c_void_p, c_int, c_int, HOOK_FN, c_void_p]),
    "hs_api_forward_run": (c_int, [c_void_p, P_i32, c_int, c_int, P_i32, P_real, P_real,
                                   P(c_double)]),
    "hs_api_env_new": (c_int, [P(c_void_p)]),
    "hs_api_env_free": (None, [c_void_p]),
    "hs_api_env_record": (c_int, [c_void_p, c_char_p, c_char_p, c_int, P(c_char_p)]),
    "hs_api_env_stop": (None, [c_void_p, P(c_int)]),
    "hs_api_env_allow_nonfinite": (None, [c_void_p, c_int]),
    "hs_api_env_allow_weak_premise": (None, [c_void_p, c_int]),
    "hs_api_ablate": (c_int, [P(c_void_p), c_void_p, c_void_p, c_void_p, c_int, c_int, c_ll,
                              c_char_p, c_char_p, c_char_p, c_int]),
    "hs_api_importance": (c_int, [P(c_void_p), c_void_p, c_void_p, c_void_p, c_int, c_int, c_ll]),
    "hs_api_prune": (c_int, [P(c_void_p), c_void_p, c_void_p, c_void_p, c_int, c_int, c_ll,
                             c_double, c_double, c_int, c_int, c_char_p, c_double, c_int,
                             c_double, c_ll]),
    "hs_api_task_load": (c_int, [P(c_void_p), c_void_p, c_char_p, c_char_p, c_char_p, c_int,
                                 c_int, c_char_p, c_char_p]),
    "hs_api_task_free": (None, [c_void_p]),
    "hs_api_task_count": (c_int, [c_void_p]),
    "hs_api_eval_task": (c_int, [P(c_void_p), c_void_p, c_void_p, c_int]),
    "hs_api_classify": (c_int, [c_void_p, P_i32, P(ctypes.c_ubyte), c_int, c_int, P_real]),
    "hs_api_env_task": (None, [c_void_p, c_void_p]),
    "hs_api_predict_top": (c_int, [c_void_p, P_i32, c_int, c_int, P_i32, P(c_double),
                                   P(c_double)]),
    "hs_api_patch": (c_int, [P(c_void_p), c_void_p, c_void_p, c_void_p, c_char_p, c_int, c_int,
                             c_int]),
    "hs_api_atp": (c_int, [P(c_void_p), c_void_p, c_void_p, c_void_p, c_char_p, c_int, c_int,
                           c_int, c_int]),
    "hs_api_dla": (c_int, [P(c_void_p), c_void_p, c_void_p, c_void_p, c_int]),
    "hs_api_induction": (c_int, [P(c_void_p), c_void_p, c_void_p, c_int, c_int, c_int,
                                 ctypes.c_ulonglong, c_int, c_int, c_double]),
    "hs_api_capture": (c_int, [P(c_void_p), c_void_p, c_void_p, c_void_p, c_char_p, c_int, c_int,
                               c_int, c_int, c_int, c_ll, c_char_p, c_char_p, c_char_p,
                               c_char_p]),
    "hs_api_train": (c_int, [P(c_void_p), c_void_p, c_void_p, c_void_p, c_int, c_int,
                             ctypes.c_long, c_double, c_double, c_double, ctypes.c_long,
                             c_void_p, ctypes.c_long, c_char_p]),
    "hs_api_sae_open": (c_int, [P(c_void_p), c_char_p]),
    "hs_api_sae_free": (None, [c_void_p]),
    "hs_api_sae_dir": (c_char_p, [c_void_p]),
    "hs_api_sae_hook": (c_char_p, [c_void_p]),
    "hs_api_sae_architecture": (c_char_p, [c_void_p]),
    "hs_api_sae_int": (c_int, [c_void_p, c_char_p, P(c_ll)]),
    "hs_api_sae_tensor": (c_int, [c_void_p, c_char_p, P(P_real), P(c_int), P(c_int)]),
    "hs_api_sae_bind": (c_int, [c_void_p, c_void_p, P(c_int), P(c_int)]),
    "hs_api_sae_encode": (c_int, [c_void_p, P_real, ctypes.c_long, P_real, P_real]),
    "hs_api_sae_decode": (c_int, [c_void_p, P_real, ctypes.c_long, P_real]),
    "hs_api_features": (c_int, [P(c_void_p), c_void_p, c_void_p, c_void_p, c_int, c_int, c_ll,
                                c_char_p, c_int, c_int, c_char_p, c_int]),
    "hs_api_index_open": (c_int, [P(c_void_p), c_char_p]),
    "hs_api_index_close": (None, [c_void_p]),
    "hs_api_index_runs": (c_int, [c_void_p, c_char_p, c_char_p, P(c_void_p)]),
    "hs_api_index_metric": (c_int, [c_void_p, c_ll, c_char_p, c_int, P(c_void_p)]),
    "hs_api_index_features": (c_int, [c_void_p, c_ll, c_int, c_char_p, c_int, P(c_void_p)]),
    "hs_api_index_value": (c_int, [c_void_p, c_ll, c_int, c_int, c_char_p, P(c_double),
                                   P(c_double), P(c_ll), P(c_int)]),
    "hs_api_index_latest": (c_int, [c_void_p, c_char_p, P(c_ll)]),
    "hs_tokenizer_open": (c_int, [P(c_void_p), c_char_p]),
    "hs_tokenizer_free": (None, [c_void_p]),
    "hs_tokenizer_target": (c_void_p, [c_void_p]),
    "hs_tokenizer_present": (c_int, [c_char_p]),
    "hs_tokenizer_vocab_size": (c_int, [c_void_p]),
    "hs_tokenizer_encode": (c_int, [c_void_p, c_char_p, c_size, c_int, P(P_i32), P(c_size)]),
    "hs_tokenizer_decode": (c_void_p, [c_void_p, P_i32, c_size, c_int]),
    "hs_tokenizer_token_text": (c_int, [c_void_p, ctypes.c_int32, c_char_p, c_size]),
}
for _name, (_res, _args) in _SIGS.items():
    _f = getattr(lib, _name)
    _f.restype, _f.argtypes = _res, _args

VERSION = lib.hs_api_version().decode()
SITES = {lib.hs_api_site_name(i).decode(): i for i in range(lib.hs_api_site_count())}


def last_error():
    m = lib.hs_last_error()
    return m.decode("utf-8", "replace") if m else "headscope: unknown failure"


def check(rc):
    """Raises Error with the library's message for a failed status."""
    if rc:
        raise Error(last_error(), rc)


def enc(s):
    """A path or text as the C side takes it (bytes), or None."""
    if s is None:
        return None
    return os.fsencode(s) if not isinstance(s, bytes) else s


def take_text(ptr):
    """The malloc'd C string ptr (a c_void_p value) as str; frees it."""
    if not ptr:
        raise Error(last_error(), 4)
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        lib.hs_api_free(ptr)


def take_json(ptr):
    return json.loads(take_text(ptr))


def real_ptr(a):
    return a.ctypes.data_as(P_real)


def i32_ptr(a):
    return a.ctypes.data_as(P_i32)


I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1


def id_int(v, what="token id"):
    """One id as a Python int that fits the C int it is passed as: a value
    beyond int32 is refused, naming it, before any cast wraps it (3 + 2**32
    once ran as 3)."""
    v = int(v)
    if not I32_MIN <= v <= I32_MAX:
        raise Error("%s %d is outside the ids headscope takes (int32)" % (what, v))
    return v


def ids_array(ids, what="token id"):
    """ids as a C-contiguous int32 array (a copy only when needed); values
    beyond int32 are refused, naming the first, before the cast."""
    a = np.asarray(ids)
    if a.dtype.kind == "O" and all(isinstance(x, int) for x in a.reshape(-1)):
        for x in a.reshape(-1):
            id_int(x, what)
    if a.dtype.kind not in "iu":
        raise TypeError("token ids must be integers, not %s" % a.dtype)
    if a.size and a.dtype.itemsize * 8 > 31 + (a.dtype.kind == "i"):
        bad = a[(a < I32_MIN) | (a > I32_MAX)] if a.dtype.kind == "i" else a[a > I32_MAX]
        if bad.size:
            id_int(int(bad.reshape(-1)[0]), what)
    return np.ascontiguousarray(a, dtype=np.int32)


def _default_threads():
    # as hs_runtime_init: this process's CPUs, unless OpenMP or OpenBLAS is told
    if not os.environ.get("OMP_NUM_THREADS") and not os.environ.get("OPENBLAS_NUM_THREADS"):
        try:
            lib.hs_set_threads(len(os.sched_getaffinity(0)))
        except (AttributeError, OSError):
            pass


_default_threads()
