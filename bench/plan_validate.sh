#!/usr/bin/env bash
# The planner's time model against measured runs on this machine (planner.md §9.3): a fixed matrix of
# layouts (two small GPT-2 shapes, 1/2/4 ranks, ZeRO 0-3, Ulysses, ring, hybrid, quantized communication,
# micro-batch and accumulation variants, pipeline parallelism under 1F1B and zb1: the bubble model), each trained 5 steps with steps 3-5 timed, 3 repetitions
# alternating over the matrix; the median per layout against `odyssey plan`'s prediction on the
# calibrated cluster file. Prints a table, MAPE, the largest error and Kendall's tau, and writes
# $RESULT (bench/results/plan_validate/<date>_<commit>.json): the host (CPU, oneDNN ISA), the load before,
# during each run and after, every repetition, and per layout the predicted terms (compute, exposed
# communication, optimizer, bubble) beside the measured step and the time rank 0 spent in collectives.
#   bash bench/plan_validate.sh [build dir] [cluster file]
# The cluster file is calibrated first when it does not exist or CALIBRATE=1 (in the same conditions as
# the measurement, just before it):
#   mpirun -np 2 build/odyssey plan --calibrate --config <model> --output configs/clusters/local.toml
# REPS (3) repetitions; ONLY=regex restricts the matrix (model errors first, the full run after); STEPS
# (5) steps per run, the median of those from the third on timed (a smoke run: REPS=1 STEPS=3).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
CLUSTER=${2:-configs/clusters/local.toml}
BIN=$BUILD/odyssey
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ODYSSEY_CACHE=${ODYSSEY_CACHE:-$PWD/cache}
REPS=${REPS:-3}
STEPS=${STEPS:-5}
OUT=${OUT:-runs/plan_validate}
DATA=${DATA:-cache/brown/bytes}
RESULT=${RESULT:-bench/results/plan_validate/$(date -u +%Y%m%d_%H%M)_$(git rev-parse --short HEAD).json}
mkdir -p "$OUT" "$(dirname "$RESULT")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The byte-level Brown shards (docs/getting-started.md) when they are not there yet.
ls "$DATA"/train_*.bin > /dev/null 2>&1 ||
  "$BIN" prepare --input cache/brown/text/*.txt --output "$DATA" --tokenizer bytes --quiet > /dev/null

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
train = "$DATA/train_*.bin"
[train]
steps = $STEPS
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

[ -f "$CLUSTER" ] && [ "${CALIBRATE:-0}" != 1 ] || mpirun -np 2 --oversubscribe "$BIN" plan --calibrate --config "$tmp/medium.toml" --output "$CLUSTER"

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
  # Pipelines of 2 stages over 4 micro-batches: 1F1B's bubble (P-1)(t_f+t_b), zb1's (planner.md §6.4).
  "s2-pp2-1f1b|small|2|parallel.pp=2 train.micro_batch=2"
  "s2-pp2-zb1|small|2|parallel.pp=2 parallel.pp_schedule=zb1 train.micro_batch=2"
  "m2-pp2-1f1b|medium|2|parallel.pp=2 train.micro_batch=2"
)

sets() { local s=""; for kv in $1; do s="$s --set $kv"; done; echo "$s"; }
if [ -n "${ONLY:-}" ]; then
  keep=()
  for row in "${matrix[@]}"; do [[ ${row%%|*} =~ $ONLY ]] && keep+=("$row"); done
  matrix=("${keep[@]}")
fi
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/load.txt"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
: > "$OUT/measured.txt"
: > "$OUT/runs.jsonl"
for rep in $(seq 1 "$REPS"); do
  for row in "${matrix[@]}"; do
    IFS='|' read -r name model ranks over <<< "$row"
    load=$(cut -d' ' -f1 /proc/loadavg)
    rm -rf "$tmp/run"
    # shellcheck disable=SC2046
    mpirun -np "$ranks" --oversubscribe "$BIN" train --config "$tmp/$model.toml" $(sets "$over") \
      --set log.metrics="$tmp/m.jsonl" > "$tmp/log" 2>&1 || { echo "$name failed:"; tail -5 "$tmp/log"; exit 1; }
    # Steps 3-5: the median step, and rank 0's seconds inside collectives (blocking: exposed) in it.
    jq -sc --arg name "$name" --argjson rep "$rep" --argjson load "$load" \
      '[.[] | select(.step >= 3)] | sort_by(.step_ms) | .[length/2|floor] |
       {name: $name, rep: $rep, load: $load, step_ms, comm_ms: (([.comm.by_group[]?.seconds] | add // 0) * 1000),
        dp_exposed_ms: (.dp_comm.exposed_ms // null)}' "$tmp/m.jsonl" >> "$OUT/runs.jsonl"
    ms=$(tail -1 "$OUT/runs.jsonl" | jq .step_ms)
    echo "$name $rep $ms $load" | tee -a "$OUT/measured.txt"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/load.txt"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

: > "$OUT/table.txt"
: > "$OUT/predicted.jsonl"
for row in "${matrix[@]}"; do
  IFS='|' read -r name model ranks over <<< "$row"
  # shellcheck disable=SC2046
  "$BIN" plan --config "$tmp/$model.toml" $(sets "$over") --cluster "$CLUSTER" --world "$ranks" --json |
    jq -c --arg name "$name" --arg over "$over" --arg model "$model" --argjson ranks "$ranks" '.time as $t |
      {name: $name, model: $model, ranks: $ranks, overrides: $over, predicted_ms: ($t.step_s * 1000),
       terms_ms: {compute: (($t.compute_fwd_s + $t.compute_bwd_s + $t.recompute_s + $t.compute_slowdown_s
                             + $t.quantize_s) * 1000),
                  comm_exposed: (([$t.comm_exposed_s[]] | add // 0) * 1000),
                  optimizer: ($t.optimizer_s * 1000), bubble: ($t.bubble_s * 1000)},
       comm_exposed_ms: ($t.comm_exposed_s | map_values(. * 1000))}' >> "$OUT/predicted.jsonl"
  pred=$(tail -1 "$OUT/predicted.jsonl" | jq .predicted_ms)
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

# The record: host, load, every run, per layout the predicted terms beside the measured medians.
jq -n --slurpfile runs "$OUT/runs.jsonl" --slurpfile pred "$OUT/predicted.jsonl" \
  --argjson host "$("$BIN" info)" --arg version "$("$BIN" --version | head -1)" --arg cluster "$CLUSTER" \
  --arg cluster_sources "$(grep -A20 '^\[sources\]' "$CLUSTER")" --arg before "$load_before" \
  --arg after "$load_after" --arg summary "$(cat "$OUT/summary.txt")" --argjson reps "$REPS" '
  def median: sort | .[(length - 1) / 2 | floor];
  {date: (now | todate), version: $version, host: $host, cluster: $cluster, cluster_sources: $cluster_sources,
   reps: $reps, load_before: $before, load_after: $after, summary: $summary,
   layouts: [$pred[] | . as $p | [$runs[] | select(.name == $p.name)] as $r |
     $p + {measured_ms: ([$r[].step_ms] | median), measured_comm_ms: ([$r[].comm_ms] | median),
           measured_dp_exposed_ms: ([$r[].dp_exposed_ms | select(. != null)] | if length > 0 then median
                                    else null end),
           error: (($p.predicted_ms - ([$r[].step_ms] | median)) / ([$r[].step_ms] | median)),
           runs: $r}]}' > "$RESULT"
echo "recorded $RESULT"
