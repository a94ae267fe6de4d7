# Sequence parallelism end to end: 10 training steps under sp_ulysses=4, sp_ring=4 (zigzag and
# contiguous), 2x2 hybrid, and dp=2 x sp=2 with ZeRO-3, give the single-process losses within
# relative 1e-5 (every step, and the final validation loss). With memory.chunk_tokens (12: each
# rank's 64 / U tokens end in a short chunk), query-chunked Ulysses (2 and 4, GPT-2 and Llama with 2
# key/value heads, checkpoint none and full, dp=2 x sp=2 with ZeRO-3, tp=2 without TP-SP x sp=2, pp=2 x
# sp=2) gives the single-process losses with the same chunks within relative 1e-6, as do ring 4, ring 2
# (Llama), the 2x2 hybrid and dp=2 x ring 2 with ZeRO-3 in §4.8's key-outer form. Bad SP layouts are
# refused.
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
$GEMM_RATE_LINE
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
# compare NAME [REF [TOL]]: every step's loss and the final val_loss within relative TOL (1e-5) of
# REF's (ref).
compare() {
  local name="$1" ref="${2:-ref}" tol="${3:-1e-5}"
  if paste -d' ' <(grep -oE '"loss":[^,}]*' "$WORK/$ref/metrics.jsonl" | cut -d: -f2) \
    <(grep -oE '"loss":[^,}]*' "$WORK/$name/metrics.jsonl" | cut -d: -f2) |
    awk -v tol="$tol" 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > tol * $1) bad = 1; n++ }
         END { exit (bad || n != 10) }' &&
    [ -n "$(grep -o '"val_loss":[^,}]*' "$WORK/$name/metrics.jsonl")" ] &&
    awk -v a="$(grep -oE '"val_loss":[^,}]*' "$WORK/$ref/metrics.jsonl" | tail -n 1 | cut -d: -f2)" \
      -v b="$(grep -oE '"val_loss":[^,}]*' "$WORK/$name/metrics.jsonl" | tail -n 1 | cut -d: -f2)" -v tol="$tol" \
      'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= tol * a) }'; then
    echo "ok: $name matches the single-process losses of $ref (relative $tol)"
  else
    fail "$name: losses differ from the single process ($ref, relative $tol)"
    paste <(grep -oE '"loss":[^,}]*' "$WORK/$ref/metrics.jsonl") <(grep -oE '"loss":[^,}]*' "$WORK/$name/metrics.jsonl") | head -3
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

# Query-chunked Ulysses against one process with the same chunks; the ring chunks its token-local ops.
chunks=(--set memory.chunk_tokens=12)
llama=(--set model.arch=llama --set model.n_kv_head=2 --set model.d_ff=96)
for policy in none full; do
  run "ref.$policy" 1 "${chunks[@]}" --set memory.checkpoint=$policy
  run "ulysses4.chunks.$policy" 4 --set parallel.sp_ulysses=4 "${chunks[@]}" --set memory.checkpoint=$policy
  compare "ulysses4.chunks.$policy" "ref.$policy" 1e-6
  run "ulysses2.chunks.$policy" 2 --set parallel.sp_ulysses=2 "${chunks[@]}" --set memory.checkpoint=$policy
  compare "ulysses2.chunks.$policy" "ref.$policy" 1e-6
  run "llama.ref.$policy" 1 "${llama[@]}" "${chunks[@]}" --set memory.checkpoint=$policy
  run "llama.ulysses4.chunks.$policy" 4 "${llama[@]}" --set parallel.sp_ulysses=4 "${chunks[@]}" \
    --set memory.checkpoint=$policy
  compare "llama.ulysses4.chunks.$policy" "llama.ref.$policy" 1e-6
done
run dp2_sp2_zero3.chunks 4 --set parallel.dp=2 --set parallel.sp_ulysses=2 --set parallel.zero_stage=3 \
  "${chunks[@]}" --set memory.checkpoint=full
compare dp2_sp2_zero3.chunks ref.full 1e-6
run tp2_ulysses2.chunks 4 --set parallel.tp=2 --set parallel.tp_sp=false --set parallel.sp_ulysses=2 \
  "${chunks[@]}" --set memory.checkpoint=full
compare tp2_ulysses2.chunks ref.full 1e-6
run pp2_ulysses2.chunks 4 --set parallel.pp=2 --set parallel.sp_ulysses=2 "${chunks[@]}" --set memory.checkpoint=full
compare pp2_ulysses2.chunks ref.full 1e-6
# Ring and the hybrid in §4.8's key-outer form (token-local ops per chunk, the op's backward writing
# the gradient over the layer's qkv) against one process with the same chunks.
run ring4.chunks 4 --set parallel.sp_ring=4 "${chunks[@]}" --set memory.checkpoint=full
compare ring4.chunks ref.full 1e-6
run hybrid.chunks 4 --set parallel.sp_ulysses=2 --set parallel.sp_ring=2 "${chunks[@]}" --set memory.checkpoint=full
compare hybrid.chunks ref.full 1e-6
run llama.ring2.chunks 2 "${llama[@]}" --set parallel.sp_ring=2 "${chunks[@]}" --set memory.checkpoint=full
compare llama.ring2.chunks llama.ref.full 1e-6
run dp2_ring2_zero3.chunks 4 --set parallel.dp=2 --set parallel.sp_ring=2 --set parallel.zero_stage=3 \
  "${chunks[@]}" --set memory.checkpoint=full
compare dp2_ring2_zero3.chunks ref.full 1e-6

expect_error "heads not divisible" "parallel.sp_ulysses \(4\).*model.n_head 6" \
  mpirun -np 4 --oversubscribe "$ODYSSEY" train --config "$cfg" --set parallel.sp_ulysses=4 --set model.n_head=6 --set checkpoint.dir="$WORK/x"
expect_error "sequence not divisible" "parallel.sp_ring \(4\).*train.seq_len 60" \
  mpirun -np 4 --oversubscribe "$ODYSSEY" train --config "$cfg" --set parallel.sp_ring=4 --set train.seq_len=60 --set checkpoint.dir="$WORK/x"
finish
