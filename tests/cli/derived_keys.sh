# A key left at its default that stands for a derived value (model.head_dim = 0: d_model / n_head;
# model.n_kv_head = 0: n_head; model.d_ff = 0: GPT-2's 4 x d_model) matches a checkpoint that recorded
# the value itself: after `odyssey import --from hf-llama` (which records head_dim, n_kv_head and d_ff),
# the config that trained the exported model resumes from the imported checkpoint (issue 42). A key that
# really differs is still refused, naming it.
source "$(dirname "$0")/common.sh" "$@"
make_shards "$WORK/data"
small_model_config llama 4 2 256
sed -i '/^n_kv_head = 2$/d' "$WORK/llama.toml"  # n_kv_head and head_dim left to their defaults
train() { "$ODYSSEY" train --config "$WORK/$1.toml" "${@:2}" >"$WORK/train.log" 2>&1; }

train llama --set "checkpoint.dir=$WORK/ref" --set train.steps=0 || fail "initial checkpoint: $(tail -n 2 "$WORK/train.log")"
"$ODYSSEY" export --checkpoint "$WORK/ref" --to hf-llama --output "$WORK/hf" >/dev/null 2>&1 || fail "export"
"$ODYSSEY" import --from hf-llama --input "$WORK/hf" --output "$WORK/imported" >/dev/null 2>&1 || fail "import"
grep -q '"head_dim": *10' "$WORK"/imported/step_*/manifest.json && echo "ok: the import records head_dim 10" ||
  fail "the imported manifest does not record head_dim 10"
if train llama --set "checkpoint.dir=$WORK/imported" --set checkpoint.resume=true --set train.steps=2; then
  echo "ok: head_dim = 0 and n_kv_head = 0 resume the imported checkpoint (head_dim 10, n_kv_head 4)"
else
  fail "resume from the import: $(tail -n 1 "$WORK/train.log")"
fi
expect_error "a real difference is refused" "has model.n_layer=2, the config says 3" \
  "$ODYSSEY" train --config "$WORK/llama.toml" --set "checkpoint.dir=$WORK/imported" --set checkpoint.resume=true \
  --set train.steps=4 --set model.n_layer=3
expect_error "a derived value that differs is refused" "has model.head_dim=10, the config says 8" \
  "$ODYSSEY" train --config "$WORK/llama.toml" --set "checkpoint.dir=$WORK/imported" --set checkpoint.resume=true \
  --set train.steps=4 --set model.head_dim=8

# GPT-2: d_ff written out as 4 x d_model resumes a checkpoint that recorded 0.
small_model_config gpt2 5 2 256
train gpt2 --set "checkpoint.dir=$WORK/gpt2" --set train.steps=1 || fail "gpt2: $(tail -n 2 "$WORK/train.log")"
if train gpt2 --set "checkpoint.dir=$WORK/gpt2" --set checkpoint.resume=true --set train.steps=2 --set model.d_ff=160; then
  echo "ok: model.d_ff = 160 resumes a GPT-2 checkpoint of d_model 40 that recorded d_ff = 0"
else
  fail "gpt2 resume with d_ff = 160: $(tail -n 1 "$WORK/train.log")"
fi
finish
