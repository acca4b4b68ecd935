"""Hugging Face tokenizers (tokenizer.json with a BPE or WordPiece model, or
GPT-2's vocab.json + merges.txt), encoded as Hugging Face tokenizer(text)
does, and SentencePiece .model files, encoded as sentencepiece's encode."""

import ctypes

import numpy as np

from . import _lib
from ._lib import check, enc, lib


class Tokenizer:
    """Tokenizer.open(path): a tokenizer.json file, a directory holding one,
    a directory with vocab.json + merges.txt, a SentencePiece .model file
    (or a directory with tokenizer.model or spiece.model), or a Marian
    directory (source.spm, target.spm, vocab.json: .target its target side)."""

    def __init__(self, handle, path, owner=None):
        self._h = ctypes.c_void_p(handle)
        self.path = path
        self._owner = owner  # a target side: the source's handle owns (and frees) it
        self.vocab_size = lib.hs_tokenizer_vocab_size(self._h)

    @classmethod
    def open(cls, path):
        h = ctypes.c_void_p()
        check(lib.hs_tokenizer_open(ctypes.byref(h), enc(path)))
        return cls(h.value, path)

    def close(self):
        if self._h and self._owner is None:
            lib.hs_tokenizer_free(self._h)
        self._h = ctypes.c_void_p()

    @property
    def target(self):
        """The tokenizer of an encoder-decoder's targets: a Marian
        directory's (source.spm, target.spm, vocab.json) target.spm side;
        every other tokenizer itself."""
        h = lib.hs_tokenizer_target(self._h)
        return self if h == self._h.value else Tokenizer(h, self.path, owner=self)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return "<headscope.Tokenizer %s: %d ids>" % (self.path, self.vocab_size)

    def encode(self, text, add_special=True):
        """text -> int32 ids; add_special: the post-processor's special
        tokens (Hugging Face add_special_tokens=True)."""
        b = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        ids, n = _lib.P_i32(), ctypes.c_size_t()
        check(lib.hs_tokenizer_encode(self._h, b, len(b), int(bool(add_special)),
                                      ctypes.byref(ids), ctypes.byref(n)))
        try:
            return np.ctypeslib.as_array(ids, shape=(n.value,)).copy() if n.value else \
                np.zeros(0, dtype=np.int32)
        finally:
            lib.hs_api_free(ctypes.cast(ids, ctypes.c_void_p))

    def decode(self, ids, skip_special=False):
        a = _lib.ids_array(ids).reshape(-1)
        return _lib.take_text(lib.hs_tokenizer_decode(self._h, _lib.i32_ptr(a), a.size,
                                                      int(bool(skip_special))))

    def token_text(self, id):
        """The display string of one id (GPT-2's "Ġthe" shows as " the")."""
        buf = ctypes.create_string_buffer(1024)
        check(lib.hs_tokenizer_token_text(self._h, int(id), buf, len(buf)))
        return buf.value.decode("utf-8", "replace")

    def str_tokens(self, ids):
        return [self.token_text(int(i)) for i in np.asarray(ids).reshape(-1)]
