#!/usr/bin/env node
// Hugging Face tokenizers (its Rust library, npm's `tokenizers`) on a
// tokenizer.json for bench/tokenizer.sh: encodes TEXT whole REPS times
// (without special tokens, a fresh tokenizer each run so that no cache
// carries over) and prints one JSON line with the median MB/s.
//
//   node bench/tokenizer_hf.js NODE_MODULES TOKENIZER.json TEXT REPS NAME
"use strict";
const fs = require("fs");
const path = require("path");
const [dir, file, textFile, repsArg, name] = process.argv.slice(2);
const { Tokenizer } = require(path.resolve(dir, "tokenizers"));
const text = fs.readFileSync(textFile, "utf8");
const bytes = Buffer.byteLength(text);
(async () => {
  const t = [];
  let count = 0;
  for (let r = 0; r < Number(repsArg); r++) {
    const tok = Tokenizer.fromFile(file);
    const t0 = process.hrtime.bigint();
    count = (await tok.encode(text, null, { addSpecialTokens: false })).getIds().length;
    t.push(Number(process.hrtime.bigint() - t0) / 1e9);
  }
  t.sort((a, b) => a - b);
  const n = t.length, med = n % 2 ? t[(n - 1) / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
  console.log(JSON.stringify({ tokenizer: name, bytes, tokens: count, reps: n, median_s: med,
                               mb_per_s: bytes / med / 1e6 }));
})().catch((e) => { console.error(String(e)); process.exit(1); });
