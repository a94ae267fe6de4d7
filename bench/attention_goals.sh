#!/usr/bin/env bash
# Every figure the attention kernel's goals ask for (README, Speed, "Where it stands"), on this
# machine, in one command, and the goal table made from them:
#   1. bench_attention at T = 1K, 4K, 16K and D = 64, 128: forward and backward against the fp32 GEMM
#      rate measured in the same run (goal: each >= 0.5), ATTENTION_ROUNDS (3) times, each shape's ratio
#      the median over the rounds: one round times a shape for about a second, and on a shared machine
#      a neighbour's second can halve it (seen here: 0.47 in one round, 0.83-0.86 in the next three);
#   2. PyTorch's attention on the same shapes where its [T, T] scores fit (bench/torch_attention.sh);
#   3. the whole step against PyTorch, alternating (bench/compare.sh): the 4-layer, 512-wide model at
#      T = 512 (goal >= 1.5x) and T = 4096 (goal >= 3x), GPT-2 124M at T = 1024 (goal: >= 0.70 of the
#      GEMM rate), with PyTorch's share of its own GEMM rate, which bounds the ratio in fp32.
# Every JSON lands in OUT_DIR; stdout gets the table (markdown) with the host (CPU, family/model, oneDNN
# ISA, the attention kernel's path) and the command's settings, ready for the README.
#
#   bash bench/attention_goals.sh                      # about 20 min on a Zen 5, longer on older cores
#   RUNS=5 MODELS=l4-t512 SKIP_ATTENTION=1 bash bench/attention_goals.sh
#
# Environment: BUILD_DIR (build), OUT_DIR (a new /tmp/odyssey-goals.XXXXXX), THREADS (2), RUNS (3,
# compare.sh's alternating runs per model), MODELS (compare.sh's, default "l4-t512 l4-t4096 gpt2-124m"),
# T_LIST (1024,4096,16384), TORCH_T_LIST (1024,4096: PyTorch's scores at 16K take 12-24 GB), D_LIST
# (64,128), SKIP_ATTENTION=1 / SKIP_TORCH_ATTENTION=1 / SKIP_STEP=1 leave a part out. What else
# compare.sh and torch_attention.sh read (BENCH_OPENBLAS_CORETYPE, TORCH_MALLOC, OMP_WAIT_POLICY)
# passes through. Run nothing else CPU-bound beside it. A benchmark: nothing here asserts on time.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/odyssey-goals.XXXXXX)}
THREADS=${THREADS:-2}
RUNS=${RUNS:-3}
MODELS=${MODELS:-"l4-t512 l4-t4096 gpt2-124m"}
T_LIST=${T_LIST:-1024,4096,16384}
TORCH_T_LIST=${TORCH_T_LIST:-1024,4096}
D_LIST=${D_LIST:-64,128}
PYTHON=${PYTHON:-/usr/bin/python3}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
mkdir -p "$OUT_DIR"
log() { echo "attention_goals: $*" >&2; }

ninja -C "$BUILD_DIR" -j2 bench_attention bench_train >&2
log "results in $OUT_DIR"
start=$(date +%s)

if [ "${SKIP_ATTENTION:-0}" != 1 ]; then
  for ((r = 1; r <= ${ATTENTION_ROUNDS:-3}; r++)); do
    log "bench_attention --T $T_LIST --D $D_LIST ($THREADS threads), round $r"
    OMP_NUM_THREADS=$THREADS "$BUILD_DIR/bench/bench_attention" --T "$T_LIST" --D "$D_LIST" \
      >"$OUT_DIR/attention.$r.json" 2>"$OUT_DIR/attention.$r.log"
  done
fi
if [ "${SKIP_TORCH_ATTENTION:-0}" != 1 ]; then
  log "PyTorch attention --T $TORCH_T_LIST --D $D_LIST"
  THREADS=$THREADS bash "$ROOT/bench/torch_attention.sh" --T "$TORCH_T_LIST" --D "$D_LIST" \
    >"$OUT_DIR/torch_attention.json" 2>"$OUT_DIR/torch_attention.log"
fi
if [ "${SKIP_STEP:-0}" != 1 ]; then
  log "whole step: MODELS=\"$MODELS\" RUNS=$RUNS"
  BUILD_DIR=$BUILD_DIR OUT_DIR="$OUT_DIR/compare" THREADS=$THREADS RUNS=$RUNS MODELS=$MODELS \
    bash "$ROOT/bench/compare.sh" >"$OUT_DIR/compare.json" 2>"$OUT_DIR/compare.log"
fi
log "done in $(($(date +%s) - start)) s"

"$PYTHON" - "$OUT_DIR" <<'EOF'
import glob, json, os, statistics, sys

out = sys.argv[1]
def load(name):
    path = os.path.join(out, name)
    return json.load(open(path)) if os.path.exists(path) and os.path.getsize(path) else None

rounds = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(out, "attention.[0-9]*.json")))
          if os.path.getsize(f)]
torch_att, step = load("torch_attention.json"), load("compare.json")
host = (rounds[0] if rounds else step or {}).get("host") or {}
print(f"Host: {host.get('cpu', '?')} (family {host.get('family', '?')} model {host.get('model_number', '?')}), "
      f"oneDNN ISA {host.get('onednn_isa', '?')}, attention path {host.get('attention_isa', '?')}, "
      f"{host.get('threads', '?')} threads; results in {out}\n")
print("| figure | measured | goal | met |\n|---|---|---|---|")

def row(name, measured, goal, met):  # met None: no goal for this figure
    print(f"| {name} | {measured} | {goal} | {'-' if met is None else 'yes' if met else 'no'} |")

if rounds:
    med = statistics.median
    shapes = [(s["T"], s["D"]) for s in rounds[0]["attention"]]
    def of_rounds(shape, key):  # the median over the rounds of key(that shape's entry)
        return med(key(s) for a in rounds for s in a["attention"] if (s["T"], s["D"]) == shape)
    gemm = med(a["gemm_onednn_1024"]["gflops"] for a in rounds)
    for part in ("forward", "backward"):
        r = {sh: of_rounds(sh, lambda s: s[part]["of_gemm"]) for sh in shapes}
        per = ", ".join(f"T={t} D={d}: {v:.2f}" for (t, d), v in r.items())
        row(f"attention {part} / same-run GEMM rate ({gemm:.0f} GFLOP/s), median of {len(rounds)} rounds",
            f"{min(r.values()):.2f}-{max(r.values()):.2f} ({per})", ">= 0.5", min(r.values()) >= 0.5)
    if torch_att:
        for s in torch_att["attention"]:
            sh = (s["T"], s["D"])
            if sh in shapes:
                ours_ms = of_rounds(sh, lambda o: o["forward"]["ms"] + o["backward"]["ms"])
                speedup = s["forward_backward"]["ms"] / ours_ms
                row(f"attention fwd+bwd vs PyTorch, T={s['T']} D={s['D']}", f"{speedup:.1f}x", "-", None)
if step:
    goals = {"l4-t512": ("ratio", 1.5), "l4-t4096": ("ratio", 3.0), "gpt2-124m": ("ours_mfu", 0.70)}
    for model, m in step["models"].items():
        detail = (f"{m['ratio']:.2f}x PyTorch (per run {', '.join(f'{r:.2f}' for r in m['ratio_per_run'])}), "
                  f"our share of the GEMM rate {m['ours_mfu']:.2f}, PyTorch's of its own "
                  f"{m['torch_mfu_vs_its_gemm']:.2f}")
        key, goal = goals.get(model, ("ratio", None))
        if key == "ratio":
            row(f"whole step {model}", detail, f">= {goal}x" if goal else "-", None if goal is None else m["ratio"] >= goal)
        else:
            row(f"whole step {model}, share of the GEMM rate", f"{m['ours_mfu']:.2f} ({detail})", f">= {goal}",
                m["ours_mfu"] >= goal)
    print(f"\nPyTorch: allocator {step.get('torch_allocator')}, OpenBLAS core {step.get('openblas_coretype')}; "
          f"ratios are medians of {m['runs']} alternating runs (compare.sh).")
EOF
