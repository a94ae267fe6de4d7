# Bad input: each case is a clear error naming the key, file or offset, a non-zero exit, and nothing
# written (no checkpoint directory, no metrics).
source "$(dirname "$0")/common.sh" "$@"
make_shards "$WORK/data"
cfg="$WORK/tiny.toml"
sed -e "s|cache/brown/bytes|$WORK/data/shards|g" -e "s|runs/tiny|$WORK/run|" "$ROOT/configs/tiny.toml" >"$cfg"
run() { "$ODYSSEY" train --config "$cfg" --set train.steps=1 "$@"; }

expect_error "unknown key in file" "unknown config key 'model.n_layers'" \
  "$ODYSSEY" train --config <(sed 's/^n_layer =/n_layers =/' "$cfg")
expect_error "unknown key in --set" "unknown config key 'train.stepz'" run --set train.stepz=3
expect_error "unknown section" "unknown config key 'optim.lr'" run --set optim.lr=3
expect_error "pipeline without two-level gradients" "comm.grad_pipeline=4 slices the two-level gradient reduce-scatter" \
  run --set parallel.zero_stage=1 --set comm.grads=int8 --set comm.grad_pipeline=4
expect_error "pipeline slices out of range" "comm.grad_pipeline must be in 1..64, got 0" run --set comm.grad_pipeline=0
expect_error "activations over the memory budget" "train.seq_len [0-9]+ x train.micro_batch [0-9]+ does not fit on this host" \
  run --set train.host_memory_gb=0.001
expect_error "negative memory budget" "train.host_memory_gb must be >= 0, got -1" run --set train.host_memory_gb=-1
expect_error "wrong type" "train.lr: 'fast' is not a valid number" run --set train.lr=fast
expect_error "wrong type in file" "model.n_head: expected an integer" \
  "$ODYSSEY" train --config <(sed 's/^n_head = 5/n_head = "five"/' "$cfg")
expect_error "toml syntax" "tiny|:[0-9]+:[0-9]+" "$ODYSSEY" train --config <(echo "[model"; cat "$cfg")
expect_error "missing config file" "cannot open .*nope.toml" "$ODYSSEY" train --config "$WORK/nope.toml"
expect_error "d_model not divisible by n_head" "model.d_model \(40\) must be divisible by model.n_head \(3\)" \
  run --set model.n_head=3
expect_error "seq_len over the model's" "train.seq_len \(64\) exceeds the model's context model.seq_len \(37\)" \
  run --set train.seq_len=64
expect_error "global batch vs micro batch" "train.global_batch \(5\) must be a multiple of train.micro_batch" \
  run --set train.global_batch=5
expect_error "impossible layout" "must equal the world size" run --set parallel.dp=2
expect_error "missing data" "matches no files|cannot open" run --set "data.train=$WORK/none/*.bin"

# A shard with a wrong magic, a truncated body, a token id >= vocab.
cp "$WORK/data/shards/train_000000.bin" "$WORK/bad_magic.bin"
printf '\x01\x02\x03\x04' | dd of="$WORK/bad_magic.bin" bs=1 seek=0 conv=notrunc status=none
expect_error "wrong magic" "bad_magic.bin.*(offset 0|magic)" run --set "data.train=$WORK/bad_magic.bin"
head -c 2000 "$WORK/data/shards/train_000000.bin" >"$WORK/truncated.bin"
expect_error "truncated body" "truncated.bin.*(truncated|offset)" run --set "data.train=$WORK/truncated.bin"
expect_error "token id >= vocab" "train_000000.bin.*offset [0-9]+" run --set model.vocab_size=100

# Nothing was written by any failing run.
if [ -e "$WORK/run" ]; then fail "a failing run wrote $WORK/run"; else echo "ok: nothing written"; fi

# eval / generate / export on a missing or corrupt checkpoint.
expect_error "eval without checkpoint" "no such directory" "$ODYSSEY" eval --checkpoint "$WORK/none" --data "$WORK/data/shards/val_*.bin"
"$ODYSSEY" train --config "$cfg" --set train.steps=0 >/dev/null 2>&1 || fail "train.steps=0 failed"
ck=$(ls -d "$WORK"/run/step_* | head -n 1)
[ -f "$ck/params.rank00000.safetensors" ] && echo "ok: train.steps=0 wrote the initial checkpoint" || fail "no initial checkpoint"
printf 'X' | dd of="$ck/params.rank00000.safetensors" bs=1 seek=20000 conv=notrunc status=none
expect_error "corrupt checkpoint" "params.rank00000.safetensors: tensor .* fails its checksum" \
  "$ODYSSEY" eval --checkpoint "$WORK/run" --data "$WORK/data/shards/val_*.bin"
finish
