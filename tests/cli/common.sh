# Helpers for command-line tests. Usage: source common.sh "$@"  (args: odyssey binary, repo root)
set -u
ODYSSEY="$1"
ROOT="$2"
WORK=$(mktemp -d)
set -a  # tests/mpi_launch.env: Open MPI without its start-up probes, for mpirun and single processes alike
# shellcheck source=../mpi_launch.env
. "$(dirname "${BASH_SOURCE[0]}")/../mpi_launch.env"
set +a
trap 'rm -rf "$WORK"' EXIT
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect_error NAME PATTERN CMD...: CMD must exit non-zero and print PATTERN (grep -E) on stderr.
expect_error() {
  local name="$1" pattern="$2"
  shift 2
  local out rc
  out=$("$@" 2>&1 >/dev/null)
  rc=$?
  if [ $rc -eq 0 ]; then
    fail "$name: exit code 0, expected an error"
  elif ! grep -qE -- "$pattern" <<<"$out"; then
    fail "$name: error message does not match /$pattern/: $out"
  elif grep -qiE "terminate|Segmentation|Aborted|core dumped" <<<"$out"; then
    fail "$name: crashed: $out"
  else
    echo "ok: $name -> $(head -c 200 <<<"$out" | head -n 1)"
  fi
}

# make_shards DIR: a small byte-level train/val split from generated text.
make_shards() {
  local dir="$1"
  mkdir -p "$dir/text"
  for i in 1 2 3 4 5 6 7 8; do
    for j in $(seq 1 60); do echo "Document $i line $j: the quick brown fox jumps over the lazy dog."; done >"$dir/text/doc$i.txt"
  done
  "$ODYSSEY" prepare --input "$dir"/text/*.txt --output "$dir/shards" --tokenizer bytes --val-fraction 0.25 --quiet >/dev/null
}

# The MFU denominator the tests' configs state (train.gemm_gflops per rank), so MFU compares across
# runs (resume.sh keeps the hardware peak and checks it).
GEMM_RATE_LINE="gemm_gflops = 50"
# tiny_config SHARDS OUT: configs/tiny.toml training on SHARDS, with the fixed GEMM rate, written to OUT.
tiny_config() { sed -e "s|cache/brown/bytes|$1|g" -e "/^\[train\]/a $GEMM_RATE_LINE" "$ROOT/configs/tiny.toml" >"$2"; }

# tiny_setup: token shards in $WORK/data, configs/tiny.toml pointed at them as $cfg, and MPIRUN for
# multi-rank runs (Open MPI allowed as root, one OpenMP thread per rank).
tiny_setup() {
  MPIRUN=(mpirun --oversubscribe)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
  make_shards "$WORK/data"
  cfg="$WORK/tiny.toml"
  tiny_config "$WORK/data/shards" "$cfg"
}

# run NAME NP ARGS...: trains $cfg on NP ranks, metrics and checkpoints in $WORK/NAME.
run() {
  local name="$1" np="$2"
  shift 2
  mpirun -np "$np" --oversubscribe "$ODYSSEY" train --config "$cfg" --set "checkpoint.dir=$WORK/$name" "$@" \
    >"$WORK/$name.log" 2>&1 || fail "$name: exit code $? ($(tail -n 3 "$WORK/$name.log"))"
}
losses() { grep -oE '"loss":[^,}]*' "$WORK/$1/metrics.jsonl" | cut -d: -f2; }
# compare NAME [REF] [TOL]: every step's loss within relative TOL (default 1e-5) of REF's (default: ref),
# 10 steps.
compare() {
  local name="$1" ref="${2:-ref}" tol="${3:-1e-5}"
  if paste -d' ' <(losses "$ref") <(losses "$name") |
    awk -v tol="$tol" 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > tol * $1) bad = 1; n++ }
         END { exit (bad || n != 10) }'; then
    echo "ok: $name matches $ref's losses (relative $tol)"
  else
    fail "$name: losses differ from $ref: $(paste <(losses "$ref") <(losses "$name") | head -3 | tr '\n' ' ')"
  fi
}

# run_compared NAME NP REF TOL ARGS...: trains $cfg as NAME on NP ranks (ARGS), then compares its losses
# with REF's within relative TOL.
run_compared() {
  local name="$1" np="$2" ref="$3" tol="$4"
  shift 4
  run "$name" "$np" "$@"
  compare "$name" "$ref" "$tol"
}

# small_model_config ARCH GPT2_HEADS LAYERS VOCAB [TRAIN_LINES]: $WORK/ARCH.toml, a 40-wide GPT-2
# (GPT2_HEADS heads) or Llama or Qwen2 (4 heads over 2 kv heads, SwiGLU 72; Qwen2 with its q, k, v
# biases and a tied head) of LAYERS layers on $WORK/data's shards, 10 steps of 8 rows x 32 tokens in
# micro-batches of 2; TRAIN_LINES are added to [train].
small_model_config() {
  local arch="$1" heads="$2" layers="$3" vocab="$4" extra="${5:-}" model
  if [ "$arch" = gpt2 ]; then
    model="arch = \"gpt2\"
n_head = $heads
d_model = 40"
  else
    model="arch = \"$arch\"
$([ "$arch" = qwen2 ] && echo "tie_embeddings = true")"'
n_head = 4
n_kv_head = 2
d_model = 40
d_ff = 72
rms_norm_eps = 1e-5'
  fi
  cat >"$WORK/$arch.toml" <<TOML
[model]
$model
n_layer = $layers
seq_len = 32
vocab_size = $vocab
[data]
train = "$WORK/data/shards/train_*.bin"
val = "$WORK/data/shards/val_*.bin"
[train]
$GEMM_RATE_LINE
steps = 10
global_batch = 8
micro_batch = 2
lr = 1e-3
warmup_steps = 2
eval_rows = 8
threads = 1
$extra
TOML
}
# val_loss NAME: the last validation loss in $WORK/NAME's metrics.
val_loss() { grep -oE '"val_loss":[^,}]*' "$WORK/$1/metrics.jsonl" | tail -n 1 | cut -d: -f2; }
# within_1e5 A B: A and B within relative 1e-5.
within_1e5() {
  awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= 1e-5 * (a < 0 ? -a : a)) }'
}

finish() {
  if [ $failures -ne 0 ]; then
    echo "$failures check(s) failed"
    exit 1
  fi
  echo "all checks passed"
}
