"""Models and their forwards: logits, losses, the activation cache and hooks,
under TransformerLens's hook names (hooks.py maps them to headscope's sites).
"""

import ctypes
import json
import os
import re
import sys
import threading
import types

import numpy as np

from . import _lib
from ._lib import Error, check, enc, lib
from .hooks import HookName, all_hook_names, embed_trampoline, resolve, select_names
from .tokenizer import Tokenizer


class ActivationCache(dict):
    """What run_with_cache kept: hook name -> numpy array, in
    TransformerLens's shapes. Also indexable as cache["pattern", 3] (the
    short name and the layer, as TransformerLens's cache is)."""

    def __getitem__(self, key):
        if isinstance(key, tuple):
            from .hooks import get_act_name
            key = get_act_name(*key)
        return dict.__getitem__(self, key)

    def __contains__(self, key):
        if isinstance(key, tuple):
            from .hooks import get_act_name
            key = get_act_name(*key)
        return dict.__contains__(self, key)

    def show(self, layer, tokens=None, batch=0, **kw):
        """The head view (hs.show) of sequence `batch`'s maps of `layer`
        (the cache must hold blocks.L.attn.hook_pattern)."""
        from .show import show
        return show(self["pattern", layer][batch], tokens, title="layer %d" % layer, **kw)


class _Storage:
    """A parameter tensor's memory for numpy (the array's base): holds the
    model, so the weights outlive neither their views nor close()."""

    def __init__(self, model, data, shape):
        self.model = model
        self.__array_interface__ = {
            "shape": shape, "typestr": np.dtype(model.dtype).str,
            "data": (ctypes.cast(data, ctypes.c_void_p).value, False), "version": 3}


class Model:
    """A headscope model in memory: Model.open(dir) for a checkpoint of any
    family, Model.new(preset, ...) for a random one. Calling it runs the
    forward: model(ids) -> logits (numpy, the build's precision)."""

    def __init__(self, handle, path=None):
        self._h = ctypes.c_void_p(handle)
        self.path = os.path.abspath(path) if path else None
        self._fwd = ctypes.c_void_p()
        check(lib.hs_api_forward_new(ctypes.byref(self._fwd), self._h))
        self._lock = threading.Lock()
        self._running = None   # the thread running a forward, while one runs
        self._blocks = []      # what _arrays handed out, kept for reuse
        self._blocks_lock = threading.Lock()
        self._views = False    # params handed out: the storage outlives close()
        self._tokenizer = None
        self.config = json.loads(_lib.take_text(lib.hs_api_model_config(self._h)))
        self.family = lib.hs_api_model_family(self._h).decode()
        self.n_layers = self._int("n_layer")
        self.d_model = self._int("d_model")
        self.d_head = self._int("head_dim")
        self.vocab_size = self._int("vocab_size")
        self.n_ctx = self._int("n_ctx")
        self.d_mlp = self._int("d_ff") if self._int("mlp") else 0
        self.n_params = self._int("n_params")
        self.learned_positions = bool(self._int("learned_positions"))
        self.rotary = bool(self._int("rotary"))
        self.final_norm = bool(self._int("final_norm"))
        self.mla = bool(self._int("mla"))
        self.embed_scale = bool(self._int("embed_scale"))
        heads = []
        for l in range(self.n_layers):
            H, G = ctypes.c_int(), ctypes.c_int()
            check(lib.hs_api_model_heads(self._h, l, ctypes.byref(H), ctypes.byref(G)))
            heads.append((H.value, G.value))
        self.heads_per_layer = [h for h, _ in heads]
        self.kv_heads_per_layer = [g for _, g in heads]
        self.n_heads = max(self.heads_per_layer)
        self.n_kv_heads = max(self.kv_heads_per_layer)
        self.dtype = _lib.dtype
        self.cfg = types.SimpleNamespace(
            n_layers=self.n_layers, d_model=self.d_model, d_head=self.d_head,
            n_heads=self.n_heads, n_key_value_heads=self.n_kv_heads, d_vocab=self.vocab_size,
            n_ctx=self.n_ctx, d_mlp=self.d_mlp, family=self.family, dtype=self.dtype)
        self._params = None
        self._names = None
        # an encoder-decoder (SPEC §17): layers 0 .. n_encoder_layers-1 are
        # its encoder's, the rest its decoder's; hook names as TransformerLens's
        # HookedEncoderDecoder gives them (encoder.{l}.attn..., decoder.{l}.attn
        # and .cross_attn...)
        self.n_encoder_layers = self._int("enc_layers")
        self.encoder_decoder = self.n_encoder_layers > 0
        self.n_decoder_layers = self.n_layers - self.n_encoder_layers if self.encoder_decoder else 0

    # ---- making models ----

    @classmethod
    def open(cls, path):
        """A checkpoint directory (config.json + model.safetensors, or a
        sharded index) of any family headscope reads."""
        h = ctypes.c_void_p()
        check(lib.hs_api_model_open(ctypes.byref(h), enc(path)))
        return cls(h.value, path)

    @classmethod
    def new(cls, preset="gpt2", seed=0, **overrides):
        """A randomly initialised model of a preset (gpt2, llama, attn-only,
        tinylm, mla) with config overrides, as `headscope train --preset
        PRESET KEY=VALUE...` makes it: Model.new("gpt2", n_layer=12,
        d_model=768, n_head=12, vocab_size=50257). A list value is written
        as JSON (n_head=[1, 8])."""
        kv = [("%s=%s" % (k, json.dumps(v) if isinstance(v, (list, tuple)) else v)).encode()
              for k, v in overrides.items()]
        arr = (ctypes.c_char_p * max(1, len(kv)))(*kv)
        h = ctypes.c_void_p()
        check(lib.hs_api_model_new(ctypes.byref(h), enc(preset), arr, len(kv), seed))
        return cls(h.value)

    def save(self, path):
        """Writes path/config.json and path/model.safetensors; the model is
        from then on the one of that directory (runs record it)."""
        check(lib.hs_api_model_save(self._handle(), enc(path)))
        self.path = os.path.abspath(path)

    def _handle(self):
        """The C model, or hs.Error once the model is closed."""
        if not self._fwd:
            raise Error("the model is closed")
        return self._h

    def close(self):
        """Frees the model. From another thread it waits for a running
        forward; from a hook of its own forward it is refused. Arrays of
        `params` still alive keep the weights' storage until they go."""
        if self._running == threading.get_ident():
            raise Error("close() from a hook: the model is running its forward")
        with self._lock:
            if self._fwd:
                lib.hs_api_forward_free(self._fwd)
                self._fwd = ctypes.c_void_p()
            self._params = None
            self._blocks = []
            if self._h and not self._views:
                self._free()

    def _free(self):
        if self._h:
            lib.hs_api_model_free(self._h)
            self._h = ctypes.c_void_p()

    def __del__(self):
        try:
            self.close()
            self._free()  # the last params view is gone too: it held the model
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "<headscope.Model %s: %d layers, d %d, %d heads (%d kv), d_head %d, vocab %d%s>" % (
            self.family, self.n_layers, self.d_model, self.n_heads, self.n_kv_heads, self.d_head,
            self.vocab_size, ", " + self.path if self.path else "")

    def _int(self, key):
        v = ctypes.c_longlong()
        check(lib.hs_api_model_int(self._handle(), key.encode(), ctypes.byref(v)))
        return v.value

    # ---- weights ----

    @property
    def params(self):
        """Every parameter tensor by headscope name, as numpy views of the
        model's own storage (writing to them edits the model); each view
        keeps the model's storage alive, after close() too."""
        if self._params is None:
            h, out = self._handle(), {}
            for i in range(lib.hs_api_model_tensor_count(h)):
                name, data = ctypes.c_char_p(), _lib.P_real()
                nd, r, c = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
                check(lib.hs_api_model_tensor(h, i, ctypes.byref(name), ctypes.byref(data),
                                              ctypes.byref(nd), ctypes.byref(r), ctypes.byref(c)))
                shape = (r.value,) if nd.value == 1 else (r.value, c.value)
                out[name.value.decode()] = np.asarray(_Storage(self, data, shape))
            self._views = True
            self._params = out
        return self._params

    # ---- tokens ----

    @property
    def tokenizer(self):
        """The tokenizer of the model's directory (None when it has none)."""
        if self._tokenizer is None and self.path and lib.hs_tokenizer_present(enc(self.path)):
            self._tokenizer = Tokenizer.open(self.path)
        return self._tokenizer

    def to_tokens(self, text):
        """text (or a list of texts of one length in tokens) -> ids (B, T),
        encoded as Hugging Face tokenizer(text) does."""
        if self.tokenizer is None:
            raise Error("the model's directory holds no tokenizer: encode with hs.Tokenizer")
        texts = [text] if isinstance(text, str) else list(text)
        rows = [self.tokenizer.encode(t) for t in texts]
        if len({len(r) for r in rows}) != 1:
            raise Error("texts of different lengths in tokens: %s" % [len(r) for r in rows])
        return np.stack(rows)

    def to_str_tokens(self, ids):
        if self.tokenizer is None:
            raise Error("the model's directory holds no tokenizer")
        return [self.tokenizer.token_text(int(i)) for i in np.asarray(ids).reshape(-1)]

    def _ids(self, ids):
        if isinstance(ids, str) or (isinstance(ids, (list, tuple)) and ids and
                                    isinstance(ids[0], str)):
            ids = self.to_tokens(ids)
        a = _lib.ids_array(ids)
        if a.ndim == 1:
            a = a[None, :]
        if a.ndim != 2 or a.size == 0:
            raise ValueError("ids: (batch, positions) or (positions,), got shape %s" % (a.shape,))
        return a

    # ---- hook names ----

    @property
    def hook_names(self):
        """Every hook name this model has, in forward order."""
        if self._names is None:
            self._names = _s2s_names(self) if self.encoder_decoder else all_hook_names(self)
        return list(self._names)

    def shape_of(self, name, batch=1, positions=1):
        """The array shape of hook `name` for ids of (batch, positions)."""
        self._handle()
        return resolve(self, name).shape(self, batch, positions)

    # ---- forwards ----

    def __call__(self, ids, decoder_input=None, return_type="logits", targets=None,
                 attention_mask=None):
        """The forward: logits (B, T, V) by default; return_type "loss" (the
        mean next-token loss, as model.loss), "both" or None. A sequence
        classifier (SPEC §16: n_labels > 0) returns its outputs (B, n_labels)
        instead, attention_mask (B, T) of 0/1 marking padding (taken as
        pad_token_id, as transformers pads). An encoder-decoder takes the
        source ids (B, S; padded with pad_token_id, which is masked) and the
        decoder's inputs (B, T), as HookedEncoderDecoder(input,
        decoder_input): logits (B, T, V); its loss needs targets (B, T)."""
        if self.encoder_decoder:
            return self._s2s(ids, decoder_input, return_type, targets, {})[0]
        if decoder_input is not None:
            raise ValueError("decoder_input: for an encoder-decoder (this model has one stack)")
        if self.n_labels:
            return self._classify(ids, attention_mask)
        if attention_mask is not None:
            raise ValueError("attention_mask: for a sequence classifier (this model has a "
                             "language-model head)")
        return self.run_with_hooks(ids, fwd_hooks=(), return_type=return_type, targets=targets)

    def test_prompt(self, prompt, answer=None, top=10, print_details=True):
        """What the model predicts after prompt (text, or ids) at its last
        position, as TransformerLens's test_prompt shows it (SPEC §21,
        `headscope predict`): the top ids, their tokens, logits and
        probabilities (ties: the lower id first), and with answer (a text's
        first token, or an id) its rank, logit and probability. Returns a
        dict; print_details prints it too."""
        if isinstance(prompt, str):
            ids = np.asarray(self.to_tokens(prompt), dtype=np.int32).reshape(-1)
        else:
            ids = np.ascontiguousarray(np.asarray(prompt, dtype=np.int32).reshape(-1))
        V = self.vocab_size
        ids_out = np.empty(V, dtype=np.int32)
        logits, probs = np.empty(V), np.empty(V)
        with self._lock:
            check(lib.hs_api_predict_top(self._handle(), _lib.i32_ptr(ids), ids.size, V,
                                         _lib.i32_ptr(ids_out),
                                         logits.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
                                         probs.ctypes.data_as(ctypes.POINTER(ctypes.c_double))))
        tok = self.tokenizer
        name = (lambda i: tok.str_tokens([int(i)])[0]) if tok else (lambda i: None)
        out = {"top": [{"id": int(i), "token": name(i), "logit": float(l), "prob": float(p)}
                       for i, l, p in zip(ids_out[:top], logits[:top], probs[:top])]}
        if answer is not None:
            if not isinstance(answer, (int, np.integer)) and tok is None:
                raise Error("answer as text needs the model's tokenizer: give its id")
            a = answer if isinstance(answer, (int, np.integer)) else int(
                np.asarray(tok.encode(answer, add_special=False)).reshape(-1)[0])
            rank = int(np.nonzero(ids_out == a)[0][0])
            out["answer"] = {"id": int(a), "token": name(a), "rank": rank + 1,
                             "logit": float(logits[rank]), "prob": float(probs[rank])}
        if print_details:
            for r, t in enumerate(out["top"], 1):
                print("Top %d: id %d %r logit %.4f prob %.4f" % (r, t["id"], t["token"],
                                                                  t["logit"], t["prob"]))
            if "answer" in out:
                a = out["answer"]
                print("Answer %r: rank %d, logit %.4f, prob %.4f" % (a["token"], a["rank"],
                                                                      a["logit"], a["prob"]))
        return out

    @property
    def n_labels(self):
        """The classification head's outputs (0: none)."""
        return self._int("n_labels")

    def _classify(self, ids, attention_mask):
        ids = self._ids(ids)
        B, T = ids.shape
        mask = None
        if attention_mask is not None:
            mask = np.ascontiguousarray(np.asarray(attention_mask), dtype=np.uint8)
            if mask.shape != (B, T):
                raise ValueError("attention_mask: shape %s, the ids' %s" % (mask.shape, (B, T)))
        out = np.empty((B, self.n_labels), dtype=self.dtype)
        with self._lock:
            check(lib.hs_api_classify(
                self._handle(), _lib.i32_ptr(ids),
                mask.ctypes.data_as(ctypes.POINTER(ctypes.c_ubyte)) if mask is not None else None,
                B, T, _lib.real_ptr(out)))
        return out

    def loss(self, ids, targets=None, per_token=False):
        """Mean next-token cross-entropy: position t predicts ids[:, t+1]
        (T-1 predictions per sequence, as TransformerLens's return_type
        "loss"), or with targets (B, T) position t predicts targets[:, t]
        (SPEC §4's batches: what the studies measure). per_token: the
        losses themselves, (B, T-1) or (B, T)."""
        return self.run_with_hooks(ids, fwd_hooks=(), return_type="loss", targets=targets,
                                   per_token=per_token)

    def run_with_cache(self, ids, names=None, names_filter=None, return_type="logits",
                       targets=None, decoder_input=None):
        """(logits, cache): the forward, keeping the activations named by
        `names` (a hook name, a list of them, or a function of a name; also
        as names_filter, TransformerLens's keyword; None: every hook of the
        model). Only what was asked for is copied, once, into arrays owned
        by the cache, while the forward runs: views into one block (holding
        one keeps the block; .copy() it to keep it alone). An encoder-decoder
        takes decoder_input as __call__ does; its hooks are the attention's
        q, k, v, z and pattern of each type (encoder.{l}.attn.hook_pattern,
        decoder.{l}.attn.hook_z, decoder.{l}.cross_attn.hook_pattern, ...)."""
        if self.encoder_decoder:
            wanted = _s2s_select(self, names if names is not None else names_filter)
            out, cache = self._s2s(ids, decoder_input, return_type, targets, wanted)
            return out, ActivationCache((n, cache[n]) for n in wanted)
        if decoder_input is not None:
            raise ValueError("decoder_input: for an encoder-decoder (this model has one stack)")
        ids = self._ids(ids)
        B, T = ids.shape
        wanted = select_names(self, names if names is not None else names_filter)
        cache = ActivationCache()
        kept = []      # (name, hook point, shape) of what the forward records
        derived = []   # names computed from the weights and the tokens
        for name in wanted:
            pt = resolve(self, name)
            if pt.derived:
                derived.append((name, pt))
            else:
                kept.append((name, pt, pt.shape(self, B, T)))
        records = []   # (site, layer, array)
        for (name, pt, _), a in zip(kept, self._arrays([shape for _, _, shape in kept])):
            records.append((pt.site, pt.layer, a))
            cache[name] = a
        out = self._run(ids, records, [], return_type, targets, False)
        for name, pt in derived:
            cache[name] = pt.compute(self, ids, cache)
        return out, ActivationCache((n, cache[n]) for n in wanted)

    # Blocks _arrays keeps for reuse: how many, and how many bytes at most.
    SPARE_BLOCKS = 8
    SPARE_BYTES = 1 << 30

    def _arrays(self, shapes):
        """Empty arrays of these shapes, views into one block, each starting
        on a 64-byte boundary. numpy asks for 2 MiB pages on blocks of 4 MiB
        and more (a cache of many smaller maps, 12 of 3 MiB at 1 x 256
        tokens of GPT-2 small, otherwise took a page fault per 4 KiB). A
        block of the same size that this model handed out before and that
        nobody holds any more (every view of it gone) serves again: a loop
        of forwards then writes into memory already in place instead of
        having the kernel clear fresh pages each call, which on a virtual
        machine cost a third of a GPT-2-small forward. The model keeps the
        last SPARE_BLOCKS blocks it made, of SPARE_BYTES in all at most
        (larger ones are not kept); close() lets them go."""
        item = np.dtype(self.dtype).itemsize
        align = 64 // item
        sizes = [int(np.prod(s)) for s in shapes]
        offsets, total = [], 0
        for n in sizes:
            offsets.append(total)
            total += -(-n // align) * align
        block = self._block(total + align)
        skip = (-block.ctypes.data % 64) // item
        return [block[skip + o:skip + o + n].reshape(s)
                for o, n, s in zip(offsets, sizes, shapes)]

    def _block(self, n):
        """A 1-d array of n elements: a kept one nobody else holds (only the
        list and getrefcount's argument refer to it), or a new one."""
        with self._blocks_lock:
            kept = self._blocks
            for i in range(len(kept)):
                if kept[i].size == n and sys.getrefcount(kept[i]) == 2:
                    kept.append(kept.pop(i))  # the most recently used last
                    return kept[-1]
            block = np.empty(n, dtype=self.dtype)
            if block.nbytes <= self.SPARE_BYTES:
                kept.append(block)
                while (len(kept) > self.SPARE_BLOCKS or
                       sum(b.nbytes for b in kept) > self.SPARE_BYTES):
                    kept.pop(0)
            return block

    def run_with_hooks(self, ids, fwd_hooks=(), return_type="logits", targets=None,
                       per_token=False, reset_hooks_end=True):
        """The forward with fwd_hooks = [(name, fn), ...] (name: a hook name
        or a function of a name). fn(array, hook) is called once per
        forward at that hook with the activation as a writable numpy view in
        TransformerLens's shape (hook: the name, a str, which also has
        .name and .layer()); the forward goes on with what fn leaves there
        or with what it returns (an array of the same shape). An exception
        in fn stops the forward and is raised here; the model stays usable.
        return_type: "logits" (default), "loss", "both" (logits, loss) or
        None."""
        del reset_hooks_end  # hooks never outlive the call
        if self.encoder_decoder:
            raise Error("run_with_hooks: hooks that change an encoder-decoder's forward are not "
                        "implemented; run_with_cache reads its activations")
        ids = self._ids(ids)
        hooks = []
        for entry in fwd_hooks:
            name, fn = entry
            for n in select_names(self, name):
                hooks.append((resolve(self, n), n, fn))
        return self._run(ids, [], hooks, return_type, targets, per_token)

    # ---- an encoder-decoder's forward ----

    def _s2s(self, src, dec, return_type, targets, wanted):
        """(out, {name: array}) of hs_api_s2s_forward: out as return_type asks,
        the arrays of `wanted` (name: (attn, layer, site))."""
        if return_type not in ("logits", "loss", "both", None):
            raise ValueError("return_type: 'logits', 'loss', 'both' or None, not %r"
                             % (return_type,))
        if dec is None:
            raise ValueError("an encoder-decoder needs decoder_input (B, T): its decoder's "
                             "inputs, [decoder_start_token_id] + the target[:-1]")
        src, dec = self._ids(src), self._ids(dec)
        (B, S), T = src.shape, dec.shape[1]
        if dec.shape[0] != B:
            raise ValueError("decoder_input: %d rows for %d sources" % (dec.shape[0], B))
        want_loss = return_type in ("loss", "both")
        if want_loss and targets is None:
            raise ValueError("an encoder-decoder's loss needs targets (B, T) (-1: left out)")
        tgt = _lib.ids_array(targets).reshape(B, T) if want_loss else None
        logits = (self._arrays([(B, T, self.vocab_size)])[0]
                  if return_type in ("logits", "both") else None)
        losses = np.empty((B, T), dtype=self.dtype) if want_loss else None
        names = list(wanted)
        shapes = [_s2s_shape(self, wanted[n], B, S, T) for n in names]
        arrays = self._arrays(shapes)
        k = len(names)
        ints = lambda vals: (ctypes.c_int * max(1, k))(*vals)
        dst = (P_real_t * max(1, k))(*[_lib.real_ptr(a) for a in arrays])
        sizes = (ctypes.c_size_t * max(1, k))(*[a.size for a in arrays])
        mean = ctypes.c_double()
        with self._lock:
            check(lib.hs_api_s2s_forward(
                self._handle(), _lib.i32_ptr(src), S, _lib.i32_ptr(dec), T, B,
                _lib.i32_ptr(tgt) if tgt is not None else None,
                _lib.real_ptr(logits) if logits is not None else None,
                _lib.real_ptr(losses) if losses is not None else None, ctypes.byref(mean),
                ints([wanted[n][0] for n in names]), ints([wanted[n][1] for n in names]),
                ints([wanted[n][2] for n in names]), dst, sizes, k))
        cache = dict(zip(names, arrays))
        out = {"logits": logits, "loss": mean.value, "both": (logits, mean.value),
               None: None}[return_type]
        return out, cache

    # ---- the one forward ----

    def _run(self, ids, records, hooks, return_type, targets, per_token):
        if return_type not in ("logits", "loss", "both", None):
            raise ValueError("return_type: 'logits', 'loss', 'both' or None, not %r"
                             % (return_type,))
        B, T = ids.shape
        want_loss = return_type in ("loss", "both")
        tgt = None
        if want_loss:
            if targets is not None:
                tgt = _lib.ids_array(targets).reshape(B, T)
            else:  # next-token targets; the last position's is left out of the loss
                if T < 2:
                    raise ValueError("a loss needs at least 2 positions (or targets)")
                tgt = np.zeros((B, T), dtype=np.int32)
                tgt[:, :-1] = ids[:, 1:]
        logits = (self._arrays([(B, T, self.vocab_size)])[0]
                  if return_type in ("logits", "both") else None)
        losses = np.empty((B, T), dtype=self.dtype) if want_loss else None
        mean = ctypes.c_double()
        errors = []
        keep = []  # the C callbacks, alive until the forward returns
        if self._running == threading.get_ident():
            raise Error("a hook cannot run the model it hooks (its forward is running)")
        with self._lock:
            f = self._fwd
            if not f:
                raise Error("the model is closed")
            self._running = threading.get_ident()
            try:
                # hook_embed and hook_pos_embed of learned positions first:
                # they make resid_pre 0, before its own hooks run
                derived = [(pt, HookName(n, pt), fn) for pt, n, fn in hooks if pt.derived]
                if derived:
                    keep.append(embed_trampoline(self, ids, derived, errors))
                    check(lib.hs_api_forward_hook(f, derived[0][0].site, 0, keep[-1], None))
                for pt, name, fn in hooks:
                    if not pt.derived:
                        keep.append(pt.trampoline(self, ids, HookName(name, pt), fn, errors))
                        check(lib.hs_api_forward_hook(f, pt.site, pt.layer, keep[-1], None))
                for site, layer, a in records:
                    check(lib.hs_api_forward_record(f, site, layer, _lib.real_ptr(a), a.size))
                rc = lib.hs_api_forward_run(
                    f, _lib.i32_ptr(ids), B, T, _lib.i32_ptr(tgt) if tgt is not None else None,
                    _lib.real_ptr(logits) if logits is not None else None,
                    _lib.real_ptr(losses) if losses is not None else None, ctypes.byref(mean))
            finally:
                lib.hs_api_forward_clear(f)
                self._running = None
        if errors:
            raise errors[0]
        check(rc)
        loss = None
        if want_loss:
            lt = losses if targets is not None else losses[:, :-1]
            if per_token:
                loss = lt.copy() if targets is None else lt
            else:
                loss = mean.value if targets is not None else float(
                    lt.astype(np.float64).sum() / lt.size)
        if return_type == "logits":
            return logits
        if return_type == "loss":
            return loss
        if return_type == "both":
            return logits, loss
        return None


# ---- encoder-decoders' hook names (TransformerLens's HookedEncoderDecoder) ----

_S2S_SITES = {"q": 3, "k": 4, "v": 5, "z": 6, "pattern": 7}  # model/hooks.h's hs_site
_S2S_NAME = re.compile(r"^(encoder|decoder)\.(\d+)\.(attn|cross_attn)\.hook_(q|k|v|z|pattern)$")
P_real_t = _lib.P_real


def _s2s_names(m):
    """Every hook name of encoder-decoder m, in forward order."""
    out = []
    for l in range(m.n_encoder_layers):
        out += ["encoder.%d.attn.hook_%s" % (l, s) for s in _S2S_SITES]
    for l in range(m.n_decoder_layers):
        for kind in ("attn", "cross_attn"):
            out += ["decoder.%d.%s.hook_%s" % (l, kind, s) for s in _S2S_SITES]
    return out


def _s2s_select(m, spec):
    """{name: (attn type 1 enc / 2 dec / 3 cross, layer, site)} of spec: a
    name, a list of names, a function of a name, or None (every hook)."""
    every = _s2s_names(m)
    if spec is None:
        names = every
    elif callable(spec):
        names = [n for n in every if spec(n)]
    else:
        names = [spec] if isinstance(spec, str) else list(spec)
    out = {}
    for n in names:
        g = _S2S_NAME.match(n)
        if not g or n not in every:
            raise KeyError("%r is not a hook of this encoder-decoder (%s ... %s)"
                           % (n, every[0], every[-1]))
        attn = 1 if g.group(1) == "encoder" else 3 if g.group(3) == "cross_attn" else 2
        out[n] = (attn, int(g.group(2)), _S2S_SITES[g.group(4)])
    return out


def _s2s_shape(m, key, B, S, T):
    """The array shape of hook (attn, layer, site) for B pairs of S + T."""
    attn, layer, site = key
    l = layer if attn == 1 else m.n_encoder_layers + layer
    H, G = m.heads_per_layer[l], m.kv_heads_per_layer[l]
    rows = S if attn == 1 else T
    keys = T if attn == 2 else S
    if site == _S2S_SITES["pattern"]:
        return (B, H, rows, keys)
    if site in (_S2S_SITES["k"], _S2S_SITES["v"]):
        return (B, keys, G, m.d_head)
    return (B, rows, H, m.d_head)
