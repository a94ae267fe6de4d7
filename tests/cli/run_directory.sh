# A run directory belongs to one run: a fresh run refuses another run's checkpoints and metrics
# (untouched) unless checkpoint.overwrite=true; an unwritable checkpoint.dir is refused before any
# training; a second job on a directory in use is refused by name; resume with nothing to resume says
# so. (Issue 18: ways to lose work found by a probe.)
source "$(dirname "$0")/common.sh" "$@"
tiny_setup
run="$WORK/run"
train() { "$ODYSSEY" train --config "$cfg" --set train.steps=2 --set "checkpoint.dir=$run" "$@"; }

train >/dev/null 2>&1 || fail "first run"
sum_before=$(cat "$run"/step_00000002/manifest.json "$run/metrics.jsonl" | md5sum)
expect_error "fresh run into another run's directory" \
  "checkpoint.dir .*run holds checkpoints of another run \(newest step_00000002\).*checkpoint.overwrite" \
  train --set train.seed=7
[ "$(cat "$run"/step_00000002/manifest.json "$run/metrics.jsonl" | md5sum)" = "$sum_before" ] &&
  echo "ok: the other run's checkpoint and metrics are untouched" || fail "the refused run changed the directory"

# Metrics alone (a run that died before its first save) also belong to another run.
mkdir -p "$WORK/metrics_only" && echo '{"step":1}' >"$WORK/metrics_only/metrics.jsonl"
expect_error "fresh run over another run's metrics" "holds another run's metrics" \
  "$ODYSSEY" train --config "$cfg" --set train.steps=1 --set "checkpoint.dir=$WORK/metrics_only"

out=$(train --set train.steps=1 --set checkpoint.overwrite=true 2>&1 >/dev/null) || fail "overwrite run: $out"
grep -q "removed the previous run's checkpoints" <<<"$out" && echo "ok: overwrite says what it removed" ||
  fail "overwrite does not say what it removed: $out"
[ -d "$run/step_00000001" ] && [ ! -d "$run/step_00000002" ] && [ "$(wc -l <"$run/metrics.jsonl")" = 1 ] &&
  echo "ok: overwrite replaced the old run" || fail "overwrite left the old run: $(ls -a "$run")"

# Resume with nothing to resume: trains from step 0 and says so.
out=$("$ODYSSEY" train --config "$cfg" --set train.steps=1 --set "checkpoint.dir=$WORK/empty" \
  --set checkpoint.resume=true 2>&1 >/dev/null) || fail "resume into an empty directory: $out"
grep -q "no checkpoint in .*empty yet; starting from step 0" <<<"$out" && echo "ok: resume without a checkpoint says so" ||
  fail "resume without a checkpoint is silent: $out"

# An unwritable run directory is refused before training (a file where a directory should be).
echo x >"$WORK/afile"
expect_error "checkpoint.dir under a file" "checkpoint.dir .*afile/run: cannot create the directory" \
  "$ODYSSEY" train --config "$cfg" --set train.steps=1 --set "checkpoint.dir=$WORK/afile/run"

# A second job on a directory in use is refused naming it (after waiting up to 10 s for the lock).
"$ODYSSEY" train --config "$cfg" --set train.steps=100000 --set "checkpoint.dir=$WORK/busy" >/dev/null 2>&1 &
first=$!
for _ in $(seq 1 300); do [ -s "$WORK/busy/metrics.jsonl" ] && break; sleep 0.1; done
expect_error "second job on a directory in use" "checkpoint.dir .*busy is in use by another running job" \
  "$ODYSSEY" train --config "$cfg" --set train.steps=1 --set "checkpoint.dir=$WORK/busy" --set checkpoint.resume=true
kill -KILL $first 2>/dev/null
wait $first 2>/dev/null
out=$("$ODYSSEY" train --config "$cfg" --set train.steps=1 --set "checkpoint.dir=$WORK/busy" \
  --set checkpoint.overwrite=true 2>&1 >/dev/null) && echo "ok: the lock is released when its job dies" ||
  fail "the directory stayed locked after its job was killed: $out"
finish
