#!/usr/bin/env node
// The WordPiece oracle: token ids of varied texts from transformers.js
// (@lenml/tokenizers) on bert-base-uncased's tokenizer.json, which this
// script first writes (tests/gen_bert_tokenizer.js) for headscope to read
// too; printed as one JSON object that tests/test_tokenizer.c
// (test_tokenizer --bert-oracle) compares with headscope's ids, exactly.
//
//   node tests/bert_oracle.js NODE_MODULES_DIR OUT_DIR > expected.json
//
// writes OUT_DIR/bert.json and OUT_DIR/VARIANT.json for each variant: the
// same file with other normalizer flags (cased: no lowercase, so no accent
// stripping, no CJK padding; strip_only: accents stripped but no cleaning),
// and BertProcessing in place of TemplateProcessing.
//
// The texts avoid where transformers.js departs from HF's Rust tokenizers
// (which headscope follows): U+0000 (a C string ends there), a capital sigma
// at a word's end (JavaScript lowercases it to ς, HF's per-character mapping
// to σ), CJK ideographs outside the BMP (transformers.js reads UTF-16 units),
// "do not" in decoding (HF's cleanup makes it "don't"), and without clean_text
// U+0085 and U+FEFF (whitespace to one side only).
"use strict";
const fs = require("fs");
const path = require("path");
const dir = path.resolve(process.argv[2] || path.join(__dirname, "../build/npm/node_modules"));
const outDir = path.resolve(process.argv[3] || ".");
const { build, CONFIG } = require("./gen_bert_tokenizer.js");
const { TokenizerLoader } = require(path.join(dir, "@lenml/tokenizers"));

const MIT =
  "Permission is hereby granted, free of charge, to any person obtaining a copy\n" +
  "of this software and associated documentation files (the \"Software\"), to deal\n" +
  "in the Software without restriction, including without limitation the rights\n" +
  "to use, copy, modify, merge, publish, distribute, sublicense, and/or sell\n" +
  "copies of the Software.\n\nTHE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND.";
const LONG = "pneumonoultramicroscopicsilicovolcanoconiosis";

const TEXTS = [
  MIT,
  "Café naïve résumé façade Ångström Éclair crème brûlée İstanbul Øresund Straße",
  "e\u0301cole cafe\u0301 man\u0303ana A\u030a \u1e9b\u0323 and Ελληνικά, русский текст",
  "我爱北京天安门。中文字符和English混合，東京タワー、한국어 텍스트",
  "Wait...what?!?! (yes) [no] {maybe} <tag> \"quoted\" --- *** ~~ @#$%^&_+=|\\/`",
  "\u00bfQu\u00e9? \u00a1S\u00ed! \u00abguillemets\u00bb \u201csmart\u201d \u2018single\u2019 \u2014 dash \u2026 \u00a7\u00b6",
  // 100 characters: pieces; 101 and more: one [UNK]
  "a" + "b".repeat(98) + "c " + LONG + LONG + LONG + " " + "x".repeat(101),
  "I \u2764\ufe0f \ud83e\udd80 and \ud83c\udf89! hello\ud83e\udd80world \u2603 \u2122 \u00a9",
  "tab\there bell\u0007end esc\u001b[0m zw\u200bsp soft\u00adhyphen bom\ufeffx del\u007fy \u0085nel",
  "The capital of France is [MASK]. [CLS] already [SEP] here [MASK][MASK]x and [mask] [UNK]",
  "HeLLo WoRLD McDonald's iPhone NASA GmbH camelCaseWord SHOUTING",
  "In 2024, 3.14159 and 1,000,000 people paid $42.50 (about 10%) on 2024-05-20 at 12:30.",
  "  many   spaces\t\ttabs\n\nnewlines\r\nCRLF \u00a0nbsp\u3000ideographic\u2009thin  ",
  "",
  " ",
  "don't won't it's I'm they've we're rock'n'roll O'Neil \u2019curly\u2019 ''quotes''",
  "state-of-the-art well-known twenty-one e-mail re-enter -leading trailing- a--b",
  "Visit https://www.example.com/path/to?query=1&x=y#frag or mail user.name@example.org now",
  "unaffable supercalifragilisticexpialidocious antidisestablishmentarianism xqzvbkj",
  "Fullwidth \uff21\uff22\uff23\uff11\uff12\uff13, the \ufb01 ligature, x\u00b2 and \u00bd",
];

const SEP = { id: "[SEP]", ids: [102], tokens: ["[SEP]"] };
const VARIANTS = {
  bert: {},
  bert_cased: {
    normalizer: { type: "BertNormalizer", clean_text: true, handle_chinese_chars: false, strip_accents: null, lowercase: false },
    post_processor: { type: "BertProcessing", sep: ["[SEP]", 102], cls: ["[CLS]", 101] },
  },
  bert_strip_only: {
    normalizer: { type: "BertNormalizer", clean_text: false, handle_chinese_chars: true, strip_accents: true, lowercase: false },
    post_processor: {
      type: "TemplateProcessing",
      single: [{ Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "[SEP]", type_id: 0 } }],
      pair: [{ Sequence: { id: "A", type_id: 0 } }, { Sequence: { id: "B", type_id: 1 } }],
      special_tokens: { "[SEP]": SEP },
    },
  },
};
// without clean_text the text reaches the pre-tokenizer as it is: these two
// are whitespace to only one of the two (above)
const NO_CLEAN_DIFFERS = /[\u0085\ufeff]/;

// text pairs (SPEC §16) through each variant's pair template: transformers.js's
// ids and token type ids, and truncated to max_len by transformers' Python
// truncate_sequences (longest_first: one token at a time from the end of the
// longer sequence, the second on ties), written out here from its source
const PAIRS = [
  ["The cat sat on the mat.", "Where did the cat sit?"],
  [MIT, "A short one."],
  ["Short.", TEXTS[1] + " " + TEXTS[10]],
  ["", "only the second"],
  ["我爱北京天安门。", "don't won't it's"],
];
const MAX_LENS = [0, 24, 9, 5];
function truncated(tok, a, b, maxLen, specials) {
  const x = tok.encode(a, { add_special_tokens: false }), y = tok.encode(b, { add_special_tokens: false });
  if (!maxLen) return null;
  while (x.length + y.length + specials > maxLen) (x.length > y.length ? x : y).pop();
  return { a: x, b: y };
}

const base = build(dir);
const out = { generator: "tests/bert_oracle.js", packages: {}, files: {}, cases: [], pairs: [] };
for (const p of ["bert-tokenizer", "@lenml/tokenizers"])
  out.packages[p] = require(path.join(dir, p, "package.json")).version;
for (const [name, override] of Object.entries(VARIANTS)) {
  const json = { ...base, ...override };
  const file = path.join(outDir, name + ".json");
  fs.writeFileSync(file, JSON.stringify(json) + "\n");
  out.files[name] = file;
  const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: json, tokenizerConfig: CONFIG });
  for (const text of TEXTS) {
    if (name === "bert_strip_only" && NO_CLEAN_DIFFERS.test(text)) continue;
    const special = tok.encode(text, { add_special_tokens: true });
    const plain = tok.encode(text, { add_special_tokens: false });
    const decoded = plain.length ? tok.decode(plain, { skip_special_tokens: true, clean_up_tokenization_spaces: false }) : "";
    out.cases.push({ tok: name, text, special, plain, decoded });
  }
  for (const [a, b] of PAIRS) {
    const e = tok._encode_plus(a, { text_pair: b, add_special_tokens: true, return_token_type_ids: true });
    const n = tok.encode(a, { add_special_tokens: false }).length + tok.encode(b, { add_special_tokens: false }).length;
    const specials = e.input_ids.length - n;
    for (const maxLen of MAX_LENS) {
      if (maxLen && maxLen <= specials) continue;
      let ids = Array.from(e.input_ids), types = Array.from(e.token_type_ids);
      const t = truncated(tok, a, b, maxLen, specials);
      if (t) { // the template again around the truncated sequences
        const r = tok._encode_plus("x", { text_pair: "y", add_special_tokens: true, return_token_type_ids: true });
        const xid = tok.encode("x", { add_special_tokens: false })[0], yid = tok.encode("y", { add_special_tokens: false })[0];
        ids = [], types = [];
        Array.from(r.input_ids).forEach((id, i) => {
          const seq = id === xid ? t.a : id === yid ? t.b : [id];
          for (const s of seq) { ids.push(s); types.push(Number(r.token_type_ids[i])); }
        });
      }
      out.pairs.push({ tok: name, a, b, max_len: maxLen, ids, types });
    }
  }
}
process.stdout.write(JSON.stringify(out) + "\n");
