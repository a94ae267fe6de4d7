# `odyssey train --dry-run`: builds the layout, checks data and memory, prints the per-rank memory
# figures as JSON and writes nothing; the same memory check refuses a layout that cannot fit.
source "$(dirname "$0")/common.sh" "$@"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
make_shards "$WORK/data"
args=(--set model.n_layer=2 --set model.n_head=4 --set model.d_model=48 --set model.seq_len=256
  --set model.vocab_size=256 --set "data.train=$WORK/data/shards/train_*.bin" --set data.val=
  --set train.seq_len=256 --set train.global_batch=2 --set train.micro_batch=1 --set train.threads=1
  --set "checkpoint.dir=$WORK/run")
field() { python3 -c "import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])['$1'])"; }

out=$("$ODYSSEY" train --config "$ROOT/configs/tiny.toml" "${args[@]}" --dry-run 2>/dev/null) || fail "dry run exit code"
[ "$(field dry_run <<<"$out")" = True ] || fail "dry run: no dry_run in $out"
[ "$(field tokens_per_rank <<<"$out")" = 256 ] || fail "dry run: tokens_per_rank in $out"
[ -e "$WORK/run" ] && fail "dry run wrote $WORK/run"
one=$(field activation_bytes_per_rank <<<"$out")

# Ulysses over 2 ranks: half the tokens; the model's activations halve, plus the head-sharded tensors
# Ulysses saves (exact figures: tests/parallel/mpitest_sp_model.cpp); two ranks on the host.
out=$(mpirun -np 2 --oversubscribe "$ODYSSEY" train --config "$ROOT/configs/tiny.toml" "${args[@]}" \
  --set parallel.sp_ulysses=2 --set parallel.zero_stage=3 --dry-run 2>/dev/null) || fail "sp dry run exit code"
[ "$(field tokens_per_rank <<<"$out")" = 128 ] || fail "sp dry run: tokens_per_rank in $out"
[ "$(field ranks_on_host <<<"$out")" = 2 ] || fail "sp dry run: ranks_on_host in $out"
act=$(field activation_bytes_per_rank <<<"$out")
((act > one / 2 && act < one)) || fail "sp dry run: activations $act not between half and all of $one"
[ -e "$WORK/run" ] && fail "sp dry run wrote $WORK/run"

# Ulysses with query chunks (memory.chunk_tokens below the rank's 128 tokens) under full: no
# sequence-wide attention tensors, so less than the same layout with the attention whole.
ufull=(--set parallel.sp_ulysses=2 --set memory.checkpoint=full)
out=$(mpirun -np 2 --oversubscribe "$ODYSSEY" train --config "$ROOT/configs/tiny.toml" "${args[@]}" "${ufull[@]}" \
  --set memory.chunk_tokens=0 --dry-run 2>/dev/null) || fail "sp full dry run exit code"
whole=$(field activation_bytes_per_rank <<<"$out")
out=$(mpirun -np 2 --oversubscribe "$ODYSSEY" train --config "$ROOT/configs/tiny.toml" "${args[@]}" "${ufull[@]}" \
  --set memory.chunk_tokens=32 --dry-run 2>/dev/null) || fail "sp query-chunked dry run exit code"
chunked=$(field activation_bytes_per_rank <<<"$out")
((chunked < whole)) && echo "ok: query-chunked Ulysses accounts $chunked bytes per rank, $whole with the attention whole" ||
  fail "sp dry run: query-chunked $chunked not below whole $whole"

# Domino at tp 2 (TP-SP, the one row's 256 tokens: 128 rows per rank in two halves of 64): the layers
# as with memory.chunk_tokens = 64, plus its second reduction in flight (partial sums of a half's 128
# tokens, 48 wide, which reduce-scatter straight into the half's d(norm) rows) and a second half's
# d(norm) scratch (64 x 48): (128 + 64) x 48 x 4 bytes.
tp2=(mpirun -np 2 --oversubscribe "$ODYSSEY" train --config "$ROOT/configs/tiny.toml" "${args[@]}" --set parallel.tp=2
  --set memory.checkpoint=none --dry-run)
halves=$("${tp2[@]}" --set memory.chunk_tokens=64 2>/dev/null | tail -1 | field activation_bytes_per_rank) ||
  fail "tp2 dry run exit code"
log=$("${tp2[@]}" --set parallel.tp_overlap=domino --set parallel.domino_split=tokens 2>&1) ||
  fail "domino dry run exit code"
grep -q "tp_overlap = domino: each layer in two halves of 64 residual rows" <<<"$log" ||
  fail "domino dry run: no Domino line in $log"
domino=$(grep '^{' <<<"$log" | tail -1 | field activation_bytes_per_rank)
[ "$((domino - halves))" = $(((128 + 64) * 48 * 4)) ] && echo "ok: domino's dry run counts its second slot" ||
  fail "domino dry run: activations $domino vs $halves without Domino"
[ -e "$WORK/run" ] && fail "domino dry run wrote $WORK/run"

# Budgets that hold the model state (checked first, at construction) but not the activations.
expect_error "dry run over the budget" "train.seq_len 256 x train.micro_batch 1 does not fit on this host: 1 rank\(s\)" \
  "$ODYSSEY" train --config "$ROOT/configs/tiny.toml" "${args[@]}" --dry-run --set train.host_memory_gb=0.0015 \
  --set memory.checkpoint=none
expect_error "training over the budget" "does not fit on this host: 2 rank\(s\)" \
  mpirun -np 2 --oversubscribe "$ODYSSEY" train --config "$ROOT/configs/tiny.toml" "${args[@]}" \
  --set parallel.sp_ring=2 --set train.host_memory_gb=0.003 --set memory.checkpoint=none
[ -e "$WORK/run" ] && fail "a refused run wrote $WORK/run"

# --world-size N: a layout of N ranks sized in one process without building it (train/footprint.h): a
# 1,024-rank 70B Llama (dp 8 x tp 8 x pp 4 x Ulysses 4); the model state of its largest rank, ZeRO-1:
# full weights and gradients of its piece plus a 1/32 gradient shard, moments of that shard.
llama70b=(--set model.arch=llama --set model.n_layer=80 --set model.n_head=64 --set model.n_kv_head=8
  --set model.d_model=8192 --set model.d_ff=28672 --set model.seq_len=8192 --set model.vocab_size=128256
  --set model.tie_embeddings=false --set train.seq_len=0 --set train.global_batch=64 --set train.micro_batch=1
  --set parallel.tp=8 --set parallel.pp=4 --set parallel.sp_ulysses=4 --set parallel.zero_stage=1)
out=$("$ODYSSEY" train --config "$ROOT/configs/tiny.toml" "${args[@]}" "${llama70b[@]}" --dry-run --world-size 1024) ||
  fail "70B dry run at --world-size 1024: exit code"
[ "$(field world_size <<<"$out")" = 1024 ] || fail "70B dry run: world_size in $out"
params=$(field params_bytes <<<"$out") grads=$(field grads_bytes <<<"$out") moments=$(field optimizer_bytes <<<"$out")
[ "$grads" = "$((params + moments / 2))" ] && [ "$params" -gt 7000000000 ] && [ "$params" -lt 11000000000 ] &&
  echo "ok: 70B on 1,024 ranks sized in one process ($out)" || fail "70B dry run figures: $out"
expect_error "a world the layout does not divide" "must equal the world size \\(1000\\)" \
  "$ODYSSEY" train --config "$ROOT/configs/tiny.toml" "${args[@]}" "${llama70b[@]}" --dry-run --world-size 1000
finish
