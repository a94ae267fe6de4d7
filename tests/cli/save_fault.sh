# Faults during a save: the file system refuses the write (a file-size limit, RLIMIT_FSIZE, gives
# EFBIG exactly as a full disk gives ENOSPC, without root or a small tmpfs; and, when not running as
# root, a read-only run directory). Each time the run fails with exit code 1 and one error naming
# the file, no new step directory appears, and the previous checkpoint stays complete: inspect
# verifies it and resuming from it reaches the uninterrupted run's weights bit for bit.
source "$(dirname "$0")/common.sh" "$@"
make_shards "$WORK/data"
cfg="$WORK/tiny.toml"
tiny_config "$WORK/data/shards" "$cfg"
common=(--set train.steps=6 --set checkpoint.every=2 --set train.threads=1)
"$ODYSSEY" train --config "$cfg" "${common[@]}" --set "checkpoint.dir=$WORK/straight" >/dev/null 2>&1 ||
  fail "uninterrupted run"

# check_intact RUN CASE: step 2 complete and verified, no step 4, and resuming ends as the straight run.
check_intact() {
  local run="$1" name="$2"
  [ -e "$run/step_00000004" ] && fail "$name: a step_00000004 appeared"
  "$ODYSSEY" checkpoint inspect "$run/step_00000002" >"$WORK/$name.inspect" 2>&1 &&
    echo "ok: $name: step_00000002 intact (inspect passes)" ||
    fail "$name: step_00000002 damaged: $(grep PROBLEM "$WORK/$name.inspect" | head -2)"
  "$ODYSSEY" train --config "$cfg" "${common[@]}" --set "checkpoint.dir=$run" --set checkpoint.resume=true \
    >/dev/null 2>"$WORK/$name.resume" || fail "$name: resume: $(tail -2 "$WORK/$name.resume")"
  if (for f in "$WORK/straight/step_00000006"/*.safetensors; do cmp -s "$f" "$run/step_00000006/$(basename "$f")" || exit 1; done); then
    echo "ok: $name: resumed to step 6, bit-identical to the uninterrupted run"
  else
    fail "$name: resumed weights differ"
  fi
}

# expect_save_error NAME CMD...: exit code 1, one error line naming the run directory or a file in it.
expect_save_error() {
  local name="$1" out rc
  shift
  out=$("$@" 2>&1 >/dev/null)
  rc=$?
  if [ $rc -eq 1 ] && [ "$(grep -c 'error' <<<"$out")" -eq 1 ] &&
    grep -qE "odyssey: error: .*$WORK/(full|readonly)" <<<"$out"; then
    echo "ok: $name -> $out"
  else
    fail "$name: exit $rc, expected 1 and one error naming the file: $out"
  fi
}

# Disk full: run to step 2, then a file-size limit below one params file (the tiny model's is
# ~200 KB; metrics lines stay far below it) for the rest. SIGXFSZ ignored: write(2) returns EFBIG.
run="$WORK/full"
"$ODYSSEY" train --config "$cfg" "${common[@]}" --set "checkpoint.dir=$run" --set train.exit_after=2 >/dev/null 2>&1 ||
  fail "first two steps"
expect_save_error "file system full during a save" \
  env PMIX_MCA_gds=hash bash -c 'trap "" XFSZ; ulimit -f 64; exec "$@"' _ "$ODYSSEY" train --config "$cfg" "${common[@]}" \
  --set "checkpoint.dir=$run" --set checkpoint.resume=true
ls -d "$run"/.step_*.tmp >/dev/null 2>&1 && echo "ok: the failed save left only a temporary directory"
check_intact "$run" "disk full"

# Read-only run directory (root writes regardless of permissions: checked only as another user).
if [ "$(id -u)" -ne 0 ]; then
  run="$WORK/readonly"
  "$ODYSSEY" train --config "$cfg" "${common[@]}" --set "checkpoint.dir=$run" --set train.exit_after=2 >/dev/null 2>&1 ||
    fail "first two steps"
  chmod a-w "$run"
  expect_save_error "read-only run directory" "$ODYSSEY" train --config "$cfg" "${common[@]}" \
    --set "checkpoint.dir=$run" --set checkpoint.resume=true
  chmod u+w "$run"
  check_intact "$run" "read-only"
else
  echo "skipped: read-only directory (running as root, which ignores permissions)"
fi
finish
