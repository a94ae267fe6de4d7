"""Reference data for tests/train/test_llama_reference.cpp: an independent float64 implementation of
Hugging Face's LlamaForCausalLM (tensor-pipeline-parallelism.md §5.2, written from the definition; no
transformers), on three tiny random models: untied with GQA 4/2 and Llama-3 RoPE scaling, tied with
one key/value head, and untied with as many key/value heads as query heads. For each: config.json (HF),
model.safetensors (the parameters, float32, HF names), and reference.safetensors holding, in float64:
    loss, grad.<name>            the mean loss over the counted targets and every parameter's gradient
    inputs, targets              the batch (as float64; -1 = not counted)
    after_step.<name>            the weights after one torch.optim.AdamW step on that gradient
    clip.loss, clip.grad_norm    a second run from the same weights: two AdamW steps on the same batch,
    after_2_steps_clip.<name>    gradients clipped to global norm CLIP before each (clip_grad_norm_);
                                 each step's loss and pre-clip norm, and the weights after the second
AdamW as Odyssey's train.* keys: decay on matrices and embeddings only, not on the RMSNorm weights.

Run with Debian's PyTorch: /usr/bin/python3 scripts/reference/make_llama_reference.py
"""
import json, math, os, struct
import numpy as np
import torch

torch.set_num_threads(1)  # one summation order, run to run

# AdamW and clipping as in make_gpt2_reference.py.
LR, BETA1, BETA2, ADAM_EPS, WEIGHT_DECAY = 1e-3, 0.9, 0.95, 1e-8, 0.1
CLIP = 0.5
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "llama_ref")


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, (dtype, array) in tensors.items():
        data = np.ascontiguousarray(array, dtype={"F32": "<f4", "F64": "<f8"}[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def inv_freq(D, theta, scaling):
    inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))  # fp32, as HF
    if scaling is None:
        return inv
    factor, low, high, orig = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"], \
        scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > orig / low, inv / factor, inv)
    smooth = (orig / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= orig / high) & (wavelen <= orig / low)
    return torch.where(medium, smoothed, scaled)


def make(name, cfg, seed, out=OUT, qkv_bias=False):
    """One case into out/name; qkv_bias: q, k and v projections with biases (Qwen2)."""
    torch.manual_seed(seed)
    C, H, K, F, L, V = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], \
        cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    D = cfg["head_dim"]
    shapes = {"model.embed_tokens.weight": (V, C)}
    for l in range(L):
        p = f"model.layers.{l}."
        shapes.update({p + "input_layernorm.weight": (C,), p + "self_attn.q_proj.weight": (H * D, C),
                       p + "self_attn.k_proj.weight": (K * D, C), p + "self_attn.v_proj.weight": (K * D, C),
                       p + "self_attn.o_proj.weight": (C, H * D), p + "post_attention_layernorm.weight": (C,),
                       p + "mlp.gate_proj.weight": (F, C), p + "mlp.up_proj.weight": (F, C),
                       p + "mlp.down_proj.weight": (C, F)})
        if qkv_bias:
            shapes.update({p + "self_attn.q_proj.bias": (H * D,), p + "self_attn.k_proj.bias": (K * D,),
                           p + "self_attn.v_proj.bias": (K * D,)})
    shapes["model.norm.weight"] = (C,)
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (V, C)
    # float32 values (what the engine holds), used in float64; norms near 1, biases near 0, matrices large
    # enough that attention is not uniform.
    W = {}
    for n, s in shapes.items():
        x = 0.2 * torch.randn(s) if len(s) == 2 else 0.1 * torch.randn(s) + (0 if n.endswith(".bias") else 1)
        W[n] = x.float().double().requires_grad_(True)
    B, T = 2, 11
    ids = torch.randint(0, V, (B, T))
    targets = torch.randint(0, V, (B, T))
    targets[0, 3] = -1
    targets[1, 7] = -1
    eps = cfg["rms_norm_eps"]
    inv = inv_freq(D, cfg["rope_theta"], cfg.get("rope_scaling"))
    angle = (torch.arange(T).float()[:, None] * inv[None, :]).float()  # fp32 angle, as HF
    emb = torch.cat([angle, angle], -1)
    cos, sin = emb.cos().double(), emb.sin().double()

    def rms(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rotate_half(x):
        return torch.cat([-x[..., D // 2:], x[..., :D // 2]], -1)

    def forward(W):
        x = W["model.embed_tokens.weight"][ids]
        mask = torch.triu(torch.full((T, T), float("-inf"), dtype=torch.float64), 1)
        for l in range(L):
            p = f"model.layers.{l}."
            a = rms(x, W[p + "input_layernorm.weight"])
            def proj(what, heads):
                y = a @ W[p + f"self_attn.{what}_proj.weight"].T
                if qkv_bias:
                    y = y + W[p + f"self_attn.{what}_proj.bias"]
                return y.view(B, T, heads, D).transpose(1, 2)
            q, k, v = proj("q", H), proj("k", K), proj("v", K)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            k, v = k.repeat_interleave(H // K, 1), v.repeat_interleave(H // K, 1)
            s = q @ k.transpose(-1, -2) / math.sqrt(D) + mask
            o = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * D)
            x = x + o @ W[p + "self_attn.o_proj.weight"].T
            b = rms(x, W[p + "post_attention_layernorm.weight"])
            g, u = b @ W[p + "mlp.gate_proj.weight"].T, b @ W[p + "mlp.up_proj.weight"].T
            x = x + (torch.nn.functional.silu(g) * u) @ W[p + "mlp.down_proj.weight"].T
        x = rms(x, W["model.norm.weight"])
        head = W["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else W["lm_head.weight"]
        logits = x @ head.T
        loss = torch.nn.functional.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=-1)
        return loss

    names = list(W)
    init = {n: w.detach().clone() for n, w in W.items()}

    def fresh():
        return {n: init[n].clone().requires_grad_(True) for n in names}

    def optimizer(P):
        decay = [P[n] for n in names if P[n].dim() >= 2]
        no_decay = [P[n] for n in names if P[n].dim() < 2]
        return torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                                  {"params": no_decay, "weight_decay": 0.0}],
                                 lr=LR, betas=(BETA1, BETA2), eps=ADAM_EPS)

    loss = forward(W)
    loss.backward()
    opt = optimizer(W)
    grads = {n: W[n].grad.clone() for n in names}
    opt.step()
    after = {n: W[n].detach().clone() for n in names}

    P = fresh()
    opt = optimizer(P)
    clip_losses, clip_norms = [], []
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        l2 = forward(P)
        l2.backward()
        clip_losses.append(float(l2))
        clip_norms.append(float(torch.nn.utils.clip_grad_norm_([P[n] for n in names], CLIP)))
        opt.step()
    assert min(clip_norms) > CLIP, "clipping must be active for the case to test it"

    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    write_safetensors(os.path.join(d, "model.safetensors"),
                      {n: ("F32", init[n].numpy()) for n in names})
    ref = {"loss": ("F64", np.array([loss.item()])), "inputs": ("F64", ids.double().numpy()),
           "targets": ("F64", targets.double().numpy())}
    ref.update({"grad." + n: ("F64", grads[n].numpy()) for n in names})
    ref.update({"after_step." + n: ("F64", after[n].numpy()) for n in names})
    ref.update({"clip.loss": ("F64", np.array(clip_losses)), "clip.grad_norm": ("F64", np.array(clip_norms))})
    ref.update({"after_2_steps_clip." + n: ("F64", P[n].detach().numpy()) for n in names})
    write_safetensors(os.path.join(d, "reference.safetensors"), ref)
    print(name, "loss", loss.item(), "clip.loss", clip_losses, "clip.grad_norm", clip_norms)


if __name__ == "__main__":
    base = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_act": "silu",
            "attention_bias": False, "mlp_bias": False, "hidden_size": 32, "intermediate_size": 56,
            "num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 8, "vocab_size": 61,
            "max_position_embeddings": 16, "rms_norm_eps": 1e-5, "rope_theta": 500000.0}
    make("untied_gqa_llama3", dict(base, num_key_value_heads=2, tie_word_embeddings=False,
                                   rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8}), 1)
    make("tied_mqa", dict(base, num_key_value_heads=1, tie_word_embeddings=True, rope_theta=10000.0), 2)
    make("untied_mha", dict(base, num_key_value_heads=5, tie_word_embeddings=False, head_dim=6,
                            num_attention_heads=5, hidden_size=30, rope_theta=10000.0), 3)
