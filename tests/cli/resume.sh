# Resume: 20 steps in one run equal 10 steps, stop, and 10 resumed steps, bit for bit (losses, gradient
# norms and final weights). Also: eval, generate and export/import run on the result.
source "$(dirname "$0")/common.sh" "$@"
make_shards "$WORK/data"
cfg="$WORK/tiny.toml"
sed -e "s|cache/brown/bytes|$WORK/data/shards|g" "$ROOT/configs/tiny.toml" >"$cfg"
common=(--set train.steps=20 --set data.shuffle=true --set train.threads=2)

"$ODYSSEY" train --config "$cfg" "${common[@]}" --set "checkpoint.dir=$WORK/full" >/dev/null 2>"$WORK/full.log" ||
  fail "full run"
# Without train.gemm_gflops MFU divides by the hardware peak of the rank's cores (train/mfu.h): logged
# with its factors, and every step's MFU in (0, 1].
grep -qE "MFU against a peak of [0-9.]+ GFLOP/s: .* GFLOP/s per core" "$WORK/full.log" &&
  python3 -c 'import json, sys; assert all(0 < json.loads(l)["mfu"] <= 1 for l in open(sys.argv[1]))' \
    "$WORK/full/metrics.jsonl" && echo "ok: MFU against the hardware peak, in (0, 1]" ||
  fail "no hardware peak in the log, or an MFU outside (0, 1]"
"$ODYSSEY" train --config "$cfg" "${common[@]}" --set "checkpoint.dir=$WORK/split" --set train.exit_after=10 \
  >/dev/null 2>&1 || fail "first half"
[ -d "$WORK/split/step_00000010" ] || fail "no checkpoint at step 10"
"$ODYSSEY" train --config "$cfg" "${common[@]}" --set "checkpoint.dir=$WORK/split" --set checkpoint.resume=true \
  >/dev/null 2>&1 || fail "resumed half"

# Compare step, loss and grad_norm of every line (timings differ), and the final weights byte for byte.
strip() { sed -E 's/.*"grad_norm":([^,]*).*"loss":([^,]*).*"step":([0-9]+).*/\3 \2 \1/' "$1"; }
if diff <(strip "$WORK/full/metrics.jsonl") <(strip "$WORK/split/metrics.jsonl") >/dev/null; then
  echo "ok: losses and gradient norms identical over 20 steps"
else
  fail "metrics differ: $(diff <(strip "$WORK/full/metrics.jsonl") <(strip "$WORK/split/metrics.jsonl") | head -5)"
fi
[ "$(wc -l <"$WORK/split/metrics.jsonl")" -eq 20 ] || fail "resumed metrics should have 20 lines"
if (for k in params m v; do
  cmp -s "$WORK/full/step_00000020/$k.rank00000.safetensors" "$WORK/split/step_00000020/$k.rank00000.safetensors" || exit 1
done); then
  echo "ok: final weights and optimizer state bit-identical"
else
  fail "final checkpoints differ"
fi

# eval prints JSON with a finite loss; generate produces text; export/import round trip keeps the loss.
loss=$("$ODYSSEY" eval --checkpoint "$WORK/full" --data "$WORK/data/shards/val_*.bin" 2>/dev/null)
grep -qE '"loss":[0-9]+\.[0-9]+' <<<"$loss" && echo "ok: eval $loss" || fail "eval output: $loss"
text=$("$ODYSSEY" generate --checkpoint "$WORK/full" --prompt "The quick" --max-tokens 20 --top-k 5 2>/dev/null)
[ "${#text}" -ge 20 ] && echo "ok: generate: $text" || fail "generate output too short: $text"
"$ODYSSEY" export --checkpoint "$WORK/full" --to hf-gpt2 --output "$WORK/hf" 2>/dev/null || fail "export"
"$ODYSSEY" import --from hf-gpt2 --input "$WORK/hf" --output "$WORK/imported" 2>/dev/null || fail "import"
loss2=$("$ODYSSEY" eval --checkpoint "$WORK/imported" --data "$WORK/data/shards/val_*.bin" 2>/dev/null)
[ "$(grep -oE '"loss":[^,]*' <<<"$loss")" = "$(grep -oE '"loss":[^,]*' <<<"$loss2")" ] &&
  echo "ok: imported model has the same eval loss" || fail "eval after import: $loss2 vs $loss"
finish
