// Hugging Face `tokenizers` itself (the Rust library, npm's `tokenizers`
// Node binding, scripts/setup) as the oracle of tokenizer.json files the
// JavaScript ports do not implement exactly (Unigram, Precompiled).
//
//   node tests/hf_tokenizers_oracle.js NODE_MODULES REQUEST.json
//
// REQUEST: {"tokenizer": PATH, "texts": [...], "decode": [[ids], ...]}.
// Prints {"plain": [[ids]...], "special": [[ids]...], "decoded": [...]}: each
// text encoded without and with the special tokens, each id list decoded
// (skip_special_tokens false).
"use strict";
const fs = require("fs");
const path = require("path");
const { Tokenizer } = require(path.resolve(process.argv[2], "tokenizers"));

(async () => {
  const req = JSON.parse(fs.readFileSync(process.argv[3], "utf8"));
  const tok = Tokenizer.fromFile(req.tokenizer);
  const out = { plain: [], special: [], decoded: [] };
  for (const text of req.texts) {
    out.plain.push((await tok.encode(text, null, { addSpecialTokens: false })).getIds());
    out.special.push((await tok.encode(text, null, { addSpecialTokens: true })).getIds());
  }
  for (const ids of req.decode || []) out.decoded.push(await tok.decode(ids, false));
  process.stdout.write(JSON.stringify(out) + "\n");
})().catch((e) => {
  console.error(String(e));
  process.exit(1);
});
