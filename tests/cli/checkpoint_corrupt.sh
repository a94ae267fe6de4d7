# Corruption of a universal checkpoint (written at np 2 ZeRO-1): a flipped byte, a truncated file, a
# missing file and a manifest from a newer format are each refused, by resume, eval and inspect, with a
# message naming the file and the tensor (the manifest, for the format version).
source "$(dirname "$0")/common.sh" "$@"
tiny_setup
common=(--set train.steps=4 --set train.global_batch=4 --set train.micro_batch=1 --set parallel.zero_stage=1)
"${MPIRUN[@]}" -np 2 "$ODYSSEY" train --config "$cfg" "${common[@]}" --set "checkpoint.dir=$WORK/good" \
  >/dev/null 2>&1 || fail "training run"
"$ODYSSEY" checkpoint inspect "$WORK/good" >"$WORK/inspect.txt" 2>&1 && grep -q "0 problems" "$WORK/inspect.txt" &&
  echo "ok: inspect of the intact checkpoint passes" || fail "inspect of the intact checkpoint: $(tail -3 "$WORK/inspect.txt")"
grep -qE "^    wte \[256, 40\]" "$WORK/inspect.txt" && grep -qE "params +params.rank00000.safetensors \[0, " "$WORK/inspect.txt" ||
  fail "inspect does not list tensors with shapes and slices"

tensor="(wte|wpe|h\.[0-9]+\.[a-z_0-9.]+|ln_f\.[a-z]+)"
# corrupt NAME PATTERN HOW...: copy the run, damage it, expect every reader to refuse.
corrupt() {
  local name="$1" pattern="$2" how="$3"
  local run="$WORK/$name" ck
  cp -r "$WORK/good" "$run"
  ck="$run/step_00000004"
  (cd "$ck" && eval "$how")
  expect_error "$name: resume" "$pattern" "${MPIRUN[@]}" -np 2 "$ODYSSEY" train --config "$cfg" "${common[@]}" \
    --set train.steps=6 --set "checkpoint.dir=$run" --set checkpoint.resume=true
  expect_error "$name: eval" "$pattern" "$ODYSSEY" eval --checkpoint "$run" --data "$WORK/data/shards/val_*.bin"
  local out rc
  out=$("$ODYSSEY" checkpoint inspect "$ck" 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && grep -qE -- "$pattern" <<<"$out"; then echo "ok: $name: inspect exits $rc"; else fail "$name: inspect rc $rc: $(grep PROBLEM <<<"$out" | head -2)"; fi
}
# Byte 60000 of rank 1's params file is inside a tensor's data (params: eval reads them too; it
# never opens the moments).
corrupt flipped "params\.rank00001\.safetensors: tensor $tensor .*checksum" \
  'printf "\xff" | dd of=params.rank00001.safetensors bs=1 seek=60000 conv=notrunc status=none'
corrupt truncated "params\.rank00001\.safetensors: size .*affects $tensor" 'truncate -s -1000 params.rank00001.safetensors'
corrupt missing "v\.rank00000\.safetensors listed in the manifest is missing \(it holds the v slices of $tensor" \
  'rm v.rank00000.safetensors'
corrupt newer "manifest\.json: format_version 4 is newer than this build reads \(3\)" \
  'sed -i "s/\"format_version\": *2/\"format_version\": 4/" manifest.json'
finish
