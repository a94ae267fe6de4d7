# Pipeline parallelism end to end (tensor-pipeline-parallelism.md §3): GPT-2 (tied embeddings) and
# Llama (untied, GQA), 9 layers (no stage count divides them), 10 steps at pp 2 and 4 under GPipe,
# 1F1B, zero-bubble ZB-H1 (zb1) and interleaved (v = 2), pp2 x dp2 ZeRO-1 (1F1B and zb1), GPT-2 pp2 x
# dp2 ZeRO-0/2/3 and an explicit split, Llama pp2 x Ulysses 2 and pp2 x ring 2: every step's loss
# within relative 1e-5 of the single process, and the validation loss too; untied Llama's pipelined
# losses are bitwise, and zb1's are bitwise 1F1B's for both models; memory.checkpoint
# = full under pp2 is bitwise none. A checkpoint written at pp2 after 4 steps resumes at pp1 and pp4
# to the same losses; eval, generate and export read a pp-trained checkpoint; the metrics carry the
# pipeline's figures per stage; the memory check counts a rank's stages (and zb1's deferred
# operands); impossible layouts are refused naming the key.
source "$(dirname "$0")/common.sh" "$@"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
make_shards "$WORK/data"
compare_all() {  # compare_all NAME REF: the step losses and the final validation loss
  compare "$1" "$2"
  within_1e5 "$(val_loss "$2")" "$(val_loss "$1")" && echo "ok: $1 validation loss matches" ||
    fail "$1: validation loss $(val_loss "$1") vs $(val_loss "$2")"
}

# Untied Llama through a pipeline computes exactly the single process's arithmetic (spec §3.2: each
# parameter's gradient accumulated in micro-batch order; only the norm's sum of squares is ordered
# otherwise), so its losses are expected to the bit.
same_losses() {
  [ "$(losses "$1")" = "$(losses "$2")" ] && echo "ok: $1 bitwise equal to $2" ||
    fail "$1: losses not bitwise equal to $2's: $(paste <(losses "$2") <(losses "$1") | head -3 | tr '\n' ' ')"
}

for arch in gpt2 llama; do
  small_model_config $arch 5 9 256
  cfg="$WORK/$arch.toml"
  run ${arch}_ref 1
  # zb1's weight gradients run later (W) but in micro-batch order with the same GEMMs: bitwise too.
  for schedule in gpipe 1f1b zb1; do
    for pp in 2 4; do
      run ${arch}_pp${pp}_$schedule $pp --set parallel.pp=$pp --set parallel.pp_schedule=$schedule
      compare_all ${arch}_pp${pp}_$schedule ${arch}_ref
      [ $arch = llama ] && same_losses ${arch}_pp${pp}_$schedule ${arch}_ref
      [ $schedule = zb1 ] && same_losses ${arch}_pp${pp}_zb1 ${arch}_pp${pp}_1f1b
    done
  done
  for pp in 2 4; do
    run ${arch}_pp${pp}_interleaved $pp --set parallel.pp=$pp --set parallel.pp_schedule=interleaved \
      --set parallel.pp_virtual=2
    compare_all ${arch}_pp${pp}_interleaved ${arch}_ref
    [ $arch = llama ] && same_losses ${arch}_pp${pp}_interleaved ${arch}_ref
  done
  run ${arch}_pp2_dp2_zero1 4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.zero_stage=1
  compare_all ${arch}_pp2_dp2_zero1 ${arch}_ref
  run ${arch}_pp2_dp2_zero1_zb1 4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.zero_stage=1 \
    --set parallel.pp_schedule=zb1
  compare_all ${arch}_pp2_dp2_zero1_zb1 ${arch}_ref
  same_losses ${arch}_pp2_dp2_zero1_zb1 ${arch}_pp2_dp2_zero1

  # A checkpoint written at pp2 after 4 steps resumes at pp1 and at pp4 (interleaved) to step 10.
  run ${arch}_part 2 --set parallel.pp=2 --set train.exit_after=4
  cp -r "$WORK/${arch}_part" "$WORK/${arch}_part4"
  run ${arch}_part 1 --set checkpoint.resume=true
  grep -q "written at world size 2, ZeRO stage 0, pp 2" "$WORK/${arch}_part.log" ||
    fail "${arch}: the resume at pp1 does not name the pp2 layout: $(grep resumed "$WORK/${arch}_part.log")"
  compare_all ${arch}_part ${arch}_ref
  run ${arch}_part4 4 --set parallel.pp=4 --set parallel.pp_schedule=interleaved --set parallel.pp_virtual=2 \
    --set checkpoint.resume=true
  compare_all ${arch}_part4 ${arch}_ref
done

cfg="$WORK/gpt2.toml"
# The tied copies' sum: ZeRO-0 over the pair of ranks with one dp coordinate, ZeRO-2/3 over both
# stages' dp groups (each rank its shard).
for zero in 0 2 3; do
  run gpt2_pp2_dp2_zero$zero 4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.zero_stage=$zero
  compare_all gpt2_pp2_dp2_zero$zero gpt2_ref
done
# zb1's last W launches ZeRO-0's all-reduces (every unit's gradients complete then).
run gpt2_pp2_dp2_zero0_zb1 4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.zero_stage=0 \
  --set parallel.pp_schedule=zb1
same_losses gpt2_pp2_dp2_zero0_zb1 gpt2_pp2_dp2_zero0
run gpt2_pp2_split 2 --set parallel.pp=2 --set "parallel.pp_layers=[1,8]"
compare_all gpt2_pp2_split gpt2_ref
grep -q 'layers \[0, 1) \[1, 9)' "$WORK/gpt2_pp2_split.log" && echo "ok: the explicit split is printed" ||
  fail "the stage split is not printed: $(grep pipeline "$WORK/gpt2_pp2_split.log")"
cfg="$WORK/llama.toml"
run llama_pp2_ulysses2 4 --set parallel.pp=2 --set parallel.sp_ulysses=2
compare_all llama_pp2_ulysses2 llama_ref
run llama_pp2_ring2 4 --set parallel.pp=2 --set parallel.sp_ring=2
compare_all llama_pp2_ring2 llama_ref
# Memory modes change no number in a pipeline either (each stage recomputes its own layers).
run llama_pp2_full 2 --set parallel.pp=2 --set parallel.pp_schedule=1f1b --set memory.checkpoint=full
same_losses llama_pp2_full llama_pp2_1f1b
# zb1 records the operands of recomputed layers (copied before the recompute buffers are reused).
run llama_pp2_zb1_full 2 --set parallel.pp=2 --set parallel.pp_schedule=zb1 --set memory.checkpoint=full
same_losses llama_pp2_zb1_full llama_pp2_1f1b

# The metrics name the pipeline's figures, one per stage's rank.
tail -n 1 "$WORK/gpt2_pp4_1f1b/metrics.jsonl" | python3 -c '
import json, sys
r = json.load(sys.stdin)
p = r["pipeline"]
assert p["schedule"] == "1f1b" and p["P"] == 4 and p["m"] == 4, p
assert len(p["wait_ms"]) == 4 and len(p["peak_in_flight"]) == 4, p
assert p["peak_in_flight"] == [4, 3, 2, 1], p  # P - r (spec 3.8)
assert r["pp_wait_ms"] == p["wait_ms"], r
assert 0 <= p["bubble_fraction"] < 1, p' && echo "ok: pipeline metrics" || fail "pipeline metrics: $(tail -n 1 "$WORK/gpt2_pp4_1f1b/metrics.jsonl")"
# zb1 holds min(P, m) micro-batches on every rank (from F until W: the weight GEMMs' operands), and
# its deferred operands show in the activation bytes: the last rank holds more than under 1F1B.
python3 - "$WORK/gpt2_pp4_zb1/metrics.jsonl" "$WORK/gpt2_pp4_1f1b/metrics.jsonl" <<'PY' && echo "ok: zb1 pipeline metrics" || fail "zb1 pipeline metrics: $(tail -n 1 "$WORK/gpt2_pp4_zb1/metrics.jsonl")"
import json, sys
zb, ob = (json.loads(open(f).read().splitlines()[-1])["pipeline"] for f in sys.argv[1:])
assert zb["schedule"] == "zb1" and zb["peak_in_flight"] == [4, 4, 4, 4], zb
assert zb["activation_bytes"][3] > ob["activation_bytes"][3], (zb, ob)
PY

# eval, generate and export read a pp-trained checkpoint.
eval_loss() { "$ODYSSEY" eval --checkpoint "$1" --data "$WORK/data/shards/val_*.bin" --max-rows 4 | grep -oE '"loss":[^,}]*' | cut -d: -f2; }
within_1e5 "$(eval_loss "$WORK/gpt2_ref")" "$(eval_loss "$WORK/gpt2_pp4_interleaved")" &&
  echo "ok: eval of a pp4-trained checkpoint" || fail "eval: $(eval_loss "$WORK/gpt2_pp4_interleaved")"
[ -n "$("$ODYSSEY" generate --checkpoint "$WORK/llama_pp2_1f1b" --prompt "Document" --max-tokens 8 2>/dev/null)" ] &&
  echo "ok: generate from a pp-trained checkpoint" || fail "generate from a pp-trained checkpoint"
"$ODYSSEY" export --checkpoint "$WORK/gpt2_pp2_1f1b" --to hf-gpt2 --output "$WORK/hf" >"$WORK/export.log" 2>&1 &&
  [ -s "$WORK/hf/model.safetensors" ] && echo "ok: export of a pp-trained checkpoint" ||
  fail "export: $(tail -n 2 "$WORK/export.log")"

# The start-up memory check counts what a pipeline rank holds: its stages, not the whole model.
per_rank() {  # per_rank NP ARGS...: the parameters per rank a refused dry run names
  local np="$1"
  shift
  mpirun -np "$np" --oversubscribe "$ODYSSEY" train --config "$WORK/gpt2.toml" --set "checkpoint.dir=$WORK/dry" \
    --set model.d_model=400 --set model.n_head=4 --set train.host_memory_gb=0.01 --dry-run "$@" 2>&1 |
    grep -oE '[0-9]+ parameters per rank' | head -n 1 | cut -d' ' -f1
}
whole=$(per_rank 1) staged=$(per_rank 4 --set parallel.pp=4)
[ -n "$whole" ] && [ -n "$staged" ] && [ "$staged" -lt $((whole / 2)) ] &&
  echo "ok: the memory check counts a pp4 rank's stages ($staged of $whole parameters)" ||
  fail "memory check under pp4: '$staged' parameters per rank of '$whole'"

# zb1 keeps each micro-batch's weight-GEMM operands from its I to its W: under full checkpointing
# (which keeps only the layers' outputs) the memory check counts more activation bytes than 1F1B's.
dry_acts() {  # dry_acts SCHEDULE: activation bytes per rank of a pp2 dry run
  mpirun -np 2 --oversubscribe "$ODYSSEY" train --config "$WORK/gpt2.toml" --set "checkpoint.dir=$WORK/dry_$1" \
    --set parallel.pp=2 --set parallel.pp_schedule=$1 --set memory.checkpoint=full --dry-run 2>/dev/null |
    grep -oE '"activation_bytes_per_rank":[0-9]+' | head -n 1 | cut -d: -f2
}
a1=$(dry_acts 1f1b) az=$(dry_acts zb1)
[ -n "$a1" ] && [ -n "$az" ] && [ "$az" -gt "$a1" ] &&
  echo "ok: the memory check counts zb1's deferred operands ($az vs 1F1B's $a1 bytes)" ||
  fail "memory check under zb1: '$az' activation bytes vs 1F1B's '$a1'"

# Impossible layouts, named by key, before any work.
bad() {  # bad NAME PATTERN NP ARGS...
  local name="$1" pattern="$2" np="$3"
  shift 3
  local launch=(mpirun -np "$np" --oversubscribe)
  [ "$np" = 1 ] && launch=()
  expect_error "$name" "$pattern" "${launch[@]}" "$ODYSSEY" train --config "$cfg" --set "checkpoint.dir=$WORK/bad" "$@"
}
bad "interleaved without virtual stages" "parallel.pp_virtual" 2 --set parallel.pp=2 --set parallel.pp_schedule=interleaved
bad "interleaved with micro-batches not a multiple of pp" "multiple of parallel.pp" 4 --set parallel.pp=4 \
  --set parallel.pp_schedule=interleaved --set parallel.pp_virtual=2 --set train.global_batch=4
bad "virtual stages without interleaving" "parallel.pp_schedule = interleaved" 2 --set parallel.pp=2 --set parallel.pp_virtual=2
bad "virtual stages without a pipeline" "parallel.pp_virtual" 1 --set parallel.pp_virtual=2
bad "explicit split missing layers" "parallel.pp_layers places 8 layers" 2 --set parallel.pp=2 --set "parallel.pp_layers=[4,4]"
bad "explicit split of the wrong length" "parallel.pp_layers has 3 entries" 2 --set parallel.pp=2 --set "parallel.pp_layers=3,3,3"
bad "an empty stage" "at least one layer" 2 --set parallel.pp=2 --set "parallel.pp_layers=[0,9]"
bad "more stages than layers" "model.n_layer" 4 --set parallel.pp=4 --set parallel.pp_schedule=interleaved \
  --set parallel.pp_virtual=3
bad "unknown schedule" "parallel.pp_schedule" 2 --set parallel.pp=2 --set parallel.pp_schedule=zb2
bad "zb1 with virtual stages" "parallel.pp_virtual = 2 needs parallel.pp_schedule = interleaved" 2 \
  --set parallel.pp=2 --set parallel.pp_schedule=zb1 --set parallel.pp_virtual=2
for zero in 2 3; do
  bad "zb1 with ZeRO-$zero" "parallel.pp_schedule = zb1 needs parallel.zero_stage 0 or 1, got $zero" 4 \
    --set parallel.pp=2 --set parallel.dp=2 --set parallel.pp_schedule=zb1 --set parallel.zero_stage=$zero
  # GPipe runs every loss (the head's gradients) before the first backward that ZeRO 2-3 reduce after.
  bad "gpipe with ZeRO-$zero" "parallel.pp_schedule = gpipe needs parallel.zero_stage 0 or 1, got $zero" 4 \
    --set parallel.pp=2 --set parallel.dp=2 --set parallel.pp_schedule=gpipe --set parallel.zero_stage=$zero
done
finish
