#!/usr/bin/env python3
"""Writes the PyTorch golden fixtures of the 3-D segmentation ops that
tests/test_conv3d_goldens.cpp reads: conv3d, conv_transpose2d/3d, pad (every
mode) and the Conv2d/Conv3d modules with padding="same" and non-zero
padding modes. Same format as scripts/make_goldens.py (its Writer): per case
float64 inputs, y, a random upstream gradient gy and the gradients of
sum(y * gy); the configurations in the "cases" metadata.

    python3 scripts/make_conv3d_goldens.py          # needs torch and safetensors (pip)
"""
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_goldens import Writer, randn  # noqa: E402


def conv3d():
    w = Writer("conv3d.safetensors")
    # (x shape, w shape, stride, padding, dilation, groups, has_bias)
    configs = [
        ((2, 3, 4, 5, 6), (4, 3, 3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), 1, True),
        ((1, 4, 6, 5, 7), (6, 2, 3, 2, 3), (2, 1, 2), (1, 0, 1), (1, 2, 1), 2, True),   # groups, strides, dilation
        ((2, 4, 4, 4, 4), (4, 1, 3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), 4, False),  # depthwise
        ((1, 2, 6, 6, 6), (3, 2, 2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1), 1, True),   # 2x downsampling
        ((3, 5, 4, 6), (2, 3, 3, 1, 3), (1, 1, 1), (2, 0, 1), (1, 1, 1), 1, True),      # unbatched
    ]
    for xs, ws, stride, padding, dilation, groups, has_bias in configs:
        inputs = {"x": randn(*xs), "w": randn(*ws)}
        if has_bias:
            inputs["b"] = randn(ws[0])
        cfg = dict(stride=stride, padding=padding, dilation=dilation, groups=groups, has_bias=has_bias)
        w.add(cfg, inputs, lambda x, w, b=None: F.conv3d(x, w, b, stride, padding, dilation, groups))
    w.save()


def conv_transpose():
    w = Writer("conv_transpose.safetensors")
    # (x shape, w shape, stride, padding, output_padding, groups, dilation, has_bias)
    configs = [
        ((2, 4, 3, 5), (4, 3, 2, 2), (2, 2), (0, 0), (0, 0), 1, (1, 1), True),        # 2x upsampling
        ((1, 4, 4, 3), (4, 2, 3, 3), (2, 3), (1, 1), (1, 2), 2, (1, 1), True),        # groups, output_padding
        ((2, 3, 4, 4), (3, 2, 3, 2), (1, 1), (1, 0), (1, 0), 1, (2, 1), False),       # output_padding >= stride
        ((3, 4, 5), (3, 2, 3, 3), (2, 1), (0, 1), (0, 0), 1, (1, 2), True),           # unbatched
        ((2, 4, 2, 3, 3), (4, 3, 2, 2, 2), (2, 2, 2), (0, 0, 0), (0, 0, 0), 1, (1, 1, 1), True),  # UNet3d up
        ((1, 4, 3, 2, 3), (4, 1, 3, 2, 3), (2, 1, 2), (1, 0, 1), (1, 0, 0), 2, (1, 2, 1), True),
        ((2, 2, 3, 3), (2, 2, 2, 3, 2), (1, 2, 1), (0, 1, 0), (0, 1, 0), 1, (1, 1, 1), False),   # unbatched 3-D
    ]
    for xs, ws, stride, padding, output_padding, groups, dilation, has_bias in configs:
        inputs = {"x": randn(*xs), "w": randn(*ws)}
        if has_bias:
            inputs["b"] = randn(ws[1] * groups)
        fn = F.conv_transpose2d if len(ws) == 4 else F.conv_transpose3d
        cfg = dict(dims=len(ws) - 2, stride=stride, padding=padding, output_padding=output_padding, groups=groups,
                   dilation=dilation, has_bias=has_bias)
        w.add(cfg, inputs,
              lambda x, w, b=None: fn(x, w, b, stride, padding, output_padding, groups, dilation))
    w.save()


def pad():
    w = Writer("pad.safetensors")
    # (x shape, pads, mode, value)
    configs = [
        ((2, 3, 5), (2, 1), "reflect", 0.0),
        ((2, 3, 4, 5), (1, 2, 3, 0), "reflect", 0.0),
        ((2, 2, 3, 4, 5), (1, 2, 0, 1, 2, 2), "reflect", 0.0),
        ((2, 3, 4), (3, 5), "replicate", 0.0),
        ((3, 4, 5), (2, 0, 1, 3), "replicate", 0.0),
        ((1, 2, 3, 3, 4), (1, 1, 2, 0, 1, 2), "replicate", 0.0),
        ((2, 3, 4), (4, 2), "circular", 0.0),
        ((2, 3, 4, 5), (1, 2, 4, 0), "circular", 0.0),
        ((1, 2, 3, 3, 4), (1, 2, 3, 1, 0, 2), "circular", 0.0),
        ((2, 3, 4, 5), (1, 2, -1, 3), "constant", 0.5),
        ((2, 3, 4), (1, 1, 0, 2, -1, 1), "constant", 0.0),
    ]
    for xs, pads, mode, value in configs:
        cfg = dict(pads=pads, mode=mode, value=value)
        w.add(cfg, {"x": randn(*xs)},
              lambda x: F.pad(x, pads, mode, value) if mode == "constant" else F.pad(x, pads, mode))
    w.save()


def conv_modules():
    w = Writer("conv_modules.safetensors")
    # (dims, in, out, kernel, stride, padding (int tuple or string), dilation, groups, bias, padding_mode, x shape)
    configs = [
        (2, 2, 3, (3, 3), (1, 1), "same", (1, 1), 1, True, "zeros", (2, 2, 5, 6)),
        (2, 2, 4, (4, 3), (1, 1), "same", (1, 2), 2, True, "zeros", (1, 2, 6, 7)),     # even kernel: extra on the right
        (2, 2, 3, (3, 3), (2, 1), (1, 2), (1, 1), 1, False, "reflect", (2, 2, 5, 6)),
        (2, 2, 3, (4, 2), (1, 1), "same", (1, 1), 1, True, "replicate", (1, 2, 5, 5)),
        (2, 3, 3, (3, 3), (1, 1), (2, 1), (1, 1), 3, True, "circular", (2, 3, 4, 5)),
        (2, 2, 3, (3, 3), (1, 1), "valid", (1, 1), 1, True, "reflect", (2, 5, 6)),      # unbatched
        (3, 2, 3, (3, 3, 3), (1, 1, 1), "same", (1, 1, 1), 1, True, "zeros", (1, 2, 4, 5, 4)),
        (3, 2, 2, (2, 3, 4), (1, 1, 1), "same", (2, 1, 1), 1, True, "zeros", (1, 2, 5, 4, 5)),
        (3, 2, 3, (3, 3, 3), (1, 2, 1), (1, 1, 1), (1, 1, 1), 1, True, "reflect", (2, 2, 3, 4, 5)),
        (3, 2, 2, (2, 2, 3), (1, 1, 1), "same", (1, 1, 1), 2, False, "replicate", (1, 2, 3, 4, 4)),
        (3, 2, 3, (3, 1, 3), (1, 1, 1), (1, 0, 2), (1, 1, 1), 1, True, "circular", (2, 3, 4, 4)),  # unbatched
    ]
    for dims, cin, cout, k, stride, padding, dilation, groups, bias, mode, xs in configs:
        cls = nn.Conv2d if dims == 2 else nn.Conv3d
        m = cls(cin, cout, k, stride, padding, dilation, groups, bias, mode).double()
        inputs = {"x": randn(*xs), "w": randn(*m.weight.shape)}
        if bias:
            inputs["b"] = randn(cout)
        cfg = dict(dims=dims, in_channels=cin, out_channels=cout, kernel_size=k, stride=stride, padding=padding,
                   dilation=dilation, groups=groups, bias=bias, padding_mode=mode)

        def fn(x, w, b=None, m=m):
            params = {"weight": w} if b is None else {"weight": w, "bias": b}
            return functional_call(m, params, (x,))

        w.add(cfg, inputs, fn)
    w.save()


def main():
    for make in [conv3d, conv_transpose, pad, conv_modules]:
        torch.manual_seed(0)
        make()


if __name__ == "__main__":
    main()
