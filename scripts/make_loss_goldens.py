#!/usr/bin/env python3
"""Writes tests/goldens/seg_losses.safetensors, which tests/test_seg_loss_goldens.cpp reads:
cross_entropy with class weights and with probability targets, nll_loss with weights,
amax/amin over several dims, binary_cross_entropy(_with_logits), and the Dice / BCE+Dice
losses (no PyTorch built-in: computed here from torch ops, the formula of ops/dice_loss.h).

    python3 scripts/make_loss_goldens.py       # needs torch and safetensors (pip)

Same layout as scripts/make_goldens.py: case i stores "case<i>.<name>" float64 tensors (the
inputs, y, the upstream gradient gy and the gradients g<name> of sum(y * gy) for every
floating input that PyTorch differentiates); constants (class weights, pos_weight) are stored
without gradients. The configurations are the JSON list in the "cases" metadata entry.
"""
import json
import os

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

OUT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "goldens",
                                    "seg_losses.safetensors"))
f64 = torch.float64


def randn(*shape):
    return torch.randn(shape, dtype=f64)


def rand(*shape):
    return torch.rand(shape, dtype=f64)


tensors, configs = {}, []


def add(config, inputs, fn, consts=None):
    """inputs: name -> tensor (floating ones get gradients "g<name>"); consts: name -> tensor (no gradient)."""
    i = len(configs)
    consts = consts or {}
    leaves = {k: v.clone().requires_grad_(v.is_floating_point()) for k, v in inputs.items()}
    y = fn(**leaves, **consts)
    gy = randn(*y.shape)
    y.backward(gy)
    for k, v in leaves.items():
        tensors[f"case{i}.{k}"] = v.detach().contiguous()
        if v.is_floating_point():
            tensors[f"case{i}.g{k}"] = v.grad.detach().contiguous()
    for k, v in consts.items():
        tensors[f"case{i}.{k}"] = v.contiguous()
    tensors[f"case{i}.y"] = y.detach().contiguous()
    tensors[f"case{i}.gy"] = gy
    configs.append(config)


def class_targets(shape, c, ignore_index=-100, n_ignored=0):
    t = torch.randint(0, c, shape, dtype=torch.int64)
    if n_ignored:
        flat = t.view(-1)
        flat[torch.randperm(flat.numel())[:n_ignored]] = ignore_index
    return t


def cross_entropy_cases():
    # class-index targets with class weights: (logits shape, reduction, ignore_index, smoothing, ignored)
    for xs, reduction, ignore_index, eps, n_ignored in [
        ((6, 5), "mean", -100, 0.0, 0), ((6, 5), "sum", -100, 0.0, 0), ((6, 5), "none", -100, 0.0, 0),
        ((6, 5), "mean", -100, 0.1, 0), ((8, 5), "mean", -100, 0.0, 3), ((8, 5), "sum", 2, 0.2, 3),
        ((8, 5), "mean", -100, 0.1, 3), ((2, 4, 3, 5), "mean", -100, 0.1, 4), ((2, 4, 3, 5), "none", -100, 0.0, 4),
        ((5,), "mean", -100, 0.1, 0)]:
        c = xs[0] if len(xs) == 1 else xs[1]
        tshape = () if len(xs) == 1 else (xs[0],) + xs[2:]
        target = class_targets(tshape, c, ignore_index, n_ignored)
        cfg = dict(op="cross_entropy", target="index", reduction=reduction, ignore_index=ignore_index,
                   label_smoothing=eps, weighted=True)
        add(cfg, {"x": 3 * randn(*xs), "target": target},
            lambda x, target, weight: F.cross_entropy(x, target, weight=weight, reduction=reduction,
                                                      ignore_index=ignore_index, label_smoothing=eps),
            {"weight": 0.2 + 2 * rand(c)})
    # probability targets (soft labels), with and without weights
    for xs, reduction, eps, weighted in [
        ((6, 5), "mean", 0.0, False), ((6, 5), "sum", 0.0, False), ((6, 5), "none", 0.0, False),
        ((6, 5), "mean", 0.2, False), ((6, 5), "mean", 0.0, True), ((6, 5), "none", 0.1, True),
        ((2, 4, 3, 5), "mean", 0.1, True), ((2, 4, 3, 5), "sum", 0.0, False), ((5,), "mean", 0.0, True)]:
        c = xs[0] if len(xs) == 1 else xs[1]
        target = F.softmax(2 * randn(*xs), dim=0 if len(xs) == 1 else 1)
        cfg = dict(op="cross_entropy", target="probabilities", reduction=reduction, ignore_index=-100,
                   label_smoothing=eps, weighted=weighted)
        consts = {"weight": 0.2 + 2 * rand(c)} if weighted else {}
        add(cfg, {"x": 3 * randn(*xs), "target": target},
            lambda x, target, weight=None: F.cross_entropy(x, target, weight=weight, reduction=reduction,
                                                           label_smoothing=eps), consts)
    for reduction in ["mean", "sum", "none"]:
        target = class_targets((7,), 4, -100, 2)
        add(dict(op="nll_loss", reduction=reduction, ignore_index=-100, weighted=True),
            {"x": randn(7, 4), "target": target},
            lambda x, target, weight: F.nll_loss(x, target, weight=weight, reduction=reduction),
            {"weight": 0.2 + 2 * rand(4)})


def amax_cases():
    for op, xs, dims, keepdim, ties in [
        ("amax", (3, 4, 5), [0, 2], False, False), ("amax", (3, 4, 5), [1], True, False),
        ("amax", (3, 4, 5), [], False, False), ("amin", (3, 4, 5), [2], False, False),
        ("amin", (3, 4, 5), [-1, -3], True, False),
        ("amax", (3, 4, 5), [1, 2], False, True),  # integer-valued: many ties share the gradient
        ("amin", (4, 6), [0], False, True), ("amax", (2, 3, 4, 5), [0, 3], True, True)]:
        x = torch.randint(0, 3, xs).to(f64) if ties else randn(*xs)
        fn = (lambda x: torch.amax(x, dim=dims, keepdim=keepdim)) if op == "amax" else \
            (lambda x: torch.amin(x, dim=dims, keepdim=keepdim))
        add(dict(op=op, dims=dims, keepdim=keepdim), {"x": x}, fn)


def bce_cases():
    for xs, reduction, weight_shape in [((4, 3), "mean", None), ((4, 3), "sum", None), ((4, 3), "none", None),
                                        ((4, 3), "mean", (3,)), ((4, 3), "none", (4, 3)),
                                        ((2, 3, 4, 5), "mean", (3, 1, 1))]:
        consts = {"weight": rand(*weight_shape) + 0.5} if weight_shape else {}
        add(dict(op="binary_cross_entropy", reduction=reduction),
            {"x": 0.02 + 0.96 * rand(*xs), "target": rand(*xs)},
            lambda x, target, weight=None: F.binary_cross_entropy(x, target, weight=weight, reduction=reduction),
            consts)
    for xs, reduction, weight_shape, pw_shape, scale in [
        ((4, 3), "mean", None, None, 2.0), ((4, 3), "sum", None, None, 2.0), ((4, 3), "none", None, None, 2.0),
        ((4, 3), "mean", None, (3,), 2.0), ((4, 3), "none", (3,), (3,), 2.0), ((4, 3), "sum", (4, 1), None, 2.0),
        ((4, 3), "mean", None, (3,), 40.0),  # large logits: the stable form
        ((2, 3, 4, 5), "mean", None, (3, 1, 1), 3.0), ((2, 3, 4, 5), "sum", (3, 1, 1), (3, 1, 1), 3.0)]:
        consts = {}
        if weight_shape:
            consts["weight"] = rand(*weight_shape) + 0.5
        if pw_shape:
            consts["pos_weight"] = 3 * rand(*pw_shape) + 0.1
        target = (rand(*xs) > 0.5).to(f64)
        target[0] = rand(*xs[1:])  # some soft labels too
        add(dict(op="binary_cross_entropy_with_logits", reduction=reduction),
            {"x": scale * randn(*xs), "target": target},
            lambda x, target, weight=None, pos_weight=None: F.binary_cross_entropy_with_logits(
                x, target, weight=weight, reduction=reduction, pos_weight=pos_weight), consts)


def dice_reference(x, target, smooth, batch):
    """ops/dice_loss.h's formula in torch ops."""
    p = torch.sigmoid(x)
    dims = tuple(range(x.dim())) if batch else tuple(range(1, x.dim()))
    inter = (p * target).sum(dims)
    card = p.sum(dims) + target.sum(dims)
    dice = (2 * inter + smooth) / (card + smooth)
    return 1 - (dice if batch else dice.mean())


def dice_cases():
    for xs, smooth, batch, soft in [((2, 1, 4, 5), 1.0, False, False), ((2, 1, 4, 5), 1.0, True, False),
                                    ((3, 2, 3, 4), 0.5, False, True), ((3, 2, 3, 4), 1e-5, True, False),
                                    ((2, 1, 2, 3, 4), 1.0, False, False)]:
        target = rand(*xs) if soft else (rand(*xs) > 0.6).to(f64)
        add(dict(op="dice_loss", smooth=smooth, batch=batch), {"x": 2 * randn(*xs), "target": target},
            lambda x, target: dice_reference(x, target, smooth, batch))
    for xs, bce_w, dice_w, smooth, batch in [((2, 1, 4, 5), 1.0, 1.0, 1.0, False), ((3, 2, 3, 4), 0.5, 2.0, 1.0, True)]:
        target = (rand(*xs) > 0.5).to(f64)
        add(dict(op="bce_dice_loss", bce_weight=bce_w, dice_weight=dice_w, smooth=smooth, batch=batch),
            {"x": 2 * randn(*xs), "target": target},
            lambda x, target: bce_w * F.binary_cross_entropy_with_logits(x, target) +
            dice_w * dice_reference(x, target, smooth, batch))


def main():
    torch.manual_seed(0)
    for make in [cross_entropy_cases, amax_cases, bce_cases, dice_cases]:
        make()
    save_file(tensors, OUT, metadata={"cases": json.dumps(configs, sort_keys=True)})
    print(f"{OUT}: {len(configs)} cases, {os.path.getsize(OUT)} bytes")


if __name__ == "__main__":
    main()
