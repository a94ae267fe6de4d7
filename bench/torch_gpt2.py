#!/usr/bin/python3
"""The same GPT-2 as Odyssey's (model/gpt2.h), written plainly in PyTorch, timed the same way.

Learned positions, pre-LayerNorm (eps 1e-5), tanh GELU, tied LM head, biases everywhere, causal
attention as an explicit masked softmax (PyTorch 1.13 has no scaled_dot_product_attention); fp32.
A step is what bench_train runs: zero_grad, forward, cross-entropy, backward, clip_grad_norm_(1.0),
AdamW (foreach, or fused where this PyTorch has it). Prints one JSON object with bench_train's fields.

Run with Debian's /usr/bin/python3 (python3-torch 1.13). Its BLAS is whatever libblas.so.3 resolves
to: give it OpenBLAS (libopenblas0-openmp; the reference BLAS runs under 1 GFLOP/s) and
OPENBLAS_CORETYPE=SkylakeX so the AVX-512 kernels are used. bench/compare.sh does both.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-layer", type=int, default=12)
    p.add_argument("--n-head", type=int, default=12)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args()


args = parse_args()
# Before torch (and its BLAS) load: one thread count for every pool.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(args.threads)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Block(nn.Module):
    def __init__(self, c, n_head, seq_len):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(c, eps=1e-5)
        self.c_attn = nn.Linear(c, 3 * c)
        self.attn_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c, eps=1e-5)
        self.c_fc = nn.Linear(c, 4 * c)
        self.mlp_proj = nn.Linear(4 * c, c)
        mask = torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, seq_len, seq_len), persistent=False)

    def attention(self, x):
        B, T, C = x.shape
        H = self.n_head
        D = C // H
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, H, D).transpose(1, 2)  # [B, H, T, D]
        k = k.view(B, T, H, D).transpose(1, 2)
        v = v.view(B, T, H, D).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.attn_proj(y)

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        x = x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x


class GPT2(nn.Module):
    def __init__(self, n_layer, n_head, d_model, seq_len, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(seq_len, d_model)
        self.h = nn.ModuleList(Block(d_model, n_head, seq_len) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model, eps=1e-5)
        # GPT-2 initialisation, as ours: N(0, 0.02), residual projections / sqrt(2 n_layer), zero biases.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln_" in name:
                nn.init.ones_(p)
            else:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def training_flops_per_token(L, C, V, T):
    """As odyssey::training_flops_per_token: 6 x matmul parameters + 6 L C T (causal attention)."""
    return 6.0 * (L * 12.0 * C * C + V * C) + 6.0 * L * C * T


def gemm_gflops(n=1024, seconds=0.3):
    """torch.mm n^3 fp32 GFLOP/s: by wall time, and by process CPU time / threads (see bench_train)."""
    a = torch.full((n, n), 0.01)
    b = torch.full((n, n), 0.02)
    c = torch.empty(n, n)
    torch.mm(a, b, out=c)
    calls, t0, c0 = 0, time.perf_counter(), time.process_time()
    while True:
        torch.mm(a, b, out=c)
        calls += 1
        dt = time.perf_counter() - t0
        if dt >= seconds:
            cpu = (time.process_time() - c0) / torch.get_num_threads()
            return 2.0 * n**3 * calls / dt / 1e9, 2.0 * n**3 * calls / cpu / 1e9


def make_optimizer(model):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    kw = dict(lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    for extra, name in ((dict(fused=True), "fused"), (dict(foreach=True), "foreach"), ({}, "for-loop")):
        try:
            return torch.optim.AdamW(groups, **kw, **extra), name
        except (TypeError, RuntimeError, ValueError):
            continue
    raise RuntimeError("no AdamW")


def main():
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    L, H, C, T, V, B = args.n_layer, args.n_head, args.d_model, args.seq_len, args.vocab, args.batch
    model = GPT2(L, H, C, T, V)
    model.train()
    opt, opt_kind = make_optimizer(model)
    n_params = sum(p.numel() for p in model.parameters())
    gen = torch.Generator().manual_seed(args.seed)

    gemm_rates = [gemm_gflops()]
    step_cpu = []
    rec = {k: [] for k in ("step", "zero", "fwd", "bwd", "clip", "opt")}
    cpu_share = []
    loss_v = norm_v = 0.0
    for s in range(args.warmup + args.steps):
        idx = torch.randint(0, V, (B, T), generator=gen)
        tgt = torch.randint(0, V, (B, T), generator=gen)
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        t1 = time.perf_counter()
        loss = model(idx, tgt)
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        t4 = time.perf_counter()
        opt.step()
        t5, c5 = time.perf_counter(), time.process_time()
        loss_v, norm_v = loss.item(), norm.item()
        print(f"step {s + 1}{' (warm-up)' if s < args.warmup else ''}: {1e3 * (t5 - t0):.0f} ms, "
              f"loss {loss_v:.4f}, grad norm {norm_v:.3f}", file=sys.stderr)
        gemm_rates.append(gemm_gflops())
        if s < args.warmup:
            continue
        cpu_share.append((c5 - c0) / (t5 - t0) / torch.get_num_threads())
        step_cpu.append(1e3 * (c5 - c0) / torch.get_num_threads())
        for k, v in zip(rec, (t5 - t0, t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            rec[k].append(1e3 * v)

    ms = statistics.median(rec["step"])
    tokens_per_s = B * T / (ms / 1e3)
    fpt = training_flops_per_token(L, C, V, T)
    achieved = fpt * tokens_per_s / 1e9
    gemm = statistics.median(g for g, _ in gemm_rates)
    gemm_cpu = statistics.median(g for _, g in gemm_rates)
    achieved_cpu = fpt * B * T / (statistics.median(step_cpu) / 1e3) / 1e9
    out = {
        "engine": "pytorch",
        "torch": torch.__version__,
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""),
        "optimizer": f"AdamW ({opt_kind})",
        "config": {"n_layer": L, "n_head": H, "d_model": C, "seq_len": T, "vocab": V, "batch": B,
                   "threads": torch.get_num_threads(), "steps": args.steps, "warmup": args.warmup},
        "params": n_params,
        "tokens_per_step": B * T,
        "tokens_per_s": tokens_per_s,
        "step_ms": ms,
        "step_ms_all": rec["step"],
        "cpu_share": statistics.median(cpu_share),
        "flops_per_token": fpt,
        "achieved_gflops": achieved,
        "gemm_gflops": gemm,
        "gemm_gflops_all": [g for g, _ in gemm_rates],
        "gemm_note": "gemm_gflops: torch.mm 1024^3 fp32 (its BLAS), median of one before warm-up and one "
                     "after each step",
        "mfu": achieved / gemm,
        "step_cpu_ms": statistics.median(step_cpu),
        "achieved_gflops_cpu": achieved_cpu,
        "gemm_gflops_cpu": gemm_cpu,
        "mfu_cpu": achieved_cpu / gemm_cpu,
        "loss": loss_v,
        "grad_norm": norm_v,
        "phases_ms": {"zero_grads": statistics.median(rec["zero"]),
                      "forward": statistics.median(rec["fwd"]),
                      "backward": statistics.median(rec["bwd"]),
                      "grad_norm": statistics.median(rec["clip"]),
                      "optimizer": statistics.median(rec["opt"])},
    }
    out["blas_core"] = blas_core()
    out["host"] = {"cpu": cpu_model(), "threads": torch.get_num_threads(),
                   "openblas_coretype_env": os.environ.get("OPENBLAS_CORETYPE")}
    print(json.dumps(out))


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return None


def blas_core():
    """The kernel set the BLAS that PyTorch loaded runs (OpenBLAS's core name), or None."""
    import ctypes
    try:
        lib = ctypes.CDLL("libblas.so.3")  # the library already loaded by torch: same handle
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return None


if __name__ == "__main__":
    main()
