// tiktoken's (npm package, Rust compiled to WebAssembly) encode speed on the Brown corpus, for bench/tokenizers.sh:
// node tiktoken_speed.js <extracted package dir> <encoding> <corpus dir> prints one JSON line.
const fs = require("fs"), path = require("path");
const [pkg, name, corpus] = process.argv.slice(2);
const { get_encoding } = require(path.join(pkg, "tiktoken.cjs"));
const docs = fs.readdirSync(corpus).filter((f) => f.endsWith(".txt")).map((f) => fs.readFileSync(path.join(corpus, f), "utf8"));
const bytes = docs.reduce((n, d) => n + Buffer.byteLength(d), 0);
let t0 = process.hrtime.bigint();
const enc = get_encoding(name);
const load_s = Number(process.hrtime.bigint() - t0) / 1e9;
let best = 0, tokens = 0;
for (let r = 0; r < 3; r++) {
  t0 = process.hrtime.bigint();
  tokens = 0;
  for (const d of docs) tokens += enc.encode(d, [], []).length;
  best = Math.max(best, bytes / 1e6 / (Number(process.hrtime.bigint() - t0) / 1e9));
}
console.log(JSON.stringify({ tokenizer: name, tokens, encode_mb_s: +best.toFixed(2), load_s: +load_s.toFixed(3) }));
