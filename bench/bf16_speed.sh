#!/usr/bin/env bash
# bf16 training steps against fp32 (issue 39's speed rows): `odyssey train` with train.precision = bf16
# against fp32, the same binary, model and data, alternated (fp32 then bf16, then bf16 then fp32, ...).
# A run's step time is the median step_ms of its steps after the first (the warm-up); a model's ratio is
# the median fp32 step over the median bf16 step of its RUNS runs of each (per-run ratios beside it).
# Models (MODELS, default all three; the Brown corpus in GPT-2 tokens, prepared from the cache):
#   l4-t512    4 layers, 512 wide, 8 heads, T = 512, 4 rows a micro-batch (bench/compare.sh's l4-t512)
#   l4-t4096   the same at T = 4096, 1 row
#   gpt2-124m  configs/gpt2-124m.toml at T = 1024, 1 row
# The JSON (printed, and written to bench/results/bf16/speed_<LABEL>.json) records the host (`odyssey
# info`: CPU, ISA, oneDNN ISA), the bf16 GEMM mode and the gemm_bf16 implementations the bf16 runs
# created, the load average around every run and the ratios. Timings on a shared machine measure the
# neighbours too: compare the ratios, and re-run in a quiet window.
#
# Usage (from the repository root): bench/bf16_speed.sh [LABEL]
# Env: BIN (build/odyssey), RUNS (3), STEPS (3: one warm-up), THREADS (nproc), MODELS, ODYSSEY_CACHE
# (cache), ODYSSEY_BF16_GEMM (passed on: emulate measures the emulation's step instead).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=common.sh
source bench/common.sh
THREADS=${THREADS:-$(nproc)}  # before bench_init's OMP_NUM_THREADS=1, which nproc honours
bench_init bf16
trap 'rm -rf "$WORK"' EXIT
LABEL=${1:-$(date -u +%Y%m%d_%H%M)}
RUNS=${RUNS:-3}
STEPS=${STEPS:-3}
MODELS=${MODELS:-l4-t512 l4-t4096 gpt2-124m}
CACHE=${ODYSSEY_CACHE:-$ROOT/cache}
export OMP_NUM_THREADS=$THREADS
# The Brown corpus in GPT-2 tokens (its text and the GPT-2 vocabulary from the cache).
"$BIN" prepare --input "$CACHE"/brown/text/*.txt --output "$WORK/shards" --tokenizer gpt2 \
  --vocab-dir "$CACHE/gpt2" --val-fraction 0.05 --quiet >/dev/null ||
  { echo "bf16_speed: cannot prepare $CACHE/brown/text (scripts/fetch_brown.sh)" >&2 && exit 1; }

model_args() {
  case $1 in
    l4-t512) echo "--set model.n_layer=4 --set model.d_model=512 --set model.n_head=8 --set model.seq_len=512 --set train.global_batch=4 --set train.micro_batch=4" ;;
    l4-t4096) echo "--set model.n_layer=4 --set model.d_model=512 --set model.n_head=8 --set model.seq_len=4096 --set train.global_batch=1 --set train.micro_batch=1" ;;
    gpt2-124m) echo "--set train.global_batch=1 --set train.micro_batch=1" ;;
    *) echo "bf16_speed: unknown model $1" >&2 && exit 2 ;;
  esac
}

# one MODEL PRECISION R: one run; its metrics in $WORK/MODEL.PRECISION.R.jsonl, its log and load beside.
one() {
  local model=$1 precision=$2 r=$3 out="$WORK/$1.$2.$3"
  cut -d' ' -f1 /proc/loadavg >"$out.load"
  # shellcheck disable=SC2046
  "$BIN" train --config configs/gpt2-124m.toml $(model_args "$model") \
    --set "data.train=$WORK/shards/train_*.bin" --set "data.val=$WORK/shards/val_*.bin" \
    --set "data.vocab_dir=$CACHE/gpt2" --set train.precision="$precision" --set train.steps="$STEPS" \
    --set train.eval_every=0 --set train.eval_rows=1 --set train.threads="$THREADS" --set log.every=1 \
    --set "checkpoint.dir=$WORK/run" --set checkpoint.overwrite=true >"$out.log" 2>&1 ||
    { echo "bf16_speed: $model $precision run $r failed: $(tail -n 3 "$out.log")" >&2 && exit 1; }
  cp "$WORK/run/metrics.jsonl" "$out.jsonl"
  rm -rf "$WORK/run"
  cut -d' ' -f1 /proc/loadavg >>"$out.load"
  echo "bf16_speed: $model $precision run $r: $(jq -s 'map(.step_ms) | .[1:] | sort | .[length / 2 | floor] | round' "$out.jsonl") ms a step, load $(paste -sd' ' "$out.load")" >&2
}

for model in $MODELS; do
  for ((r = 1; r <= RUNS; r++)); do
    if ((r % 2)); then order="fp32 bf16"; else order="bf16 fp32"; fi
    for precision in $order; do one "$model" "$precision" "$r"; done
  done
done

python3 - "$WORK" "$LABEL" "$RUNS" "$STEPS" "$THREADS" $MODELS >"$WORK/summary.json" <<'EOF'
import json, os, re, statistics, sys

work, label, runs, steps, threads, models = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6:]
med = statistics.median

def step_ms(model, precision, r):
    lines = [json.loads(l) for l in open(f"{work}/{model}.{precision}.{r}.jsonl")]
    return med([l["step_ms"] for l in lines[1:]])

def loads(model, precision, r):
    return [float(x) for x in open(f"{work}/{model}.{precision}.{r}.load").read().split()]

out = {"bench": "bf16_speed", "label": label, "commit": os.environ["COMMIT"], "date": os.environ["DATE"],
       "host": json.loads(os.environ["HOST_JSON"]), "threads": int(threads), "runs": runs, "steps": int(steps),
       "bf16_gemm_env": os.environ.get("ODYSSEY_BF16_GEMM", "auto"), "models": {}}
all_loads = []
for model in models:
    fp32 = [step_ms(model, "fp32", r) for r in range(1, runs + 1)]
    bf16 = [step_ms(model, "bf16", r) for r in range(1, runs + 1)]
    log = open(f"{work}/{model}.bf16.1.log").read()
    gemms = re.search(r"GEMMs: ([^)]*\))", log)
    impls = sorted(set(re.findall(r"^gemm_bf16 \d+x\d+x\d+ .*: (\S+)$", log, re.M)))
    ld = [x for r in range(1, runs + 1) for p in ("fp32", "bf16") for x in loads(model, p, r)]
    all_loads += ld
    out["models"][model] = {
        "fp32_step_ms": med(fp32), "bf16_step_ms": med(bf16), "ratio": med(fp32) / med(bf16),
        "ratio_per_run": [f / b for f, b in zip(fp32, bf16)], "fp32_step_ms_per_run": fp32,
        "bf16_step_ms_per_run": bf16, "bf16_gemms": gemms.group(1) if gemms else None,
        "gemm_bf16_implementations": impls, "load_average_min_max": [min(ld), max(ld)]}
out["load_average_min_max"] = [min(all_loads), max(all_loads)]
print(json.dumps(out, indent=1))
EOF
mkdir -p bench/results/bf16
cp "$WORK/summary.json" "bench/results/bf16/speed_$LABEL.json"
cat "$WORK/summary.json"
