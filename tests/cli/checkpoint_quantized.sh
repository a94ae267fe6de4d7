# Exact resume with quantized communication at np 4 (two emulated nodes of two ranks): 12 steps straight
# equal 6 steps, stop, 6 resumed, bit for bit (losses and gradient norms), for qwd weights with tlq_hs
# gradients (ZeRO-2), int4 weights with int8 gradients (ZeRO-1) and qgz with int8 weights and hpZ
# (ZeRO-3). Stages 1-2 checkpoint the quantized model-weight replica next to the master ("weights"
# kind); a resume under another layout rebuilds it from the master and says so.
source "$(dirname "$0")/common.sh" "$@"
tiny_setup
common=(--set train.steps=12 --set train.global_batch=8 --set train.micro_batch=1 --set data.shuffle=true
  --set parallel.bucket_mb=0.05 --set parallel.ranks_per_node=2)
strip() { sed -E 's/.*"grad_norm":([^,]*).*"loss":([^,]*).*"step":([0-9]+).*/\3 \2 \1/' "$1"; }

configs=("qwd_tlq_hs_z2|--set parallel.zero_stage=2 --set comm.weights=qwd --set comm.grads=tlq_hs"
  "int4_int8_z1|--set parallel.zero_stage=1 --set comm.weights=int4 --set comm.grads=int8"
  "qgz_int8_hpz_z3|--set parallel.zero_stage=3 --set comm.weights=int8 --set comm.grads=qgz --set comm.hpz=true")
for entry in "${configs[@]}"; do
  name="${entry%%|*}"
  read -r -a q <<<"${entry#*|}"
  run() { "${MPIRUN[@]}" -np 4 "$ODYSSEY" train --config "$cfg" "${common[@]}" "${q[@]}" "$@"; }
  run --set "checkpoint.dir=$WORK/full_$name" >/dev/null 2>"$WORK/err.txt" ||
    fail "$name full run: $(tail -3 "$WORK/err.txt")"
  run --set "checkpoint.dir=$WORK/split_$name" --set train.exit_after=6 >/dev/null 2>"$WORK/err.txt" ||
    fail "$name first half: $(tail -3 "$WORK/err.txt")"
  run --set "checkpoint.dir=$WORK/split_$name" --set checkpoint.resume=true >/dev/null 2>"$WORK/err.txt" ||
    fail "$name resume: $(tail -3 "$WORK/err.txt")"
  if [ "$(strip "$WORK/full_$name/metrics.jsonl" | wc -l)" -eq 12 ] &&
    diff <(strip "$WORK/full_$name/metrics.jsonl") <(strip "$WORK/split_$name/metrics.jsonl") >/dev/null; then
    echo "ok: $name np 4: resumed losses and gradient norms bit-identical"
  else
    fail "$name np 4 resume differs: $(diff <(strip "$WORK/full_$name/metrics.jsonl") <(strip "$WORK/split_$name/metrics.jsonl") | head -4)"
  fi
done

# Stages 1-2 with quantized weights save the replica; stage 3 (no replica) does not.
[ "$(ls "$WORK"/split_qwd_tlq_hs_z2/step_00000006/weights.rank*.safetensors 2>/dev/null | wc -l)" -eq 4 ] &&
  [ "$(ls "$WORK"/split_qgz_int8_hpz_z3/step_00000006/weights.rank*.safetensors 2>/dev/null | wc -l)" -eq 0 ] &&
  echo "ok: the model-weight replica is saved by ZeRO-1/2 with comm.weights only" ||
  fail "weights files: $(ls "$WORK"/split_qwd_tlq_hs_z2/step_00000006 "$WORK"/split_qgz_int8_hpz_z3/step_00000006)"

# Another layout (dp 2) cannot restore the replica: it is rebuilt from the master, and the log says so.
mkdir -p "$WORK/other" && cp -r "$WORK/split_qwd_tlq_hs_z2/step_00000006" "$WORK/other/"
"${MPIRUN[@]}" -np 2 "$ODYSSEY" train --config "$cfg" "${common[@]}" --set parallel.zero_stage=2 \
  --set comm.weights=qwd --set comm.grads=tlq_hs --set parallel.ranks_per_node=1 --set "checkpoint.dir=$WORK/other" \
  --set checkpoint.resume=true --set train.exit_after=1 >/dev/null 2>"$WORK/err.txt" &&
  grep -q "rebuilt from the master weights" "$WORK/err.txt" &&
  echo "ok: resume at dp 2 rebuilds the replica from the master and logs it" ||
  fail "resume at dp 2: $(tail -3 "$WORK/err.txt")"
finish
