# Memory modes change no number: training with memory.checkpoint = full (layers recomputed in their
# backward) and a chunked LM head gives, step for step, bitwise the losses, gradient norms and final
# checkpoint tensors of checkpoint = none with the same head chunk, in one process and under dp2 ZeRO-3,
# Ulysses 2 and ring 2 (zigzag) with ZeRO-3. The dry run accounts for less memory under full.
source "$(dirname "$0")/common.sh" "$@"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
make_shards "$WORK/data"
cfg="$WORK/mem.toml"
cat >"$cfg" <<TOML
[model]
n_layer = 3
n_head = 4
d_model = 48
seq_len = 64
vocab_size = 256
[data]
train = "$WORK/data/shards/train_*.bin"
[train]
steps = 4
global_batch = 4
micro_batch = 2
lr = 1e-3
threads = 1
[memory]
head_chunk_tokens = 48
TOML
run() {  # run NAME NP ARGS...
  local name="$1" np="$2"
  shift 2
  mpirun -np "$np" --oversubscribe "$ODYSSEY" train --config "$cfg" --set "checkpoint.dir=$WORK/$name" "$@" \
    >"$WORK/$name.log" 2>&1 || fail "$name: exit code $? ($(tail -n 3 "$WORK/$name.log"))"
}
numbers() {  # the step, loss and gradient norm of every metrics line, and the checkpoint's tensor sums
  grep -oE '"(step|loss|grad_norm)":[^,}]*' "$WORK/$1/metrics.jsonl"
  (cd "$WORK/$1" && find . -name '*.safetensors' | sort | xargs sha256sum)
}
for layout in "single 1" "zero3 2 --set parallel.zero_stage=3" \
  "ulysses2 2 --set parallel.sp_ulysses=2 --set parallel.zero_stage=3" \
  "ring2 2 --set parallel.sp_ring=2 --set parallel.zero_stage=3"; do
  set -- $layout
  name=$1
  shift
  run "$name.none" "$@" --set memory.checkpoint=none
  run "$name.full" "$@" --set memory.checkpoint=full
  diff <(numbers "$name.none") <(numbers "$name.full") >/dev/null ||
    fail "$name: checkpoint=full differs from none: $(diff <(numbers "$name.none") <(numbers "$name.full") | head -4)"
  echo "ok: $name, checkpoint=full bitwise equal to none ($(grep -c step "$WORK/$name.none/metrics.jsonl") steps)"
done
acts() {
  "$ODYSSEY" train --config "$cfg" --dry-run --set memory.checkpoint="$1" 2>&1 |
    grep -oE '\+ [0-9.]+ GiB of activations' | grep -oE '[0-9.]+'
}
none=$(acts none) full=$(acts full)
awk -v n="$none" -v f="$full" 'BEGIN { exit !(f < n) }' || fail "dry run: full ($full GiB) not below none ($none GiB)"
echo "ok: dry run accounts $full GiB of activations under full, $none GiB under none"
expect_error "bad policy" "memory.checkpoint: unknown value 'some' \\(none, full\\)" "$ODYSSEY" train \
  --config "$cfg" --set memory.checkpoint=some --set "checkpoint.dir=$WORK/bad"
finish
