"""SentencePiece model files and Unigram tokenizer.json files (SPEC §17).

.model files against sentencepiece itself
(Debian's python3-sentencepiece 0.1.97, scripts/setup): Unigram and BPE
models trained here at several vocabulary sizes and normalisation settings
(nmt_nfkc, identity, nfkc_cf, no dummy prefix, extra whitespace kept,
user-defined and control pieces, byte fallback) encode and decode as
sentencepiece does text with accents, CJK, emoji, digits and runs of
whitespace, a document, and seeded random texts; a directory's
tokenizer.model / spiece.model is found; files whose protobuf is truncated,
lies about its sizes or breaks sentencepiece's rules are refused naming the
file and the field.

tokenizer.json files with a Unigram model, made from the trained Unigram
models as transformers' converters write them (T5's: Precompiled,
WhitespaceSplit, Metaspace, `</s>` after; XLM-R's: Precompiled and
Replace(" {2,}", " "), Metaspace, `<s> ... </s>`; the newer one with
Strip(right)), against Hugging Face `tokenizers` itself (its Rust library
through npm's `tokenizers`, tests/hf_tokenizers_oracle.js): ids with and
without the special tokens and decoded text.

Decoding is compared on ids without the <0x00> byte piece: the C decoder
returns a NUL-terminated string (tokenizer.h), so a decoded NUL ends it."""

import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

from util import HS, ROOT, hs

sys.path.insert(0, os.path.join(ROOT, "tests"))
from gen_spm_fixtures import charsmap_of, hf_json  # noqa: E402  (the converter, shared)

try:
    import sentencepiece as spm
except ImportError:  # scripts/setup installs python3-sentencepiece
    spm = None

SAMPLES = [
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u2014 d\u00e9j\u00e0 vu, \u00c5ngstr\u00f6m, fa\u00e7ade; "
    "Z\u00fcrich Stra\u00dfe.",
    "\u6771\u4eac\u306f\u65e5\u672c\u306e\u9996\u90fd\u3067\u3059\u3002\u4e2d\u6587\u6d4b\u8bd5\uff0c"
    "\u6c49\u5b57\u5f88\u591a\u3002\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8.",
    "Emoji: \U0001F600\U0001F389\U0001F44D\U0001F3FD \U0001F468\u200d\U0001F469\u200d\U0001F467 "
    "\u2764\ufe0f and flags \U0001F1EB\U0001F1F7.",
    "Digits 0123456789 3.14159 1,000,000 and \uff12\uff10\uff12\uff16\u5e74 full-width "
    "\uff21\uff22\uff23.",
    "Runs   of    spaces\tand\ttabs\n\nnew lines  end.   ",
    "\ufb01 ligature, \u216b roman, \u3300 squared, \uff76\uff80\uff76\uff85 half-width, "
    "x\u00b2 and H\u2082O.",
]
EDGES = ["", " ", "   ", "a", " hello", "hello ", "  two  spaces  ", "\t\ttab", "\n",
         "<mask> and @@ and <ctl> and <s> </s> <unk>", "ab abab <mask><mask>", "x" * 100,
         "\u65e5\u672c\u8a9e" * 20, "\u3000full\u3000width", "zero\u200bwidth",
         "e\u0301 a\u0308", "\u2581already \u2581\u2581escaped", "I\u0307stanbul \u00df \u1e9e",
         "\x7f\x01control", "a\u00a0b", "mixed 123abc456 def", "end with space "]

# name: the trainer's options (input, model_prefix added)
MODELS = {
    "uni400": dict(model_type="unigram", vocab_size=400),
    "uni1500id": dict(model_type="unigram", vocab_size=1500, normalization_rule_name="identity"),
    "uni800cf": dict(model_type="unigram", vocab_size=800, normalization_rule_name="nfkc_cf",
                     add_dummy_prefix=False),
    "uni800ws": dict(model_type="unigram", vocab_size=800, remove_extra_whitespaces=False,
                     user_defined_symbols=["<mask>", "@@"], control_symbols=["<ctl>"]),
    "uni600bf": dict(model_type="unigram", vocab_size=600, byte_fallback=True,
                     character_coverage=0.98),
    "bpe300": dict(model_type="bpe", vocab_size=300),
    "bpe1000llama": dict(model_type="bpe", vocab_size=1000, byte_fallback=True, split_digits=True,
                         normalization_rule_name="identity", remove_extra_whitespaces=False,
                         character_coverage=0.99),
    "bpe1200ud": dict(model_type="bpe", vocab_size=1200, user_defined_symbols=["<mask>", "ab"],
                      add_dummy_prefix=False, normalization_rule_name="nfkc_cf"),
    # pieces across words ("e\u2581t"): merged over the whole text, not word by word
    "bpe600span": dict(model_type="bpe", vocab_size=600, split_by_whitespace=False),
}


def corpus():
    """The repository's own prose and the samples (tests make their data)."""
    text = []
    for name in ["README.md"] + sorted(os.listdir(os.path.join(ROOT, "docs"))):
        path = os.path.join(ROOT, name) if name == "README.md" else os.path.join(ROOT, "docs", name)
        if path.endswith(".md"):
            with open(path, encoding="utf-8") as f:
                text.append(f.read())
    return "".join(text)[:60000] + ("\n".join(SAMPLES) + "\n") * 20


def train(tmp, name, **kw):
    """The .model file of the trainer's options kw, trained on corpus() in tmp."""
    text = os.path.join(tmp, "train.txt")
    if not os.path.exists(text):
        with open(text, "w", encoding="utf-8") as f:
            f.write(corpus())
    prefix = os.path.join(tmp, name)
    spm.SentencePieceTrainer.train(input=text, model_prefix=prefix, minloglevel=2, num_threads=2,
                                   **kw)
    return prefix + ".model"


def random_texts(rng, alphabet, n):
    out = []
    for _ in range(n):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
        if rng.random() < 0.3:  # code points from every plane's common ranges
            s += "".join(chr(rng.choice([rng.randrange(0x20, 0x7f), rng.randrange(0xa0, 0x3000),
                                         rng.randrange(0x3000, 0xd7ff),
                                         rng.randrange(0xe000, 0xfffe),
                                         rng.randrange(0x10000, 0x1fbff)]))
                         for _ in range(rng.randrange(1, 10)))
        out.append(s)
    return out


NPM = os.environ.get("HS_NPM_DIR") or os.path.join(ROOT, "build", "npm", "node_modules")
HAVE_HF = os.path.isdir(os.path.join(NPM, "tokenizers")) and shutil.which("node")


# ---- a protobuf writer for hand-made files ----

def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7f
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def field(num, wire, payload):
    key = varint(num << 3 | wire)
    if wire == 2:
        return key + varint(len(payload)) + payload
    return key + payload


def piece(text, score=0.0, kind=None):
    b = field(1, 2, text.encode()) + field(2, 5, struct.pack("<f", score))
    return field(1, 2, b + (field(3, 0, varint(kind)) if kind is not None else b""))


def model(pieces, trainer=b"", normalizer=b""):
    return b"".join(pieces) + field(2, 2, trainer) + field(3, 2, normalizer)


# a Unigram model: <unk>, <s> (control), and a few pieces
BASE = [piece("<unk>", 0, 2), piece("<s>", 0, 3), piece("\u2581a", -1.0), piece("b", -2.0),
        piece("\u2581ab", -2.5), piece("a", -3.0), piece("\u2581", -4.0)]


@unittest.skipIf(spm is None, "python3-sentencepiece is not installed (scripts/setup)")
class SentencePieceModels(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="hs_py_")
        cls.doc = corpus()[:20000]
        cls.paths = {name: train(cls.tmp.name, name, **kw) for name, kw in MODELS.items()}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def pair(self, name):
        return (spm.SentencePieceProcessor(model_file=self.paths[name]),
                hs.Tokenizer.open(self.paths[name]))

    def check_texts(self, name, texts):
        sp, tok = self.pair(name)
        zero = sp.piece_to_id("<0x00>") if sp.piece_to_id("<0x00>") != sp.unk_id() else -1
        for x in texts:
            want = sp.encode(x)
            got = tok.encode(x, add_special=False).tolist()
            self.assertEqual(got, want, "%s: %r: %s" % (name, x[:60], sp.encode(x, out_type=str)))
            self.assertEqual(tok.encode(x).tolist(), want, "a .model file adds no specials")
            if zero not in want:
                self.assertEqual(tok.decode(np.array(got, dtype=np.int32)), sp.decode(want),
                                 "%s: decode %r" % (name, x[:60]))

    def test_samples_and_edges_equal_sentencepiece(self):
        for name in MODELS:
            self.check_texts(name, SAMPLES + EDGES + ["\n".join(SAMPLES)])

    def test_a_document_equals_sentencepiece(self):
        for name in MODELS:
            self.check_texts(name, [self.doc])

    def test_random_texts_equal_sentencepiece(self):
        rng = random.Random(7)
        alphabet = list("".join(SAMPLES)) + [" ", "  ", "\t", "\n", "\u3000", "\u00a0", "\u2581",
                                             "<mask>", "@@", "ab", "<ctl>", "<s>", "e\u0301"]
        for name in MODELS:
            self.check_texts(name, random_texts(rng, alphabet, 200))

    def test_random_ids_decode_as_sentencepiece(self):
        rng = random.Random(11)
        for name in MODELS:
            sp, tok = self.pair(name)
            n = sp.get_piece_size()
            zero = sp.piece_to_id("<0x00>")
            for _ in range(300):
                hi = n if rng.random() < 0.7 else min(n, 262)  # byte pieces often
                ids = [rng.randrange(hi) for _ in range(rng.randrange(1, 12))]
                ids = [i for i in ids if i != zero or zero == sp.unk_id()]
                self.assertEqual(tok.decode(np.array(ids, dtype=np.int32)), sp.decode(ids),
                                 "%s: %s" % (name, [sp.id_to_piece(i) for i in ids]))

    def test_vocabulary_and_token_text(self):
        sp, tok = self.pair("uni400")
        self.assertEqual(tok.vocab_size, sp.get_piece_size())
        for i in range(sp.get_piece_size()):
            p = sp.id_to_piece(i)
            want = p if sp.is_control(i) or sp.is_unknown(i) else p.replace("\u2581", " ")
            self.assertEqual(tok.token_text(i), want, i)
        sp, tok = self.pair("bpe1000llama")
        self.assertEqual(tok.token_text(sp.piece_to_id("<0x41>")), "A")
        self.assertEqual(tok.token_text(sp.piece_to_id("<0xE3>")), "<0xE3>")
        with self.assertRaises(hs.Error):
            tok.decode(np.array([sp.get_piece_size()], dtype=np.int32))

    def test_a_directory_holding_a_model_file(self):
        sp = spm.SentencePieceProcessor(model_file=self.paths["uni800ws"])
        for fname in ["tokenizer.model", "spiece.model"]:
            with tempfile.TemporaryDirectory(prefix="hs_py_") as d:
                shutil.copy(self.paths["uni800ws"], os.path.join(d, fname))
                tok = hs.Tokenizer.open(d)
                self.assertEqual(tok.encode(SAMPLES[0]).tolist(), sp.encode(SAMPLES[0]), fname)
        # ids that are not the model's (Marian's vocab.json, fairseq's shift):
        # the directory is refused, the file itself read as sentencepiece's
        for fname, why in [("source.spm", "Marian"), ("sentencepiece.bpe.model", "fairseq")]:
            with tempfile.TemporaryDirectory(prefix="hs_py_") as d:
                path = os.path.join(d, fname)
                shutil.copy(self.paths["uni800ws"], path)
                with self.assertRaisesRegex(hs.Error, why):
                    hs.Tokenizer.open(d)
                self.assertEqual(hs.Tokenizer.open(path).encode(SAMPLES[0]).tolist(),
                                 sp.encode(SAMPLES[0]))
        with tempfile.TemporaryDirectory(prefix="hs_py_") as d:  # a tokenizer.json is preferred: a broken one is read, and refused
            shutil.copy(self.paths["uni400"], os.path.join(d, "tokenizer.model"))
            with open(os.path.join(d, "tokenizer.json"), "w") as f:
                f.write("{")
            with self.assertRaisesRegex(hs.Error, "tokenizer.json"):
                hs.Tokenizer.open(d)

    def test_a_hand_made_model_equals_sentencepiece(self):
        # UNIGRAM, BPE, and BPE with an UNUSED piece (split back as it was merged)
        for trainer, extra in [(field(3, 0, varint(1)), []), (field(3, 0, varint(2)), []),
                               (field(3, 0, varint(2)), [piece("ba", -0.5, 5),
                                                         piece("\u2581aba", -0.2)])]:
            data = model(BASE + extra, trainer)
            sp = spm.SentencePieceProcessor(model_proto=data)
            with tempfile.TemporaryDirectory(prefix="hs_py_") as d:
                path = os.path.join(d, "m.model")
                with open(path, "wb") as f:
                    f.write(data)
                tok = hs.Tokenizer.open(path)
                for x in ["ab", "a b ab", "ba", "abc", "  a  ", "<s>", "aba ba ab aba"]:
                    self.assertEqual(tok.encode(x).tolist(), sp.encode(x), (trainer, x))
                    self.assertEqual(tok.decode(np.array(sp.encode(x), dtype=np.int32)),
                                     sp.decode(sp.encode(x)))

    def test_broken_files_name_the_file_and_field(self):
        good = model(BASE, field(3, 0, varint(1)))
        bytes256 = [piece("<0x%02X>" % b, 0, 6) for b in range(256)]
        cases = {
            "truncated": (good[:len(good) // 2], r"pieces\[\d+\]|the model"),
            "a length past the end": (field(1, 2, b"\x0a\x7f" + b"a" * 3),
                                      r"pieces\[0\]\.piece: a length of 127 bytes where 3"),
            "a score as a varint": (model([piece("<unk>", 0, 2), field(1, 2, field(1, 2, b"x") +
                                                                       field(2, 0, b"\x01"))]),
                                    r"pieces\[1\]\.score: wire type 0 where 5"),
            "no unknown piece": (model([piece("a", -1.0)]), "no piece of type UNKNOWN"),
            "two unknown pieces": (model([piece("<unk>", 0, 2), piece("<u>", 0, 2)]),
                                   r"pieces\[1\]\.type: a second unknown"),
            "a piece twice": (model(BASE + [piece("b", -5.0)]), r"pieces\[7\]\.piece: \"b\" is"),
            "an empty piece": (model(BASE + [piece("", -5.0)]), r"pieces\[7\]\.piece: empty"),
            "a piece without its text": (model(BASE + [field(1, 2, field(2, 5, b"\0\0\0\0"))]),
                                         r"pieces\[7\]\.piece: empty"),
            "a type past BYTE": (model(BASE + [piece("c", -5.0, 9)]), r"pieces\[7\]\.type"),
            "a byte piece without byte_fallback": (model(BASE + [piece("<0x41>", 0, 6)]),
                                                   "byte_fallback is false"),
            "byte_fallback with 255 byte pieces": (model(BASE + bytes256[:255],
                                                         field(35, 0, varint(1))), "not 256"),
            "a WORD model": (model(BASE, field(3, 0, varint(3))), "trainer_spec.model_type: 3"),
            "whitespace as a suffix": (model(BASE, field(24, 0, varint(1))),
                                       "treat_whitespace_as_suffix"),
            "a charsmap shorter than its trie": (model(BASE, b"", field(2, 2, struct.pack(
                "<I", 64) + b"\0" * 8)), "precompiled_charsmap: a trie of 64 bytes"),
            "a charsmap without its NUL": (model(BASE, b"", field(2, 2, struct.pack(
                "<I", 4) + b"\0\0\0\0ab")), "precompiled_charsmap: .* NUL"),
            "a denormalizer": (model(BASE) + field(5, 2, field(2, 2, b"\x04\0\0\0\0\0\0\0a\0")),
                               "denormalizer_spec"),
            "a group": (good + varint(9 << 3 | 3), "wire type"),
            "no pieces": (b"", "no pieces"),
        }
        with tempfile.TemporaryDirectory(prefix="hs_py_") as d:
            path = os.path.join(d, "bad.model")
            for what, (data, pattern) in cases.items():
                with open(path, "wb") as f:
                    f.write(data)
                with self.assertRaisesRegex(hs.Error, pattern, msg=what) as cm:
                    hs.Tokenizer.open(path)
                self.assertIn(path, str(cm.exception), what)


@unittest.skipIf(spm is None or not HAVE_HF,
                 "python3-sentencepiece or npm's tokenizers is not installed (scripts/setup)")
class UnigramTokenizerJson(unittest.TestCase):
    """Unigram tokenizer.json files against HF tokenizers' Rust library."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="hs_py_")
        cls.files = []
        for name, kw, style in [("t5", dict(vocab_size=600), "t5"),
                                ("xlmr", dict(vocab_size=1000, character_coverage=0.98), "xlmr"),
                                ("cf", dict(vocab_size=500, normalization_rule_name="nfkc_cf"),
                                 "strip")]:
            path = train(cls.tmp.name, name, model_type="unigram", **kw)
            sp = spm.SentencePieceProcessor(model_file=path)
            with open(path[:-len(".model")] + ".json", "w", encoding="utf-8") as f:
                json.dump(hf_json(sp, charsmap_of(path), style), f)
            cls.files.append((name, path[:-len(".model")] + ".json", sp))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def oracle(self, path, texts, decode):
        req = os.path.join(self.tmp.name, "req.json")
        with open(req, "w", encoding="utf-8") as f:
            json.dump({"tokenizer": path, "texts": texts, "decode": decode}, f)
        out = subprocess.run(["node", os.path.join(ROOT, "tests", "hf_tokenizers_oracle.js"), NPM,
                              req], capture_output=True, text=True, check=True)
        return json.loads(out.stdout)

    def test_ids_and_decoding_equal_hf_tokenizers(self):
        rng = random.Random(5)
        alphabet = list("".join(SAMPLES)) + [" ", "  ", "\t", "\n", "\u3000", "\u00a0",
                                             "\u2581", "e\u0301", "\ufb01", "\u2460"]
        texts = SAMPLES + EDGES + ["\n".join(SAMPLES), corpus()[:8000]] + \
            random_texts(rng, alphabet, 300)
        for name, path, sp in self.files:
            tok = hs.Tokenizer.open(path)
            n = sp.get_piece_size()
            ids = [[rng.randrange(n) for _ in range(rng.randrange(1, 10))] for _ in range(100)]
            want = self.oracle(path, texts, ids)
            for x, plain, special in zip(texts, want["plain"], want["special"]):
                self.assertEqual(tok.encode(x, add_special=False).tolist(), plain,
                                 "%s: %r" % (name, x[:60]))
                self.assertEqual(tok.encode(x).tolist(), special, "%s: %r" % (name, x[:60]))
            for i, d in zip(ids, want["decoded"]):
                self.assertEqual(tok.decode(np.array(i, dtype=np.int32)), d, "%s: %s" % (name, i))
            # where HF and sentencepiece agree (text without trailing
            # whitespace), the file equals the .model it was made from
            self.assertEqual(tok.encode(SAMPLES[0], add_special=False).tolist(),
                             sp.encode(SAMPLES[0]))

    def test_unigram_refusals_name_the_field(self):
        base = {"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["a", -1.0]]}}
        cases = [({"vocab": []}, "model.vocab: a non-empty array"),
                 ({"vocab": [["<unk>", 0.0], ["a"]]}, r"model.vocab\[1\]: \[piece, score\]"),
                 ({"vocab": [["<unk>", 0.0], ["", -1.0]]}, r"model.vocab\[1\]"),
                 ({"vocab": [["<unk>", 0.0], ["a", -1.0], ["a", -2.0]]},
                  r"model.vocab\[2\]: a piece that model.vocab holds twice"),
                 ({"unk_id": 5}, "model.unk_id"),
                 ({"unk_id": "0"}, "model.unk_id")]
        with tempfile.TemporaryDirectory(prefix="hs_py_") as d:
            path = os.path.join(d, "tokenizer.json")
            for change, pattern in cases:
                doc = json.loads(json.dumps(base))
                doc["model"].update(change)
                with open(path, "w") as f:
                    json.dump(doc, f)
                with self.assertRaisesRegex(hs.Error, pattern, msg=str(change)):
                    hs.Tokenizer.open(path)
            for norm, pattern in [({"type": "Precompiled", "precompiled_charsmap": "!!"},
                                   "precompiled_charsmap: standard base64"),
                                  ({"type": "Precompiled", "precompiled_charsmap": "AAAA"},
                                   "precompiled_charsmap: 3 bytes")]:
                doc = dict(base, normalizer=norm)
                with open(path, "w") as f:
                    json.dump(doc, f)
                with self.assertRaisesRegex(hs.Error, pattern):
                    hs.Tokenizer.open(path)
            doc = dict(base)  # unk_id null: an uncovered character is an error naming the model
            doc["model"] = dict(base["model"], unk_id=None)
            with open(path, "w") as f:
                json.dump(doc, f)
            tok = hs.Tokenizer.open(path)
            self.assertEqual(tok.encode("aa").tolist(), [1, 1])
            with self.assertRaisesRegex(hs.Error, "model \\(Unigram\\).*no unk_id"):
                tok.encode("ab")


if __name__ == "__main__":
    unittest.main()


# ---- Marian: source.spm + target.spm + vocab.json (SPEC §17) ----

class MarianOracle:
    """transformers' MarianTokenizer, written from its definition over
    sentencepiece itself: a leading ">>xx<<" language code kept as a token,
    every such code removed from the text, the side's model's pieces mapped
    through vocab.json (<unk> for a piece it lacks), </s> appended; decoding
    with skip_special_tokens: the pieces through the side's decode_pieces,
    U+2581 a space, stripped."""
    CODE = __import__("re").compile(">>.+<<")

    def __init__(self, source, target, vocab):
        self.sp = {"source": spm.SentencePieceProcessor(model_file=source),
                   "target": spm.SentencePieceProcessor(model_file=target)}
        self.vocab = vocab
        self.pieces = {i: p for p, i in vocab.items()}

    def encode(self, text, side):
        m = self.CODE.match(text)
        code = [m.group(0)] if m else []
        text = self.CODE.sub("", text)
        pieces = code + self.sp[side].encode(text, out_type=str)
        return [self.vocab.get(p, self.vocab["<unk>"]) for p in pieces] + [self.vocab["</s>"]]

    def decode(self, ids, side):
        special = {self.vocab[p] for p in ("</s>", "<unk>", "<pad>")}
        pieces = [self.pieces[i] for i in ids if i not in special]
        return self.sp[side].decode_pieces(pieces).replace("\u2581", " ").strip()


@unittest.skipIf(spm is None, "python3-sentencepiece is not installed (scripts/setup)")
class MarianDirectories(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="hs_marian_")
        d = cls.dir = os.path.join(cls.tmp.name, "opus")
        os.makedirs(d)
        text = corpus()
        lines = text.split("\n")
        # a source and a target model of their own: the target's corpus the
        # source's lines with their words reversed
        tgt_text = "\n".join(" ".join(l.split()[::-1]) for l in lines)
        with open(os.path.join(cls.tmp.name, "tgt.txt"), "w", encoding="utf-8") as f:
            f.write(tgt_text)
        src = train(cls.tmp.name, "src", model_type="unigram", vocab_size=500)
        spm.SentencePieceTrainer.train(input=os.path.join(cls.tmp.name, "tgt.txt"),
                                       model_prefix=os.path.join(cls.tmp.name, "tgt"),
                                       model_type="bpe", vocab_size=400, minloglevel=2)
        shutil.copy(src, os.path.join(d, "source.spm"))
        shutil.copy(os.path.join(cls.tmp.name, "tgt.model"), os.path.join(d, "target.spm"))
        # vocab.json as Marian's: </s>, <unk>, the pieces of both, a language
        # code, <pad> last; a few source pieces left out (<unk> for them)
        pieces = ["</s>", "<unk>"]
        for path in (src, os.path.join(cls.tmp.name, "tgt.model")):
            sp = spm.SentencePieceProcessor(model_file=path)
            for i in range(sp.get_piece_size()):
                p = sp.id_to_piece(i)
                if p not in pieces and p not in ("<s>", "</s>", "<unk>") and i % 97 != 5:
                    pieces.append(p)
        pieces += [">>de<<", "<pad>"]
        cls.vocab = {p: i for i, p in enumerate(pieces)}
        with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
            json.dump(cls.vocab, f, ensure_ascii=False)
        cls.oracle = MarianOracle(os.path.join(d, "source.spm"), os.path.join(d, "target.spm"),
                                  cls.vocab)
        cls.texts = SAMPLES + EDGES + [">>de<< Hello world.", ">>de<<x<< y", "a >>fr<< b",
                                       ">>de<<\n>>en<< two lines", ">><< none", ">>a<<"] + \
            random_texts(random.Random(5), "abcdefghij klmn\u00e9\u6771", 150)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_sources_and_targets_encode_as_marian(self):
        tok = hs.Tokenizer.open(self.dir)
        self.assertEqual(tok.vocab_size, len(self.vocab))
        tgt = tok.target
        self.assertIsNot(tgt, tok)
        for x in self.texts:
            self.assertEqual(tok.encode(x).tolist(), self.oracle.encode(x, "source"), repr(x))
            self.assertEqual(tgt.encode(x).tolist(), self.oracle.encode(x, "target"), repr(x))
            self.assertEqual(tok.encode(x, add_special=False).tolist(),
                             self.oracle.encode(x, "source")[:-1], repr(x))

    def test_targets_decode_as_marian(self):
        tgt = hs.Tokenizer.open(self.dir).target
        rng = random.Random(9)
        ids = [v for p, v in self.vocab.items() if p != ">>de<<"]
        for x in self.texts[:40]:
            e = self.oracle.encode(x, "target")
            self.assertEqual(tgt.decode(e, skip_special=True), self.oracle.decode(e, "target"),
                             repr(x))
        for _ in range(100):
            e = [rng.choice(ids) for _ in range(rng.randrange(0, 12))]
            got = tgt.decode(np.array(e, dtype=np.int32), skip_special=True)
            self.assertEqual(got, self.oracle.decode(e, "target"), e)

    def test_pairs_use_the_source_and_the_target_model(self):
        """eval --pairs of text pairs = of the oracle's ids (sources by
        source.spm, targets by target.spm), and generate --source's text =
        the oracle's decoding of its new ids."""
        d = os.path.join(self.tmp.name, "model")
        shutil.copytree(self.dir, d)
        V = len(self.vocab)
        with open(os.path.join(ROOT, "tests", "fixtures", "seq2seq", "marian", "config.json")) as f:
            cfg = json.load(f)
        cfg.update(vocab_size=V, decoder_vocab_size=V, pad_token_id=self.vocab["<pad>"],
                   decoder_start_token_id=self.vocab["<pad>"], eos_token_id=self.vocab["</s>"],
                   max_position_embeddings=64, bad_words_ids=[[self.vocab["<pad>"]]])
        with open(os.path.join(self.tmp.name, "config.json"), "w") as f:
            json.dump(cfg, f)
        src = ["the quick brown fox", ">>de<< jumps over", "caf\u00e9 \u6771 12"]
        tgt = ["fox brown quick the", "over jumps", "12 \u6771 caf\u00e9"]
        text = os.path.join(self.tmp.name, "text.jsonl")
        ids = os.path.join(self.tmp.name, "ids.jsonl")
        with open(text, "w") as f:
            f.writelines(json.dumps({"source": a, "target": b}) + "\n" for a, b in zip(src, tgt))
        with open(ids, "w") as f:
            f.writelines(json.dumps({"source_ids": self.oracle.encode(a, "source"),
                                     "target_ids": self.oracle.encode(b, "target")}) + "\n"
                         for a, b in zip(src, tgt))
        run = lambda *a: subprocess.run([HS, *a], capture_output=True, text=True)
        r = run("train", "--config", os.path.join(self.tmp.name, "config.json"), "--pairs", ids,
                "--out", d, "--steps", "2", "--batch", "3", "--seed", "3", "--force")
        self.assertEqual(r.returncode, 0, r.stderr)
        losses = []
        for pairs in (text, ids):
            r = run("eval", "--model", d, "--pairs", pairs, "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            losses.append(json.loads(r.stdout)["loss"])
        self.assertEqual(losses[0], losses[1])
        r = run("generate", "--model", d, "--source", src[0], "--max-new", "8", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual(out["text"], self.oracle.decode(out["new_ids"], "target"))

    def test_language_codes_take_linear_time(self):
        """">>" without a "<<" after it, 200,000 times on one line, and with
        one at the end: the code search is linear, the result the oracle's."""
        tok = hs.Tokenizer.open(self.dir)
        for x in (">>" * 100000, ">>" * 100000 + "a<<", "x>>" * 50000 + "\n>>de<< y"):
            t0 = __import__("time").monotonic()
            got = tok.encode(x).tolist()
            self.assertLess(__import__("time").monotonic() - t0, 5.0, x[:20])
            self.assertEqual(got, self.oracle.encode(x, "source"), x[:20])

    def test_a_marian_directory_without_vocab_json_is_refused(self):
        d = os.path.join(self.tmp.name, "novocab")
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(self.dir, "source.spm"), d)
        shutil.copy(os.path.join(self.dir, "target.spm"), d)
        with self.assertRaisesRegex(hs.Error, "needs vocab.json"):
            hs.Tokenizer.open(d)
        with open(os.path.join(d, "vocab.json"), "w") as f:
            json.dump({"a": 0, "</s>": 1}, f)
        with self.assertRaisesRegex(hs.Error, "no \"<unk>\""):
            hs.Tokenizer.open(d)
