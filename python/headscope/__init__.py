"""headscope from Python: a thin binding over libheadscope.so (ctypes, no
compiled extension), with TransformerLens's hook names.

    import headscope as hs
    model = hs.Model.open("runs/tiny")
    logits, cache = model.run_with_cache(ids, names=lambda n: n.endswith("hook_pattern"))
    cache["blocks.1.attn.hook_pattern"]           # [batch, head, q, k]
    model.run_with_hooks(ids, fwd_hooks=[("blocks.1.attn.hook_z", fn)])
    hs.ablate(model, "eval.bin", method="zero", db="runs.db")
    sae = hs.SAE.open("sae/"); f = sae.encode(cache["z", 1])   # [batch, pos, d_sae]

Arrays are numpy, in the build's precision (hs.dtype: float32, or float64 in
a -DHEADSCOPE_DOUBLE=ON build). Failures of the library raise hs.Error with
its message. See python/README.md.
"""

from ._lib import Error, VERSION as __version__, dtype, path as library_path
from ._lib import lib as _clib
from .hooks import HookName, get_act_name
from .index import Grid, Index
from .model import ActivationCache, Model
from .studies import (Result, Task, ablate, atp, capture, dla, eval_task, importance,
                      induction_scores, patch, prune, read_tokens, train, write_tokens)
from .sae import SAE, features
from .show import HeadView, show
from .tokenizer import Tokenizer


def set_threads(n):
    """Threads of the library's OpenMP loops and OpenBLAS calls."""
    _clib.hs_set_threads(int(n))


def get_threads():
    return _clib.hs_get_threads()


__all__ = ["Error", "Model", "Tokenizer", "ActivationCache", "HookName", "Index", "Grid",
           "Result", "Task", "ablate", "importance", "prune", "eval_task", "patch", "atp", "dla",
           "induction_scores", "capture", "SAE", "features", "show", "HeadView",
           "train", "read_tokens", "write_tokens", "get_act_name", "set_threads", "get_threads",
           "dtype", "library_path"]
