# Resharding with sequence parallelism (issue 7): a checkpoint written at dp=2 x sp_ulysses=2 with
# ZeRO-3 resumes at dp=4, dp=1 and sp_ring=4, and one written at sp_ring=4 resumes at dp=2 x
# sp_ulysses=2 ZeRO-3; the losses of the resumed steps match the uninterrupted run within 1e-5.
source "$(dirname "$0")/common.sh" "$@"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
make_shards "$WORK/data"
cfg="$WORK/sp.toml"
cat >"$cfg" <<TOML
[model]
n_layer = 2
n_head = 4
d_model = 32
seq_len = 32
vocab_size = 256
[data]
train = "$WORK/data/shards/train_*.bin"
shuffle = true
[train]
$GEMM_RATE_LINE
steps = 12
global_batch = 4
micro_batch = 1
lr = 1e-3
warmup_steps = 2
TOML
run() {  # run NP DIR [--set ...]
  local np=$1 dir=$2
  shift 2
  mpirun -np "$np" --oversubscribe "$ODYSSEY" train --config "$cfg" --set "checkpoint.dir=$dir" "$@" \
    >/dev/null 2>"$WORK/err.txt" || fail "np $np $dir: $(tail -n 3 "$WORK/err.txt")"
}
losses() { grep -oE '"loss":[^,}]*,.*"step":[0-9]+' "$1" | sed -E 's/"loss":([^,]*).*"step":([0-9]+)/\2 \1/'; }
close() {  # close RUN NAME: steps 7..12 match the reference within relative 1e-5
  if join <(losses "$WORK/ref/metrics.jsonl") <(losses "$1/metrics.jsonl") |
    awk '$1 >= 7 { d = $2 - $3; if (d < 0) d = -d; if (d > 1e-5 * $2) bad = 1; n++ } END { exit (bad || n != 6) }'; then
    echo "ok: $2: steps 7-12 match the uninterrupted run"
  else
    fail "$2: losses differ: $(join <(losses "$WORK/ref/metrics.jsonl") <(losses "$1/metrics.jsonl") | tail -n 3)"
  fi
}
hybrid=(--set parallel.dp=2 --set parallel.sp_ulysses=2 --set parallel.zero_stage=3)
run 4 "$WORK/ref" "${hybrid[@]}"
run 4 "$WORK/w" "${hybrid[@]}" --set train.exit_after=6
for to in "4 dp4 --set parallel.zero_stage=1" "1 dp1" "4 ring4 --set parallel.sp_ring=4"; do
  set -- $to
  np=$1 name=$2
  shift 2
  cp -r "$WORK/w" "$WORK/$name"
  run "$np" "$WORK/$name" --set checkpoint.resume=true "$@"
  close "$WORK/$name" "dp=2 x sp_ulysses=2 ZeRO-3 -> $name"
done
run 4 "$WORK/wr" --set parallel.sp_ring=4 --set train.exit_after=6
run 4 "$WORK/wr" --set checkpoint.resume=true "${hybrid[@]}"
close "$WORK/wr" "sp_ring=4 -> dp=2 x sp_ulysses=2 ZeRO-3"
finish
