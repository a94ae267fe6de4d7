#!/usr/bin/env bash
# Bitwise parity of a handful of tiny runs against a recorded baseline (issue 12: the model seam must
# change no number). Records, per run, every metrics line's step, loss, grad_norm, val_loss and comm
# bytes (timings dropped) and the sha256 of every checkpoint tensor file.
#   seam_parity.sh record DIR   runs them and writes DIR/<run>.{metrics,sums}
#   seam_parity.sh check DIR    runs them again and diffs against DIR (exit 1 on any difference)
# Env: ODYSSEY (binary, default build/odyssey); EXTRA_SET (space-separated KEY=VALUE settings appended to
# every run's --set list, e.g. EXTRA_SET=train.precision=bf16 for a bf16 baseline; default none).
set -uo pipefail
mode="$1"
base="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
cd "$(dirname "$0")/../.."
ROOT=$PWD
ODYSSEY=${ODYSSEY:-$ROOT/build/odyssey}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$base"

# Deterministic byte-level shards (as tests/cli/common.sh makes them).
mkdir -p "$WORK/text"
for i in 1 2 3 4 5 6 7 8; do
  for j in $(seq 1 60); do echo "Document $i line $j: the quick brown fox jumps over the lazy dog."; done >"$WORK/text/doc$i.txt"
done
"$ODYSSEY" prepare --input "$WORK"/text/*.txt --output "$WORK/shards" --tokenizer bytes --val-fraction 0.25 --quiet >/dev/null
cfg="$WORK/tiny.toml"
sed -e "s|cache/brown/bytes|$WORK/shards|g" configs/tiny.toml >"$cfg"
common=(--set train.steps=6 --set train.threads=1 --set data.shuffle=true --set train.eval_every=3 --set train.eval_rows=8)
extra=()
for kv in ${EXTRA_SET:-}; do extra+=(--set "$kv"); done
bf16=false
case " ${EXTRA_SET:-} " in *" train.precision=bf16 "*) bf16=true ;; esac

failures=0
# run NAME NP ARGS...: trains into $WORK/NAME, then records or checks its numbers.
run() {
  local name="$1" np="$2"
  shift 2
  local launch=("$ODYSSEY")
  [ "$np" -gt 1 ] && launch=(mpirun -np "$np" --oversubscribe "$ODYSSEY")
  "${launch[@]}" train --config "$cfg" "${common[@]}" --set "checkpoint.dir=$WORK/$name" "$@" "${extra[@]}" \
    >"$WORK/$name.log" 2>&1 || { echo "FAIL $name: exit code ($(tail -n 3 "$WORK/$name.log"))"; failures=$((failures + 1)); return; }
}
record() {
  local name="$1"
  # by_group (added after the baseline) splits the same bytes by communicator; the totals are compared.
  # inter_node_sent_bytes_all_ranks (added after it too) counts TCP bytes between hosts: 0 on one host.
  jq -c '{step, loss, grad_norm, val_loss, comm_bytes_per_param, comm: (.comm | del(.by_group?, .inter_node_sent_bytes_all_ranks?) | del(.. | .time_ms?, .seconds?, .ms?))}' \
    "$WORK/$name/metrics.jsonl" >"$WORK/$name.metrics"
  (cd "$WORK/$name" && find . -name '*.safetensors' | sort | xargs sha256sum) >"$WORK/$name.sums"
  if [ "$mode" = record ]; then
    cp "$WORK/$name.metrics" "$WORK/$name.sums" "$base/"
    echo "recorded $name: $(wc -l <"$WORK/$name.metrics") metrics lines, $(wc -l <"$WORK/$name.sums") tensor files"
  else
    if diff -q "$base/$name.metrics" "$WORK/$name.metrics" >/dev/null && diff -q "$base/$name.sums" "$WORK/$name.sums" >/dev/null; then
      echo "ok: $name bitwise equal ($(wc -l <"$WORK/$name.metrics") steps, $(wc -l <"$WORK/$name.sums") tensor files)"
    else
      echo "FAIL $name differs:"
      diff "$base/$name.metrics" "$WORK/$name.metrics" | head -6
      diff "$base/$name.sums" "$WORK/$name.sums" | head -6
      failures=$((failures + 1))
    fi
  fi
}

run single 1 && record single
run dp4_zero3 4 --set train.global_batch=4 --set train.micro_batch=1 --set parallel.zero_stage=3 && record dp4_zero3
# Ulysses needs heads divisible by its degree: 4 heads of 10.
run usp2x2_dp2 8 --set model.n_head=4 --set model.seq_len=40 --set train.global_batch=4 --set train.micro_batch=1 \
  --set parallel.sp_ulysses=2 --set parallel.sp_ring=2 --set parallel.zero_stage=1 && record usp2x2_dp2
# bf16 refuses compressed communication (comm.weights, comm.grads): skipped in that mode.
if $bf16; then
  echo "skip qwd_tlqhs: train.precision=bf16 refuses compressed communication (comm.weights, comm.grads)"
else
  run qwd_tlqhs 4 --set train.global_batch=8 --set train.micro_batch=1 --set parallel.zero_stage=2 \
    --set comm.weights=qwd --set comm.grads=tlq_hs --set parallel.ranks_per_node=2 --set parallel.bucket_mb=0.05 &&
    record qwd_tlqhs
fi
run resume 2 --set train.global_batch=4 --set train.micro_batch=1 --set parallel.zero_stage=3 --set train.exit_after=3 &&
  run resume 2 --set train.global_batch=4 --set train.micro_batch=1 --set parallel.zero_stage=3 --set checkpoint.resume=true &&
  record resume
# Issue 37 (one layout builder, pp = 1 a one-stage pipeline): the pipeline, tensor parallelism, ZeRO-2
# over several micro-steps and the recomputing memory modes, each against main's numbers.
run dp2_zero2 2 --set train.global_batch=8 --set train.micro_batch=2 --set parallel.zero_stage=2 && record dp2_zero2
run memory_full 1 --set memory.checkpoint=full --set memory.chunk_tokens=8 --set memory.head_chunk_tokens=16 &&
  record memory_full
run pp2_1f1b 2 --set train.global_batch=4 --set train.micro_batch=1 --set parallel.pp=2 && record pp2_1f1b
run pp2x2_interleaved 4 --set model.n_layer=4 --set train.global_batch=8 --set train.micro_batch=1 \
  --set parallel.pp=2 --set parallel.pp_virtual=2 --set parallel.pp_schedule=interleaved --set parallel.zero_stage=1 &&
  record pp2x2_interleaved
run tp2_zero1 2 --set model.n_head=4 --set train.global_batch=4 --set train.micro_batch=2 --set parallel.tp=2 \
  --set parallel.zero_stage=1 && record tp2_zero1
# bf16 only (the fp32 baseline predates them): the memory modes and tensor-parallel variants whose saved
# activations move between buffers, disk and ranks.
if $bf16; then
  run memory_cheap 1 --set memory.checkpoint=cheap && record memory_cheap
  mkdir -p "$WORK/offload"
  run memory_disk 1 --set memory.checkpoint=full --set memory.tier=disk --set "memory.offload_dir=$WORK/offload" \
    --set memory.chunk_tokens=8 && record memory_disk
  run tp2_sp_domino 2 --set model.n_head=4 --set model.seq_len=36 --set train.global_batch=4 --set train.micro_batch=2 \
    --set parallel.tp=2 --set parallel.tp_sp=true --set parallel.tp_overlap=domino && record tp2_sp_domino
fi
if [ $failures -ne 0 ]; then echo "$failures run(s) failed or differ"; exit 1; fi
echo "all runs ${mode}ed"
