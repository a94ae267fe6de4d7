#!/usr/bin/env bash
# bf16 against fp32 on real text (mixed-precision.md §9 "convergence"): the demo model (configs/demo.toml,
# GPT-2 tokens of the Brown corpus) trained twice from the same seed, one process, fp32 then bf16, and
# the two loss curves compared. Writes OUT (default bench/results/bf16/convergence_demo.json): the CPU,
# the command, every step's two losses, the final validation losses and their relative difference, the
# mean of the last 50 train losses of each and the largest per-step difference.
#   bash scripts/experiments/bf16_convergence.sh [STEPS (300)] [OUT] [SEQ_LEN (the config's 2048)]
# Env: ODYSSEY (binary, default build/odyssey), ODYSSEY_CACHE (brown/text, gpt2/ vocabulary).
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-300}
out=${2:-bench/results/bf16/convergence_demo.json}
seq_len=${3:-2048}
ODYSSEY=${ODYSSEY:-build/odyssey}
cache=${ODYSSEY_CACHE:-cache}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$ODYSSEY" prepare --input "$cache"/brown/text/*.txt --output "$work/gpt2" --tokenizer gpt2 \
  --vocab-dir "$cache/gpt2" --quiet >/dev/null
args=(--config configs/demo.toml --set parallel.sp_ulysses=1 --set parallel.zero_stage=0
  --set "data.train=$work/gpt2/train_*.bin" --set "data.val=$work/gpt2/val_*.bin" --set "data.vocab_dir=$cache/gpt2"
  --set train.steps="$steps" --set train.eval_every=25 --set model.seq_len="$seq_len" --set checkpoint.every=0)
for p in fp32 bf16; do
  "$ODYSSEY" train "${args[@]}" --set train.precision=$p --set "checkpoint.dir=$work/$p" >/dev/null 2>"$work/$p.log"
done
python3 - "$work" "$out" "$steps" "$ODYSSEY train ${args[*]} --set train.precision=fp32|bf16" <<'PY'
import json, sys
work, out, steps, command = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def load(p):
    return [json.loads(l) for l in open(f"{work}/{p}/metrics.jsonl") if l.strip()]
runs = {p: load(p) for p in ("fp32", "bf16")}
loss = {p: [r["loss"] for r in runs[p] if "loss" in r] for p in runs}
val = {p: [(r["step"], r["val_loss"]) for r in runs[p] if "val_loss" in r] for p in runs}
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
last = lambda xs: sum(xs[-50:]) / len(xs[-50:])
fv = {p: val[p][-1][1] for p in runs}
result = {
    "cpu": cpu, "command": command, "steps": steps,
    "final_val_loss": fv,
    "final_val_loss_rel_diff": (fv["bf16"] - fv["fp32"]) / fv["fp32"],
    "mean_last50_train_loss": {p: last(loss[p]) for p in runs},
    "mean_last50_rel_diff": (last(loss["bf16"]) - last(loss["fp32"])) / last(loss["fp32"]),
    "max_abs_step_loss_diff": max(abs(a - b) for a, b in zip(loss["fp32"], loss["bf16"])),
    "val_loss": val, "train_loss": loss,
    "step_ms_median": {p: sorted(r["step_ms"] for r in runs[p] if "step_ms" in r)[len(runs[p]) // 2] for p in runs},
}
json.dump(result, open(out, "w"), indent=1)
print(json.dumps({k: v for k, v in result.items() if k not in ("val_loss", "train_loss")}, indent=1))
PY
