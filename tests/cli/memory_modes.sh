# Memory modes change no number: training with memory.checkpoint = cheap (norm outputs and the MLP
# activation recomputed), keep_attention or full (layers recomputed in their backward, the attention
# kept or not) and a chunked LM head gives, step for step,
# bitwise the losses, gradient norms and final checkpoint tensors of checkpoint = none with the same
# head chunk, in one process and under dp2 ZeRO-3, Ulysses 2 and ring 2 (zigzag) with ZeRO-3. With
# sequence-chunked layers (memory.chunk_tokens = 48: 128 rows per micro-batch and rank in chunks of
# 48, 48, 32) every policy is bitwise none with the same chunks, and within 1e-6 of the unchunked loss.
# The dry run accounts for less memory under keep_attention and less again under full, and less with
# smaller chunks; auto picks the fastest policy that fits the budget and says so.
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
$GEMM_RATE_LINE
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
  for policy in cheap keep_attention full; do
    run "$name.$policy" "$@" --set memory.checkpoint=$policy
    diff <(numbers "$name.none") <(numbers "$name.$policy") >/dev/null ||
      fail "$name: checkpoint=$policy differs from none: $(diff <(numbers "$name.none") <(numbers "$name.$policy") | head -4)"
    echo "ok: $name, checkpoint=$policy bitwise equal to none ($(grep -c step "$WORK/$name.none/metrics.jsonl") steps)"
  done
  for policy in none cheap keep_attention full; do
    run "$name.$policy.c48" "$@" --set memory.checkpoint=$policy --set memory.chunk_tokens=48
    [ $policy = none ] && continue
    diff <(numbers "$name.none.c48") <(numbers "$name.$policy.c48") >/dev/null ||
      fail "$name: chunked checkpoint=$policy differs from chunked none"
    echo "ok: $name, chunk_tokens=48, checkpoint=$policy bitwise equal to none with the same chunks"
  done
  paste <(grep -oE '"loss":[^,}]*' "$WORK/$name.none/metrics.jsonl" | cut -d: -f2) \
    <(grep -oE '"loss":[^,}]*' "$WORK/$name.none.c48/metrics.jsonl" | cut -d: -f2) |
    awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-6 * $1 || NF != 2) bad = 1; n++ } END { exit bad || n == 0 }' ||
    fail "$name: chunked losses not within 1e-6 of unchunked"
  echo "ok: $name, chunk_tokens=48 losses within 1e-6 relative of unchunked"
done
json() {  # the dry run's JSON line under a policy
  "$ODYSSEY" train --config "$cfg" --dry-run --set memory.checkpoint="$1" 2>/dev/null | grep dry_run
}
field() { grep -oE "\"$1\":[0-9]+" | cut -d: -f2; }
none=$(json none | field activation_bytes_per_rank) keep=$(json keep_attention | field activation_bytes_per_rank)
cheap=$(json cheap | field activation_bytes_per_rank)
full=$(json full | field activation_bytes_per_rank) state=$(json none | field state_bytes_per_rank)
[ -n "$none" ] && [ "$full" -lt "$keep" ] && [ "$keep" -lt "$cheap" ] && [ "$cheap" -lt "$none" ] &&
  echo "ok: dry run accounts $full bytes of activations under full, $keep under keep_attention, $cheap under cheap, $none under none" ||
  fail "dry run: not full ($full) < keep_attention ($keep) < cheap ($cheap) < none ($none)"
small=$("$ODYSSEY" train --config "$cfg" --dry-run --set memory.checkpoint=full --set memory.chunk_tokens=64 2>/dev/null |
  grep dry_run | field activation_bytes_per_rank)
[ -n "$small" ] && [ "$small" -lt "$full" ] && echo "ok: dry run accounts $small bytes under full with chunks of 64" ||
  fail "dry run: full with chunks of 64 ($small) not below one chunk ($full)"
expect_error "bad chunk" "memory.chunk_tokens must be >= 0" "$ODYSSEY" train --config "$cfg" \
  --set memory.chunk_tokens=-1 --set "checkpoint.dir=$WORK/bad"
# auto: with a budget that holds keep_attention's activations but not cheap's, auto picks keep_attention.
budget=$(awk -v s="$state" -v k="$keep" -v n="$cheap" 'BEGIN { printf "%.9f", (s + (k + n) / 2) / 2^30 }')
out=$("$ODYSSEY" train --config "$cfg" --dry-run --set memory.checkpoint=auto --set train.host_memory_gb="$budget" 2>&1)
grep -q 'memory.checkpoint = auto: keep_attention' <<<"$out" && grep -q '"checkpoint":"keep_attention"' <<<"$out" &&
  echo "ok: auto picks keep_attention under a $budget GiB budget" || fail "auto: $(tail -n 3 <<<"$out")"
# A budget holding the model state but not even full's activations: refused with full's numbers.
tight=$(awk -v s="$state" -v f="$full" 'BEGIN { printf "%.9f", (s + f / 2) / 2^30 }')
expect_error "nothing fits" "memory.checkpoint = full" "$ODYSSEY" train --config "$cfg" --dry-run \
  --set memory.checkpoint=auto --set train.host_memory_gb="$tight"
expect_error "bad policy" "memory.checkpoint: unknown value 'some' \\(none, cheap, keep_attention, full, auto\\)" "$ODYSSEY" train \
  --config "$cfg" --set memory.checkpoint=some --set "checkpoint.dir=$WORK/bad"
finish
