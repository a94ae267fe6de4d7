# Sequence parallelism end to end: 10 training steps under sp_ulysses=4, sp_ring=4 (zigzag and
# contiguous), 2x2 hybrid, and dp=2 x sp=2 with ZeRO-3, give the single-process losses within
# relative 1e-5 (every step, and the final validation loss). Bad SP layouts are refused.
source "$(dirname "$0")/common.sh" "$@"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
make_shards "$WORK/data"
cfg="$WORK/sp.toml"
cat >"$cfg" <<TOML
[model]
n_layer = 2
n_head = 4
d_model = 48
seq_len = 64
vocab_size = 256
[data]
train = "$WORK/data/shards/train_*.bin"
val = "$WORK/data/shards/val_*.bin"
[train]
steps = 10
global_batch = 4
micro_batch = 2
lr = 1e-3
warmup_steps = 2
eval_rows = 8
threads = 1
TOML
run() {  # run NAME NP ARGS...: metrics in $WORK/NAME
  local name="$1" np="$2"
  shift 2
  mpirun -np "$np" --oversubscribe "$ODYSSEY" train --config "$cfg" --set "checkpoint.dir=$WORK/$name" "$@" \
    >"$WORK/$name.log" 2>&1 || fail "$name: exit code $? ($(tail -n 3 "$WORK/$name.log"))"
}
# compare NAME: every step's loss and the final val_loss within relative 1e-5 of the reference.
compare() {
  local name="$1"
  if paste -d' ' <(grep -oE '"loss":[^,}]*' "$WORK/ref/metrics.jsonl" | cut -d: -f2) \
    <(grep -oE '"loss":[^,}]*' "$WORK/$name/metrics.jsonl" | cut -d: -f2) |
    awk 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) bad = 1; n++ }
         END { exit (bad || n != 10) }' &&
    [ -n "$(grep -o '"val_loss":[^,}]*' "$WORK/$name/metrics.jsonl")" ] &&
    awk -v a="$(grep -oE '"val_loss":[^,}]*' "$WORK/ref/metrics.jsonl" | tail -n 1 | cut -d: -f2)" \
      -v b="$(grep -oE '"val_loss":[^,}]*' "$WORK/$name/metrics.jsonl" | tail -n 1 | cut -d: -f2)" \
      'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * a) }'; then
    echo "ok: $name matches the single-process losses"
  else
    fail "$name: losses differ from the single process"
    paste <(grep -oE '"loss":[^,}]*' "$WORK/ref/metrics.jsonl") <(grep -oE '"loss":[^,}]*' "$WORK/$name/metrics.jsonl") | head -3
  fi
}
run ref 1
run ulysses4 4 --set parallel.sp_ulysses=4
compare ulysses4
run ring4 4 --set parallel.sp_ring=4
compare ring4
run ring4_contiguous 4 --set parallel.sp_ring=4 --set parallel.sp_ring_layout=contiguous
compare ring4_contiguous
run hybrid 4 --set parallel.sp_ulysses=2 --set parallel.sp_ring=2
compare hybrid
run dp2_sp2_zero3 4 --set parallel.dp=2 --set parallel.sp_ulysses=2 --set parallel.zero_stage=3
compare dp2_sp2_zero3
run dp2_ring2_zero2 4 --set parallel.dp=2 --set parallel.sp_ring=2 --set parallel.zero_stage=2
compare dp2_ring2_zero2

expect_error "heads not divisible" "parallel.sp_ulysses \(4\).*model.n_head 6" \
  mpirun -np 4 --oversubscribe "$ODYSSEY" train --config "$cfg" --set parallel.sp_ulysses=4 --set model.n_head=6 --set checkpoint.dir="$WORK/x"
expect_error "sequence not divisible" "parallel.sp_ring \(4\).*train.seq_len 60" \
  mpirun -np 4 --oversubscribe "$ODYSSEY" train --config "$cfg" --set parallel.sp_ring=4 --set train.seq_len=60 --set checkpoint.dir="$WORK/x"
finish
