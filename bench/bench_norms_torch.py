#!/usr/bin/env python3
"""PyTorch's side of `bench_bf16 --only norms`: the same ops and shapes,
forward + backward, float32 and bfloat16 (float32 weights next to a bfloat16
input, as under autocast), best of --reps, in wall and thread CPU time
(time.thread_time: with --threads 1 it counts only this work on a busy machine).
Prints one JSON object per op with bench_bf16's keys (f32_ms, bf16_dot_ms,
cpu_f32_ms, cpu_bf16_dot_ms)."""
import argparse
import json
import time

import torch
import torch.nn.functional as F


def best_of(fn, reps):
    fn()  # warm-up
    wall = cpu = float("inf")
    for _ in range(reps):
        w0, c0 = time.perf_counter(), time.thread_time()
        fn()
        wall, cpu = min(wall, time.perf_counter() - w0), min(cpu, time.thread_time() - c0)
    return 1e3 * wall, 1e3 * cpu


def case(op, shape, shapes, f, reps):
    out = {"op": op, "shape": shape}
    for key, dtype in (("f32", torch.float32), ("bf16_dot", torch.bfloat16)):
        torch.manual_seed(0)
        leaves = [torch.randn(s).to(dtype).requires_grad_() for s in shapes]
        grad = torch.randn(f(leaves).shape).to(dtype)

        def step():
            for t in leaves:
                t.grad = None
            f(leaves).backward(grad)

        out[f"{key}_ms"], out[f"cpu_{key}_ms"] = best_of(step, reps)
    print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    x = (32, 128, 32, 32)
    f32 = lambda t: t.float()
    case("group_norm_fwd_bwd", "x 32x128x32x32, 32 groups, float32 weight", [x, (128,), (128,)],
         lambda a: F.group_norm(a[0], 32, f32(a[1]), f32(a[2])), args.reps)
    case("layer_norm_fwd_bwd", "x 32x128x32x32 over (32), float32 weight", [x, (32,), (32,)],
         lambda a: F.layer_norm(a[0], (32,), f32(a[1]), f32(a[2])), args.reps)
    case("layer_norm_fwd_bwd", "x 32x128x32x32 over (128, 32, 32), no affine", [x],
         lambda a: F.layer_norm(a[0], (128, 32, 32)), args.reps)
    case("instance_norm_fwd_bwd", "x 32x128x32x32, float32 weight", [x, (128,), (128,)],
         lambda a: F.instance_norm(a[0], weight=f32(a[1]), bias=f32(a[2])), args.reps)
    case("avg_pool2d_fwd_bwd", "x 32x128x32x32, 2x2", [x], lambda a: F.avg_pool2d(a[0], 2), args.reps)
    case("avg_pool2d_fwd_bwd", "x 32x128x32x32, 3x3 s1 p1", [x], lambda a: F.avg_pool2d(a[0], 3, 1, 1), args.reps)
    case("adaptive_avg_pool2d_fwd_bwd", "x 32x512x4x4 -> 1x1", [(32, 512, 4, 4)],
         lambda a: F.adaptive_avg_pool2d(a[0], 1), args.reps)


if __name__ == "__main__":
    main()
