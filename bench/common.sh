# shellcheck shell=bash
# What bench/val_curve.sh and bench/multinode.sh share (sourced, from the repository root): the MPI
# environment of their runs, the scratch directory, the results file with what every JSON line records
# (the CPU from `odyssey info`, the commit, the date), the Brown corpus as bytes, and their model.
#
#   bench_init NAME       ROOT, BIN (default build/odyssey), WORK (a new scratch directory: the caller's
#                         EXIT trap removes it), OUT (bench/results/NAME/<date>_<commit>.jsonl);
#                         exports COMMIT, DATE and HOST_JSON for the scripts' Python that writes the lines
#   bench_prepare_bytes   $WORK/shards/{train,val}_*.bin: cache/brown/text tokenized as bytes, 5% validation
#   bench_model_toml FILE SEQ BATCH EVAL_ROWS [EVAL_EVERY]
#                         the 4-layer GPT-2 (d_model 256, vocabulary 8,192: 5.3M parameters) on those
#                         shards, BATCH rows of SEQ tokens a step, one row per micro-batch, one thread
#                         a rank

bench_init() {
  BENCH=$1
  ROOT=$PWD
  BIN=${BIN:-$ROOT/build/odyssey}
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
  set -a
  . "$ROOT/tests/mpi_launch.env"
  set +a
  WORK=$(mktemp -d)
  local out_dir="$ROOT/bench/results/$BENCH"
  mkdir -p "$out_dir"
  COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  # shellcheck disable=SC2034  # the caller writes to it
  OUT="$out_dir/$(date -u +%Y%m%d_%H%M)_$COMMIT.jsonl"
  HOST_JSON=$("$BIN" info)
  export COMMIT DATE HOST_JSON
}

bench_prepare_bytes() {
  "$BIN" prepare --input "$ROOT"/cache/brown/text/*.txt --output "$WORK/shards" --tokenizer bytes \
    --val-fraction 0.05 --quiet >/dev/null ||
    { echo "$BENCH: cannot prepare cache/brown/text (scripts/fetch_brown.sh)" >&2 && return 1; }
}

bench_model_toml() {
  local file=$1 seq=$2 batch=$3 eval_rows=$4 eval_every=${5:-}
  cat >"$file" <<TOML
[model]
arch = "gpt2"
n_layer = 4
n_head = 4
d_model = 256
seq_len = $seq
vocab_size = 8192
[data]
train = "$WORK/shards/train_*.bin"
val = "$WORK/shards/val_*.bin"
[train]
gemm_gflops = 50
global_batch = $batch
micro_batch = 1
lr = 1e-3
warmup_steps = 2
eval_rows = $eval_rows
${eval_every:+eval_every = $eval_every
}threads = 1
seed = 1337
TOML
}
