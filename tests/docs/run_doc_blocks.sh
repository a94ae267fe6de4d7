#!/usr/bin/env bash
# Runs the code blocks of README.md and docs/*.md that are marked to run (a fence opened with
# "```sh run"), so the commands the documentation shows keep working. Usage:
#   bash tests/docs/run_doc_blocks.sh ODYSSEY_BINARY REPO_ROOT [FILE.md ...]
# Each file's blocks run in order, in one fresh directory laid out like the repository root
# (build/odyssey, configs/, scripts/, cache/ with the Brown corpus and GPT-2's vocabulary from
# $ODYSSEY_CACHE, default REPO_ROOT/cache, tokenized once into cache/brown/{bytes,gpt2}), so a block
# may use what an earlier block of its file wrote. To stay small and quick:
#   DOCS_SET   --set overrides appended to every `odyssey train` (default: train.steps=2,
#              train.eval_rows=8, checkpoint.every=1 ... see below); a block's own --set come first,
#              so these win
#   mpirun     gets --oversubscribe (blocks show 4 ranks; CI has 2 cores) and tests/mpi_launch.env
# Every guide in docs/ must have at least one such block (configuration.md is generated, multi-node.md
# needs several hosts). A failing block is reported with its file and line.
set -u
ODYSSEY=$(realpath "$1")
ROOT=$(realpath "$2")
shift 2
CACHE=${ODYSSEY_CACHE:-$ROOT/cache}
DOCS_SET=${DOCS_SET:-train.steps=2 train.eval_rows=8 train.eval_every=0 checkpoint.every=0}
WORK=$(mktemp -d)
[ -n "${DOCS_KEEP:-}" ] || trap 'rm -rf "$WORK"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  files=("$ROOT/README.md")
  for f in "$ROOT"/docs/*.md; do files+=("$f"); done
fi

for need in brown/text gpt2/encoder.json; do
  [ -e "$CACHE/$need" ] || { echo "run_doc_blocks: $CACHE/$need is missing (bash scripts/fetch_brown.sh, fetch_gpt2_vocab.sh)"; exit 1; }
done
# The shared layout: the binary behind a wrapper that appends DOCS_SET to `train`, mpirun behind one
# that oversubscribes, the corpus tokenized once.
mkdir -p "$WORK/bin" "$WORK/cache/brown"
cat >"$WORK/bin/odyssey" <<WRAP
#!/usr/bin/env bash
if [ "\${1:-}" = train ]; then
  extra=()
  for kv in $DOCS_SET; do extra+=(--set "\$kv"); done
  exec "$ODYSSEY" "\$@" "\${extra[@]}"
fi
exec "$ODYSSEY" "\$@"
WRAP
REAL_MPIRUN=$(command -v mpirun)
cat >"$WORK/bin/mpirun" <<WRAP
#!/usr/bin/env bash
exec "$REAL_MPIRUN" --oversubscribe "\$@"
WRAP
chmod +x "$WORK/bin/odyssey" "$WORK/bin/mpirun"
ln -s "$CACHE/brown/text" "$WORK/cache/brown/text"
ln -s "$CACHE/gpt2" "$WORK/cache/gpt2"
for tok in bytes gpt2; do
  "$ODYSSEY" prepare --input "$CACHE"/brown/text/*.txt --output "$WORK/cache/brown/$tok" --tokenizer $tok \
    --vocab-dir "$CACHE/gpt2" --quiet >/dev/null || { echo "run_doc_blocks: prepare ($tok) failed"; exit 1; }
done

set -a
. "$ROOT/tests/mpi_launch.env"
set +a
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export PATH="$WORK/bin:$PATH" ODYSSEY_CACHE="$WORK/cache"

for file in "${files[@]}"; do
  name=$(basename "$file")
  dir="$WORK/run-${name%.md}"
  mkdir -p "$dir/build" "$dir/blocks"
  ln -s "$WORK/bin/odyssey" "$dir/build/odyssey"
  ln -s "$ROOT/configs" "$dir/configs"
  ln -s "$ROOT/scripts" "$dir/scripts"
  ln -s "$WORK/cache" "$dir/cache"
  # Each marked block into blocks/<line>.sh (the line of its opening fence).
  awk -v out="$dir/blocks" '
    /^```sh run[ \t]*$/ { inblock = 1; file = sprintf("%s/%06d.sh", out, NR); next }
    inblock && /^```/ { inblock = 0; close(file); next }
    inblock { print > file }' "$file"
  count=$(find "$dir/blocks" -name '*.sh' | wc -l)
  if [ "$count" -eq 0 ]; then
    case "$name" in
      configuration.md | multi-node.md) ;;
      *) [ "$file" = "$ROOT/README.md" ] || fail "$name has no block marked \`\`\`sh run" ;;
    esac
    continue
  fi
  for block in "$dir"/blocks/*.sh; do
    line=$((10#$(basename "$block" .sh)))
    start=$SECONDS
    if (cd "$dir" && timeout 300 bash -eo pipefail "$block") >"$block.out" 2>&1; then
      echo "ok: $name:$line ($((SECONDS - start)) s)"
    else
      fail "$name:$line (exit $?):"
      sed 's/^/    | /' "$block"
      tail -n 15 "$block.out" | sed 's/^/    > /'
    fi
  done
done
if [ $failures -ne 0 ]; then
  echo "$failures block(s) failed"
  exit 1
fi
echo "all marked blocks ran"
