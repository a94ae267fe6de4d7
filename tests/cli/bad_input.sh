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
expect_error "negative GEMM rate" "train.gemm_gflops must be a finite rate >= 0 \(0: the hardware peak\), got -1" \
  run --set train.gemm_gflops=-1
expect_error "infinite GEMM rate" "train.gemm_gflops must be a finite rate >= 0 .*got inf" run --set train.gemm_gflops=inf
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

# Fixtures of the matrix: HF directories with a bad config.json, a shard with a wrong version, an
# empty shard, a checkpoint whose manifest is not JSON.
gpt2_config='{"model_type": "gpt2", "n_layer": 2, "n_head": 5, "n_embd": 40, "n_positions": 37, "vocab_size": 256}'
mkdir -p "$WORK"/{hf_text,hf_llama,hf_inner,hf_nokey,hf_noweights} "$WORK/badmanifest/step_00000001"
echo '{"model_type": "gpt2", ' >"$WORK/hf_text/config.json"
echo '{"model_type": "llama", "num_hidden_layers": 2}' >"$WORK/hf_llama/config.json"
sed 's/}$/, "n_inner": 100}/' <<<"$gpt2_config" >"$WORK/hf_inner/config.json"
sed 's/"n_layer": 2, //' <<<"$gpt2_config" >"$WORK/hf_nokey/config.json"
echo "$gpt2_config" >"$WORK/hf_noweights/config.json"
cp "$WORK/data/shards/train_000000.bin" "$WORK/bad_version.bin"
printf '\x03' | dd of="$WORK/bad_version.bin" bs=1 seek=4 conv=notrunc status=none
: >"$WORK/empty.bin"
echo 'not json' >"$WORK/badmanifest/step_00000001/manifest.json"
mkdir -p "$WORK/hf_llama_big"
echo '{"model_type": "llama", "vocab_size": 256, "hidden_size": 4294967336, "intermediate_size": 72,
  "num_hidden_layers": 2, "num_attention_heads": 5, "max_position_embeddings": 37}' >"$WORK/hf_llama_big/config.json"

# The matrix: each case exits 1 with one line on stderr, "odyssey: error: ..." matching PATTERN.
# bad NAME PATTERN ARGS...  (ARGS: the odyssey command line)
bad() {
  local name="$1" pattern="$2"
  shift 2
  local out rc
  # A hang guard, not a time assertion: a case that does work proportional to a key (minutes) fails.
  out=$(timeout 120 "$ODYSSEY" "$@" 2>&1 >/dev/null)
  rc=$?
  if [ $rc -ne 1 ]; then
    fail "$name: exit code $rc, expected 1: $out"
  elif [ "$(grep -c . <<<"$out")" -ne 1 ] || ! grep -qE -- "^odyssey: error: .*($pattern)" <<<"$out"; then
    fail "$name: expected one line matching /$pattern/: $out"
  else
    echo "ok: $name -> $out"
  fi
}
T=(train --config "$cfg" --set train.steps=1)
while IFS='|' read -r name pattern args; do
  [ -z "$name" ] && continue
  eval "set -- $args"
  bad "$name" "$pattern" "$@"
done <<EOF_CASES
micro batch 0|train.micro_batch must be positive, got 0|"\${T[@]}" --set train.micro_batch=0
negative lr|train.lr must be positive, got -1|"\${T[@]}" --set train.lr=-1
unknown schedule|train.schedule: unknown .*'linear'|"\${T[@]}" --set train.schedule=linear
unknown precision|train.precision: unknown .*'fp16'|"\${T[@]}" --set train.precision=fp16
zero stage 4|parallel.zero_stage must be 0, 1, 2 or 3, got 4|"\${T[@]}" --set parallel.zero_stage=4
ulysses over the world|parallel.sp_ulysses \(3\).*world size \(1\)|"\${T[@]}" --set parallel.sp_ulysses=3
tensor parallel|parallel.tp \(2\)|"\${T[@]}" --set parallel.tp=2
unknown gradient format|comm.grads: unknown .*'int3'|"\${T[@]}" --set comm.grads=int3
negative checkpoint interval|checkpoint.every must be >= 0, got -1|"\${T[@]}" --set checkpoint.every=-1
negative keep|checkpoint.keep must be >= 0, got -1|"\${T[@]}" --set checkpoint.keep=-1
unknown tokenizer key|data.tokenizer: unknown value 'wordpiece'|"\${T[@]}" --set data.tokenizer=wordpiece
zero layers|model.n_layer must be positive, got 0|"\${T[@]}" --set model.n_layer=0
zero vocabulary|model.vocab_size must be positive, got 0|"\${T[@]}" --set model.vocab_size=0
unknown architecture|model.arch: unknown value 'bert' \(gpt2, llama, qwen2\)|"\${T[@]}" --set model.arch=bert
unknown rope scaling|model.rope_scaling.rope_type: unknown value 'yarn' \(\"\", llama3\)|"\${T[@]}" --set model.rope_scaling.rope_type=yarn
negative steps|train.steps must be >= 0, got -5|"\${T[@]}" --set train.steps=-5
negative warmup|train.warmup_steps must be >= 0, got -1|"\${T[@]}" --set train.warmup_steps=-1
beta1 of 1|train.beta1 must be in \[0, 1\), got 1|"\${T[@]}" --set train.beta1=1
log every 0|log.every must be >= 1, got 0|"\${T[@]}" --set log.every=0
unknown ring layout|parallel.sp_ring_layout: unknown .*'spiral'|"\${T[@]}" --set parallel.sp_ring_layout=spiral
--set without value|--set train.steps: expected section.key=value|"\${T[@]}" --set train.steps
--set without key|--set =3: expected section.key=value|"\${T[@]}" --set =3
model too large|model.n_layer 1, model.d_model 400000.*does not fit on this host|"\${T[@]}" --set model.d_model=400000 --set model.n_head=1 --set model.n_layer=1
model too large, dry run|model.n_layer 4000.*does not fit on this host|"\${T[@]}" --set model.n_layer=4000 --set model.d_model=4000 --set model.n_head=4 --dry-run
layout product beyond 32 bits|parallel.dp \(0\) x parallel.sp_ulysses \(65536\) x parallel.sp_ring \(65536\) .*world size \(1\)|"\${T[@]}" --set parallel.sp_ulysses=65536 --set parallel.sp_ring=65536
tp x pp beyond 32 bits|parallel.tp \(65536\) x parallel.pp \(65536\) must equal the world size \(1\)|"\${T[@]}" --set parallel.tp=65536 --set parallel.pp=65536
tokens per micro-batch beyond 32 bits|train.micro_batch \(2147483647\) x train.seq_len \(37\)|"\${T[@]}" --set train.micro_batch=2147483647 --set train.global_batch=2147483647
GPT-2 MLP width beyond 32 bits|twice the MLP width must be at most|"\${T[@]}" --set model.d_model=268435456 --set model.n_head=1 --dry-run
many layers, dry run|model.n_layer \(100000\) is more than|"\${T[@]}" --set model.n_layer=100000 --set model.d_model=8 --set model.n_head=1 --set train.host_memory_gb=100000 --dry-run
threads beyond the host|train.threads \(100000000\) is more than|"\${T[@]}" --set train.threads=100000000
memory budget beyond the address space|train.host_memory_gb must be at most|"\${T[@]}" --set train.host_memory_gb=1e300
disk budget beyond the address space|memory.disk_budget_gb must be at most|"\${T[@]}" --set memory.disk_budget_gb=inf
bucket beyond the address space|parallel.bucket_mb must be at most|"\${T[@]}" --set parallel.bucket_mb=1e300
import: llama hidden_size beyond 32 bits|hf_llama_big/config.json: field 'hidden_size': 4294967336 is out of range|import --from hf-llama --input "$WORK/hf_llama_big" --output "$WORK/out"
train without --config|--config is required|train
unknown flag|--bogus|"\${T[@]}" --bogus
eval without --data|--data is required|eval --checkpoint "$WORK/none"
generate without checkpoint|checkpoint .*none: no such directory|generate --checkpoint "$WORK/none" --prompt x
export without checkpoint|checkpoint .*none: no such directory|export --checkpoint "$WORK/none" --to hf-gpt2 --output "$WORK/out"
export to unknown format|--to: unknown format 'onnx'|export --checkpoint "$WORK/none" --to onnx --output "$WORK/out"
import from unknown format|--from: unknown format 'keras'|import --from keras --input "$WORK/hf" --output "$WORK/out"
import without config.json|none/config.json|import --from hf-gpt2 --input "$WORK/none" --output "$WORK/out"
import: config not JSON|hf_text/config.json: not valid JSON|import --from hf-gpt2 --input "$WORK/hf_text" --output "$WORK/out"
import: llama config|hf_llama/config.json: 'model_type' must be "gpt2"|import --from hf-gpt2 --input "$WORK/hf_llama" --output "$WORK/out"
import: wrong n_inner|hf_inner/config.json: 'n_inner'|import --from hf-gpt2 --input "$WORK/hf_inner" --output "$WORK/out"
import: missing key|hf_nokey/config.json: missing 'n_layer'|import --from hf-gpt2 --input "$WORK/hf_nokey" --output "$WORK/out"
import: no weights|hf_noweights: no model.safetensors|import --from hf-gpt2 --input "$WORK/hf_noweights" --output "$WORK/out"
prepare: missing input|input file .*none.txt not found|prepare --input "$WORK/none.txt" --output "$WORK/out" --tokenizer bytes
prepare: unknown tokenizer|unknown tokenizer 'nope'|prepare --input "$WORK/data/text/doc1.txt" --output "$WORK/out" --tokenizer nope
prepare: val fraction 2|--val-fraction|prepare --input "$WORK/data/text/doc1.txt" --output "$WORK/out" --tokenizer bytes --val-fraction 2
shard: wrong version|bad_version.bin.*version|"\${T[@]}" --set "data.train=$WORK/bad_version.bin"
shard: empty file|empty.bin|"\${T[@]}" --set "data.train=$WORK/empty.bin"
checkpoint: manifest not JSON|manifest.json|eval --checkpoint "$WORK/badmanifest/step_00000001" --data "$WORK/data/shards/val_*.bin"
EOF_CASES
[ -e "$WORK/out" ] && fail "a failing command wrote $WORK/out"

# Nothing was written by any failing run.
if [ -e "$WORK/run" ]; then fail "a failing run wrote $WORK/run"; else echo "ok: nothing written"; fi

# eval / generate / export on a missing or corrupt checkpoint.
expect_error "eval without checkpoint" "no such directory" "$ODYSSEY" eval --checkpoint "$WORK/none" --data "$WORK/data/shards/val_*.bin"
"$ODYSSEY" train --config "$cfg" --set train.steps=0 >/dev/null 2>&1 || fail "train.steps=0 failed"
ck=$(ls -d "$WORK"/run/step_* | head -n 1)
[ -f "$ck/params.rank00000.safetensors" ] && echo "ok: train.steps=0 wrote the initial checkpoint" || fail "no initial checkpoint"
# Integers of imported and saved files beyond the type that holds them, and fields missing from an older
# or hand-edited manifest: refused naming the file and the field (issue 42).
"$ODYSSEY" export --checkpoint "$ck" --to hf-gpt2 --output "$WORK/hf_big" >/dev/null 2>&1 || fail "export to hf-gpt2"
sed -i 's/"n_embd": 40/"n_embd": 4294967336/' "$WORK/hf_big/config.json"
expect_error "import: n_embd beyond 32 bits" "hf_big/config.json: field 'n_embd': 4294967336 is out of range" \
  "$ODYSSEY" import --from hf-gpt2 --input "$WORK/hf_big" --output "$WORK/imported_big"
[ -e "$WORK/imported_big" ] && fail "a refused import wrote $WORK/imported_big"
# edited NAME SED: a copy of the checkpoint whose manifest.json is edited by SED (its checksum removed,
# as a hand edit or a manifest older than the checksum has none).
edited() {
  mkdir -p "$WORK/$1"
  cp -r "$ck" "$WORK/$1/"
  sed -i -e '/^ "manifest_xxh3_64"/d' -e "$2" "$WORK/$1"/step_*/manifest.json
  echo "$WORK/$1"
}
val=("$WORK"/data/shards/val_*.bin)
expect_error "manifest: step missing" "manifest.json: field 'step' is missing" \
  "$ODYSSEY" eval --checkpoint "$(edited nostep '/^ "step":/d')" --data "${val[0]}"
expect_error "manifest: kinds missing" "manifest.json: field 'kinds' is missing" \
  "$ODYSSEY" eval --checkpoint "$(edited nokinds '/^ "kinds": \[/,/^ \],/d')" --data "${val[0]}"
expect_error "manifest: step not an integer" "manifest.json: field 'step': expected an integer, got \"zero\"" \
  "$ODYSSEY" eval --checkpoint "$(edited wordstep 's/^ "step": 0,/ "step": "zero",/')" --data "${val[0]}"
expect_error "manifest: n_layer beyond 32 bits" "manifest.json: field 'model.n_layer': 4294967298 is out of range" \
  "$ODYSSEY" eval --checkpoint "$(edited bignlayer 's/^  "n_layer": 2,/  "n_layer": 4294967298,/')" --data "${val[0]}"
printf 'X' | dd of="$ck/params.rank00000.safetensors" bs=1 seek=20000 conv=notrunc status=none
expect_error "corrupt checkpoint" "params.rank00000.safetensors: tensor .* fails its checksum" \
  "$ODYSSEY" eval --checkpoint "$WORK/run" --data "$WORK/data/shards/val_*.bin"
finish
