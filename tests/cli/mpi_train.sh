# Multi-rank training through the CLI: `mpirun -np 2 odyssey train` with ZeRO-2 (and ZeRO-3) gives the
# 1-rank losses (relative 1e-5) and writes one full checkpoint; a resumed ZeRO-3 run at np 2 is
# bit-identical to an uninterrupted one; impossible layouts are refused naming the keys.
source "$(dirname "$0")/common.sh" "$@"
tiny_setup
# global_batch 4 = 2 micro-steps x 1 row x 2 ranks; small buckets so several are in flight.
common=(--set train.steps=8 --set train.global_batch=4 --set train.micro_batch=1 --set data.shuffle=true
  --set parallel.bucket_mb=0.05)

"$ODYSSEY" train --config "$cfg" "${common[@]}" --set "checkpoint.dir=$WORK/one" >/dev/null 2>&1 || fail "1-rank run"
for stage in 2 3; do
  "${MPIRUN[@]}" -np 2 "$ODYSSEY" train --config "$cfg" "${common[@]}" --set parallel.zero_stage=$stage \
    --set "checkpoint.dir=$WORK/two_z$stage" >"$WORK/out_z$stage.json" 2>"$WORK/err_z$stage.txt" ||
    fail "2-rank ZeRO-$stage run: $(tail -3 "$WORK/err_z$stage.txt")"
  # Losses step by step, relative 1e-5; only rank 0 printed the result line and wrote metrics.
  if python3 - "$WORK/one/metrics.jsonl" "$WORK/two_z$stage/metrics.jsonl" <<'PY'; then
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 8, (len(a), len(b))
for x, y in zip(a, b):
    assert abs(x["loss"] - y["loss"]) <= 1e-5 * abs(x["loss"]), (x["step"], x["loss"], y["loss"])
assert b[-1]["comm"]["total_bytes"] > 0 and "by_kind" in b[-1]["comm"], b[-1]["comm"]
assert b[-1]["memory"]["optimizer"] < a[-1]["memory"]["optimizer"], (a[-1]["memory"], b[-1]["memory"])
PY
    echo "ok: np 2 ZeRO-$stage losses match the 1-rank run"
  else
    fail "np 2 ZeRO-$stage losses differ from the 1-rank run"
  fi
  [ "$(grep -c '"steps"' "$WORK/out_z$stage.json")" -eq 1 ] || fail "ZeRO-$stage: expected one result line"
  [ -f "$WORK/two_z$stage/step_00000008/v.rank00001.safetensors" ] || fail "ZeRO-$stage: no full checkpoint"
done

# MFU's denominator fixed by train.gemm_gflops (50 here, tiny_setup): logged as such, and MFU per token
# per second halves at twice the rate.
grep -q "peak of 100.0 GFLOP/s: 50.0 GFLOP/s per rank (train.gemm_gflops)" "$WORK/err_z2.txt" &&
  echo "ok: the peak is train.gemm_gflops" || fail "no 'peak of 100.0 GFLOP/s: 50.0 ... (train.gemm_gflops)' in the log"
"$ODYSSEY" train --config "$cfg" "${common[@]}" --set train.steps=2 --set train.gemm_gflops=100 \
  --set "checkpoint.dir=$WORK/rate100" >/dev/null 2>&1 || fail "1-rank run at train.gemm_gflops=100"
if python3 - "$WORK/one/metrics.jsonl" "$WORK/rate100/metrics.jsonl" <<'PY'; then
import json, sys
per_tps = [[r["mfu"] / r["tokens_per_s"] for r in map(json.loads, open(f))] for f in sys.argv[1:]]
assert all(abs(x / y - 2) < 1e-3 for x, y in zip(per_tps[0], per_tps[1])), per_tps
PY
  echo "ok: MFU is measured against train.gemm_gflops"
else
  fail "MFU does not scale with 1 / train.gemm_gflops"
fi

# Resume under ZeRO-3 at np 2: 4 steps, stop, 4 more equal 8 straight, bit for bit.
"${MPIRUN[@]}" -np 2 "$ODYSSEY" train --config "$cfg" "${common[@]}" --set parallel.zero_stage=3 \
  --set "checkpoint.dir=$WORK/split" --set train.exit_after=4 >/dev/null 2>&1 || fail "first half"
"${MPIRUN[@]}" -np 2 "$ODYSSEY" train --config "$cfg" "${common[@]}" --set parallel.zero_stage=3 \
  --set "checkpoint.dir=$WORK/split" --set checkpoint.resume=true >/dev/null 2>&1 || fail "resumed half"
strip() { sed -E 's/.*"grad_norm":([^,]*).*"loss":([^,]*).*"step":([0-9]+).*/\3 \2 \1/' "$1"; }
if diff <(strip "$WORK/two_z3/metrics.jsonl") <(strip "$WORK/split/metrics.jsonl") >/dev/null &&
  (for f in "$WORK"/two_z3/step_00000008/*.safetensors; do
    cmp -s "$f" "$WORK/split/step_00000008/$(basename "$f")" || exit 1
  done); then
  echo "ok: ZeRO-3 resume at np 2 bit-identical"
else
  fail "ZeRO-3 resume at np 2 differs"
fi

expect_error "dp does not fit the world" "parallel\.dp \(3\).*world size \(2\)" \
  "${MPIRUN[@]}" -np 2 "$ODYSSEY" train --config "$cfg" --set parallel.dp=3 --set "checkpoint.dir=$WORK/bad1"
expect_error "zero stage 5" "parallel\.zero_stage must be 0, 1, 2 or 3, got 5" \
  "${MPIRUN[@]}" -np 2 "$ODYSSEY" train --config "$cfg" --set parallel.zero_stage=5 --set "checkpoint.dir=$WORK/bad2"
[ ! -e "$WORK/bad1" ] && [ ! -e "$WORK/bad2" ] && echo "ok: nothing written" || fail "a refused run wrote files"
finish
