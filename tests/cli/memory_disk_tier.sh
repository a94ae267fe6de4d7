# The disk tier changes no number: memory.tier = disk (the layer inputs kept by keep_attention and
# full written to a scratch file during the forward and read back during the backward) gives, step for
# step, bitwise the losses, gradient norms and final checkpoint tensors of the RAM tier with the same
# policy and chunks, in one process, under dp2 ZeRO-3, Ulysses 2 and ring 2 (zigzag) with ZeRO-3, and
# over a 2-stage pipeline (two micro-batches in flight, each with its own scratch file).
# Llama too, in one process and under Ulysses 2 x ZeRO-3; with chunk records (memory.chunk_tokens = 24)
# the backward reads each back while the layer above runs (bytes_read_late = 0 in the metrics).
# The scratch directories (one per rank) are gone after the run, and two jobs sharing memory.offload_dir
# at once do not disturb each other. A corrupt record fails the step by name and leaves the last
# checkpoint intact: resuming from it gives the same numbers. The dry run accounts two layer inputs in RAM and the rest on disk.
# Bad input is refused by key: a disk tier without a recomputing policy or without a directory, a
# directory that is not one, a disk budget too small.
source "$(dirname "$0")/common.sh" "$@"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
make_shards "$WORK/data"
cfg="$WORK/mem.toml"
cat >"$cfg" <<TOML
[model]
n_layer = 4
n_head = 4
d_model = 48
seq_len = 64
vocab_size = 256
[data]
train = "$WORK/data/shards/train_*.bin"
[train]
$GEMM_RATE_LINE
steps = 3
global_batch = 4
micro_batch = 2
lr = 1e-3
threads = 1
[memory]
head_chunk_tokens = 48
TOML
offload="$WORK/offload"
mkdir -p "$offload"
run() {  # run NAME NP ARGS...
  local name="$1" np="$2"
  shift 2
  mpirun -np "$np" --oversubscribe "$ODYSSEY" train --config "${CFG:-$cfg}" --set "checkpoint.dir=$WORK/$name" "$@" \
    >"$WORK/$name.log" 2>&1 || fail "$name: exit code $? ($(tail -n 3 "$WORK/$name.log"))"
}
numbers() {  # the step, loss and gradient norm of every metrics line, and the checkpoint's tensor sums
  grep -oE '"(step|loss|grad_norm)":[^,}]*' "$WORK/$1/metrics.jsonl"
  (cd "$WORK/$1" && find . -name '*.safetensors' | sort | xargs sha256sum)
}
same() {  # same A B WHAT
  if diff <(numbers "$1") <(numbers "$2") >/dev/null; then
    echo "ok: $3 ($(grep -c step "$WORK/$1/metrics.jsonl") steps)"
  else
    fail "$3: $(diff <(numbers "$1") <(numbers "$2") | head -4)"
  fi
}
disk=(--set memory.tier=disk --set "memory.offload_dir=$offload")
for layout in "single 1" "zero3 2 --set parallel.zero_stage=3" \
  "ulysses2 2 --set parallel.sp_ulysses=2 --set parallel.zero_stage=3" \
  "ring2 2 --set parallel.sp_ring=2 --set parallel.zero_stage=3" "pp2 2 --set parallel.pp=2"; do
  set -- $layout
  name=$1
  shift
  for policy in keep_attention full; do
    for chunk in 0 24; do  # 24: short last chunks (of 64 tokens, of Ulysses' 32: query-chunked)
      run "$name.$policy.$chunk.ram" "$@" --set memory.checkpoint=$policy --set memory.chunk_tokens=$chunk
      run "$name.$policy.$chunk.disk" "$@" --set memory.checkpoint=$policy --set memory.chunk_tokens=$chunk "${disk[@]}"
      same "$name.$policy.$chunk.ram" "$name.$policy.$chunk.disk" \
        "$name, checkpoint=$policy, chunk_tokens=$chunk: tier=disk bitwise equal to tier=ram"
    done
  done
done
# Llama (GQA, RoPE) with several chunk records per layer input, in one process and under Ulysses 2 x
# ZeRO-3 (query-chunked: 32 tokens a rank in chunks of 24 and 8).
sed -e 's/^n_layer = 4/arch = "llama"\nn_layer = 3\nn_kv_head = 2\nd_ff = 72/' "$cfg" >"$WORK/llama.toml"
for layout in "llama 1" "llama.ulysses2 2 --set parallel.sp_ulysses=2 --set parallel.zero_stage=3"; do
  set -- $layout
  name=$1
  shift
  CFG="$WORK/llama.toml" run "$name.ram" "$@" --set memory.checkpoint=full --set memory.chunk_tokens=24
  CFG="$WORK/llama.toml" run "$name.disk" "$@" --set memory.checkpoint=full --set memory.chunk_tokens=24 "${disk[@]}"
  same "$name.ram" "$name.disk" "$name, checkpoint=full, chunk_tokens=24: tier=disk bitwise equal to tier=ram"
done
# The backward reads every chunk record while the layer above runs: none read late, all read once.
for m in single.full.24.disk ulysses2.full.24.disk zero3.keep_attention.24.disk llama.disk; do
  io=$(grep -oE '"offload":\{[^}]*\}' "$WORK/$m/metrics.jsonl" | tail -n 1)
  w=$(grep -oE '"bytes_written":[0-9]+' <<<"$io" | cut -d: -f2)
  r=$(grep -oE '"bytes_read":[0-9]+' <<<"$io" | cut -d: -f2)
  [ -n "$w" ] && [ "$w" -gt 0 ] && [ "$w" = "$r" ] && grep -q '"bytes_read_late":0' <<<"$io" &&
    echo "ok: $m: $io" || fail "$m: offload metrics $io"
done
grep -q "memory.tier = disk: .* of layer inputs per rank in $offload/odyssey-.*-rank0-" "$WORK/single.full.0.disk.log" &&
  echo "ok: the run names its scratch directory" || fail "no scratch directory in $(head -5 "$WORK/single.full.0.disk.log")"
[ -z "$(ls -A "$offload")" ] && echo "ok: no scratch directory or file left in memory.offload_dir" ||
  fail "left in memory.offload_dir: $(ls -A "$offload")"

# Two jobs at once in the same memory.offload_dir: each its own directory, both bitwise as alone.
run shared.a 1 --set memory.checkpoint=full "${disk[@]}" &
run shared.b 2 --set memory.checkpoint=full --set parallel.zero_stage=3 "${disk[@]}" &
wait
same single.full.0.ram shared.a "a job sharing memory.offload_dir with another"
same zero3.full.0.ram shared.b "the other job sharing memory.offload_dir"
[ -z "$(ls -A "$offload")" ] || fail "left in memory.offload_dir after two jobs: $(ls -A "$offload")"

# Dry run: one layer input in RAM (the slot) instead of four (the embeddings' output and the outputs of
# layers 0-2; the last layer's output is in d(residual) in both tiers); three on disk (the inputs of
# layers 0-2: the last layer's stays in the slot).
json() { "$ODYSSEY" train --config "$cfg" --dry-run --set memory.checkpoint=full "$@" 2>/dev/null | grep dry_run; }
field() { grep -oE "\"$1\":\"?[0-9a-z]+" | cut -d: -f2 | tr -d '"'; }
ram=$(json | field activation_bytes_per_rank)
out=$(json "${disk[@]}")
act=$(field activation_bytes_per_rank <<<"$out") on_disk=$(field offload_bytes_per_rank <<<"$out")
# 2 x 64 tokens x 48 floats = 24576 bytes a layer input; 3 records of 24576 bytes (a multiple of 4096).
[ "$(field tier <<<"$out")" = disk ] && [ "$on_disk" = $((3 * 24576)) ] && [ $((ram - act)) = $((3 * 24576)) ] &&
  echo "ok: dry run: $act bytes in RAM (ram tier: $ram), $on_disk on disk" ||
  fail "dry run: ram $ram, disk tier $act in RAM and $on_disk on disk ($out)"

# A record that comes back corrupt mid-run (the test hook flips a byte of the 13th record written:
# step 3's first, the embeddings' output, 3 per micro-batch, 2 micro-batches a step) ends the run with
# an error naming the layer; the checkpoint of step 2 is intact and resuming from it gives, bitwise, the run that never failed.
ODYSSEY_OFFLOAD_CORRUPT=13 "$ODYSSEY" train --config "$cfg" --set memory.checkpoint=full "${disk[@]}" \
  --set checkpoint.every=2 --set "checkpoint.dir=$WORK/broken" >"$WORK/broken.log" 2>&1 &&
  fail "a corrupt record did not fail the run"
grep -q "error: the input of layer 0, chunk 0 of 1 .*memory.offload_dir) is corrupt" "$WORK/broken.log" &&
  grep -q "step     2/3" "$WORK/broken.log" && ! grep -q "step     3/3" "$WORK/broken.log" &&
  echo "ok: corrupt record in step 3 -> $(grep -o 'error: .*' "$WORK/broken.log" | head -c 160)" ||
  fail "corrupt record: $(tail -n 2 "$WORK/broken.log")"
[ -f "$WORK/broken/step_00000002/manifest.json" ] || fail "no intact step 2 checkpoint: $(ls "$WORK/broken")"
[ -z "$(ls -A "$offload")" ] || fail "left in memory.offload_dir after the failed run: $(ls -A "$offload")"
run broken 1 --set memory.checkpoint=full "${disk[@]}" --set checkpoint.resume=true --set checkpoint.every=2
grep -q "resumed from .*step_00000002" "$WORK/broken.log" || fail "did not resume from step 2: $(head -3 "$WORK/broken.log")"
run clean 1 --set memory.checkpoint=full --set checkpoint.every=2
same clean broken "resumed from step 2 after the failed step, bitwise the run that never failed"

# Bad input, each refused at start-up naming its key.
expect_error "disk tier with checkpoint none" "memory.tier = disk .* memory.checkpoint = none" "$ODYSSEY" train \
  --config "$cfg" --set memory.checkpoint=none "${disk[@]}" --set "checkpoint.dir=$WORK/bad"
expect_error "disk tier without a directory" "memory.tier = disk needs memory.offload_dir" "$ODYSSEY" train \
  --config "$cfg" --set memory.checkpoint=full --set memory.tier=disk --set "checkpoint.dir=$WORK/bad"
touch "$WORK/plain"
expect_error "offload_dir is a file" "memory.offload_dir '$WORK/plain'" "$ODYSSEY" train --config "$cfg" \
  --set memory.checkpoint=full --set memory.tier=disk --set "memory.offload_dir=$WORK/plain" --set "checkpoint.dir=$WORK/bad"
expect_error "offload_dir missing" "memory.offload_dir '$WORK/missing'" "$ODYSSEY" train --config "$cfg" \
  --set memory.checkpoint=full --set memory.tier=disk --set "memory.offload_dir=$WORK/missing" --set "checkpoint.dir=$WORK/bad"
expect_error "disk budget too small" "memory.disk_budget_gb = 1e-05 allows" "$ODYSSEY" train --config "$cfg" \
  --set memory.checkpoint=full "${disk[@]}" --set memory.disk_budget_gb=0.00001 --set "checkpoint.dir=$WORK/bad"
[ -e "$WORK/bad" ] && fail "a refused run wrote its checkpoint directory"
expect_error "bad tier" "memory.tier: unknown value 'tape' \\(ram, disk\\)" "$ODYSSEY" train --config "$cfg" \
  --set memory.tier=tape --set "checkpoint.dir=$WORK/bad"
finish
