# Resharding: a checkpoint written at dp=4 ZeRO-3 (np 4) resumes at dp=2 ZeRO-1 (np 2) and dp=1, and
# ones written at dp=1 and dp=2 ZeRO-1 resume at dp=4 ZeRO-3; the following losses match the
# uninterrupted run within relative 1e-5. (Layouts with sequence parallelism: checkpoint_reshard_sp.sh.)
source "$(dirname "$0")/common.sh" "$@"
tiny_setup
common=(--set train.steps=12 --set train.global_batch=4 --set train.micro_batch=1 --set data.shuffle=true
  --set parallel.bucket_mb=0.05)
# run NP STAGE DIR [more --set ...]
run() {
  local np=$1 stage=$2 dir=$3
  shift 3
  "${MPIRUN[@]}" -np "$np" "$ODYSSEY" train --config "$cfg" "${common[@]}" --set parallel.zero_stage=$stage \
    --set "checkpoint.dir=$dir" "$@" >/dev/null 2>"$WORK/err.txt" || fail "np $np ZeRO-$stage $dir: $(tail -3 "$WORK/err.txt")"
}
# close REF RUN NAME: steps 7..12 of RUN match REF within relative 1e-5.
close() {
  if python3 - "$1" "$2" <<'PY'; then
import json, sys
ref = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1]))}
got = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2]))}
steps = [s for s in range(7, 13)]
assert all(s in got for s in steps), sorted(got)
for s in steps:
    assert abs(ref[s] - got[s]) <= 1e-5 * abs(ref[s]), (s, ref[s], got[s])
PY
    echo "ok: $3: losses of steps 7-12 match the uninterrupted run (rel 1e-5)"
  else
    fail "$3: losses differ from the uninterrupted run"
  fi
}

run 4 3 "$WORK/ref"
run 4 3 "$WORK/w4" --set train.exit_after=6
[ "$(ls "$WORK"/w4/step_00000006/params.rank*.safetensors | wc -l)" -eq 4 ] || fail "dp=4 should write 4 params files"
for to in "2 1" "1 0"; do
  set -- $to
  cp -r "$WORK/w4" "$WORK/r$1"
  run "$1" "$2" "$WORK/r$1" --set checkpoint.resume=true
  grep -q "written at world size 4, ZeRO stage 3" "$WORK/err.txt" || fail "np $1 did not report resharding"
  close "$WORK/ref/metrics.jsonl" "$WORK/r$1/metrics.jsonl" "dp=4 ZeRO-3 -> dp=$1 ZeRO-$2"
done
for from in "1 0" "2 1"; do
  set -- $from
  run "$1" "$2" "$WORK/w$1" --set train.exit_after=6
  run 4 3 "$WORK/w$1" --set checkpoint.resume=true
  close "$WORK/ref/metrics.jsonl" "$WORK/w$1/metrics.jsonl" "dp=$1 ZeRO-$2 -> dp=4 ZeRO-3"
done
# The dense tools assemble any layout: eval of the dp=4 run's final checkpoint matches that of the
# resumed dp=1 run (equivalent runs, so within 1e-4).
a=$("$ODYSSEY" eval --checkpoint "$WORK/ref" --data "$WORK/data/shards/val_*.bin" 2>/dev/null | grep -oE '"loss":[0-9.e-]+' | cut -d: -f2)
b=$("$ODYSSEY" eval --checkpoint "$WORK/r1" --data "$WORK/data/shards/val_*.bin" 2>/dev/null | grep -oE '"loss":[0-9.e-]+' | cut -d: -f2)
python3 -c "import sys; a,b=float('$a'),float('$b'); sys.exit(abs(a-b) > 1e-4*abs(a))" &&
  echo "ok: eval on dp=4 and resharded dp=1 checkpoints: $a vs $b" || fail "eval: '$a' vs '$b'"
finish
