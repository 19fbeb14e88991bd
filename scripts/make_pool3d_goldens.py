#!/usr/bin/env python3
"""Writes the PyTorch golden fixtures of 3-D pooling, the 2-D pooling options
(dilation, ceil_mode, divisor_override) and interpolate, which
tests/test_pooling3d_goldens.cpp reads:

    tests/goldens/pooling3d.safetensors     max/avg/adaptive pools, 2-D and 3-D
    tests/goldens/interpolate.safetensors   nearest, nearest-exact, linear, bilinear, trilinear

    python3 scripts/make_pool3d_goldens.py   # needs torch and safetensors (pip)

Same layout as scripts/make_goldens.py (its Writer): case<i>.x, .y, .gy, .gx in
float64 and a "cases" JSON list; max pools also store PyTorch's return_indices
as case<i>.indices (int64). Every file starts from torch.manual_seed(0).
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_goldens import Writer, randn  # noqa: E402


def pooling3d():
    w = Writer("pooling3d.safetensors")
    # (op, x shape, kwargs); kernel/stride/padding/dilation/output_size as lists.
    cases = [
        # 2-D options
        ("max_pool2d", (2, 3, 7, 9), dict(kernel_size=[3, 3], stride=[2, 2], padding=[1, 1], ceil_mode=True)),
        ("max_pool2d", (1, 2, 6, 6), dict(kernel_size=[3, 3], stride=[3, 3], padding=[1, 1], ceil_mode=True)),
        ("max_pool2d", (2, 2, 8, 7), dict(kernel_size=[3, 3], stride=[1, 1], padding=[1, 1], dilation=[2, 2])),
        ("max_pool2d", (2, 2, 9, 8), dict(kernel_size=[2, 3], stride=[2, 2], padding=[0, 1], dilation=[3, 2],
                                          ceil_mode=True)),
        ("avg_pool2d", (2, 3, 7, 9), dict(kernel_size=[3, 3], stride=[2, 2], padding=[1, 1], ceil_mode=True)),
        ("avg_pool2d", (2, 3, 7, 9), dict(kernel_size=[3, 3], stride=[2, 2], padding=[1, 1], ceil_mode=True,
                                          count_include_pad=False)),
        ("avg_pool2d", (2, 3, 7, 6), dict(kernel_size=[3, 2], stride=[2, 1], padding=[1, 1], divisor_override=5)),
        ("avg_pool2d", (1, 2, 6, 6), dict(kernel_size=[3, 3], stride=[3, 3], padding=[1, 1], ceil_mode=True,
                                          divisor_override=2)),
        # 3-D
        ("max_pool3d", (2, 3, 6, 7, 8), dict(kernel_size=[2, 2, 2])),
        ("max_pool3d", (2, 2, 5, 6, 7), dict(kernel_size=[3, 3, 3], stride=[2, 2, 2], padding=[1, 1, 1])),
        ("max_pool3d", (2, 2, 7, 7, 6), dict(kernel_size=[2, 3, 3], stride=[1, 2, 2], padding=[0, 1, 1],
                                             dilation=[2, 1, 2])),
        ("max_pool3d", (1, 2, 5, 5, 6), dict(kernel_size=[2, 2, 2], stride=[2, 2, 2], ceil_mode=True)),
        ("max_pool3d", (3, 5, 6, 4), dict(kernel_size=[2, 2, 2], stride=[1, 1, 1])),  # unbatched
        ("avg_pool3d", (2, 3, 6, 7, 8), dict(kernel_size=[2, 2, 2])),
        ("avg_pool3d", (2, 2, 5, 6, 7), dict(kernel_size=[3, 3, 3], stride=[2, 2, 2], padding=[1, 1, 1])),
        ("avg_pool3d", (2, 2, 5, 6, 7), dict(kernel_size=[3, 3, 3], stride=[2, 2, 2], padding=[1, 1, 1],
                                             count_include_pad=False)),
        ("avg_pool3d", (1, 2, 5, 5, 6), dict(kernel_size=[3, 2, 3], stride=[2, 2, 2], padding=[1, 1, 1],
                                             ceil_mode=True, count_include_pad=False)),
        ("avg_pool3d", (2, 2, 4, 5, 6), dict(kernel_size=[2, 3, 2], stride=[1, 2, 2], divisor_override=3)),
        ("avg_pool3d", (3, 5, 6, 4), dict(kernel_size=[2, 2, 2], stride=[1, 1, 1])),  # unbatched
        ("adaptive_avg_pool3d", (2, 3, 5, 6, 7), dict(output_size=[2, 3, 4])),
        ("adaptive_avg_pool3d", (2, 3, 5, 6, 7), dict(output_size=[1, 1, 1])),
        ("adaptive_avg_pool3d", (3, 4, 5, 6), dict(output_size=[5, 7, 3])),  # unbatched, partly upsampling
        ("adaptive_max_pool3d", (2, 3, 5, 6, 7), dict(output_size=[2, 3, 4])),
        ("adaptive_max_pool3d", (2, 2, 4, 4, 4), dict(output_size=[1, 1, 1])),
        ("adaptive_max_pool2d", (2, 3, 7, 6), dict(output_size=[3, 4])),
    ]
    for op, xs, kw in cases:
        cfg = dict(op=op, **kw)
        fn = getattr(F, op)
        x = randn(*xs)
        w.add(cfg, {"x": x}, lambda x: fn(x, **kw))
        if "max" in op:
            _, idx = fn(x, return_indices=True, **kw)
            w.tensors[f"case{len(w.configs) - 1}.indices"] = idx.contiguous()
    w.save()


def interpolate():
    w = Writer("interpolate.safetensors")
    # (x shape, kwargs) for F.interpolate.
    cases = [
        ((2, 3, 5), dict(mode="nearest", scale_factor=2.0)),
        ((2, 3, 5), dict(mode="nearest", size=[7])),
        ((2, 3, 7), dict(mode="nearest", scale_factor=0.6)),
        ((2, 3, 5, 6), dict(mode="nearest", scale_factor=2.0)),
        ((2, 3, 5, 6), dict(mode="nearest", size=[7, 4])),
        ((2, 3, 5, 6), dict(mode="nearest", scale_factor=[1.5, 2.3])),
        ((2, 2, 3, 4, 5), dict(mode="nearest", scale_factor=2.0)),
        ((2, 2, 3, 4, 5), dict(mode="nearest", size=[5, 3, 7])),
        ((2, 3, 5, 6), dict(mode="nearest-exact", size=[7, 4])),
        ((2, 2, 3, 4, 5), dict(mode="nearest-exact", scale_factor=1.7)),
        ((2, 3, 5), dict(mode="linear", scale_factor=2.0, align_corners=False)),
        ((2, 3, 5), dict(mode="linear", size=[9], align_corners=True)),
        ((2, 3, 5), dict(mode="linear", size=[3], align_corners=False)),
        ((2, 3, 5), dict(mode="linear", size=[1], align_corners=True)),
        ((2, 3, 5, 6), dict(mode="bilinear", scale_factor=2.0, align_corners=False)),
        ((2, 3, 5, 6), dict(mode="bilinear", scale_factor=2.0, align_corners=True)),
        ((2, 3, 5, 6), dict(mode="bilinear", size=[7, 4], align_corners=False)),
        ((2, 3, 5, 6), dict(mode="bilinear", size=[7, 4], align_corners=True)),
        ((2, 3, 5, 6), dict(mode="bilinear", scale_factor=[1.5, 2.3], align_corners=False)),
        ((2, 3, 5, 6), dict(mode="bilinear", scale_factor=1.7, align_corners=False, recompute_scale_factor=True)),
        ((2, 3, 5, 6), dict(mode="bilinear", size=[1, 3], align_corners=True)),
        ((2, 3, 8, 6), dict(mode="bilinear", scale_factor=0.5, align_corners=False)),
        ((2, 2, 3, 4, 5), dict(mode="trilinear", scale_factor=2.0, align_corners=False)),
        ((2, 2, 3, 4, 5), dict(mode="trilinear", scale_factor=2.0, align_corners=True)),
        ((2, 2, 3, 4, 5), dict(mode="trilinear", size=[5, 3, 7], align_corners=False)),
        ((2, 2, 3, 4, 5), dict(mode="trilinear", size=[5, 3, 7], align_corners=True)),
        ((2, 2, 3, 4, 5), dict(mode="trilinear", scale_factor=[1.5, 2.0, 0.7], align_corners=False)),
        ((1, 2, 3, 8, 5), dict(mode="trilinear", size=[3, 8, 9], align_corners=False)),  # identity dims
    ]
    for xs, kw in cases:
        w.add(dict(kw), {"x": randn(*xs)}, lambda x: F.interpolate(x, **kw))
    w.save()


def main():
    for make in [pooling3d, interpolate]:
        torch.manual_seed(0)
        make()


if __name__ == "__main__":
    main()
