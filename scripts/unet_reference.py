#!/usr/bin/env python3
"""models/unet.h in PyTorch: the same module tree (names, shapes, order), its parameter
counts, and a golden fixture tests/test_unet.cpp reads.

    python3 scripts/unet_reference.py        # needs torch and safetensors (pip)

Prints the parameter counts the tests check, and writes tests/goldens/unet.safetensors:
per case i, float64 tensors "case<i>.param.<name>" (every parameter of a freshly
initialized torch model), "case<i>.x" (input), "case<i>.y" (train-mode output),
"case<i>.gy" (upstream gradient), "case<i>.gx" and "case<i>.grad.<name>" (gradients of
sum(y * gy)), and the configs as JSON under the metadata key "cases".
"""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

OUT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "goldens", "unet.safetensors"))


def groups_for(c, max_groups=32):  # nn::group_norm_groups_for: largest divisor of c not above max_groups
    return max(g for g in range(1, min(c, max_groups) + 1) if c % g == 0)


def make_norm(kind, c, dims):
    if kind == "batchnorm":
        return (nn.BatchNorm2d if dims == 2 else nn.BatchNorm3d)(c)
    if kind == "groupnorm":
        return nn.GroupNorm(groups_for(c), c)
    if kind == "layernorm":
        return nn.GroupNorm(1, c)
    if kind == "instancenorm":
        return (nn.InstanceNorm2d if dims == 2 else nn.InstanceNorm3d)(c, affine=True)
    return nn.Identity()


def conv(dims, i, o, k, bias):
    return (nn.Conv2d if dims == 2 else nn.Conv3d)(i, o, k, padding=k // 2, bias=bias)


def double_conv(dims, i, o, norm):
    b = norm == "none"
    return nn.Sequential(conv(dims, i, o, 3, b), make_norm(norm, o, dims), nn.ReLU(),
                         conv(dims, o, o, 3, b), make_norm(norm, o, dims), nn.ReLU())


class Up(nn.Module):
    def __init__(self, dims, i, o, mode):
        super().__init__()
        self.dims, self.mode = dims, mode
        if mode == "interpolate":
            self.conv = conv(dims, i, o, 1, True)
        else:
            self.conv = (nn.ConvTranspose2d if dims == 2 else nn.ConvTranspose3d)(i, o, 2, stride=2)

    def forward(self, x):
        if self.mode == "interpolate":
            x = F.interpolate(x, scale_factor=2.0, mode="bilinear" if self.dims == 2 else "trilinear",
                              align_corners=False)
        return self.conv(x)


class UNet(nn.Module):
    def __init__(self, dims, in_channels=1, classes=1, base_width=16, norm="batchnorm", upsample="transpose", levels=4):
        super().__init__()
        self.dims = dims
        widths = [base_width << l for l in range(levels)]
        self.encoders = nn.ModuleList()
        c = in_channels
        for w in widths:
            self.encoders.append(double_conv(dims, c, w, norm))
            c = w
        self.ups = nn.ModuleList([Up(dims, 2 * w, w, upsample) for w in widths[:-1]])
        self.decoders = nn.ModuleList([double_conv(dims, 2 * w, w, norm) for w in widths[:-1]])
        self.head = conv(dims, base_width, classes, 1, True)

    def forward(self, x):
        pool = F.max_pool2d if self.dims == 2 else F.max_pool3d
        skips = []
        for l, enc in enumerate(self.encoders):
            if l > 0:
                x = pool(x, 2)
            x = enc(x)
            skips.append(x)
        for l in range(len(self.decoders) - 1, -1, -1):
            x = self.decoders[l](torch.cat([skips[l], self.ups[l](x)], 1))
        return self.head(x)


def count(m):
    return sum(p.numel() for p in m.parameters())


def main():
    print("parameter counts (parameters, state_dict entries):")
    for dims, kw in [(3, {}), (3, dict(norm="groupnorm")), (3, dict(upsample="interpolate")),
                     (3, dict(norm="none")), (3, dict(base_width=4)), (3, dict(base_width=32)),
                     (2, {}), (2, dict(in_channels=3, classes=2, base_width=64)), (2, dict(base_width=8, levels=3))]:
        m = UNet(dims, **kw)
        print(f"  UNet{dims}d {kw}: {count(m)} {len(m.state_dict())}")

    torch.manual_seed(0)
    cases = [
        dict(dims=2, in_channels=2, classes=3, base_width=2, norm="batchnorm", upsample="transpose", levels=3, x=[2, 2, 8, 8]),
        dict(dims=3, in_channels=1, classes=1, base_width=2, norm="groupnorm", upsample="interpolate", levels=3, x=[1, 1, 8, 8, 4]),
        dict(dims=3, in_channels=1, classes=2, base_width=1, norm="batchnorm", upsample="transpose", levels=4, x=[2, 1, 8, 8, 8]),
        dict(dims=2, in_channels=1, classes=1, base_width=3, norm="none", upsample="interpolate", levels=2, x=[1, 1, 6, 4]),
    ]
    tensors = {}
    for i, c in enumerate(cases):
        m = UNet(c["dims"], c["in_channels"], c["classes"], c["base_width"], c["norm"], c["upsample"], c["levels"]).double()
        m.train()
        for name, p in m.named_parameters():
            tensors[f"case{i}.param.{name}"] = p.detach().clone()
        x = torch.randn(c["x"], dtype=torch.float64, requires_grad=True)
        y = m(x)
        gy = torch.randn(y.shape, dtype=torch.float64)
        (y * gy).sum().backward()
        tensors[f"case{i}.x"] = x.detach()
        tensors[f"case{i}.y"] = y.detach()
        tensors[f"case{i}.gy"] = gy
        tensors[f"case{i}.gx"] = x.grad
        for name, p in m.named_parameters():
            tensors[f"case{i}.grad.{name}"] = p.grad
        c["num_parameters"] = count(m)
    save_file({k: v.contiguous() for k, v in tensors.items()}, OUT, metadata={"cases": json.dumps(cases, sort_keys=True)})
    print("wrote", OUT)


if __name__ == "__main__":
    main()
