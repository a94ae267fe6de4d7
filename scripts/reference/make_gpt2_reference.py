#!/usr/bin/python3
"""Independent reference for Odyssey's GPT-2: a tiny GPT2LMHeadModel in plain PyTorch, float64.

Regenerate (deterministic; the committed files are what this prints hashes of):

    /usr/bin/python3 scripts/reference/make_gpt2_reference.py [--out tests/data/gpt2_ref]

Needs only PyTorch and numpy (Debian's python3-torch 1.13); transformers and safetensors are not
used, so the model below re-states Hugging Face's GPT2LMHeadModel (modeling_gpt2.py) op for op:
learned positions, pre-LayerNorm (eps 1e-5), Conv1D weights stored [in, out] (y = x @ W + b), fused
c_attn split q|k|v, scaled causal softmax attention, tanh GELU ("gelu_new"), final ln_f, LM head tied
to wte, no dropout. The loss is the mean cross-entropy of logits[b, t] against targets[b, t] (the
targets are given already shifted, as llm.c and Odyssey do; HF shifts labels inside the model).

Writes, in --out:
  config.json         the GPT2LMHeadModel config, byte for byte what odyssey's export writes
  model.safetensors   the weights under HF names ("transformer.h.0.attn.c_attn.weight", Conv1D
                      layout [in, out]; no lm_head.weight, as save_pretrained writes tied weights)
  expected.safetensors
    inputs [B,T] I32, targets [B,T] I32, loss [1] F32, logits [B,T,V] F32,
    grad_norm [1] F32                    global L2 norm of all gradients (tied wte counted once)
    grad.<HF name>                       dL/dW, Conv1D layout; grad.transformer.wte.weight includes
                                         the tied head's contribution. The key slice [C, 2C) of each
                                         c_attn.bias gradient is exactly 0 (softmax is invariant to
                                         it) and stored as 0; an fp32 engine gets noise there, which
                                         AdamW (eps 1e-8) can turn into steps of up to ~lr, so compare
                                         that slice of the updated weights loosely
    after_step.<HF name>                 weights after one torch.optim.AdamW step on that gradient
                                         (no clipping)
    clip.loss [2], clip.grad_norm [2]    a second run from the same weights: two AdamW steps on the
    after_2_steps_clip.<HF name>         same batch, gradients clipped to global norm CLIP before
                                         each step (torch.nn.utils.clip_grad_norm_: scale by
                                         CLIP / (norm + 1e-6) when that is < 1); loss and pre-clip
                                         norm of each step, and the weights after the second step
Everything is computed in float64 from the float32-rounded weights, then stored as F32.
"""

import argparse
import hashlib
import json
import math
import os
import struct

import numpy as np
import torch

# --- The case. Odd sizes on purpose: 5 heads of 8, T not a power of two, V prime. ---
N_LAYER, N_HEAD, D_MODEL, N_POSITIONS, VOCAB = 2, 5, 40, 37, 67
B, T = 3, 37
SEED = 20240607
# AdamW as Odyssey's train.* keys: decay on 2-D tensors (matrices, embeddings) only.
LR, BETA1, BETA2, ADAM_EPS, WEIGHT_DECAY = 1e-3, 0.9, 0.95, 1e-8, 0.1
CLIP = 0.5
# Initial weights. Matrices and embeddings use std 0.2 rather than GPT-2's 0.02: at 0.02 attention
# is near uniform and the GELU inputs are so small that tanh GELU and erf GELU agree to ~1e-7, so a
# wrong activation or attention scale would hide inside fp32 tolerances. Biases and LayerNorm
# parameters are random so that a bug cannot hide behind zeros and ones.
STD_MATRIX, STD_BIAS, STD_LN = 0.2, 0.1, 0.1


def hf_tensors():
    """(HF name, HF shape, kind) in Odyssey's parameter-table order."""
    C = D_MODEL
    out = [("transformer.wte.weight", (VOCAB, C), "matrix"), ("transformer.wpe.weight", (N_POSITIONS, C), "matrix")]
    for l in range(N_LAYER):
        h = f"transformer.h.{l}."
        out += [
            (h + "ln_1.weight", (C,), "ln_weight"),
            (h + "ln_1.bias", (C,), "bias"),
            (h + "attn.c_attn.weight", (C, 3 * C), "matrix"),  # Conv1D: [in, out]
            (h + "attn.c_attn.bias", (3 * C,), "bias"),
            (h + "attn.c_proj.weight", (C, C), "matrix"),
            (h + "attn.c_proj.bias", (C,), "bias"),
            (h + "ln_2.weight", (C,), "ln_weight"),
            (h + "ln_2.bias", (C,), "bias"),
            (h + "mlp.c_fc.weight", (C, 4 * C), "matrix"),
            (h + "mlp.c_fc.bias", (4 * C,), "bias"),
            (h + "mlp.c_proj.weight", (4 * C, C), "matrix"),
            (h + "mlp.c_proj.bias", (C,), "bias"),
        ]
    out += [("transformer.ln_f.weight", (C,), "ln_weight"), ("transformer.ln_f.bias", (C,), "bias")]
    return out


def config_json():
    """Same keys, values and formatting as odyssey::hf_gpt2_config_json."""
    eos = VOCAB - 1
    cfg = {
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.0,
        "bos_token_id": eos,
        "embd_pdrop": 0.0,
        "eos_token_id": eos,
        "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-5,
        "model_type": "gpt2",
        "n_ctx": N_POSITIONS,
        "n_embd": D_MODEL,
        "n_head": N_HEAD,
        "n_inner": None,
        "n_layer": N_LAYER,
        "n_positions": N_POSITIONS,
        "reorder_and_upcast_attn": False,
        "resid_pdrop": 0.0,
        "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": VOCAB,
    }
    return json.dumps(cfg, indent=2, sort_keys=True) + "\n"


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, numpy array of float32 or int32). Header padded to 8 with spaces."""
    dtypes = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, a in tensors:
        a = np.ascontiguousarray(a)
        data = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dtypes[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)
    os.replace(path + ".tmp", path)


# --- The model: modeling_gpt2.py's computation on a dict of HF-named float64 tensors. ---


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def conv1d(x, p, name):
    return x @ p[name + ".weight"] + p[name + ".bias"]  # weight [in, out]


def layer_norm(x, p, name):
    return torch.nn.functional.layer_norm(x, (D_MODEL,), p[name + ".weight"], p[name + ".bias"], eps=1e-5)


def attention(x, p, h):
    Bx, Tx, C = x.shape
    D = C // N_HEAD
    q, k, v = conv1d(x, p, h + "attn.c_attn").split(C, dim=2)
    q, k, v = (t.view(Bx, Tx, N_HEAD, D).transpose(1, 2) for t in (q, k, v))  # [B, H, T, D]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)
    causal = torch.ones(Tx, Tx, dtype=torch.bool).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    y = torch.softmax(scores, dim=-1) @ v
    y = y.transpose(1, 2).reshape(Bx, Tx, C)
    return conv1d(y, p, h + "attn.c_proj")


def forward(p, inputs, targets):
    Tx = inputs.shape[1]
    x = p["transformer.wte.weight"][inputs] + p["transformer.wpe.weight"][torch.arange(Tx)]
    for l in range(N_LAYER):
        h = f"transformer.h.{l}."
        x = x + attention(layer_norm(x, p, h + "ln_1"), p, h)
        x = x + conv1d(gelu_new(conv1d(layer_norm(x, p, h + "ln_2"), p, h + "mlp.c_fc")), p, h + "mlp.c_proj")
    x = layer_norm(x, p, "transformer.ln_f")
    logits = x @ p["transformer.wte.weight"].t()  # tied head
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
    return logits, loss


def make_optimizer(params, names):
    decay = [params[n] for n in names if params[n].dim() >= 2]
    no_decay = [params[n] for n in names if params[n].dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
        lr=LR,
        betas=(BETA1, BETA2),
        eps=ADAM_EPS,
    )


def global_norm(params, names):
    return math.sqrt(sum(float((params[n].grad ** 2).sum()) for n in names))


def zero_key_bias_grads(p):
    """The key part of c_attn.bias adds q_i . b_k to every score of row i, which softmax ignores: its
    gradient is exactly zero, and float64 autograd leaves 1e-17 noise whose bits depend on the heap
    layout. Zeroing it keeps the files reproducible byte for byte (and the AdamW step exact)."""
    for l in range(N_LAYER):
        p[f"transformer.h.{l}.attn.c_attn.bias"].grad[D_MODEL : 2 * D_MODEL] = 0.0


def f32(t):
    return t.detach().numpy().astype(np.float32)


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(root, "tests", "data", "gpt2_ref"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    torch.set_num_threads(1)  # one summation order, run to run
    torch.manual_seed(SEED)
    spec = hf_tensors()
    names = [n for n, _, _ in spec]
    init = {}
    for name, shape, kind in spec:
        z = torch.randn(shape, dtype=torch.float32)
        if kind == "matrix":
            w = STD_MATRIX * z
        elif kind == "bias":
            w = (STD_LN if ".ln_" in name else STD_BIAS) * z
        else:  # LayerNorm weight
            w = 1.0 + STD_LN * z
        init[name] = w.to(torch.float32)  # the stored weights are the truth; compute from them
    inputs = torch.randint(0, VOCAB, (B, T), dtype=torch.int64)
    targets = torch.randint(0, VOCAB, (B, T), dtype=torch.int64)

    def fresh():
        return {n: init[n].to(torch.float64).clone().requires_grad_(True) for n in names}

    # Case 1: forward, backward, one AdamW step without clipping.
    p = fresh()
    logits, loss = forward(p, inputs, targets)
    loss.backward()
    zero_key_bias_grads(p)
    grad_norm = global_norm(p, names)
    grads = {n: p[n].grad.clone() for n in names}
    opt = make_optimizer(p, names)
    opt.step()
    after = {n: p[n].detach().clone() for n in names}

    # Case 2: two clipped AdamW steps on the same batch.
    p = fresh()
    opt = make_optimizer(p, names)
    clip_losses, clip_norms = [], []
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        _, l2 = forward(p, inputs, targets)
        l2.backward()
        zero_key_bias_grads(p)
        clip_losses.append(float(l2))
        clip_norms.append(float(torch.nn.utils.clip_grad_norm_([p[n] for n in names], CLIP)))
        opt.step()
    assert min(clip_norms) > CLIP, "clipping must be active for the case to test it"

    with open(os.path.join(args.out, "config.json"), "w") as f:
        f.write(config_json())
    write_safetensors(
        os.path.join(args.out, "model.safetensors"), [(n, init[n].numpy()) for n in names], {"format": "pt"}
    )
    expected = [
        ("inputs", inputs.numpy().astype(np.int32)),
        ("targets", targets.numpy().astype(np.int32)),
        ("loss", np.array([float(loss)], dtype=np.float32)),
        ("logits", f32(logits)),
        ("grad_norm", np.array([grad_norm], dtype=np.float32)),
    ]
    expected += [("grad." + n, f32(grads[n])) for n in names]
    expected += [("after_step." + n, f32(after[n])) for n in names]
    expected += [
        ("clip.loss", np.array(clip_losses, dtype=np.float32)),
        ("clip.grad_norm", np.array(clip_norms, dtype=np.float32)),
    ]
    expected += [("after_2_steps_clip." + n, f32(p[n])) for n in names]
    write_safetensors(os.path.join(args.out, "expected.safetensors"), expected)

    print(f"loss {float(loss):.9f}  grad_norm {grad_norm:.9f}  clip.loss {clip_losses}  clip.grad_norm {clip_norms}")
    for fn in ("config.json", "model.safetensors", "expected.safetensors"):
        path = os.path.join(args.out, fn)
        with open(path, "rb") as f:
            print(f"{hashlib.sha256(f.read()).hexdigest()}  {os.path.getsize(path):7d}  {fn}")


if __name__ == "__main__":
    main()
