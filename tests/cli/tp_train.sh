# Tensor parallelism end to end (tensor-pipeline-parallelism.md §1, §4): GPT-2 (tied, a vocabulary of
# 257 that tp 2 and 4 must pad) and Llama (GQA: 4 heads, 2 key/value heads, replicated at tp 4), 10
# steps at tp 2 and 4 with Megatron sequence parallelism (the default) and without it, tp2 x dp2 under
# ZeRO-1 and ZeRO-3, tp2 x Ulysses 2, tp2 x ring 2, tp2 x pp2 (1F1B and zb1), and memory.checkpoint =
# full and sequence chunks under TP-SP and under plain TP: every step's loss and the validation loss
# within relative 1e-5 of the single process (tp2 x dp2 with quantized ZeRO-2 communication within
# 1e-2). Checkpoints written at tp2 x dp2 resume at tp1, tp4 and dp4, one written at pp2 at tp2 and one
# at tp2 x pp2 at one process. Domino (rows and tokens, with and without TP-SP, and tp2 x dp2 ZeRO-1)
# within 1e-5 as well, with the same tp bytes, and at tp2 bitwise equal to its halves run in order. The metrics carry the tp group's bytes; a tp rank holds
# about half the weights; impossible layouts are refused naming the key. Qwen2 (q, k, v biases, tied) at
# tp 2, 4, over chunks, with dp2 ZeRO-3, pp2 and Domino within 1e-6.
source "$(dirname "$0")/common.sh" "$@"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
make_shards "$WORK/data"
norms() { grep -oE '"grad_norm":[^,}]*' "$WORK/$1/metrics.jsonl" | cut -d: -f2; }
compare_all() {  # compare_all NAME REF: the step losses, gradient norms and the final validation loss
  compare "$1" "$2"
  if paste -d' ' <(norms "$2") <(norms "$1") |
    awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * $1) bad = 1; n++ } END { exit (bad || n != 10) }'; then
    echo "ok: $1 gradient norms match"
  else
    fail "$1: gradient norms differ from $2's: $(paste <(norms "$2") <(norms "$1") | head -3 | tr '\n' ' ')"
  fi
  within_1e5 "$(val_loss "$2")" "$(val_loss "$1")" && echo "ok: $1 validation loss matches" ||
    fail "$1: validation loss $(val_loss "$1") vs $(val_loss "$2")"
}

for arch in gpt2 llama; do
  small_model_config $arch 4 3 257 'grad_clip = 1.0'
  cfg="$WORK/$arch.toml"
  run ${arch}_ref 1
  run ${arch}_tp2 2 --set parallel.tp=2
  compare_all ${arch}_tp2 ${arch}_ref
  run ${arch}_tp2_nosp 2 --set parallel.tp=2 --set parallel.tp_sp=false
  compare_all ${arch}_tp2_nosp ${arch}_ref
  run ${arch}_tp4 4 --set parallel.tp=4
  compare_all ${arch}_tp4 ${arch}_ref
  run ${arch}_tp4_nosp 4 --set parallel.tp=4 --set parallel.tp_sp=false
  compare_all ${arch}_tp4_nosp ${arch}_ref
  for zero in 1 3; do
    run ${arch}_tp2_dp2_z$zero 4 --set parallel.tp=2 --set parallel.dp=2 --set parallel.zero_stage=$zero
    compare_all ${arch}_tp2_dp2_z$zero ${arch}_ref
  done
  run ${arch}_tp2_ulysses2 4 --set parallel.tp=2 --set parallel.sp_ulysses=2
  compare_all ${arch}_tp2_ulysses2 ${arch}_ref
  run ${arch}_tp2_ring2 4 --set parallel.tp=2 --set parallel.sp_ring=2
  compare_all ${arch}_tp2_ring2 ${arch}_ref
  run ${arch}_tp2_pp2 4 --set parallel.tp=2 --set parallel.pp=2
  compare_all ${arch}_tp2_pp2 ${arch}_ref
  run ${arch}_tp2_pp2_zb1 4 --set parallel.tp=2 --set parallel.pp=2 --set parallel.pp_schedule=zb1
  compare_all ${arch}_tp2_pp2_zb1 ${arch}_ref
  # The memory modes: full recomputation under TP-SP; TP-SP over sequence chunks (a rank's 32 rows in
  # chunks of 24, its 16 rows at tp 4 in chunks of 5: short last chunks, tokens interleaved by chunk,
  # the LM head in chunks of 9); plain TP over sequence chunks of 24 rows (query-chunked attention over
  # the K/V prefix, a short last chunk).
  run ${arch}_tp2_full 2 --set parallel.tp=2 --set memory.checkpoint=full
  compare_all ${arch}_tp2_full ${arch}_ref
  run ${arch}_tp2_chunks 2 --set parallel.tp=2 --set memory.checkpoint=full --set memory.chunk_tokens=24
  compare_all ${arch}_tp2_chunks ${arch}_ref
  run ${arch}_tp4_chunks 4 --set parallel.tp=4 --set memory.checkpoint=cheap --set memory.chunk_tokens=5 \
    --set memory.head_chunk_tokens=9
  compare_all ${arch}_tp4_chunks ${arch}_ref
  run ${arch}_tp2_nosp_chunks 2 --set parallel.tp=2 --set parallel.tp_sp=false --set memory.checkpoint=full \
    --set memory.chunk_tokens=24
  compare_all ${arch}_tp2_nosp_chunks ${arch}_ref

  # Domino (parallel.tp_overlap = domino): two halves of the rows (micro-batches of 2 rows) or of one
  # row's tokens (micro-batches of 1, against the single process with the same micro-batches), with and
  # without TP-SP, and tp2 x dp2 under ZeRO-1. The tp bytes are those without Domino; the metrics
  # report the hidden fraction.
  run ${arch}_tp2_domino 2 --set parallel.tp=2 --set parallel.tp_overlap=domino
  compare_all ${arch}_tp2_domino ${arch}_ref
  run ${arch}_tp2_nosp_domino 2 --set parallel.tp=2 --set parallel.tp_sp=false --set parallel.tp_overlap=domino
  compare_all ${arch}_tp2_nosp_domino ${arch}_ref
  run ${arch}_ref_mb1 1 --set train.micro_batch=1
  for sp in true false; do
    run ${arch}_tp2_domino_tokens_$sp 2 --set parallel.tp=2 --set parallel.tp_sp=$sp --set train.micro_batch=1 \
      --set parallel.tp_overlap=domino --set parallel.domino_split=tokens
    compare_all ${arch}_tp2_domino_tokens_$sp ${arch}_ref_mb1
  done
  run ${arch}_tp2_dp2_z1_domino 4 --set parallel.tp=2 --set parallel.dp=2 --set parallel.zero_stage=1 \
    --set parallel.tp_overlap=domino
  compare_all ${arch}_tp2_dp2_z1_domino ${arch}_ref
  # Spec §6.13: at tp 2 (a sum of two values does not depend on the collective's algorithm) Domino gives
  # the bits of the same halves run one after the other (memory.chunk_tokens = half a rank's rows: 16
  # under TP-SP, 32 without): every loss, the validation loss and the final weights and Adam moments.
  for sp in true false; do
    half=16 && [ $sp = false ] && half=32
    run ${arch}_tp2_halves_$sp 2 --set parallel.tp=2 --set parallel.tp_sp=$sp --set memory.chunk_tokens=$half
    domino=${arch}_tp2_domino && [ $sp = false ] && domino=${arch}_tp2_nosp_domino
    numbers() { grep -oE '"(loss|val_loss)":[^,}]*' "$WORK/$1/metrics.jsonl"; }
    same=1
    [ "$(numbers $domino)" = "$(numbers ${arch}_tp2_halves_$sp)" ] || same=0
    for f in params m v; do for r in 0 1; do
      cmp -s "$WORK/$domino/step_00000010/$f.rank0000$r.safetensors" \
        "$WORK/${arch}_tp2_halves_$sp/step_00000010/$f.rank0000$r.safetensors" || same=0
    done; done
    [ $same = 1 ] && echo "ok: $domino bitwise equal to the halves in order (losses, weights, moments)" ||
      fail "$domino differs from ${arch}_tp2_halves_$sp"
  done
  tp_bytes() { grep -oE '"tp":\{"bytes":[0-9]+' "$WORK/$1/metrics.jsonl" | head -1 | grep -oE '[0-9]+$'; }
  [ -n "$(tp_bytes ${arch}_tp2)" ] && [ "$(tp_bytes ${arch}_tp2_domino)" = "$(tp_bytes ${arch}_tp2)" ] &&
    echo "ok: ${arch} domino moves the same tp bytes ($(tp_bytes ${arch}_tp2))" ||
    fail "${arch}: domino tp bytes $(tp_bytes ${arch}_tp2_domino) vs $(tp_bytes ${arch}_tp2)"
  [ "$(grep -c '"tp_hidden_fraction":[01]' "$WORK/${arch}_tp2_domino/metrics.jsonl")" = 10 ] &&
    grep -q "tp hidden" "$WORK/${arch}_tp2_domino.log" && echo "ok: ${arch} domino reports tp_hidden_fraction" ||
    fail "${arch}: no tp_hidden_fraction in every step: $(head -c 300 "$WORK/${arch}_tp2_domino/metrics.jsonl")"

  # A checkpoint written at tp2 x dp2 (ZeRO-1) after 4 steps resumes at tp1, tp4 and dp4 to step 10;
  # one written at pp2 resumes at tp2, one at tp2 x pp2 at one process.
  run ${arch}_part 4 --set parallel.tp=2 --set parallel.dp=2 --set parallel.zero_stage=1 --set train.exit_after=4
  grep -q '"format_version": *3' "$WORK/${arch}_part/step_00000004/manifest.json" && echo "ok: tp checkpoint is format 3" ||
    fail "${arch}: the tp2 checkpoint is not format 3"
  for at in tp4 dp4; do cp -r "$WORK/${arch}_part" "$WORK/${arch}_part_$at"; done
  run ${arch}_part 1 --set checkpoint.resume=true
  compare_all ${arch}_part ${arch}_ref
  run ${arch}_part_tp4 4 --set parallel.tp=4 --set checkpoint.resume=true
  compare_all ${arch}_part_tp4 ${arch}_ref
  run ${arch}_part_dp4 4 --set parallel.dp=4 --set parallel.zero_stage=1 --set checkpoint.resume=true
  compare_all ${arch}_part_dp4 ${arch}_ref
  run ${arch}_pp_part 2 --set parallel.pp=2 --set train.exit_after=4
  run ${arch}_pp_part 2 --set parallel.tp=2 --set checkpoint.resume=true
  compare_all ${arch}_pp_part ${arch}_ref
  run ${arch}_tppp_part 4 --set parallel.tp=2 --set parallel.pp=2 --set train.exit_after=4
  run ${arch}_tppp_part 1 --set checkpoint.resume=true
  compare_all ${arch}_tppp_part ${arch}_ref
done

# Qwen2 (Llama's block with q, k, v biases, tied head) through the same seams: TP-SP at tp 2 and 4, plain
# TP over sequence chunks, tp2 x dp2 ZeRO-3, tp2 x pp2 and Domino, every step within 1e-6 of one process.
small_model_config qwen2 4 3 257 'grad_clip = 1.0'
cfg="$WORK/qwen2.toml"
run qwen2_ref 1
run_compared qwen2_tp2 2 qwen2_ref 1e-6 --set parallel.tp=2
run_compared qwen2_tp4 4 qwen2_ref 1e-6 --set parallel.tp=4
run_compared qwen2_tp2_nosp_chunks 2 qwen2_ref 1e-6 --set parallel.tp=2 --set parallel.tp_sp=false \
  --set memory.checkpoint=full --set memory.chunk_tokens=24
run_compared qwen2_tp2_dp2_z3 4 qwen2_ref 1e-6 --set parallel.tp=2 --set parallel.dp=2 --set parallel.zero_stage=3
run_compared qwen2_tp2_pp2 4 qwen2_ref 1e-6 --set parallel.tp=2 --set parallel.pp=2
run_compared qwen2_tp2_domino 2 qwen2_ref 1e-6 --set parallel.tp=2 --set parallel.tp_overlap=domino

# Quantized communication of a tp rank's shard (ZeRO-2 over dp: int8 weights, int4 gradients) runs,
# its losses within the quantization's error (1e-2 relative) of the single process.
cfg="$WORK/gpt2.toml"
run gpt2_tp2_dp2_quantized 4 --set parallel.tp=2 --set parallel.dp=2 --set parallel.zero_stage=2 \
  --set comm.weights=int8 --set comm.grads=int4
if paste -d' ' <(losses gpt2_ref) <(losses gpt2_tp2_dp2_quantized) |
  awk 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-2 * $1) bad = 1; n++ } END { exit (bad || n != 10) }'; then
  echo "ok: tp2 x dp2 with quantized ZeRO-2 communication within 1e-2"
else
  fail "tp2 x dp2 quantized: $(paste <(losses gpt2_ref) <(losses gpt2_tp2_dp2_quantized) | head -3 | tr '\n' ' ')"
fi

# The metrics carry the tp group's traffic, and a tp rank holds about half the weights.
grep -q '"tp":{"bytes":[1-9]' "$WORK/gpt2_tp2/metrics.jsonl" && echo "ok: comm.by_group has tp bytes" ||
  fail "no tp bytes in comm.by_group: $(head -c 300 "$WORK/gpt2_tp2/metrics.jsonl")"
p1=$(grep -oE 'params [0-9.]+ MB' "$WORK/gpt2_ref.log" | head -1 | grep -oE '[0-9.]+')
p2=$(grep -oE 'params [0-9.]+ MB' "$WORK/gpt2_tp2.log" | head -1 | grep -oE '[0-9.]+')
awk -v a="$p1" -v b="$p2" 'BEGIN { exit !(b < 0.7 * a) }' && echo "ok: tp2 holds $p2 MB of $p1 MB of weights" ||
  fail "tp2 weights per rank $p2 MB vs $p1 MB"

# Impossible layouts are refused by key, before any work.
cfg="$WORK/gpt2.toml"
expect_error "heads do not split" "parallel.tp" mpirun -np 3 --oversubscribe "$ODYSSEY" train --config "$cfg" \
  --set parallel.tp=3 --set "checkpoint.dir=$WORK/bad1"
expect_error "tokens do not split under tp_sp" "parallel.tp_sp" mpirun -np 4 --oversubscribe "$ODYSSEY" train \
  --config "$cfg" --set parallel.tp=4 --set model.n_head=8 --set train.micro_batch=1 --set model.seq_len=30 \
  --set train.global_batch=4 --set "checkpoint.dir=$WORK/bad2"
expect_error "heads do not split over tp x ulysses" "sp_ulysses" mpirun -np 4 --oversubscribe "$ODYSSEY" train \
  --config "$cfg" --set parallel.tp=2 --set parallel.sp_ulysses=2 --set model.n_head=2 --set model.d_model=20 \
  --set "checkpoint.dir=$WORK/bad3"
# Domino's halves must exist: tp > 1, whole rows (rows) or one row (tokens), each half split over tp
# under TP-SP, both halves' activations kept.
expect_error "domino without tp" "parallel.tp_overlap" "$ODYSSEY" train --config "$cfg" \
  --set parallel.tp_overlap=domino --set "checkpoint.dir=$WORK/bad4"
expect_error "domino rows with one row" "domino_split" mpirun -np 2 --oversubscribe "$ODYSSEY" train \
  --config "$cfg" --set parallel.tp=2 --set parallel.tp_overlap=domino --set train.micro_batch=1 \
  --set "checkpoint.dir=$WORK/bad5"
expect_error "domino tokens with two rows" "domino_split" mpirun -np 2 --oversubscribe "$ODYSSEY" train \
  --config "$cfg" --set parallel.tp=2 --set parallel.tp_overlap=domino --set parallel.domino_split=tokens \
  --set "checkpoint.dir=$WORK/bad6"
expect_error "domino halves do not split over tp" "parallel.tp_sp" mpirun -np 4 --oversubscribe "$ODYSSEY" train \
  --config "$cfg" --set parallel.tp=4 --set parallel.tp_overlap=domino --set parallel.domino_split=tokens \
  --set train.micro_batch=1 --set model.seq_len=36 --set "checkpoint.dir=$WORK/bad7"
expect_error "domino with full recompute" "memory.checkpoint" mpirun -np 2 --oversubscribe "$ODYSSEY" train \
  --config "$cfg" --set parallel.tp=2 --set parallel.tp_overlap=domino --set memory.checkpoint=full \
  --set "checkpoint.dir=$WORK/bad8"
expect_error "domino with smaller chunks" "memory.chunk_tokens" mpirun -np 2 --oversubscribe "$ODYSSEY" train \
  --config "$cfg" --set parallel.tp=2 --set parallel.tp_overlap=domino --set memory.chunk_tokens=8 \
  --set "checkpoint.dir=$WORK/bad9"
finish
