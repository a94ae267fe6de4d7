#!/usr/bin/env node
// One-off generator of tests/data/gpt2_tokenizer_cases.json: GPT-2 token ids for a set of tricky
// strings, computed by an independent implementation (tiktoken's `gpt2` encoding, encode_ordinary
// semantics) and cross-checked against the npm package gpt-3-encoder (OpenAI's original algorithm
// ported to JS). The output is committed; nothing in the build or the tests runs this script.
//
// Regenerate (outside the repository, so node_modules never lands in it):
//   mkdir -p /tmp/tokref && cd /tmp/tokref && npm init -y && npm install tiktoken gpt-3-encoder
//   NODE_PATH=/tmp/tokref/node_modules node scripts/make_tokenizer_reference.js tests/data/gpt2_tokenizer_cases.json
//
// Invalid UTF-8 cannot be expressed in a JS string, so that case is tested by round trip in C++.
"use strict";
const fs = require("fs");
const { get_encoding } = require("tiktoken");
const gpt3 = require("gpt-3-encoder");

// A fixed pseudo-random letter string (xorshift32), so the file is reproducible.
function randomWord(n, seed) {
  let x = seed >>> 0;
  let s = "";
  for (let i = 0; i < n; i++) {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    s += String.fromCharCode(97 + (x % 26));
  }
  return s;
}

const cases = [
  // empty and whitespace only
  "", " ", "  ", "      ", "\n", "\n\n", "\n\n\n\n", "\t", " \t \n ", "\r\n", "\r\n\r\n",
  // whitespace runs, the look-ahead rule, leading and trailing spaces
  "Hello world", "hello   world", "hello\tworld", "trailing spaces   ", "   leading spaces",
  "a  b   c    d", "line one\nline two\n", "para one\n\n\npara two", "x \n y", "word\n\n  indented",
  "\ttab\t\tindent", "end with newline\n", "end with spaces and newline  \n", "a \t b",
  // contractions (case-sensitive in GPT-2's regex) and apostrophes
  "they'll", "I'M", "don't", "DON'T", "we're we've I'd she's it's you'll", "'s't're've'm'll'd",
  "'''s", "rock'n'roll", "don\u2019t (curly apostrophe)", "O'Neill's", " 's",
  // numbers
  "12345 3.14", "1,000,000", "2024-01-01T12:34:56Z", "0x1F 1e-9 -42", "123456789012345678901234567890",
  "\u0663\u0664\u0665 \u096a\u096b\u096c \u216b\u2163 \u00bd \u00b2", "abc123def",
  // accented, combining marks, other scripts
  "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m", "cafe\u0301 (combining acute)",
  "e\u0301\u0302\u0303 a\u0308\u0308", "\u0391\u03b8\u03ae\u03bd\u03b1 \u041c\u043e\u0441\u043a\u0432\u0430",
  "\u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd", "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
  "Stra\u00dfe \u0130stanbul \u0131", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
  // CJK
  "\u4f60\u597d\uff0c\u4e16\u754c\uff01", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8", "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
  "\u4e2d\u6587 English \u6df7\u5408", "\u3000\u5168\u89d2\u30b9\u30da\u30fc\u30b9",
  // emoji, ZWJ sequences, flags, skin tones, variation selectors
  "\ud83d\ude00", "\ud83d\udc4d\ud83c\udffd thumbs", "\ud83d\udc68\u200d\ud83d\udc69\u200d\ud83d\udc67\u200d\ud83d\udc66 family",
  "\ud83c\uddeb\ud83c\uddf7\ud83c\uddef\ud83c\uddf5", "\u2764\ufe0f love", "a\ud83d\ude00b \ud83d\ude00\ud83d\ude00\ud83d\ude00",
  // punctuation runs and code
  "!!!??? ... --- ***", "\"quoted\" (parens) [brackets] {braces}", "Hello,World!How's it going?",
  "def f(x):\n    return x**2  # comment\n", "if (a && b) { return -1; }\n\t}",
  "https://example.com/path?q=1&r=two#frag", "user.name+tag@example.org", "$$$ %%% ^^^ ~~~ ```",
  "<html><body>text</body></html>", "\u2014\u2013\u2026\u00ab\u00bb\u201c\u201d",
  // the special token as plain text
  "<|endoftext|>", "text<|endoftext|>more", " <|endoftext|> ", "<|endoftext|><|endoftext|>",
  // unusual whitespace and control characters (engines disagree on some of these)
  "\u00a0nbsp", "a\u3000b", "a\u2028b\u2029c", "x\u0085y", "x \u0085 y", "x\u180ey", "x \u180e\u180e y",
  "\ufeffBOM", "a \ufeff\ufeff b", "a\u200bb zero width", "nul\u0000byte \u0001\u007f", "\u000b\u000c vt ff",
  "a\u2003\u2003\u2003b", "  \u00a0\u00a0x",
  // long words and long runs
  "supercalifragilisticexpialidocious", "pneumonoultramicroscopicsilicovolcanoconiosis".repeat(20),
  "a".repeat(1000), "ab".repeat(500), " " + "x".repeat(300), randomWord(2000, 12345), "9".repeat(500),
  " ".repeat(200) + "a", "\n".repeat(100) + "b", "!".repeat(400), "\u00e9".repeat(300),
  "\u4e00".repeat(200), "\ud83d\ude00".repeat(100),
  // prose
  "The quick brown fox jumps over the lazy dog. It wasn't the first time; the dog didn't mind.\n\n" +
    "  \"Why,\" she asked, \"would anyone do that?\"  He shrugged -- and left at 5:30 p.m.",
];

// Random mixtures of pieces that stress the regex: contractions next to letters, spaces before
// marks, digits of several scripts, unusual whitespace, controls. Only characters assigned since
// Unicode 14 or earlier: letter/number classes of newer characters differ between regex engines.
const atoms = [" ", "  ", "   ", "\n", "\n\n", "\t", "\r\n", "\u000b", "\u0000", "\u001f", "\u007f", "'s", "'t",
  "'re", "'ve", "'m", "'ll", "'d", "'S", "'M", "'LL", "'", "\u2019", "a", "Z", "xyz", "The", " the", "\u00e9",
  "\u00df", "\u0131", "\u03a9", "\u0436", "\u05d0", "\u0628", "\u0915", "\u0e01", "\u4e2d", "\u3042", "\uac00",
  "\u02b0", "\u0301", "\u0308", "\u094d", "\u20dd", "0", "7", "42", "\u0663", "\u096a", "\u00bd", "\u2163",
  "\u00b2", "\u2460", "!", ".", ",", "...", "-", "\u2014", "\u00bf", "$", "+", "\u20ac", "\u00a9", "\u2603",
  "\ud83d\ude00", "\ud83d\udc4d\ud83c\udffd", "\u200d", "\ufe0f", "\u00a0", "\u0085", "\u1680", "\u180e",
  "\u2000", "\u2009", "\u200b", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\ufeff", "\ue000"];
{
  let x = 2463534242;
  const next = () => { x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0; return x; };
  for (let i = 0; i < 300; i++) {
    let text = "";
    for (let n = next() % 24; n > 0; n--) text += atoms[next() % atoms.length];
    cases.push(text);
  }
}

// Texts where the special token is allowed (tiktoken's encode(text, "all")).
const allowSpecial = ["<|endoftext|>", "a<|endoftext|>b", "doc one.<|endoftext|>\n\ndoc two<|endoftext|>",
  "<|endoftext|><|endoftext|>", "no special here"];

// package.json is not exported by tiktoken, so read the version from the file next to its entry point.
function versionOf(pkg) {
  let dir = require("path").dirname(require.resolve(pkg));
  while (!fs.existsSync(dir + "/package.json")) dir = require("path").dirname(dir);
  return JSON.parse(fs.readFileSync(dir + "/package.json", "utf8")).version;
}

const enc = get_encoding("gpt2");
const out = { generator: "scripts/make_tokenizer_reference.js",
  reference: "tiktoken " + versionOf("tiktoken") + " gpt2, encode_ordinary",
  cross_check: "gpt-3-encoder " + versionOf("gpt-3-encoder"),
  cross_check_differences: [], cases: [], allow_special: [] };
for (const text of cases) {
  const ids = Array.from(enc.encode_ordinary(text));
  const other = gpt3.encode(text);
  if (JSON.stringify(ids) !== JSON.stringify(other)) {
    out.cross_check_differences.push({ text, tiktoken: ids, gpt3_encoder: other });
  }
  out.cases.push({ text, ids });
}
for (const text of allowSpecial) out.allow_special.push({ text, ids: Array.from(enc.encode(text, "all")) });
enc.free();

// One case per line keeps diffs readable.
const lines = [];
lines.push("{");
for (const key of ["generator", "reference", "cross_check"]) lines.push(`  ${JSON.stringify(key)}: ${JSON.stringify(out[key])},`);
for (const key of ["cross_check_differences", "cases", "allow_special"]) {
  lines.push(`  ${JSON.stringify(key)}: [`);
  out[key].forEach((c, i) => lines.push("    " + JSON.stringify(c) + (i + 1 < out[key].length ? "," : "")));
  lines.push(key === "allow_special" ? "  ]" : "  ],");
}
lines.push("}");
const path = process.argv[2] || "tests/data/gpt2_tokenizer_cases.json";
fs.writeFileSync(path, lines.join("\n") + "\n");
console.error(`${path}: ${out.cases.length} cases, ${out.allow_special.length} with special tokens, ` +
  `${out.cross_check_differences.length} differences between tiktoken and gpt-3-encoder`);
for (const d of out.cross_check_differences) console.error("  differs:", JSON.stringify(d.text));
