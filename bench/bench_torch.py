#!/usr/bin/env python3
"""PyTorch twin of bench_ops.cpp: same ops, shapes, warm-up and median, one
JSON object per line. Usage: python3 bench/bench_torch.py [--threads 2] [--reps 15] [--suite ops|norm]
(--suite norm: the twin of bench_norm.cpp)"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


def median_ms(f, reps):
    for _ in range(3):
        f()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def report(op, shape, ms, flops, threads):
    print(json.dumps({"impl": "pytorch", "op": op, "shape": shape, "median_ms": round(ms, 3),
                      "gflops": round(flops / (ms * 1e6), 1), "threads": threads,
                      "version": "torch " + torch.__version__}), flush=True)


def bench_matmul(n, args):
    torch.manual_seed(0)
    a, b = torch.randn(n, n), torch.randn(n, n)
    with torch.no_grad():
        ms = median_ms(lambda: torch.mm(a, b), args.reps)
    report("matmul", f"{n}x{n}x{n}", ms, 2.0 * n ** 3, args.threads)


def bench_conv(N, C, K, H, W, k, stride, pad, args):
    torch.manual_seed(0)
    shape = f"N{N} C{C} K{K} {H}x{W} k{k} s{stride} p{pad}"
    x = torch.randn(N, C, H, W)
    w = torch.randn(K, C, k, k) * 0.05
    oh, ow = (H + 2 * pad - k) // stride + 1, (W + 2 * pad - k) // stride + 1
    flops = 2.0 * N * K * C * k * k * oh * ow
    with torch.no_grad():
        report("conv2d_fwd", shape, median_ms(lambda: F.conv2d(x, w, None, stride, pad), args.reps), flops,
               args.threads)
    x.requires_grad_()
    w.requires_grad_()
    dy = torch.ones(N, K, oh, ow)

    def fwd_bwd():
        x.grad = None
        w.grad = None
        F.conv2d(x, w, None, stride, pad).backward(dy)

    report("conv2d_fwd_bwd", shape, median_ms(fwd_bwd, args.reps), 3 * flops, args.threads)


def bench_norm(args):
    """Twin of bench_norm.cpp: normalization layers in training mode, float32."""
    torch.manual_seed(0)
    N, C, H, W = 128, 64, 32, 32
    x = torch.randn(N, C, H, W, requires_grad=True)
    dy = torch.randn(N, C, H, W)
    w, b = torch.ones(C, requires_grad=True), torch.zeros(C, requires_grad=True)
    lw, lb = torch.ones(C, H, W, requires_grad=True), torch.zeros(C, H, W, requires_grad=True)
    rm, rv = torch.zeros(C), torch.ones(C)
    cases = [
        ("batch_norm", [w, b], lambda: F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)),
        ("group_norm", [w, b], lambda: F.group_norm(x, 32, w, b, 1e-5)),
        ("layer_norm", [lw, lb], lambda: F.layer_norm(x, [C, H, W], lw, lb, 1e-5)),
        ("instance_norm", [], lambda: F.instance_norm(x)),
    ]
    for name, params, f in cases:
        with torch.no_grad():
            report(name + "_fwd", "128x64x32x32", median_ms(f, args.reps), x.numel(), args.threads)

        def fwd_bwd():
            x.grad = None
            for p in params:
                p.grad = None
            f().backward(dy)

        report(name + "_fwd_bwd", "128x64x32x32", median_ms(fwd_bwd, args.reps), x.numel(), args.threads)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--suite", choices=["ops", "norm"], default="ops")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.suite == "norm":
        bench_norm(args)
        return
    bench_matmul(1024, args)
    bench_conv(128, 64, 64, 32, 32, 3, 1, 1, args)
    bench_conv(128, 128, 128, 16, 16, 3, 1, 1, args)
    bench_conv(128, 64, 128, 32, 32, 3, 2, 1, args)
    bench_conv(128, 3, 64, 32, 32, 3, 1, 1, args)


if __name__ == "__main__":
    main()
