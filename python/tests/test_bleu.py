"""Corpus BLEU (analyze/bleu.h, SPEC §17's `eval --pairs --bleu`) against an
independent reimplementation of sacreBLEU's defaults written here in plain
Python (no PyPI here: sacrebleu itself cannot be installed): the 13a
tokenizer with Python's re, n-grams with collections.Counter, `exp`
smoothing and the brevity penalty as sacreBLEU's compute_bleu writes them.
The score must be equal to the last bit, and the tokenization of every
segment identical, on seeded random corpora built to hit every rule
(punctuation, numbers with periods, commas and dashes, HTML entities,
<skipped>, hyphenated line breaks, non-ASCII whitespace, CJK, accents) and
on the edge cases (empty hypotheses, no match, a perfect match, segments
shorter than four tokens)."""

import ctypes
import math
import random
import re
import unittest
from collections import Counter

from util import hs

lib = hs._lib.lib

# ---- the oracle: sacreBLEU's BLEU with tokenize="13a", smooth "exp" ----
RULES = [(re.compile(r'([\{-\~\[-\` -\&\(-\+\:-\@\/])'), r' \1 '),
         (re.compile(r'([^0-9])([\.,])'), r'\1 \2 '),
         (re.compile(r'([\.,])([^0-9])'), r' \1 \2'),
         (re.compile(r'([0-9])(-)'), r'\1 \2 ')]


def tok13a(line):
    line = line.rstrip()
    line = line.replace('<skipped>', '').replace('-\n', '').replace('\n', ' ')
    if '&' in line:
        line = line.replace('&quot;', '"').replace('&amp;', '&').replace('&lt;', '<')
        line = line.replace('&gt;', '>')
    line = ' %s ' % line
    for r, repl in RULES:
        line = r.sub(repl, line)
    return ' '.join(line.split())


def ngrams(line):
    toks = line.split()
    return Counter(tuple(toks[i:i + n]) for n in range(1, 5)
                   for i in range(len(toks) - n + 1)), len(toks)


def oracle(hyps, refs):
    correct, total, sys_len, ref_len = [0] * 4, [0] * 4, 0, 0
    for h, r in zip(hyps, refs):
        hg, hl = ngrams(tok13a(h))
        rg, rl = ngrams(tok13a(r))
        sys_len, ref_len = sys_len + hl, ref_len + rl
        for g, c in hg.items():
            total[len(g) - 1] += c
            if g in rg:
                correct[len(g) - 1] += min(c, rg[g])
    bp = 1.0
    if sys_len < ref_len:
        bp = math.exp(1 - ref_len / sys_len) if sys_len > 0 else 0.0
    prec = [0.0] * 4
    if not any(correct):
        return 0.0, correct, total, sys_len, ref_len
    smooth = 1.
    for n in range(1, 5):
        if total[n - 1] == 0:
            break
        if correct[n - 1] == 0:
            smooth *= 2
            prec[n - 1] = 100. / (smooth * total[n - 1])
        else:
            prec[n - 1] = 100. * correct[n - 1] / total[n - 1]
    score = bp * math.exp(sum([-9999999999 if p == 0.0 else math.log(p) for p in prec]) / 4)
    return score, correct, total, sys_len, ref_len


# ---- the library ----
class Bleu(ctypes.Structure):
    _fields_ = [("score", ctypes.c_double), ("bp", ctypes.c_double),
                ("precisions", ctypes.c_double * 4), ("correct", ctypes.c_longlong * 4),
                ("total", ctypes.c_longlong * 4), ("sys_len", ctypes.c_longlong),
                ("ref_len", ctypes.c_longlong)]


lib.hs_bleu_corpus.restype = ctypes.c_int
lib.hs_bleu_corpus.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p),
                               ctypes.c_size_t, ctypes.POINTER(Bleu)]
lib.hs_bleu_tokenize.restype = ctypes.c_void_p
lib.hs_bleu_tokenize.argtypes = [ctypes.c_char_p]


def corpus_bleu(hyps, refs):
    enc = lambda xs: (ctypes.c_char_p * len(xs))(*[x if isinstance(x, bytes) else x.encode()
                                                    for x in xs])
    b = Bleu()
    hs._lib.check(lib.hs_bleu_corpus(enc(hyps), enc(refs), len(hyps), ctypes.byref(b)))
    return b


def tokenize(text):
    return hs._lib.take_text(lib.hs_bleu_tokenize(text.encode()))


WORDS = ["the", "cat", "sat", "on", "mat", "Zürich", "東京", "naïve", "3.14", "1,000", "10-20",
         "e.g.", "U.S.", "a,b", "x.y", "end.", "(yes)", "[no]", "{maybe}", "a/b", "@home", "#1",
         "$5", "50%", "&amp;", "&lt;tag&gt;", "&quot;q&quot;", "<skipped>", "well-\nknown",
         "don't", "—", "…", "«quote»", "_under_", "~tilde", "`tick`", "^", "|", "1.", ".5", "-",
         "2-", "-3", "a.", ",b", "..", ",,", "9.", "9,", "x9.", "9.x"]
SPACES = [" ", " ", " ", "  ", "\t", "\n", "\u3000", "\u00a0", "\x1c", "\u2009", "\u200b"]


def sentence(rng, k):
    out = ""
    for i in range(k):
        out += rng.choice(WORDS) + rng.choice(SPACES)
    return out.rstrip(" ") if rng.random() < 0.7 else out


def perturb(rng, ref):
    toks = ref.split(" ")
    ops = rng.randrange(4)
    for _ in range(ops):
        if not toks:
            break
        i = rng.randrange(len(toks))
        r = rng.random()
        if r < 0.3:
            del toks[i]
        elif r < 0.6:
            toks.insert(i, rng.choice(WORDS))
        else:
            j = rng.randrange(len(toks))
            toks[i], toks[j] = toks[j], toks[i]
    return " ".join(toks)


class BleuEqualsSacreBleu(unittest.TestCase):
    def check(self, hyps, refs):
        want = oracle(hyps, refs)
        got = corpus_bleu(hyps, refs)
        self.assertEqual(list(got.correct), want[1])
        self.assertEqual(list(got.total), want[2])
        self.assertEqual((got.sys_len, got.ref_len), want[3:])
        self.assertEqual(got.score, want[0], "the score to the last bit")

    def test_tokenization_equals_13a(self):
        rng = random.Random(3)
        for _ in range(2000):
            s = sentence(rng, rng.randrange(0, 12))
            self.assertEqual(tokenize(s), tok13a(s), repr(s))

    def test_random_corpora(self):
        rng = random.Random(1)
        for _ in range(60):
            refs = [sentence(rng, rng.randrange(1, 20)) for _ in range(rng.randrange(1, 40))]
            hyps = [perturb(rng, r) for r in refs]
            self.check(hyps, refs)

    def test_edges(self):
        self.check(["the cat sat on the mat"], ["the cat sat on the mat"])  # 100
        self.assertAlmostEqual(corpus_bleu(["a b c d e"], ["a b c d e"]).score, 100.0, places=9)
        self.check(["x y z"], ["a b c d"])            # no match: 0
        self.check([""], ["a b c"])                    # empty hypothesis: bp 0
        self.check(["a", "b c"], ["a", "b c"])         # no 3- or 4-grams: the loop stops
        self.check(["a b c d", "q"], ["a b x d", "q"])  # exp smoothing on the 4-grams
        self.check(["a b"], [""])
        self.assertEqual(corpus_bleu([], []).score, 0.0)

    def test_refusals_name_the_segment(self):
        with self.assertRaisesRegex(hs.Error, r"segment 1's reference: not UTF-8"):
            corpus_bleu(["a", "b"], ["a", b"\xff"])


if __name__ == "__main__":
    unittest.main()
