#!/usr/bin/env bash
# Whole training steps at long sequence lengths under Ulysses sequence parallelism.
#
#   bench/long_sequences.sh            # from the repository root, build/odyssey already built
#
# Models: (a) "small" 4 layers, 4 heads, d_model 256, byte vocabulary (256), brown/bytes shards;
#         (b) "gpt2"  GPT-2 124M (12/12/768, vocab 50257), brown/gpt2 shards;
#         (c) "llama" the 124M-class Llama of configs/llama-124m.toml (GQA 12/4, SwiGLU 2048, GPT-2 BPE), brown/gpt2.
# MEMORY: the memory mode of every run, POLICY[:CHUNK_TOKENS[:TIER]] (default "none": every
# activation kept, whole-sequence layers), e.g. MEMORY=full:4096 or full:4096:disk (scratch files in
# OFFLOAD_DIR, default /tmp). Rows record it ("mode"); estimates only use rows of the same mode.
# Each run: global_batch = micro_batch = 1 row of T tokens, train.steps = STEPS (default 2), the last
# step measured (STEPS=1 for the longest rows: one-time start-up costs are seconds against minutes).
# P ranks = parallel.sp_ulysses = P (dp = 1), parallel.zero_stage = 3 (parameters, gradients and
# AdamW state sharded over the P sequence-parallel ranks). No validation set.
# Recorded per run: step_ms, tokens_per_s, peak RSS per rank (max over ranks, getrusage ru_maxrss,
# whole process lifetime) and the engine's accounted memory per rank (memory.total and its parts).
#
# A run over the time budget is still started, for PROBE_S seconds (default 120): a layout that cannot
# fit is refused by the engine's start-up memory check (train.host_memory_gb) within seconds, and that
# refusal, with its numbers, is the row; one that fits is stopped and marked "not run".
#
# Environment: RANKS="1 2 4", MAX_STEP_S (skip when the estimated step time exceeds it, default 180),
# DEADLINE (epoch seconds; skip runs whose estimated wall time would pass it), OUT (results file),
# APPEND=1 (keep OUT's measured rows and add to them; its "not run" rows are dropped).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/odyssey}
RANKS=${RANKS:-"1 2 4"}
MAX_STEP_S=${MAX_STEP_S:-180}
DEADLINE=${DEADLINE:-0}
OUT=${OUT:-/tmp/long_sequences.jsonl}
STEPS=${STEPS:-2}
APPEND=${APPEND:-0}
MEMORY=${MEMORY:-none}
OFFLOAD_DIR=${OFFLOAD_DIR:-/tmp}
IFS=: read -r POLICY CHUNK TIER <<<"$MEMORY"
MEMORY_ARGS="--set memory.checkpoint=$POLICY --set memory.chunk_tokens=${CHUNK:-0} --set memory.tier=${TIER:-ram}"
[[ ${TIER:-ram} == disk ]] && MEMORY_ARGS+=" --set memory.offload_dir=$OFFLOAD_DIR"
export MEMORY
PROBE_S=${PROBE_S:-120}
PLAN=${PLAN:-"small:4096 small:8192 small:16384 gpt2:4096 small:32768 gpt2:8192 small:65536 gpt2:16384 small:131072 small:262144 gpt2:32768"}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
HOST_JSON=$("$BIN" info)  # CPU model, oneDNN ISA, threads: recorded in every row
export HOST_JSON
if [[ $APPEND == 1 && -f $OUT ]]; then
  grep -v '"skipped"' "$OUT" >"$OUT.tmp" || true
  mv "$OUT.tmp" "$OUT"
else
  : >"$OUT"
fi

model_args() {  # $1 = small | gpt2, $2 = T
  case $1 in
    small) echo "--set model.n_layer=4 --set model.n_head=4 --set model.d_model=256 --set model.vocab_size=256" \
                "--set data.train=cache/brown/bytes/train_000000.bin" ;;
    gpt2) echo "--set model.n_layer=12 --set model.n_head=12 --set model.d_model=768 --set model.vocab_size=50257" \
               "--set data.train=cache/brown/gpt2/train_000000.bin" ;;
    llama) echo "--set model.arch=llama --set model.n_layer=12 --set model.n_head=12 --set model.n_kv_head=4" \
                "--set model.d_model=768 --set model.d_ff=2048 --set model.vocab_size=50257" \
                "--set model.rms_norm_eps=1e-5 --set model.rope_theta=10000 --set model.tie_embeddings=true" \
                "--set data.train=cache/brown/gpt2/train_000000.bin" ;;
  esac
}

# mpirun --bind-to none: Open MPI binds each rank of a job of one or two ranks to one core, and the
# engine runs as many threads as its ranks' cores (train.threads): a one-rank run would use one core.

# Estimated step seconds for (model, T, P): the measured step at T/2 (same model and P) times 4
# (attention is quadratic in T; the linear parts make this an over-estimate). Empty if unknown.
estimate() {
  python3 - "$OUT" "$1" "$2" "$3" <<'EOF'
import json, os, sys
out, model, T, P = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
mode = os.environ["MEMORY"]
prev = [r for r in map(json.loads, open(out))
        if r["model"] == model and r["P"] == P and r["T"] < T and r.get("mode", "none") == mode]
if any(r.get("skipped") or r.get("failed") or r.get("refused") for r in prev):
    print("skip-chain")
elif prev:
    r = max(prev, key=lambda r: r["T"])
    print(int(r["step_ms"] / 1e3 * (T / r["T"]) ** 2))
EOF
}

for item in $PLAN; do
  model=${item%%:*}
  T=${item##*:}
  for P in $RANKS; do
    est=$(estimate "$model" "$T" "$P")
    now=$(date +%s)
    reason=""
    if [[ $est == skip-chain ]]; then
      reason="not run: shorter T already skipped"
      est=""
    elif [[ -n $est ]]; then
      wall=$((STEPS * est + 20))
      if ((est > MAX_STEP_S)); then
        reason="not run: est. $(((est + 59) / 60)) min per step"
      elif ((DEADLINE > 0 && now + wall > DEADLINE)); then
        reason="not run: est. $(((wall + 59) / 60)) min, past the deadline"
      fi
    fi
    limit=()
    [[ -n $reason ]] && limit=(timeout "$PROBE_S")
    dir=$(mktemp -d /tmp/longseq.XXXXXX)
    # shellcheck disable=SC2046
    "${limit[@]}" mpirun --bind-to none -np "$P" --oversubscribe "$BIN" train --config configs/tiny.toml $(model_args "$model" "$T") \
      --set data.val= --set model.seq_len="$T" --set train.seq_len="$T" --set train.steps="$STEPS" \
      --set train.global_batch=1 --set train.micro_batch=1 --set train.warmup_steps=0 \
      --set parallel.sp_ulysses="$P" --set parallel.zero_stage=3 --set log.every=1 $MEMORY_ARGS \
      --set checkpoint.dir="$dir" >"$dir.log" 2>&1
    rc=$?
    python3 - "$dir" "$model" "$T" "$P" "$rc" "$dir.log" "$STEPS" "$reason" "${est:-0}" <<'EOF' | tee -a "$OUT"
import json, os, re, sys
d, model, T, P, rc, log, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], int(sys.argv[7])
reason, est = sys.argv[8], int(sys.argv[9])
r = {"model": model, "T": T, "P": P, "mode": os.environ["MEMORY"], "step": steps, "load1_after": float(open("/proc/loadavg").read().split()[0]),
     "host": json.loads(os.environ["HOST_JSON"])}
text = open(log, errors="replace").read()
size = r"[\d.]+ [GM]iB"
refusal = re.search(rf"(\d+) rank\(s\) x ({size}) of activations .*? = ({size}), but ({size}) is available", text)
if refusal:  # the engine's memory check: this layout cannot fit on this host
    n, per, total, avail = refusal.groups()
    r.update(refused=True, reason=f"does not fit: {n} × {per} of activations = {total} > {avail} available")
    print(json.dumps(r))
    sys.exit(0)
if reason:  # over the time budget and not refused: stopped
    r.update(skipped=True, reason=reason, est_step_s=est or None)
    print(json.dumps(r))
    sys.exit(0)
try:
    recs = [json.loads(l) for l in open(d + "/metrics.jsonl")]
    m = [x for x in recs if x["step"] == steps][0]
    r.update(step_ms=round(m["step_ms"], 1), tokens_per_s=round(m["tokens_per_s"], 1),
             peak_rss_bytes_rank0=m["peak_rss_bytes"], peak_rss_bytes_max=m["peak_rss_bytes_max"],
             memory=m["memory"], loss=m["loss"])
    if "offload" in m:  # the disk tier: bytes written / read and the I/O stall of the step
        r["offload"] = m["offload"]
except Exception as e:  # a failed run (e.g. out of memory) is reported, not hidden
    r.update(failed=True, rc=rc, error=str(e), log_tail=open(log).read()[-400:])
print(json.dumps(r))
EOF
    rm -rf "$dir" "$dir.log"
  done
done

# The activations the engine accounts for (Ulysses' saved head-sharded tensors included), from a dry run
# of each measured layout with this binary: rows measured by older binaries counted the model's own
# activations only. The budget is lifted so that the check does not refuse it while other jobs run.
python3 - "$OUT" <<'EOF' | while read -r model T P; do
import json, os, sys
for r in map(json.loads, open(sys.argv[1])):
    if "memory" in r and "dry_run_activation_bytes" not in r and r.get("mode", "none") == os.environ["MEMORY"]:
        print(r["model"], r["T"], r["P"])
EOF
  # shellcheck disable=SC2046
  acts=$(mpirun --bind-to none -np "$P" --oversubscribe "$BIN" train --config configs/tiny.toml $(model_args "$model" "$T") \
    --set data.val= --set model.seq_len="$T" --set train.seq_len="$T" --set train.global_batch=1 \
    --set train.micro_batch=1 --set parallel.sp_ulysses="$P" --set parallel.zero_stage=3 \
    --set train.host_memory_gb=100000 $MEMORY_ARGS --dry-run 2>/dev/null </dev/null |
    python3 -c "import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])['activation_bytes_per_rank'])")
  python3 - "$OUT" "$model" "$T" "$P" "$acts" <<'EOF'
import json, os, sys
out, model, T, P, acts = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rows = [json.loads(l) for l in open(out)]
for r in rows:
    if (r["model"] == model and r["T"] == T and r["P"] == P and "memory" in r
            and r.get("mode", "none") == os.environ["MEMORY"]):
        r["dry_run_activation_bytes"] = acts
open(out, "w").write("".join(json.dumps(r) + "\n" for r in rows))
EOF
done

python3 - "$OUT" <<'EOF'
import json, sys
order = {"small": 0, "gpt2": 1, "llama": 2}
rows = sorted((json.loads(l) for l in open(sys.argv[1])),
              key=lambda r: (order[r["model"]], r.get("mode", "none"), r["T"], r["P"]))
mb = lambda b: f"{b / 2**20:,.0f} MiB"
print()
print("| model | memory mode | T | P (sp_ulysses) | step | tokens/s | peak RSS per rank (max) | accounted per rank (params+grads+optim / activations / total) |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    name = {"small": "4L×256, 4 heads, bytes", "gpt2": "GPT-2 124M", "llama": "llama-124m"}[r["model"]]
    head = f"| {name} | {r.get('mode', 'none')} | {r['T']} | {r['P']} |"
    if r.get("skipped") or r.get("refused"):
        print(f"{head} {r['reason']} | | | |")
    elif r.get("failed"):
        print(f"{head} failed (rc {r['rc']}) | | | |")
    else:
        m = dict(r["memory"])
        if "dry_run_activation_bytes" in r:
            m["activations"] = r["dry_run_activation_bytes"]
            m["total"] = sum(v for k, v in m.items() if k != "total")
        state = m["params"] + m["grads"] + m["optimizer"]
        step = "" if r.get("step", 2) == 2 else f" (step {r['step']})"
        print(f"{head} {r['step_ms'] / 1e3:.1f} s{step} | {r['tokens_per_s']:,.0f} | {mb(r['peak_rss_bytes_max'])} | "
              f"{mb(state)} / {mb(m['activations'])} / {mb(m['total'])} |")
EOF
