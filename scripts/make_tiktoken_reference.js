#!/usr/bin/env node
// One-off generator of tests/data/tiktoken_cases.json: token ids of cl100k_base, o200k_base and
// Llama 3 for adversarial strings and Brown corpus excerpts, computed by tiktoken (its wasm build of
// the Rust BPE) and, for Llama 3, also by llama3-tokenizer-js (an independent JS implementation of
// Hugging Face's merges-based BPE). The output is committed; nothing in the build or tests runs this.
//
// Llama 3 in tiktoken: Meta's tokenizer is tiktoken with Llama 3's ranks, pattern and special tokens;
// here they come from $ODYSSEY_CACHE/llama3/llama3.json (scripts/fetch_tokenizer.sh llama3, which
// converts llama3-tokenizer-js's data), so llama3-tokenizer-js's own ids check that conversion too.
//
// Regenerate (outside the repository, so node_modules never lands in it):
//   mkdir -p /tmp/tokref && cd /tmp/tokref && npm init -y && npm install tiktoken@1.0.22 llama3-tokenizer-js@1.2.0
//   for t in cl100k_base o200k_base llama3; do bash scripts/fetch_tokenizer.sh $t; done
//   NODE_PATH=/tmp/tokref/node_modules node scripts/make_tiktoken_reference.js tests/data/tiktoken_cases.json
//
// Per case: "ids" = encode_ordinary (special tokens' literals are text), "special" = encode(text,
// "all") when it differs from "ids". Llama 3 cases add "js" = llama3-tokenizer-js's encode(text,
// {bos: false, eos: false}) (which always honours special tokens) when it differs from
// encode(text, "all"). Brown: per corpus file the token count and a 32-bit hash of the ids
// (h = h * 1000003 + id mod 2^32), so the whole corpus is checked without committing its ids.
// Invalid UTF-8 cannot be expressed in a JS string, so it is tested by round trip in C++.
"use strict";
const fs = require("fs");
const path = require("path");
const { get_encoding, Tiktoken } = require("tiktoken");
const llama3Tokenizer = require("llama3-tokenizer-js").default;

const cache = process.env.ODYSSEY_CACHE || path.resolve("cache");
const gpt2Cases = JSON.parse(fs.readFileSync("tests/data/gpt2_tokenizer_cases.json", "utf8"));

// The GPT-2 adversarial strings (whitespace, contractions, numbers, scripts, CJK, emoji, controls,
// long runs, random mixtures), then what the newer patterns treat differently.
const cases = gpt2Cases.cases.map((c) => c.text);
cases.push(
  // digit runs: \p{N}{1,3}
  "1", "12", "123", "1234", "12345678901", "3.14159265358979", "1,234,567.89", "$1,000,000", "9".repeat(1000),
  "0" + "1".repeat(31), "\u0663\u0664\u0665\u0666\u0667", "x1y22z333w4444", "v2.0.1-rc3", "  42  ",
  // whitespace and line ends: \s*[\r\n]+, [\r\n]* after punctuation
  "a\r\nb", "a\r\r\nb", "a \r\n \r\n b", "end.\n\n\nnext", "end.\r\n", ".\n\n\n", "  \n  \n", "\t\n\t\n",
  " ".repeat(17) + "\n" + " ".repeat(3), "a\n\u00a0\nb", "x\u2028\u2029y", "x\u0085\u0085y", "\u0085", "\ufeff\n",
  "line\u000bline\u000cline", "\n".repeat(40), "\r".repeat(9) + "x",
  // o200k's case-aware letter runs and contractions after letters, slashes after punctuation
  "HelloWorld", "HELLOworld", "helloWORLD", "CamelCaseIdentifierName", "iPhone XMLHttpRequest", "McDonald's",
  "DON'T don'T Don'T", "I'M I'm i'M", "they'RE we'Ve", "\u01c5ungla \u01c8j \u1f88\u1f89", "\u02b0\u02b1abc",
  "e\u0301E\u0301\u00c9", "\u0915\u094d\u0937", "//comment", "a/b/c", "http://x.y/z//", "</div>/", "?/\n/",
  // special-token look-alikes (ordinary text to encode(); real tokens to encode(text, "all"))
  "<|endoftext|>", "<|endofprompt|>", "<|fim_prefix|>x<|fim_middle|>y<|fim_suffix|>", "<|begin_of_text|>",
  "<|end_of_text|>", "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>", "<|eom_id|><|python_tag|>",
  "<|reserved_special_token_0|>", "<|reserved_special_token_247|>", "<|reserved_special_token_248|>",
  "<|finetune_right_pad_id|>", "<|endoftext|", "<|endoftext", "|endoftext|>", "<||>", "<|<|endoftext|>|>",
  "< |endoftext| >", "<|ENDOFTEXT|>", "text<|endoftext|>more<|endofprompt|>", " <|begin_of_text|> ",
  // CJK and emoji runs, mixed scripts
  "\u6f22\u5b57\u304b\u306a\u30ab\u30ca\u6df7\u3058\u308a\u6587", "\u4e2d\u6587\u6807\u70b9\uff0c\u3002\uff1f\uff01",
  "\ud83e\udd16\ud83e\udde0\ud83d\udcbb", "\ud83c\udff3\ufe0f\u200d\ud83c\udf08", "\u0928\u092e\u0938\u094d\u0924\u0947\u4f60\u597dhello",
);

// Brown excerpts: fixed slices of fixed files (the first 40 files in name order, 2,000 bytes each
// from byte 1,000, cut at character boundaries), kept in the file as text.
const brownDir = path.join(cache, "brown", "text");
const brownFiles = fs.readdirSync(brownDir).filter((f) => f.endsWith(".txt")).sort();
const excerpts = brownFiles.slice(0, 40).map((f) => {
  const text = fs.readFileSync(path.join(brownDir, f), "utf8");
  return text.slice(1000, 3000);
});

function versionOf(pkg) {
  let dir = path.dirname(require.resolve(pkg));
  while (!fs.existsSync(dir + "/package.json")) dir = path.dirname(dir);
  return JSON.parse(fs.readFileSync(dir + "/package.json", "utf8")).version;
}

function hashIds(ids) {
  let h = 0;
  for (const id of ids) h = (Math.imul(h, 1000003) + id) >>> 0;
  return h;
}

const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

const out = { generator: "scripts/make_tiktoken_reference.js",
  reference: `tiktoken ${versionOf("tiktoken")}; llama3 also llama3-tokenizer-js ${versionOf("llama3-tokenizer-js")}`,
  brown_excerpts: excerpts, tokenizers: {} };
for (const name of ["cl100k_base", "o200k_base", "llama3"]) {
  let enc;
  if (name === "llama3") {
    const d = JSON.parse(fs.readFileSync(path.join(cache, "llama3", "llama3.json"), "utf8"));
    enc = new Tiktoken(d.bpe_ranks, d.special_tokens, d.pat_str);
  } else {
    enc = get_encoding(name);
  }
  const t = { cases: [], brown_excerpts: [], brown_files: [], js_differences: 0 };
  const one = (text) => {
    const c = { ids: Array.from(enc.encode_ordinary(text)) };
    const special = Array.from(enc.encode(text, "all"));
    if (!same(special, c.ids)) c.special = special;
    if (name === "llama3") {
      const js = llama3Tokenizer.encode(text, { bos: false, eos: false });
      if (!same(js, special)) {
        c.js = js;
        t.js_differences++;
        console.error(`llama3: llama3-tokenizer-js differs from tiktoken on ${JSON.stringify(text).slice(0, 80)}`);
      }
    }
    return c;
  };
  for (const text of cases) t.cases.push(Object.assign({ text }, one(text)));
  for (const text of excerpts) t.brown_excerpts.push(one(text));
  for (const f of brownFiles) {
    const ids = Array.from(enc.encode_ordinary(fs.readFileSync(path.join(brownDir, f), "utf8")));
    t.brown_files.push({ file: f, tokens: ids.length, hash: hashIds(ids) });
  }
  enc.free();
  out.tokenizers[name] = t;
  console.error(`${name}: ${t.cases.length} cases, ${excerpts.length} excerpts, ${brownFiles.length} Brown files, ` +
    `${t.js_differences} llama3-tokenizer-js differences`);
}

// One case per line keeps diffs readable.
const lines = ["{"];
for (const key of ["generator", "reference"]) lines.push(`  ${JSON.stringify(key)}: ${JSON.stringify(out[key])},`);
lines.push(`  "brown_excerpts": [`);
excerpts.forEach((e, i) => lines.push("    " + JSON.stringify(e) + (i + 1 < excerpts.length ? "," : "")));
lines.push("  ],");
lines.push(`  "tokenizers": {`);
const names = Object.keys(out.tokenizers);
names.forEach((name, n) => {
  const t = out.tokenizers[name];
  lines.push(`    ${JSON.stringify(name)}: {`);
  lines.push(`      "js_differences": ${t.js_differences},`);
  for (const key of ["cases", "brown_excerpts", "brown_files"]) {
    lines.push(`      ${JSON.stringify(key)}: [`);
    t[key].forEach((c, i) => lines.push("        " + JSON.stringify(c) + (i + 1 < t[key].length ? "," : "")));
    lines.push(key === "brown_files" ? "      ]" : "      ],");
  }
  lines.push(n + 1 < names.length ? "    }," : "    }");
});
lines.push("  }");
lines.push("}");
const file = process.argv[2] || "tests/data/tiktoken_cases.json";
fs.writeFileSync(file, lines.join("\n") + "\n");
console.error(`${file} written`);
