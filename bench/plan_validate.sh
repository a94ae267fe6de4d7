#!/usr/bin/env bash
# The planner's time model against measured runs on this machine (planner.md §9.3): a fixed matrix of
# layouts (two small GPT-2 shapes, 1/2/4 ranks, ZeRO 0-3, Ulysses, ring, hybrid, quantized communication,
# micro-batch and accumulation variants), each trained 5 steps with steps 3-5 timed, 3 repetitions
# alternating over the matrix; the median per layout against `odyssey plan`'s prediction on the
# calibrated cluster file. Prints a table, MAPE, the largest error and Kendall's tau; records the load.
#   bash bench/plan_validate.sh [build dir] [cluster file]
# The cluster file is calibrated first when it does not exist:
#   mpirun -np 2 build/odyssey plan --calibrate --config <model> --output configs/clusters/local.toml
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
CLUSTER=${2:-configs/clusters/local.toml}
BIN=$BUILD/odyssey
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ODYSSEY_CACHE=${ODYSSEY_CACHE:-$PWD/cache}
REPS=${REPS:-3}
OUT=${OUT:-runs/plan_validate}
mkdir -p "$OUT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Two models on the Brown bytes shards: small (4 layers, d 128, context 256) and medium (4 layers, d 256,
# context 512, 8 heads).
model_small='[model]
arch = "gpt2"
n_layer = 4
n_head = 4
d_model = 128
seq_len = 256
vocab_size = 256'
model_medium='[model]
arch = "gpt2"
n_layer = 4
n_head = 8
d_model = 256
seq_len = 512
vocab_size = 256'
for m in small medium; do
  var=model_$m
  cat > "$tmp/$m.toml" <<TOML
${!var}
[data]
train = "cache/brown/bytes/train_*.bin"
[train]
steps = 5
global_batch = 8
micro_batch = 8
lr = 1e-3
warmup_steps = 0
gemm_gflops = 1
[memory]
checkpoint = "none"
chunk_tokens = 0
[checkpoint]
dir = "$tmp/run"
overwrite = true
TOML
done

[ -f "$CLUSTER" ] || mpirun -np 2 --oversubscribe "$BIN" plan --calibrate --config "$tmp/medium.toml" --output "$CLUSTER"

# name | model | ranks | overrides
matrix=(
  "s1-z0|small|1|parallel.zero_stage=0"
  "s1-acc4|small|1|train.micro_batch=2"
  "s2-z0|small|2|parallel.zero_stage=0 train.micro_batch=4"
  "s2-z1|small|2|parallel.zero_stage=1 train.micro_batch=4"
  "s2-z2-acc2|small|2|parallel.zero_stage=2 train.micro_batch=2"
  "s2-z3|small|2|parallel.zero_stage=3 train.micro_batch=4"
  "s2-uly2|small|2|parallel.sp_ulysses=2"
  "s2-ring2|small|2|parallel.sp_ring=2"
  "s2-tlqhs|small|2|parallel.zero_stage=1 train.micro_batch=4 parallel.ranks_per_node=1 comm.grads=tlq_hs comm.weights=qwd"
  "s4-z1|small|4|parallel.zero_stage=1 train.micro_batch=2"
  "s4-z3|small|4|parallel.zero_stage=3 train.micro_batch=2"
  "s4-uly4|small|4|parallel.sp_ulysses=4"
  "s4-hybrid|small|4|parallel.sp_ulysses=2 parallel.sp_ring=2"
  "m1-z0|medium|1|parallel.zero_stage=0"
  "m1-mb2|medium|1|train.micro_batch=2"
  "m2-z0|medium|2|parallel.zero_stage=0 train.micro_batch=4"
  "m2-z2|medium|2|parallel.zero_stage=2 train.micro_batch=4"
  "m2-z3-acc2|medium|2|parallel.zero_stage=3 train.micro_batch=2"
  "m2-uly2|medium|2|parallel.sp_ulysses=2"
  "m2-ring2-full|medium|2|parallel.sp_ring=2 memory.checkpoint=full"
  "m4-z2|medium|4|parallel.zero_stage=2 train.micro_batch=2"
  "m4-ring4|medium|4|parallel.sp_ring=4"
  "m4-uly2-dp2|medium|4|parallel.sp_ulysses=2 parallel.zero_stage=1 train.micro_batch=4"
  "m4-zpp|medium|4|parallel.zero_stage=3 train.micro_batch=2 parallel.ranks_per_node=2 comm.weights=int8 comm.hpz=true comm.grads=qgz"
)

sets() { local s=""; for kv in $1; do s="$s --set $kv"; done; echo "$s"; }
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/load.txt"
: > "$OUT/measured.txt"
for rep in $(seq 1 "$REPS"); do
  for row in "${matrix[@]}"; do
    IFS='|' read -r name model ranks over <<< "$row"
    rm -rf "$tmp/run"
    # shellcheck disable=SC2046
    mpirun -np "$ranks" --oversubscribe "$BIN" train --config "$tmp/$model.toml" $(sets "$over") \
      --set log.metrics="$tmp/m.jsonl" > "$tmp/log" 2>&1 || { echo "$name failed:"; tail -5 "$tmp/log"; exit 1; }
    # Steps 3-5: their median.
    ms=$(jq -s '[.[] | select(.step >= 3) | .step_ms] | sort | .[length/2|floor]' "$tmp/m.jsonl")
    echo "$name $rep $ms $(cut -d' ' -f1 /proc/loadavg)" | tee -a "$OUT/measured.txt"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/load.txt"

: > "$OUT/table.txt"
for row in "${matrix[@]}"; do
  IFS='|' read -r name model ranks over <<< "$row"
  # shellcheck disable=SC2046
  pred=$("$BIN" plan --config "$tmp/$model.toml" $(sets "$over") --cluster "$CLUSTER" --world "$ranks" --json |
    jq '.time.step_s * 1000')
  meas=$(awk -v n="$name" '$1 == n {print $3}' "$OUT/measured.txt" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  echo "$name $ranks $pred $meas" >> "$OUT/table.txt"
done
awk '
  { name[NR]=$1; r[NR]=$2; p[NR]=$3; m[NR]=$4; e=($3-$4)/$4; err[NR]=e; s+= (e<0?-e:e); if ((e<0?-e:e) > mx) {mx=(e<0?-e:e); worst=$1} }
  END {
    printf "%-16s %5s %12s %12s %8s\n", "layout", "ranks", "predicted_ms", "measured_ms", "error";
    for (i=1;i<=NR;i++) printf "%-16s %5s %12.1f %12.1f %+7.1f%%\n", name[i], r[i], p[i], m[i], 100*err[i];
    conc=0; disc=0;
    for (i=1;i<=NR;i++) for (j=i+1;j<=NR;j++) { a=(p[i]-p[j])*(m[i]-m[j]); if (a>0) conc++; else if (a<0) disc++; }
    printf "layouts %d  MAPE %.1f%%  max |error| %.1f%% (%s)  Kendall tau %.3f\n", NR, 100*s/NR, 100*mx, worst, (conc-disc)/(NR*(NR-1)/2);
  }' "$OUT/table.txt" | tee "$OUT/summary.txt"
