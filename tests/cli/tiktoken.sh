# The tiktoken-format tokenizers end to end: Brown text prepared with llama3 (and cl100k_base) gives
# uint32 shards (ids above 65,535); a Llama with Llama 3's 128,256-token vocabulary trains on them and
# generates text decoded by the same tokenizer; data.tokenizer is checked; a missing rank file names
# the script that fetches it. Skipped when the files were not fetched (scripts/fetch_tokenizer.sh).
source "$(dirname "$0")/common.sh" "$@"
cache="${ODYSSEY_CACHE:-$ROOT/cache}"
for t in cl100k_base llama3; do
  if [ ! -s "$cache/$t/$t.json" ]; then
    echo "skip: $cache/$t/$t.json not fetched (bash scripts/fetch_tokenizer.sh $t)"
    exit 0
  fi
done
export ODYSSEY_CACHE="$cache" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
text=("$ROOT"/cache/brown/text/ca0*)
[ -e "${text[0]}" ] || text=("$cache"/brown/text/ca0*)
for t in cl100k_base llama3; do
  "$ODYSSEY" prepare --input "${text[@]}" --output "$WORK/$t" --tokenizer "$t" --val-fraction 0.2 \
    >"$WORK/$t.json" 2>&1 || fail "prepare $t: $(tail -n 2 "$WORK/$t.json")"
  grep -q '"token_bytes": 4' "$WORK/$t.json" && echo "ok: $t writes uint32 shards" || fail "$t: not uint32 shards"
done
cfg="$WORK/llama3.toml"
cat >"$cfg" <<TOML
[model]
arch = "llama"
n_layer = 2
n_head = 4
n_kv_head = 2
d_model = 32
d_ff = 64
seq_len = 64
vocab_size = 128256
tie_embeddings = true
[data]
train = "$WORK/llama3/train_*.bin"
val = "$WORK/llama3/val_*.bin"
tokenizer = "llama3"
[train]
$GEMM_RATE_LINE
steps = 3
global_batch = 2
micro_batch = 2
lr = 1e-3
eval_rows = 2
threads = 1
[checkpoint]
dir = "$WORK/run"
TOML
"$ODYSSEY" train --config "$cfg" >"$WORK/train.log" 2>&1 && echo "ok: a Llama trains on Llama 3 tokens" ||
  fail "train: $(tail -n 3 "$WORK/train.log")"
out=$("$ODYSSEY" generate --checkpoint "$WORK/run" --prompt "The jury said" --max-tokens 8 --temperature 0 2>/dev/null)
[[ "$out" == "The jury said"* ]] && echo "ok: generate decodes with llama3: $(head -c 60 <<<"$out")" ||
  fail "generate: '$out'"
expect_error "unknown data.tokenizer" "data.tokenizer: unknown value 'llama4'" "$ODYSSEY" train --config "$cfg" \
  --set data.tokenizer=llama4 --set "checkpoint.dir=$WORK/bad"
expect_error "missing rank file" "fetch_tokenizer.sh o200k_base" env ODYSSEY_CACHE="$WORK/empty" "$ODYSSEY" prepare \
  --input "${text[0]}" --output "$WORK/bad" --tokenizer o200k_base
finish
