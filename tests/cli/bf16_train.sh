# train.precision = bf16 (docs/precision.md, mixed-precision.md §9) on the tiny GPT-2, a small GPT-2, Llama
# and Qwen2:
#   - the fp32 reference is untouched by the key's existence (seam_parity.sh checks it bitwise);
#   - bf16 trains (10 steps within 0.05 absolute and 2e-2 relative of fp32's losses, and not equal to them);
#   - its GEMMs: ODYSSEY_BF16_GEMM=native (gemm_bf16 on the narrowed operands) within relative 1e-3 of
#     emulate (fp32 GEMMs of the same rounded operands), each said at start-up; a bad value is refused;
#   - every layout in bf16 (dp 2 and 4 with ZeRO 0-3, Ulysses, ring, the hybrid, tp 2, pp 2) gives one
#     process's bf16 losses within relative 1e-3 (the bf16 roundings flip with the fp32 summation order);
#   - ZeRO-3's and ZeRO-1's weight gathers and Ulysses' all-to-alls move bf16: exactly half the bytes of
#     fp32's; the ring's K|V blocks too, its dK|dV sums in fp32;
#   - the activations a layer keeps take fewer bytes than fp32's (2-byte buffers), as --dry-run says;
#   - checkpoints hold the fp32 master: a bf16 run resumes bit for bit, and a run resumes across precisions;
#   - export --dtype bf16 writes BF16 safetensors (half the bytes) and torch_dtype bfloat16.
source "$(dirname "$0")/common.sh" "$@"
tiny_setup
common=(--set train.steps=10 --set train.global_batch=8 --set train.micro_batch=2 --set train.eval_every=0)
bf16=(--set train.precision=bf16)
strip() { sed -E 's/.*"grad_norm":([^,]*).*"loss":([^,]*).*"step":([0-9]+).*/\3 \2 \1/' "$WORK/$1/metrics.jsonl"; }
same_files() {  # same_files DIR_A DIR_B: every safetensors file (master params, m, v) byte-identical
  local f ok=0
  for f in "$1"/*.safetensors; do cmp -s "$f" "$2/$(basename "$f")" || ok=1; done
  [ "$(ls "$1"/*.safetensors | wc -l)" -ge 3 ] || ok=1
  return $ok
}
# close NAME REF ABS REL: every loss within ABS absolute and REL relative of REF's.
close() {
  if paste -d' ' <(losses "$2") <(losses "$1") |
    awk -v a="$3" -v r="$4" 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > a || d > r * $1) bad = 1; n++ }
         END { exit (bad || n != 10) }'; then
    echo "ok: $1 within $3 absolute and $4 relative of $2's losses"
  else
    fail "$1: losses differ from $2's: $(paste <(losses "$2") <(losses "$1") | tail -3 | tr '\n' ' ')"
  fi
}

run fp32 1 "${common[@]}"
run ref 1 "${common[@]}" "${bf16[@]}"
grep -q "precision: bf16" "$WORK/ref.log" || fail "the bf16 run does not say its precision at start-up"
grep -q "oneDNN bf16 matmul on this CPU" "$WORK/ref.log" || fail "the bf16 run does not say native or fallback"
close ref fp32 0.05 2e-2
[ "$(losses ref | md5sum)" != "$(losses fp32 | md5sum)" ] || fail "bf16 losses equal fp32's: nothing was rounded"

# The GEMMs: native against the emulation on the same rounded operands (summation order only).
ODYSSEY_BF16_GEMM=emulate run emulate 1 "${common[@]}" "${bf16[@]}"
ODYSSEY_BF16_GEMM=native run native 1 "${common[@]}" "${bf16[@]}"
grep -q "GEMMs: fp32 GEMMs of operands rounded" "$WORK/emulate.log" || fail "emulate does not say its GEMMs"
grep -q "GEMMs: gemm_bf16" "$WORK/native.log" || fail "native does not say its GEMMs"
grep -q "gemm_bf16 .*x.*x.* trans_a=" "$WORK/native.log" || fail "native does not list its bf16 GEMM shapes"
close native emulate 0.01 1e-3
expect_error bad_gemm_mode "ODYSSEY_BF16_GEMM=fast" env ODYSSEY_BF16_GEMM=fast "$ODYSSEY" train --config "$cfg" \
  "${common[@]}" "${bf16[@]}" --set "checkpoint.dir=$WORK/bad_gemm_mode"

# Layouts in bf16 against one process in bf16.
for stage in 0 1 2 3; do
  run_compared dp2_z$stage 2 ref 1e-3 "${common[@]}" "${bf16[@]}" --set parallel.zero_stage=$stage
done
run_compared dp4_z3 4 ref 1e-3 "${common[@]}" "${bf16[@]}" --set parallel.zero_stage=3

# The weight gathers in bf16: exactly half of fp32's bytes (ZeRO-3 per unit, ZeRO-1 after the step).
weights_bytes() { grep -oE '"weights_intra":[^,}]*' "$WORK/$1/metrics.jsonl" | tail -n 1 | cut -d: -f2; }
for stage in 1 3; do
  run fp32_dp2_z$stage 2 "${common[@]}" --set parallel.zero_stage=$stage
  if awk -v a="$(weights_bytes fp32_dp2_z$stage)" -v b="$(weights_bytes dp2_z$stage)" 'BEGIN { exit !(a > 0 && 2 * b == a) }'; then
    echo "ok: ZeRO-$stage dp 2 weight gathers: bf16 $(weights_bytes dp2_z$stage) bytes/param = fp32's $(weights_bytes fp32_dp2_z$stage) / 2"
  else
    fail "ZeRO-$stage weight gather bytes: bf16 $(weights_bytes dp2_z$stage), fp32 $(weights_bytes fp32_dp2_z$stage)"
  fi
done

# Resume: bf16 12 steps straight = 6, stop, 6 resumed, bit for bit (ZeRO 0 on one process, ZeRO 2 on two).
resume=(--set train.steps=12 --set train.global_batch=8 --set train.micro_batch=2 --set data.shuffle=true "${bf16[@]}")
for z in "1 0" "2 2"; do
  set -- $z
  run straight_$2 $1 "${resume[@]}" --set parallel.zero_stage=$2
  run split_$2 $1 "${resume[@]}" --set parallel.zero_stage=$2 --set train.exit_after=6
  run split_$2 $1 "${resume[@]}" --set parallel.zero_stage=$2 --set checkpoint.resume=true
  if [ "$(strip straight_$2)" = "$(strip split_$2)" ] && [ "$(strip straight_$2 | wc -l)" -eq 12 ] &&
    same_files "$WORK/straight_$2/step_00000012" "$WORK/split_$2/step_00000012"; then
    echo "ok: bf16 ZeRO-$2 np $1: resumed losses, norms and final master weights bit-identical"
  else
    fail "bf16 ZeRO-$2 np $1 resume differs"
  fi
done

# Memory modes change no number in bf16 either: recomputing (cheap, full) and the disk tier give the
# stored run's losses bit for bit; a head in chunks sums its weight gradient in another order (as in fp32).
run_compared mem_cheap 1 ref 0 "${common[@]}" "${bf16[@]}" --set memory.checkpoint=cheap
run_compared mem_full 1 ref 0 "${common[@]}" "${bf16[@]}" --set memory.checkpoint=full
mkdir -p "$WORK/offload"
run_compared mem_disk 1 ref 0 "${common[@]}" "${bf16[@]}" --set memory.checkpoint=full --set memory.tier=disk \
  --set "memory.offload_dir=$WORK/offload"
run_compared mem_head 1 ref 1e-3 "${common[@]}" "${bf16[@]}" --set memory.head_chunk_tokens=16
# The activations a layer keeps are held in 2 bytes: the run's activation bytes (the footprint, which
# mpitest_footprint checks against what is allocated) are what --dry-run says, and at 4 layers (C = 40,
# 74 tokens) bf16 holds each layer's six rounded tensors (14 C floats a token) at 2 bytes instead of 4,
# plus one fp32 copy of them a block call computes on: 4 x 74 x 560 x 2 - 74 x 560 x 4 = 165760 bytes
# fewer than fp32 (at 2 layers the copy eats the saving); counted with the emulated GEMMs (the native
# ones add their bf16 scratch, model/bf16_linears.h).
act_bytes() { grep -oE '"activations":[0-9]+' "$WORK/$1/metrics.jsonl" | tail -n 1 | cut -d: -f2; }
dry_act() {
  "$ODYSSEY" train --config "$cfg" "${common[@]}" "$@" --dry-run 2>/dev/null |
    grep -oE '"activation_bytes_per_rank":[0-9]+' | cut -d: -f2
}
d2=$(dry_act "${bf16[@]}") d4=$(ODYSSEY_BF16_GEMM=emulate dry_act "${bf16[@]}" --set model.n_layer=4)
f4=$(dry_act --set model.n_layer=4)
if [ -n "$d2" ] && [ "$(act_bytes ref)" = "$d2" ] && [ -n "$d4" ] && [ -n "$f4" ] && [ $((f4 - d4)) -eq 165760 ]; then
  echo "ok: bf16 activations $d2 bytes as --dry-run says; at 4 layers $d4 against fp32's $f4"
else
  fail "bf16 activations: run $(act_bytes ref), dry run $d2; at 4 layers bf16 $d4, fp32 $f4 (expected 165760 fewer)"
fi
# The metrics say the state's bytes by dtype.
grep -q '"precision":{"bf16_model_copy_bytes_held_as_f32":[1-9]' "$WORK/ref/metrics.jsonl" ||
  fail "the bf16 metrics do not give the state's bytes by dtype"

# Across precisions: an fp32 checkpoint resumes in bf16 and a bf16 one in fp32 (the master is fp32).
run x_fp32 1 "${resume[@]}" --set train.precision=fp32 --set train.exit_after=6
run x_fp32 1 "${resume[@]}" --set checkpoint.resume=true
run x_bf16 1 "${resume[@]}" --set train.exit_after=6
run x_bf16 1 "${resume[@]}" --set train.precision=fp32 --set checkpoint.resume=true
if [ "$(strip x_fp32 | wc -l)" -eq 12 ] && [ "$(strip x_bf16 | wc -l)" -eq 12 ] &&
  [ "$(strip x_bf16 | head -6)" = "$(strip straight_0 | head -6)" ]; then
  echo "ok: fp32 -> bf16 and bf16 -> fp32 resumes run to step 12"
else
  fail "resume across precisions: $(strip x_fp32 | wc -l) and $(strip x_bf16 | wc -l) steps"
fi

# Export: bf16 safetensors (half the bytes of f32's), importing back to the master rounded to bf16.
"$ODYSSEY" export --checkpoint "$WORK/ref" --to hf-gpt2 --output "$WORK/hf32" >/dev/null 2>&1 || fail "export f32"
"$ODYSSEY" export --checkpoint "$WORK/ref" --to hf-gpt2 --output "$WORK/hf16" --dtype bf16 >/dev/null 2>&1 ||
  fail "export bf16"
s32=$(stat -c %s "$WORK/hf32/model.safetensors") s16=$(stat -c %s "$WORK/hf16/model.safetensors")
if grep -q '"torch_dtype": "bfloat16"' "$WORK/hf16/config.json" && [ $((s16 * 2)) -gt "$s32" ] &&
  [ $((s16 * 2)) -lt $((s32 + 8192)) ]; then
  echo "ok: export --dtype bf16: $s16 bytes against f32's $s32, torch_dtype bfloat16"
else
  fail "export --dtype bf16: $s16 bytes against f32's $s32"
fi
expect_error "export --dtype f16" "--dtype: unknown value 'f16'" "$ODYSSEY" export --checkpoint "$WORK/ref" \
  --to hf-gpt2 --output "$WORK/hfbad" --dtype f16
[ ! -e "$WORK/hfbad" ] || fail "a refused export left $WORK/hfbad"

# Sequence, tensor and pipeline parallelism in bf16 against one process in bf16 (a 4-head GPT-2 and a
# Llama with 2 key/value heads, 32 tokens).
for arch in gpt2 llama; do
  small_model_config $arch 4 2 256
  cfg="$WORK/$arch.toml"
  run ${arch}_fp32 1
  run ${arch}_ref 1 "${bf16[@]}"
  close ${arch}_ref ${arch}_fp32 0.05 2e-2
  run_compared ${arch}_ulysses2 2 ${arch}_ref 1e-3 "${bf16[@]}" --set parallel.sp_ulysses=2
  run_compared ${arch}_ring2 2 ${arch}_ref 1e-3 "${bf16[@]}" --set parallel.sp_ring=2
  run_compared ${arch}_tp2 2 ${arch}_ref 1e-3 "${bf16[@]}" --set parallel.tp=2
  run_compared ${arch}_pp2 2 ${arch}_ref 1e-3 "${bf16[@]}" --set parallel.pp=2
done
# Sequence parallelism's wire in bf16: Ulysses' all-to-alls exactly half of fp32's bytes; the ring's K|V
# blocks half and its dK|dV partial sums fp32, so at 2 ranks (1 K|V hop forward, 1 K|V hop and 2 dK|dV
# hops backward) 2 + 2 + 8 = 12 of fp32's 16 byte units: exactly 3/4.
group_bytes() {  # group_bytes NAME GROUP: the comm bytes of GROUP in NAME's last metrics line
  tail -n 1 "$WORK/$1/metrics.jsonl" | python3 -c "import json, sys; print(json.load(sys.stdin)['comm']['by_group']['$2']['bytes'])"
}
cfg="$WORK/gpt2.toml"
run gpt2_fp32_ulysses2 2 --set parallel.sp_ulysses=2
run gpt2_fp32_ring2 2 --set parallel.sp_ring=2
for x in "ulysses2 sp_ulysses 1 2" "ring2 sp_ring 3 4"; do
  set -- $x
  a=$(group_bytes gpt2_fp32_$1 $2) b=$(group_bytes gpt2_$1 $2)
  if [ "$a" -gt 0 ] && [ $((b * $4)) -eq $((a * $3)) ]; then
    echo "ok: $1 $2 bytes in bf16 = $3/$4 of fp32's ($b of $a)"
  else
    fail "$1 $2 bytes: bf16 $b, fp32 $a (expected $3/$4)"
  fi
done
run_compared gpt2_hybrid 4 gpt2_ref 1e-3 "${bf16[@]}" --set parallel.sp_ulysses=2 --set parallel.sp_ring=2

# Qwen2 (Llama's block with q, k, v biases and a tied head) comes with the block runner.
small_model_config qwen2 4 2 256
cfg="$WORK/qwen2.toml"
run qwen2_fp32 1
run qwen2_ref 1 "${bf16[@]}"
close qwen2_ref qwen2_fp32 0.05 2e-2
run_compared qwen2_dp2_z3 2 qwen2_ref 1e-3 "${bf16[@]}" --set parallel.zero_stage=3

expect_error "bf16 with zb1" "does not run parallel.pp_schedule = zb1" "$ODYSSEY" train --config "$cfg" \
  "${bf16[@]}" --set parallel.pp=2 --set parallel.pp_schedule=zb1 --set parallel.dp=1 --dry-run --world-size 2
expect_error "bf16 with comm.grads" "does not run with comm.weights, comm.grads or comm.hpz" "$ODYSSEY" train \
  --config "$cfg" "${bf16[@]}" --set comm.grads=int8 --set parallel.zero_stage=2 --dry-run --world-size 2
finish
