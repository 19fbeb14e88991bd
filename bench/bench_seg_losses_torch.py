#!/usr/bin/env python3
"""PyTorch twin of bench_seg_losses.cpp: same ops, shapes, warm-up and median, one JSON
object per line. Usage: python3 bench/bench_seg_losses_torch.py [--threads 2] [--reps 15]"""
import argparse
import json
import time

import torch
import torch.nn.functional as F


from bench_torch import LAST_CPU_MS, median_ms  # the same warm-up and median as bench_ops' twin


def report(op, shape, ms, threads):
    print(json.dumps({"impl": "pytorch", "op": op, "shape": shape, "median_ms": round(ms, 3), "gflops": 0.0,
                      "threads": threads, "version": "torch " + torch.__version__, "cpu_ms": round(LAST_CPU_MS[0], 3)}), flush=True)


def dice_loss(x, t, smooth=1.0):
    p = torch.sigmoid(x)
    dims = tuple(range(1, x.dim()))
    dice = (2 * (p * t).sum(dims) + smooth) / (p.sum(dims) + t.sum(dims) + smooth)
    return 1 - dice.mean()


def dice_score(x, t):
    pred = (torch.sigmoid(x) > 0.5).float()
    fg = (t > 0.5).float()
    dims = tuple(range(1, x.dim()))
    inter, denom = (pred * fg).sum(dims), pred.sum(dims) + fg.sum(dims)
    empty = (denom == 0).float()
    return ((2 * inter + empty) / (denom + empty)).mean()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    def fwd_bwd(op, shape, x, t, loss):
        x = x.clone().requires_grad_(True)

        def step():
            x.grad = None
            loss(x, t).backward()
        report(op, shape, median_ms(step, args.reps), args.threads)

    vol = "2x1x64x64x64"
    logits, masks = torch.randn(2, 1, 64, 64, 64), (torch.rand(2, 1, 64, 64, 64) > 0.7).float()
    fwd_bwd("bce_with_logits_fwd_bwd", vol, logits, masks, F.binary_cross_entropy_with_logits)
    fwd_bwd("dice_loss_fwd_bwd", vol, logits, masks, dice_loss)
    fwd_bwd("bce_dice_loss_fwd_bwd", vol, logits, masks,
            lambda x, t: F.binary_cross_entropy_with_logits(x, t) + dice_loss(x, t))
    with torch.no_grad():
        report("dice_score", vol, median_ms(lambda: dice_score(logits, masks), args.reps), args.threads)

    cls = "2x4x32x64x64"
    x4, labels = torch.randn(2, 4, 32, 64, 64), torch.randint(0, 4, (2, 32, 64, 64))
    weight = torch.tensor([0.1, 1.0, 2.0, 3.0])
    fwd_bwd("cross_entropy_weighted_fwd_bwd", cls, x4, labels, lambda x, t: F.cross_entropy(x, t, weight=weight))
    soft = torch.softmax(torch.randn(2, 4, 32, 64, 64), 1)
    fwd_bwd("cross_entropy_probs_fwd_bwd", cls, x4, soft, F.cross_entropy)
    fwd_bwd("amax_dims_fwd_bwd", cls, x4, None, lambda x, t: torch.amax(x, dim=(2, 3, 4)).sum())


if __name__ == "__main__":
    main()
