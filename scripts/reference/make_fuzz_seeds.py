"""Writes the small seed corpora of the fuzz targets under fuzz/corpus/<target>/ (committed).

Run from the repository root: python3 scripts/reference/make_fuzz_seeds.py [gpt2 vocab dir]
The GPT-2 vocabulary seed is a cut-down vocabulary (the 256 byte tokens, the first merges and
<|endoftext|>) taken from the published encoder.json / vocab.bpe (default cache/gpt2)."""
import json
import os
import struct
import sys

ROOT = "fuzz/corpus"


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def shard(magic, version, tokens, fmt):
    header = struct.pack("<256i", magic, version, len(tokens), *([0] * 253))
    return header + struct.pack("<%d%s" % (len(tokens), fmt), *tokens)


def safetensors(tensors, metadata=None):
    header, body = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(body), len(body) + len(raw)]}
        body += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + body


def main():
    vocab_dir = sys.argv[1] if len(sys.argv) > 1 else "cache/gpt2"

    put("config_toml", "tiny.toml", open("configs/tiny.toml").read())
    put("config_toml", "gpt2-124m.toml", open("configs/gpt2-124m.toml").read())
    put("config_set", "basic", "train.steps=3\nmodel.n_head=2\ntrain.lr=3e-4\n")
    put("config_set", "parallel", "parallel.zero_stage=2\ncomm.grads=int8\ncomm.grad_pipeline=4\n")
    put("config_set", "strings", 'data.train="x_*.bin"\ncheckpoint.dir=runs/x\ncheckpoint.keep=2\n')

    put("token_shard", "u16", shard(20240520, 1, [1, 2, 3, 50256, 65535, 0, 7], "H"))
    put("token_shard", "u32", shard(20240801, 7, [1, 2, 3, 128000, 50256, 0], "I"))
    put("token_shard", "empty_u16", shard(20240520, 1, [], "H"))

    f32 = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    put("safetensors", "f32", safetensors([("a", "F32", [2, 3], f32), ("b", "F32", [], struct.pack("<f", 7))],
                                          {"format": "pt"}))
    put("safetensors", "mixed", safetensors([("i", "I64", [3], struct.pack("<3q", 1, -2, 3)),
                                             ("h", "F16", [2], struct.pack("<2H", 0x3C00, 0x4000)),
                                             ("u", "U16", [2], struct.pack("<2H", 1, 65535))]))

    config = {"arch": "gpt2", "n_layer": 2, "n_head": 4, "d_model": 64, "seq_len": 32, "vocab_size": 256}
    files = {"model": [{"path": "params.rank00000.safetensors", "bytes": 1234}]}
    put("checkpoint_manifest", "format2", json.dumps({
        "format_version": 2, "model": config, "step": 10, "next_row": 40, "seed": 1337,
        "run": {"train": {"steps": 10}}, "layout": {"dp": 1, "zero_stage": 0}, "schedule": {},
        "files": files}, indent=1))
    put("checkpoint_manifest", "format1", json.dumps({
        "format_version": 1, "model": config, "step": 3, "next_row": 12, "seed": 1,
        "files": {"model.safetensors": {"bytes": 100, "xxh3": "0123456789abcdef"}}}, indent=1))

    put("hf_config", "gpt2", json.dumps({
        "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_inner": None, "n_layer": 12,
        "n_positions": 1024, "tie_word_embeddings": True, "vocab_size": 50257}, indent=2, sort_keys=True))
    put("hf_config", "tiny", '{"model_type": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 4, '
                             '"n_positions": 8, "vocab_size": 300}')

    encoder = json.load(open(os.path.join(vocab_dir, "encoder.json"), encoding="utf-8"))
    merges = open(os.path.join(vocab_dir, "vocab.bpe"), encoding="utf-8").read().split("\n")
    merges = [m for m in merges[1:] if m][:40]
    keep = {tok for tok, i in encoder.items() if i < 256}
    small, order = {}, sorted(keep, key=lambda t: encoder[t])
    for m in merges:
        a, b = m.split(" ")
        order.append(a + b)
    for t in order:
        small.setdefault(t, len(small))
    small["<|endoftext|>"] = len(small)
    put("gpt2_vocab", "small",
        json.dumps(small, ensure_ascii=False).encode() + b"\0" + ("#version: 0.2\n" + "\n".join(merges) + "\n").encode())

    put("gpt2_tokenizer", "ascii", "Hello world, it's 2024! The quick brown fox.\n\n  indented\ttab")
    put("gpt2_tokenizer", "unicode", "Grüße, 世界! ça va? 123,456 — ok <|endoftext|> next")
    put("gpt2_tokenizer", "invalid_utf8", b"abc\xff\xfe def \xc3 \xe2\x82 x\x00y")

    # tiktoken_tokenizer: the first byte picks cl100k_base (0), o200k_base (1) or llama3 (2).
    for i, name in enumerate(["cl100k", "o200k", "llama3"]):
        put("tiktoken_tokenizer", name + "_text",
            bytes([i]) + "Grüße, 世界! It's 12345 — ok <|endoftext|><|begin_of_text|> next\n\n  x".encode())
        put("tiktoken_tokenizer", name + "_invalid_utf8", bytes([i]) + b"abc\xff\xfe def \xc3 \xe2\x82 x\x00y")


if __name__ == "__main__":
    main()
