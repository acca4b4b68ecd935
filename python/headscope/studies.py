"""The studies of the headscope command as functions: each runs the library's
own study (analyze/study.h, the same code as the command) and returns a
Result; with db= it records a run into that index exactly as the command
does (provenance, rows, curves), its command line being the equivalent
`headscope` command's."""

import ctypes
import os
import threading

import numpy as np

from . import _lib
from ._lib import Error, check, enc, lib
from .tokenizer import Tokenizer


def _nan_row(r):
    """A row of the library's JSON: NaN comes as null (the index's NULL too)."""
    l, h, m, v, se, n = r
    return (l, h, m, np.nan if v is None else v, np.nan if se is None else se, n)


class Result:
    """A study's results: rows (layer, head, metric, value, stderr, n) as
    the index holds them (layer = head = -1: model-wide; head = -1: per
    layer), per-position rows, curves and named numbers.

      r["loss_delta_zero"]      the metric as a (layer, head) grid (NaN where
                                a head has no row); per-layer metrics as a
                                vector, model-wide ones as a float
      r.stderr("induction")     the standard errors, shaped alike
      r.clean_loss              a named number of the study (r.scalars)
      r.top("induction", 3)     [(layer, head, value), ...] largest first
    """

    def __init__(self, kind, d, n_layers, n_heads):
        self.kind = kind
        self.run_id = d.get("run_id") or None
        self.rows = [_nan_row(r) for r in d.get("rows", [])]
        self.positions = [_nan_row(r) for r in d.get("positions", [])]
        self.curves = {k: np.array(v, dtype=np.float64).reshape(-1, 3)
                       for k, v in d.get("curves", {}).items()}
        self.scalars = {k: np.nan if v is None else v for k, v in d.get("scalars", {}).items()}
        self.texts = dict(d.get("texts", {}))
        self.extra = {k: v for k, v in d.items()
                      if k not in ("run_id", "rows", "positions", "curves", "scalars", "texts")}
        self._L, self._H = n_layers, n_heads

    def __repr__(self):
        return "<headscope.Result %s: %d rows, metrics %s%s>" % (
            self.kind, len(self.rows), ", ".join(self.metrics),
            ", run %d" % self.run_id if self.run_id else "")

    @property
    def metrics(self):
        return sorted({r[2] for r in self.rows} | {r[2] for r in self.positions})

    def _grid(self, metric, col):
        g = np.full((self._L, self._H), np.nan)
        found = False
        for l, h, m, *v in self.rows:
            if m == metric and l >= 0 and h >= 0:
                g[l, h] = v[col]
                found = True
        return g if found else None

    def _layers(self, metric, col):
        vals = {l: v[col] for l, h, m, *v in self.rows if m == metric and l >= 0 and h == -1}
        if not vals:
            return None
        out = np.full(max(vals) + 1, np.nan)
        for l, v in vals.items():
            out[l] = v
        return out

    def _get(self, metric, col):
        g = self._grid(metric, col)
        if g is not None:
            return g
        g = self._layers(metric, col)
        if g is not None:
            return g
        for l, h, m, *v in self.rows:
            if m == metric and l == -1 and h == -1:
                return v[col]
        p = self.position_grid(metric, col)
        if p is not None:
            return p
        raise KeyError("%s: no metric %r (it has %s)" % (self.kind, metric, ", ".join(self.metrics)))

    def __getitem__(self, metric):
        return self._get(metric, 0)

    def stderr(self, metric):
        return self._get(metric, 1)

    def count(self, metric):
        return self._get(metric, 2)

    def value(self, metric, layer=-1, head=-1):
        """One row's value (model-wide by default)."""
        for l, h, m, v, *_ in self.rows:
            if m == metric and l == layer and h == head:
                return v
        raise KeyError("%s: no row (%d, %d, %r)" % (self.kind, layer, head, metric))

    def position_grid(self, metric, col=0):
        """A per-(layer, position) metric (activation patching of the
        residual stream) as a (layer, position) grid; None when absent."""
        rows = [r for r in self.positions if r[2] == metric]
        if not rows:
            return None
        g = np.full((max(r[0] for r in rows) + 1, max(r[1] for r in rows) + 1), np.nan)
        for l, p, m, *v in rows:
            g[l, p] = v[col]
        return g

    def top(self, metric, k=5):
        g = self._grid(metric, 0)
        if g is None:
            raise KeyError("%s: no per-head metric %r" % (self.kind, metric))
        cells = [(float(g[l, h]), l, h) for l in range(g.shape[0]) for h in range(g.shape[1])
                 if not np.isnan(g[l, h])]
        cells.sort(key=lambda c: (-c[0], c[1], c[2]))
        return [(l, h, v) for v, l, h in cells[:k]]

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        s = self.__dict__.get("scalars", {})
        if name in s:
            return s[name]
        raise AttributeError("%s result has no %r (scalars: %s)" % (
            self.__dict__.get("kind"), name, ", ".join(s)))


# ---- inputs ----


class _Tokens:
    """A token handle: a shard read by the library (its path recorded) or
    ids held here."""

    def __init__(self, data):
        self.h = ctypes.c_void_p()
        self.ids = None
        if isinstance(data, (str, bytes, os.PathLike)):
            self.path = os.path.abspath(os.fsdecode(data))
            check(lib.hs_api_tokens_read(ctypes.byref(self.h), enc(self.path)))
        else:
            self.path = None
            self.ids = _lib.ids_array(data).reshape(-1)
            check(lib.hs_api_tokens_wrap(ctypes.byref(self.h), _lib.i32_ptr(self.ids),
                                         self.ids.size))

    def __del__(self):
        if self.h:
            lib.hs_api_tokens_free(self.h)
            self.h = ctypes.c_void_p()

    @property
    def arg(self):
        return self.path or "(memory)"


def read_tokens(path):
    """A token shard (llm.c format, SPEC §4) as an int32 array."""
    t = _Tokens(path)
    n = lib.hs_api_tokens_count(t.h)
    return np.ctypeslib.as_array(lib.hs_api_tokens_ids(t.h), shape=(n,)).copy() if n else \
        np.zeros(0, np.int32)


def write_tokens(path, ids):
    """ids as a token shard (uint16, or uint32 when an id needs it)."""
    a = _lib.ids_array(ids).reshape(-1)
    check(lib.hs_api_tokens_write(enc(path), _lib.i32_ptr(a), a.size))


class _Prompts:
    """Clean/corrupt pairs: a prompts file (SPEC §11), or a list of dicts
    {"clean_ids", "corrupt_ids", "answer_id", "wrong_id"} or {"clean",
    "corrupt", "answer", "wrong"} (text: encoded as Hugging Face
    tokenizer(text), answer and wrong the first id of their text encoded
    without special tokens, as the prompts file's text lines are)."""

    def __init__(self, model, prompts, tokenizer):
        self.h = ctypes.c_void_p()
        if isinstance(prompts, (str, bytes, os.PathLike)):
            self.path = os.path.abspath(os.fsdecode(prompts))
            tok = tokenizer.path if isinstance(tokenizer, Tokenizer) else tokenizer
            check(lib.hs_api_prompts_load(ctypes.byref(self.h), enc(self.path), enc(tok),
                                          enc(model.path), model._handle()))
            return
        self.path = None
        check(lib.hs_api_prompts_new(ctypes.byref(self.h)))
        tk = None
        for i, p in enumerate(prompts):
            if "clean_ids" in p:
                clean, corrupt = _lib.ids_array(p["clean_ids"]), _lib.ids_array(p["corrupt_ids"])
                ans = _lib.id_int(p["answer_id"], "prompt %d: answer_id" % (i + 1))
                wrong = _lib.id_int(p["wrong_id"], "prompt %d: wrong_id" % (i + 1))
            else:
                if tk is None:
                    tk = (tokenizer if isinstance(tokenizer, Tokenizer) else
                          Tokenizer.open(tokenizer) if tokenizer else model.tokenizer)
                    if tk is None:
                        raise Error("prompt %d is text: give tokenizer= (the model's directory "
                                    "holds none)" % (i + 1))
                clean, corrupt = tk.encode(p["clean"]), tk.encode(p["corrupt"])
                a, w = tk.encode(p["answer"], False), tk.encode(p["wrong"], False)
                if not a.size or not w.size:
                    raise Error("prompt %d: an empty answer or wrong token" % (i + 1))
                ans, wrong = int(a[0]), int(w[0])
            if clean.shape != corrupt.shape or clean.ndim != 1:
                raise Error("prompt %d: clean and corrupt of different lengths (%d, %d)"
                            % (i + 1, clean.size, corrupt.size))
            check(lib.hs_api_prompts_add(self.h, _lib.i32_ptr(clean), _lib.i32_ptr(corrupt),
                                         clean.size, ans, wrong))

    def __del__(self):
        if self.h:
            lib.hs_api_prompts_free(self.h)
            self.h = ctypes.c_void_p()

    @property
    def arg(self):
        return self.path or "(memory)"


# ---- running a study ----


def _argv(kind, model, pairs):
    """The equivalent command line, recorded as the run's args."""
    argv = [kind]
    if model.path:
        argv += ["--model", model.path]
    for k, v in pairs:
        if v is None or v is False:
            continue
        argv.append("--" + k.replace("_", "-"))
        if v is not True:
            argv.append(str(v))
    return argv


def _run(kind, model, fn, args, db=None, argv=(), allow_nonfinite=False,
         allow_weak_premise=False):
    """Runs fn(&json, *args, env) in a worker thread, so that Ctrl-C (a
    notebook's interrupt) stops the study between units of work (HS_EINTR,
    raised as KeyboardInterrupt; a recorded run is then marked failed)."""
    env = ctypes.c_void_p()
    check(lib.hs_api_env_new(ctypes.byref(env)))
    stop = ctypes.c_int(0)
    try:
        if db is not None:
            if argv and "--db" not in argv:
                argv = list(argv) + ["--db", os.path.abspath(os.fsdecode(db))]
            arr = (ctypes.c_char_p * max(1, len(argv)))(*[a.encode() for a in argv])
            check(lib.hs_api_env_record(env, enc(os.fsdecode(db)), enc(model.path), len(argv),
                                        arr))
        elif model.path:
            check(lib.hs_api_env_record(env, None, enc(model.path), 0, None))
        lib.hs_api_env_stop(env, ctypes.byref(stop))
        lib.hs_api_env_allow_nonfinite(env, int(bool(allow_nonfinite)))
        lib.hs_api_env_allow_weak_premise(env, int(bool(allow_weak_premise)))
        out = ctypes.c_void_p()
        res = {}

        done = threading.Event()

        def work():
            try:
                rc = fn(ctypes.byref(out), *args(env))
                res["rc"] = rc
                if rc:  # the message is this thread's
                    res["msg"] = _lib.last_error()
            finally:
                done.set()

        t = threading.Thread(target=work, name="headscope " + kind, daemon=True)
        with model._lock:  # close() from another thread waits for the study
            model._handle()
            try:
                t.start()
                while not done.wait(0.25):
                    pass
            except KeyboardInterrupt:
                stop.value = 1
                while not done.is_set():  # the study stops at its next unit of work
                    try:
                        done.wait()
                    except KeyboardInterrupt:
                        pass
                if out.value:
                    lib.hs_api_free(out)
                raise
        if res.get("rc"):
            raise Error(res["msg"], res["rc"])
        d = _lib.take_json(out.value)
    finally:
        lib.hs_api_env_free(env)
    return Result(kind, d, model.n_layers, model.n_heads)


class Task:
    """A labelled task file (SPEC §16, `--task FILE.jsonl`) read for a
    classifier: {"text"[, "text_pair"], "label"} lines through the
    tokenizer (tokenizer=, else the model directory's) or {"ids",
    "token_type_ids"?, "label"} lines. seq_len (default min(n_ctx, 256)),
    truncate, label_map "i0,i1,..." and metric (the headline) as the
    command's options."""

    def __init__(self, model, path, tokenizer=None, seq_len=None, truncate=False, label_map=None,
                 metric=None):
        self.path = os.path.abspath(os.fsdecode(path))
        self.h = ctypes.c_void_p()
        self.args = [("task", self.path), ("seq_len", seq_len), ("truncate", truncate),
                     ("label_map", _list(label_map)), ("metric", metric),
                     ("tokenizer", tokenizer)]
        check(lib.hs_api_task_load(ctypes.byref(self.h), model._handle(), enc(model.path),
                                   enc(self.path), enc(tokenizer), seq_len or 0, int(truncate),
                                   enc(_list(label_map)), enc(metric)))

    def __len__(self):
        return lib.hs_api_task_count(self.h)

    def __del__(self):
        if getattr(self, "h", None) and self.h.value:
            lib.hs_api_task_free(self.h)
            self.h = ctypes.c_void_p()


def _task(model, task, **kw):
    return task if isinstance(task, Task) or task is None else Task(model, task, **kw)


def eval_task(model, task, batch=8, **task_options):
    """`headscope eval --task`'s numbers as a dict: task_loss and
    task_loss_stderr, each metric of the task's kind with <metric>_stderr
    (jackknife), metric (the headline) and n. task: a Task or a path (read
    with task_options: tokenizer, seq_len, truncate, label_map, metric)."""
    t = _task(model, task, **task_options)
    out = ctypes.c_void_p()
    with model._lock:
        check(lib.hs_api_eval_task(ctypes.byref(out), model._handle(), t.h, batch))
    return _lib.take_json(out.value)


def _with_task(task, fn):
    """fn's arguments with the env told to run on the task (SPEC §16)."""
    def args(env):
        if task is not None:
            lib.hs_api_env_task(env, task.h)
        return fn(env)
    return args


def ablate(model, data=None, batch=4, seq_len=None, max_batches=0, method="zero", layers=None,
           heads=None, naive=False, db=None, allow_nonfinite=False, task=None):
    """Head ablation (`headscope ablate`): loss_delta_<method> per head.
    data: a token shard's path or ids; layers, heads: lists or "0,2".
    task: a Task or a task file instead of data (loss and headline-metric
    deltas on its examples, SPEC §16)."""
    t = _task(model, task)
    toks = _Tokens(data) if t is None else None
    layers, heads, method = _list(layers), _list(heads), _list(method) or "zero"
    argv = _argv("ablate", model, (t.args if t else [("data", toks.arg)]) + [
        ("batch", batch), ("seq_len", None if t else seq_len),
        ("max_batches", max_batches or None), ("method", method), ("layers", layers),
        ("heads", heads), ("naive", naive)])
    return _run("ablate", model, lib.hs_api_ablate, _with_task(t, lambda env: (
        model._handle(), toks.h if toks else None, env, batch, seq_len or 0, max_batches,
        enc(method), enc(layers), enc(heads), int(naive))), db, argv, allow_nonfinite)


def importance(model, data=None, batch=4, seq_len=None, max_batches=0, db=None,
               allow_nonfinite=False, task=None):
    """Gradient head importance (`headscope importance`): importance and
    importance_raw per head; task instead of data: each example's task loss."""
    t = _task(model, task)
    toks = _Tokens(data) if t is None else None
    argv = _argv("importance", model, (t.args if t else [("data", toks.arg)]) + [
        ("batch", batch), ("seq_len", None if t else seq_len),
        ("max_batches", max_batches or None)])
    return _run("importance", model, lib.hs_api_importance, _with_task(t, lambda env: (
        model._handle(), toks.h if toks else None, env, batch, seq_len or 0, max_batches)), db,
        argv, allow_nonfinite)


def prune(model, data=None, task=None, batch=4, seq_len=None, max_batches=0, step_percent=10,
          max_percent=50, min_heads_per_layer=0, one_shot=False, method="importance",
          lambdas=(0.01,), steps=500, lr=0.1, seed=0, db=None, allow_nonfinite=False):
    """Head pruning (`headscope prune`). method "importance": Michel et
    al.'s iterative pruning, curves "pruning" (loss) and on a task
    "pruning_<metric>", rows "pruned"; returns a Result. method "l0" (a
    task): Voita et al.'s gates, one run per lambda (rows l0_gate,
    l0_log_alpha, l0_heads_open and the task's numbers with the gates,
    curve l0); returns a list of Results, one per lambda."""
    t = _task(model, task)
    toks = _Tokens(data) if t is None else None
    l0 = method == "l0"
    results = []
    for lam in (lambdas if l0 else (0.0,)):
        argv = _argv("prune", model, (t.args if t else [("data", toks.arg)]) + [
            ("batch", batch), ("seq_len", None if t else seq_len),
            ("max_batches", max_batches or None), ("method", method if l0 else None)] + (
            [("lambda", lam), ("steps", steps), ("lr", lr), ("seed", seed)] if l0 else
            [("step_percent", step_percent), ("max_percent", max_percent),
             ("min_heads_per_layer", min_heads_per_layer or None), ("one_shot", one_shot)]))
        results.append(_run("prune", model, lib.hs_api_prune, _with_task(t, lambda env, lam=lam: (
            model._handle(), toks.h if toks else None, env, batch, seq_len or 0, max_batches,
            step_percent, max_percent, min_heads_per_layer, int(one_shot), enc(method),
            lam, steps, lr, seed)), db, argv, allow_nonfinite))
    return results if l0 else results[0]


def _sites(sites, site):
    """sites=, or site= as the command spells it (--site); not both."""
    if sites is not None and site is not None:
        raise ValueError("sites= or site=, not both")
    return _list(sites if sites is not None else site)


def patch(model, prompts, sites=None, noising=False, batch=0, naive=False, tokenizer=None,
          db=None, allow_nonfinite=False, site=None, allow_weak_premise=False):
    """Activation patching (`headscope patch`): patch_z, patch_pattern per
    head and patch_resid_pre, patch_attn_out, patch_mlp_out per (layer,
    position); prompts: a prompts file or a list of pairs (see _Prompts);
    sites (or site, as --site): "z", ["z", "pattern"], ... A prompt set
    whose logit-difference gap is within two standard errors of 0 raises
    HeadscopeError unless allow_weak_premise (SPEC §21); the model-wide
    rows logit_diff_gap and premise_ok (0: not established) say which."""
    ps = _Prompts(model, prompts, tokenizer)
    sites = _sites(sites, site)
    argv = _argv("patch", model, [("prompts", ps.arg), ("site", sites), ("noising", noising),
                                  ("batch", batch or None), ("naive", naive),
                                  ("tokenizer", _tok_arg(tokenizer)),
                                  ("allow_weak_premise", allow_weak_premise)])
    return _run("patch", model, lib.hs_api_patch, lambda env: (
        model._handle(), ps.h, env, enc(sites), int(noising), batch, int(naive)), db, argv,
        allow_nonfinite, allow_weak_premise)


def atp(model, prompts, sites=None, noising=False, star=False, verify=0, batch=0,
        tokenizer=None, db=None, allow_nonfinite=False, site=None, allow_weak_premise=False):
    """Attribution patching (`headscope atp`): atp_z, atp_pattern, atp_q,
    atp_k, atp_v per head (k, v per key/value head), with star=True also
    atp_star_<site> (AtP*), with verify=K the exact patch_z of the K heads
    of largest |atp_z|; atp_resid_pre, atp_attn_out, atp_mlp_out per
    (layer, position). prompts: as for patch; sites or site and
    allow_weak_premise as patch's."""
    ps = _Prompts(model, prompts, tokenizer)
    sites = _sites(sites, site)
    argv = _argv("atp", model, [("prompts", ps.arg), ("site", sites), ("noising", noising),
                                ("star", star), ("verify", verify or None),
                                ("batch", batch or None), ("tokenizer", _tok_arg(tokenizer)),
                                ("allow_weak_premise", allow_weak_premise)])
    return _run("atp", model, lib.hs_api_atp, lambda env: (
        model._handle(), ps.h, env, enc(sites), int(noising), int(star), verify, batch), db, argv,
        allow_nonfinite, allow_weak_premise)


def dla(model, prompts, batch=8, tokenizer=None, db=None, allow_nonfinite=False):
    """Direct logit attribution (`headscope dla`): dla per head and per MLP,
    the model-wide parts; r.extra["parts"] holds every prompt's."""
    ps = _Prompts(model, prompts, tokenizer)
    argv = _argv("dla", model, [("prompts", ps.arg), ("batch", batch),
                                ("tokenizer", _tok_arg(tokenizer))])
    return _run("dla", model, lib.hs_api_dla, lambda env: (model._handle(), ps.h, env, batch), db, argv,
                allow_nonfinite)


def induction_scores(model, seq_len=0, samples=64, batch=8, seed=1, causal_k=1,
                     random_draws=20, min_score=0.4, db=None, allow_nonfinite=False):
    """The induction study (`headscope induction`): induction,
    duplicate_token, prev_token and copying per head for the model and its
    random-init control (suffix _control), the causal check of the top
    causal_k heads against random draws, and the verdict (r.established)."""
    argv = _argv("induction", model, [("seq_len", seq_len or None), ("samples", samples),
                                      ("batch", batch), ("seed", seed), ("causal_k", causal_k),
                                      ("random_draws", random_draws),
                                      ("min_score", min_score)])
    return _run("induction", model, lib.hs_api_induction, lambda env: (
        model._handle(), env, seq_len, samples, batch, seed, causal_k, random_draws, min_score), db,
        argv, allow_nonfinite)


def capture(model, data, out, batch=4, seq_len=None, max_batches=0, layers=None, heads=None,
            queries=None, half=False, compress=0, force=False, tokenizer=None, db=None):
    """Per-head maps into an HDF5 file (`headscope capture`), whole or not
    at all; the model must come from a directory (its provenance)."""
    toks = _Tokens(data)
    layers, heads = _list(layers), _list(heads)
    argv = _argv("capture", model, [("data", toks.arg), ("out", os.path.abspath(out)),
                                    ("batch", batch), ("seq_len", seq_len),
                                    ("max_batches", max_batches or None), ("layers", layers),
                                    ("heads", heads), ("queries", queries),
                                    ("dtype", "f16" if half else None),
                                    ("compress", compress or None), ("force", force),
                                    ("tokenizer", _tok_arg(tokenizer))])
    return _run("capture", model, lib.hs_api_capture, lambda env: (
        model._handle(), toks.h, env, enc(out), int(force), int(half), compress, batch, seq_len or 0,
        max_batches, enc(layers), enc(heads), enc(queries), enc(_tok_arg(tokenizer))), db, argv)


def train(model, data, steps=100, batch=4, seq_len=None, lr=1e-3, weight_decay=0.0, clip=0.0,
          warmup=0, val=None, val_every=0, out=None, db=None):
    """Trains model in place (`headscope train`): batches of batch x seq_len
    wrapping around data; out: the checkpoint directory written (then the
    model is that directory's). Curve train_loss: (step, tokens, loss)."""
    toks = _Tokens(data)
    vt = _Tokens(val) if val is not None else None
    argv = _argv("train", model, [("data", toks.arg), ("out", out and os.path.abspath(out)),
                                  ("steps", steps), ("batch", batch), ("seq_len", seq_len),
                                  ("lr", lr), ("weight_decay", weight_decay or None),
                                  ("clip", clip or None), ("warmup", warmup or None),
                                  ("val", vt.arg if vt else None),
                                  ("val_every", val_every or None)])
    r = _run("train", model, lib.hs_api_train, lambda env: (
        model._handle(), toks.h, env, batch, seq_len or 0, steps, lr, weight_decay, clip, warmup,
        vt.h if vt else None, val_every, enc(out)), db, argv)
    if out:
        model.path = os.path.abspath(out)
    return r


def _list(v):
    """A list of ints or names as the command's comma-separated option."""
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return ",".join(str(x) for x in v)


def _tok_arg(t):
    if t is None:
        return None
    return t.path if isinstance(t, Tokenizer) else os.fspath(t)
