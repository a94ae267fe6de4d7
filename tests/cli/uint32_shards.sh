# llm.c's uint32 token shards end to end: the byte-level shards rewritten as uint32 (magic 20240801,
# version 7) train and evaluate to the same losses as the uint16 originals; ids above 65535 train
# with a larger vocabulary; an id >= model.vocab_size is refused naming the file and offset.
source "$(dirname "$0")/common.sh" "$@"
make_shards "$WORK/data"
mkdir -p "$WORK/wide" "$WORK/shifted"

# to_uint32 IN OUT SHIFT: the tokens of a uint16 shard, plus SHIFT, as a uint32 shard.
to_uint32() {
  python3 - "$1" "$2" "$3" <<'PY'
import array, struct, sys
src, dst, shift = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(src, "rb").read()
header = list(struct.unpack("<256i", data[:1024]))
assert header[0] == 20240520 and header[1] == 1, header[:3]
tokens = array.array("H", data[1024:])
assert len(tokens) == header[2]
header[0], header[1] = 20240801, 7
wide = array.array("I", (t + shift for t in tokens))
with open(dst, "wb") as f:
    f.write(struct.pack("<256i", *header))
    f.write(wide.tobytes())
PY
}
for f in "$WORK"/data/shards/*.bin; do
  to_uint32 "$f" "$WORK/wide/$(basename "$f")" 0 || fail "convert $f"
  to_uint32 "$f" "$WORK/shifted/$(basename "$f")" 65536 || fail "convert $f (shifted)"
done
[ "$(head -c 8 "$WORK/wide/train_000000.bin" | od -An -tu4 | xargs)" = "20240801 7" ] || fail "uint32 header"

common=(--set train.steps=4 --set data.shuffle=true --set train.threads=2)
for kind in data/shards wide; do
  tiny_config "$WORK/$kind" "$WORK/$(basename $kind).toml"
  "$ODYSSEY" train --config "$WORK/$(basename $kind).toml" "${common[@]}" --set "checkpoint.dir=$WORK/run_$(basename $kind)" \
    >/dev/null 2>&1 || fail "train over $kind"
done
strip() { sed -E 's/.*"grad_norm":([^,]*).*"loss":([^,]*).*"step":([0-9]+).*/\3 \2 \1/' "$1"; }
if diff <(strip "$WORK/run_shards/metrics.jsonl") <(strip "$WORK/run_wide/metrics.jsonl") >/dev/null &&
  [ "$(wc -l <"$WORK/run_wide/metrics.jsonl")" -eq 4 ]; then
  echo "ok: uint32 shards train to the same losses and gradient norms as uint16"
else
  fail "metrics differ: $(diff <(strip "$WORK/run_shards/metrics.jsonl") <(strip "$WORK/run_wide/metrics.jsonl") | head -5)"
fi
loss_of() { grep -oE '"loss":[^,]*'; }
narrow=$("$ODYSSEY" eval --checkpoint "$WORK/run_shards" --data "$WORK/data/shards/val_*.bin" 2>/dev/null | loss_of)
wide=$("$ODYSSEY" eval --checkpoint "$WORK/run_shards" --data "$WORK/wide/val_*.bin" 2>/dev/null | loss_of)
[ -n "$narrow" ] && [ "$narrow" = "$wide" ] && echo "ok: eval over uint32 shards: $wide" ||
  fail "eval differs: uint16 $narrow, uint32 $wide"

# Ids 65536..65791 need a vocabulary of 65792: it trains; with the byte vocabulary it is refused.
tiny_config "$WORK/shifted" "$WORK/shifted.toml"
"$ODYSSEY" train --config "$WORK/shifted.toml" --set train.steps=2 --set model.vocab_size=65792 \
  --set train.threads=2 --set "checkpoint.dir=$WORK/run_shifted" >/dev/null 2>&1 && echo "ok: vocabulary 65792 trains" ||
  fail "train with vocabulary 65792"
grep -qE '"loss":[0-9]+\.[0-9]+' "$WORK/run_shifted/metrics.jsonl" 2>/dev/null || fail "no loss for vocabulary 65792"
expect_error "uint32 id above the vocabulary" "train_000000.bin.*token id 65[5-7][0-9][0-9] at byte offset 1024" \
  "$ODYSSEY" train --config "$WORK/shifted.toml" --set train.steps=2 --set "checkpoint.dir=$WORK/run_bad"
[ -e "$WORK/run_bad" ] && fail "a refused run wrote $WORK/run_bad"
finish
