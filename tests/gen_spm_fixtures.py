"""Writes the SentencePiece fixtures: tests/fixtures/spm/{uni,bpe,unibf}.model,
three small models trained here by
Debian's python3-sentencepiece on the README (a Unigram with a few custom
normalization rules and a user-defined piece; a BPE with byte fallback and
the identity normalizer, as Llama-2's; a Unigram with byte fallback, no dummy
prefix and a control piece), each behind a text with accents, CJK and emoji.
A seed is: 0x80 | flags, the text's length (2 bytes, little-endian), the
text, the .model file.

    /usr/bin/python3 tests/fuzz/gen_spm_seeds.py
"""
import json
import os
import tempfile

import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures", "spm")
SEEDS = os.path.join(HERE, "fuzz", "corpus", "tokenizer")
# custom rules (code points in hex, tab, replacement): A->a, B->b, U+FB01 ->
# "fi", the ideographic space and a tab -> " ", "AB" -> "x" (longest first)
RULES = "41\t61\n42\t62\nFB01\t66 69\n3000\t20\n9\t20\n41 42\t78\n"
MODELS = {
    "uni": (dict(model_type="unigram", vocab_size=150, user_defined_symbols=["<m>"]),
            "AB ABC \ufb01\u3000x <m> Caf\u00e9 \u6771\u4eac \U0001F600"),
    "bpe": (dict(model_type="bpe", vocab_size=420, byte_fallback=True,
                 normalization_rule_name="identity", remove_extra_whitespaces=False,
                 character_coverage=0.99),
            "  Hello\tworld 123 Z\u00fcrich \u6771\u4eac \U0001F600 "),
    "unibf": (dict(model_type="unigram", vocab_size=420, byte_fallback=True,
                   add_dummy_prefix=False, control_symbols=["<c>"], character_coverage=0.99),
              "\uff21\uff22 x<c>y \ufb01 \u00fcn\u00efc\u00f6d\u00e9 \U0001D518 "),
}

TEXTS = ["Caf\u00e9 na\u00efve \u00c5ngstr\u00f6m Stra\u00dfe", "\u6771\u4eac\u306f\u65e5\u672c",
         "\U0001F600\U0001F44D\U0001F3FD \u2764\ufe0f", "0123 3.14 \uff12\uff10\uff12\uff16",
         "  runs   of\tspace\n\nend  ", "", " ", "AB AAB \ufb01\u3000fi", "<m><c><s>x<unk>",
         "\u2581\u2581 already", "\u00e9\u0301 e\u0301"]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        rules = os.path.join(tmp, "rules.tsv")
        with open(rules, "w") as f:
            f.write(RULES)
        train = os.path.join(tmp, "train.txt")
        with open(os.path.join(HERE, "..", "README.md"), encoding="utf-8") as f:
            text = f.read()[:20000]
        with open(train, "w") as f:
            f.write(text + "\n" + "\n".join(t for _, t in MODELS.values()) + "\n")
        os.makedirs(FIXTURES, exist_ok=True)
        oracle = {}
        for name, (kw, sample) in MODELS.items():
            if kw.get("normalization_rule_name") != "identity":
                kw = dict(kw, normalization_rule_tsv=rules)
            prefix = os.path.join(tmp, name)
            spm.SentencePieceTrainer.train(input=train, model_prefix=prefix, minloglevel=2,
                                           hard_vocab_limit=False, **kw)
            with open(prefix + ".model", "rb") as f:
                model = f.read()
            with open(os.path.join(FIXTURES, name + ".model"), "wb") as f:
                f.write(model)
            sp = spm.SentencePieceProcessor(model_proto=model)
            oracle[name] = [{"text": t, "ids": sp.encode(t), "decoded": sp.decode(sp.encode(t))}
                            for t in TEXTS + [sample]]
            b = sample.encode()
            for flags in (0, 3):
                with open(os.path.join(SEEDS, "spm-%s-%d" % (name, flags)), "wb") as f:
                    f.write(bytes([0x80 | flags, len(b) & 255, len(b) >> 8]) + b + model)
        with open(os.path.join(FIXTURES, "oracle.json"), "w", encoding="utf-8") as f:
            json.dump(oracle, f, ensure_ascii=False)
            f.write("\n")


if __name__ == "__main__":
    main()
