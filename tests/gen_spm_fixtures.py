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
import base64
import json
import os
import tempfile

import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures", "spm")
SEEDS = os.path.join(HERE, "fuzz", "corpus", "tokenizer")
NPM = os.environ.get("HS_NPM_DIR") or os.path.join(HERE, "..", "build", "npm", "node_modules")
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


# ---- tokenizer.json files from .model files, as transformers converts them
# (also python/tests/test_sentencepiece.py's) ----

def charsmap_of(path):
    """normalizer_spec.precompiled_charsmap of a .model file (b"" none)"""
    with open(path, "rb") as f:
        data = f.read()

    def fields(buf):
        i = 0
        while i < len(buf):
            key, i = read_varint(buf, i)
            wire = key & 7
            if wire == 0:
                _, i = read_varint(buf, i)
                val = None
            elif wire == 2:
                n, i = read_varint(buf, i)
                val, i = buf[i:i + n], i + n
            else:
                n = 8 if wire == 1 else 4
                val, i = None, i + n
            yield key >> 3, val

    for num, val in fields(data):
        if num == 3:
            return dict(fields(val)).get(2, b"") or b""
    return b""


def read_varint(buf, i):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7f) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def hf_json(sp, charsmap, style):
    """A tokenizer.json of a Unigram .model: style t5, xlmr or strip"""
    n = sp.get_piece_size()
    vocab = [[sp.id_to_piece(i), sp.get_score(i)] for i in range(n)]
    added = [{"id": i, "content": sp.id_to_piece(i), "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for i in range(n) if sp.is_control(i) or sp.is_unknown(i)]
    pre = {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode()}
    meta = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
            "split": True}
    seq = lambda parts: [{"Sequence": {"id": p[1], "type_id": int(p == "$B")}} if p[0] == "$"
                         else {"SpecialToken": {"id": p, "type_id": 0}} for p in parts]
    specials = lambda parts: {p: {"id": p, "ids": [sp.piece_to_id(p)], "tokens": [p]}
                              for p in parts if p[0] != "$"}
    if style == "t5":
        norm = pre
        pretok = {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, meta]}
        single, pair = ["$A", "</s>"], ["$A", "</s>", "$B", "</s>"]
    else:
        tail = [{"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]
        if style == "strip":
            tail.insert(0, {"type": "Strip", "strip_left": False, "strip_right": True})
        norm = {"type": "Sequence", "normalizers": [pre] + tail}
        pretok = meta
        single, pair = ["<s>", "$A", "</s>"], ["<s>", "$A", "</s>", "</s>", "$B", "</s>"]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": norm, "pre_tokenizer": pretok,
            "post_processor": {"type": "TemplateProcessing", "single": seq(single),
                               "pair": seq(pair),
                               "special_tokens": specials(single)},
            "decoder": {"type": "Metaspace", "replacement": "\u2581",
                        "prepend_scheme": "always", "split": True},
            "model": {"type": "Unigram", "unk_id": sp.unk_id(), "vocab": vocab,
                      "byte_fallback": False}}


def hf_oracle(tmp, path, texts):
    """HF tokenizers' ids (no specials) and decoding of them (its Rust
    library through npm's tokenizers: scripts/setup)"""
    import subprocess
    first = subprocess.run(["node", os.path.join(HERE, "hf_tokenizers_oracle.js"), NPM,
                            request(tmp, path, texts, [])], capture_output=True, check=True)
    plain = json.loads(first.stdout)["plain"]
    second = subprocess.run(["node", os.path.join(HERE, "hf_tokenizers_oracle.js"), NPM,
                             request(tmp, path, [], plain)], capture_output=True, check=True)
    return {"plain": plain, "decoded": json.loads(second.stdout)["decoded"]}


def request(tmp, path, texts, decode):
    req = os.path.join(tmp, "req.json")
    with open(req, "w", encoding="utf-8") as f:
        json.dump({"tokenizer": path, "texts": texts, "decode": decode}, f)
    return req


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
            if name == "uni":  # mode 0 (add_special): tokenizer.json, NUL, text
                doc = hf_json(sp, charsmap_of(prefix + ".model"), "t5")
                with open(os.path.join(SEEDS, "json-unigram-t5"), "wb") as f:
                    f.write(b"\x04" + json.dumps(doc).encode() + b"\0" + b)
                path = os.path.join(FIXTURES, "uni_t5.json")
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(doc, f)
                texts = TEXTS + [sample]
                want = hf_oracle(tmp, path, texts)
                oracle["uni_t5.json"] = [{"text": t, "ids": i, "decoded": d}
                                         for t, i, d in zip(texts, want["plain"], want["decoded"])]
        with open(os.path.join(FIXTURES, "oracle.json"), "w", encoding="utf-8") as f:
            json.dump(oracle, f, ensure_ascii=False)
            f.write("\n")


if __name__ == "__main__":
    main()
