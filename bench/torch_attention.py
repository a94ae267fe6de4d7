"""PyTorch's attention (matmul, causal mask, softmax, matmul) timed on bench_attention's shapes, for
comparison only: B = 1, C = H * D = 768, causal, fp32, same threads. Prints one JSON object.

Same FLOP convention as bench_attention (forward 4*T*T*D per head, halved for causal; backward 2.5x
forward), although PyTorch computes the whole [T, T] score matrix: the figures are useful work per
second. Shapes whose [H, T, T] score tensors (about 5 of them live at once in the backward) would
not fit in 60% of the machine's memory are skipped and listed.

Run through bench/torch_attention.sh, which points PyTorch at OpenBLAS.
"""
import argparse
import json
import math
import os
import time

import torch


def median_times(fn, min_seconds=1.0):
    """Median (wall ms, process CPU ms) over >= 3 runs after one untimed warm-up (first-touch page
    faults of the [T, T] scores: at T = 4096 the warm-up took 4.6 s and the next call 0.6 s); one timed
    run after it when the warm-up took longer than min_seconds. bench_attention times the same way."""
    t0 = time.perf_counter()
    fn()
    long_call = time.perf_counter() - t0 > min_seconds
    wall, cpu = [], []
    start = time.perf_counter()
    while not wall or (not long_call and (len(wall) < 3 or (time.perf_counter() - start < min_seconds
                                                             and len(wall) < 200))):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - t) * 1e3)
        cpu.append((time.process_time() - c) * 1e3)
    wall.sort()
    cpu.sort()
    return wall[len(wall) // 2], cpu[len(cpu) // 2], len(wall)


def attention(q, k, v, mask, scale):
    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    s = s.masked_fill(mask, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v)


def bench_shape(T, D):
    C = 768
    H = C // D
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, H, T, D, generator=g, requires_grad=True) for _ in range(3))
    dout = torch.randn(1, H, T, D, generator=g)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    scale = 1.0 / math.sqrt(D)
    fwd_flops = 4.0 * H * T * T * D * 0.5
    bwd_flops = 2.5 * fwd_flops

    def forward():
        with torch.no_grad():
            attention(q, k, v, mask, scale)

    def backward():  # forward with autograd, then backward: what a training step pays
        for t in (q, k, v):
            t.grad = None
        attention(q, k, v, mask, scale).backward(dout)

    shape = {"B": 1, "T": T, "H": H, "D": D, "causal": True}
    for name, fn, flops in (("forward", forward, fwd_flops), ("forward_backward", backward, fwd_flops + bwd_flops)):
        wall, cpu, runs = median_times(fn)
        shape[name] = {"ms": round(wall, 3), "runs": runs, "gflops": round(flops / wall / 1e6, 1),
                       "gflops_per_core": round(flops / cpu / 1e6, 1)}
    # backward alone = forward_backward - forward (autograd's forward keeps what backward needs)
    fb, f = shape["forward_backward"]["ms"], shape["forward"]["ms"]
    shape["backward_derived"] = {"ms": round(fb - f, 3), "gflops": round(bwd_flops / max(fb - f, 1e-9) / 1e6, 1)}
    return shape


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--T", default="1024,4096,16384")
    p.add_argument("--D", default="64,128")
    a = p.parse_args()
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    shapes, skipped = [], []
    for T in map(int, a.T.split(",")):
        for D in map(int, a.D.split(",")):
            need = 5 * (768 // D) * T * T * 4
            if need > 0.6 * mem:
                skipped.append({"T": T, "D": D, "score_bytes_needed": need})
                continue
            shapes.append(bench_shape(T, D))
    c = torch.__config__
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                      "blas": os.environ.get("LD_LIBRARY_PATH", ""),
                      "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""),
                      "allocator": os.environ.get("TORCH_ALLOCATOR", "system"),
                      "parallel_info": c.parallel_info().splitlines()[:3],
                      "attention": shapes, "skipped": skipped}, indent=2))


if __name__ == "__main__":
    main()
