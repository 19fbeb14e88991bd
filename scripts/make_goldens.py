#!/usr/bin/env python3
"""Writes the PyTorch golden fixtures under tests/goldens/ that tests/test_goldens.cpp reads
(and the normalization ones, *_norm.safetensors, that tests/test_norm_goldens.cpp reads).

    python3 scripts/make_goldens.py          # needs torch and safetensors (pip)

One .safetensors file per op family. Each case i stores float64 tensors under
"case<i>.<name>": the inputs (x, w, b, target, ...), the output y, a fixed random
upstream gradient gy, and the gradients of sum(y * gy) with respect to every
floating input (gx, gw, gb). The configurations live in the metadata under the
single key "cases": a JSON list with one object per case (one key only, because
the Rust writer stores metadata keys in random order and the files should be
byte-for-byte reproducible). Every file starts from torch.manual_seed(0).
The normalization files store several steps per case; see NormWriter below.
"""
import json
import os

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

OUT_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "goldens"))
f64 = torch.float64


def randn(*shape):
    return torch.randn(shape, dtype=f64)


class Writer:
    """Collects cases for one file: tensors under "case<i>.<name>" and one config per case."""

    def __init__(self, filename):
        self.filename = filename
        self.tensors = {}
        self.configs = []

    def add(self, config, inputs, fn):
        """inputs: name -> tensor; the floating ones get gradients named "g<name>"."""
        i = len(self.configs)
        leaves = {k: v.clone().requires_grad_(v.is_floating_point()) for k, v in inputs.items()}
        y = fn(**leaves)
        gy = randn(*y.shape)  # 0-d for reduced losses
        y.backward(gy)
        for k, v in leaves.items():
            self.tensors[f"case{i}.{k}"] = v.detach().contiguous()
            if v.is_floating_point():
                self.tensors[f"case{i}.g{k}"] = v.grad.detach().contiguous()
        self.tensors[f"case{i}.y"] = y.detach().contiguous()
        self.tensors[f"case{i}.gy"] = gy
        self.configs.append(config)

    def save(self):
        path = os.path.join(OUT_DIR, self.filename)
        save_file(self.tensors, path, metadata={"cases": json.dumps(self.configs, sort_keys=True)})
        print(f"{path}: {len(self.configs)} cases, {os.path.getsize(path)} bytes")


def conv2d():
    w = Writer("conv2d.safetensors")
    # (x shape, w shape, stride, padding, dilation, groups, has_bias)
    configs = [
        ((3, 5, 7, 6), (4, 5, 3, 3), (1, 1), (1, 1), (1, 1), 1, True),
        ((2, 3, 9, 8), (6, 3, 3, 3), (2, 2), (1, 1), (2, 2), 1, True),
        ((2, 5, 6, 7), (5, 1, 3, 3), (1, 1), (1, 1), (1, 1), 5, True),    # depthwise
        ((2, 5, 6, 7), (10, 1, 3, 3), (2, 1), (0, 1), (1, 1), 5, False),  # depthwise, multiplier 2
        ((2, 4, 5, 6), (6, 2, 3, 3), (1, 2), (0, 1), (1, 1), 2, True),    # groups, not depthwise
        ((2, 3, 4, 5), (7, 3, 1, 1), (1, 1), (0, 0), (1, 1), 1, True),    # 1x1
        ((2, 3, 6, 7), (4, 3, 2, 3), (2, 1), (1, 0), (1, 1), 1, False),   # 2x3 kernel, no bias
        ((3, 6, 5), (2, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1, True),       # unbatched
        ((1, 2, 8, 9), (3, 2, 3, 2), (3, 2), (2, 1), (2, 3), 1, True),    # everything asymmetric
    ]
    for xs, ws, stride, padding, dilation, groups, has_bias in configs:
        inputs = {"x": randn(*xs), "w": randn(*ws)}
        if has_bias:
            inputs["b"] = randn(ws[0])
        cfg = dict(stride=stride, padding=padding, dilation=dilation, groups=groups, has_bias=has_bias)
        w.add(cfg, inputs, lambda x, w, b=None: F.conv2d(x, w, b, stride, padding, dilation, groups))
    w.save()


def linear():
    w = Writer("linear.safetensors")
    for xs, has_bias in [((5, 7), True), ((2, 3, 7), True), ((5, 7), False), ((2, 3, 7), False),
                         ((1, 1), True)]:
        inputs = {"x": randn(*xs), "w": randn(4, xs[-1])}
        if has_bias:
            inputs["b"] = randn(4)
        w.add({"has_bias": has_bias}, inputs, lambda x, w, b=None: F.linear(x, w, b))
    w.save()


def pooling():
    w = Writer("pooling.safetensors")
    # (op, x shape, kernel, stride (None = kernel), padding, count_include_pad, output_size)
    cases = [
        ("max_pool2d", (2, 3, 8, 8), (2, 2), None, (0, 0), None, None),
        ("max_pool2d", (2, 3, 7, 9), (3, 3), (2, 2), (1, 1), None, None),
        ("max_pool2d", (2, 2, 7, 6), (3, 2), (2, 1), (1, 0), None, None),
        ("max_pool2d", (3, 5, 5), (2, 2), (1, 1), (1, 1), None, None),  # unbatched
        ("avg_pool2d", (2, 3, 7, 9), (3, 3), (2, 2), (1, 1), True, None),
        ("avg_pool2d", (2, 3, 7, 9), (3, 3), (2, 2), (1, 1), False, None),
        ("avg_pool2d", (2, 3, 8, 6), (2, 2), None, (0, 0), True, None),
        ("avg_pool2d", (3, 6, 5), (3, 2), (1, 2), (1, 1), False, None),  # unbatched
        ("adaptive_avg_pool2d", (2, 3, 5, 6), None, None, None, None, (1, 1)),
        ("adaptive_avg_pool2d", (2, 3, 7, 6), None, None, None, None, (3, 4)),
        ("adaptive_avg_pool2d", (3, 7, 6), None, None, None, None, (3, 4)),  # unbatched
        ("adaptive_avg_pool2d", (1, 2, 3, 4), None, None, None, None, (5, 7)),  # upsampling
        ("adaptive_max_pool2d", (2, 3, 7, 6), None, None, None, None, (3, 4)),
        ("adaptive_max_pool2d", (2, 3, 5, 6), None, None, None, None, (1, 1)),
    ]
    for op, xs, kernel, stride, padding, cip, out_size in cases:
        cfg = {"op": op}
        if op == "max_pool2d":
            cfg.update(kernel_size=kernel, stride=stride or kernel, padding=padding)
            fn = lambda x: F.max_pool2d(x, kernel, stride, padding)
        elif op == "avg_pool2d":
            cfg.update(kernel_size=kernel, stride=stride or kernel, padding=padding, count_include_pad=cip)
            fn = lambda x: F.avg_pool2d(x, kernel, stride, padding, count_include_pad=cip)
        elif op == "adaptive_avg_pool2d":
            cfg.update(output_size=out_size)
            fn = lambda x: F.adaptive_avg_pool2d(x, out_size)
        else:
            cfg.update(output_size=out_size)
            fn = lambda x: F.adaptive_max_pool2d(x, out_size)
        w.add(cfg, {"x": randn(*xs)}, fn)
    w.save()


def softmax():
    w = Writer("softmax.safetensors")
    for op, xs, dim, scale in [("softmax", (3, 4, 5), 1, 1.0), ("softmax", (3, 4, 5), -1, 1.0),
                               ("log_softmax", (3, 4, 5), 1, 1.0), ("log_softmax", (3, 4, 5), -1, 1.0),
                               ("softmax", (2, 3, 4), 0, 1.0),
                               ("softmax", (4, 7), -1, 40.0),  # large logits: needs the max subtracted
                               ("log_softmax", (4, 7), -1, 40.0)]:
        fn = (lambda x: F.softmax(x, dim)) if op == "softmax" else (lambda x: F.log_softmax(x, dim))
        w.add({"op": op, "dim": dim}, {"x": scale * randn(*xs)}, fn)
    w.save()


def cross_entropy():
    w = Writer("cross_entropy.safetensors")
    # (logits shape, reduction, ignore_index, label_smoothing, how many targets are ignored)
    cases = [
        ((6, 5), "mean", -100, 0.0, 0),
        ((6, 5), "sum", -100, 0.0, 0),
        ((6, 5), "none", -100, 0.0, 0),
        ((6, 5), "mean", -100, 0.1, 0),
        ((8, 5), "mean", -100, 0.0, 3),
        ((8, 5), "sum", 2, 0.0, 3),     # ignore_index is a real class id
        ((8, 5), "none", -100, 0.0, 3),
        ((8, 5), "mean", -100, 0.1, 3),  # smoothing and ignoring together
        ((2, 4, 3, 5), "mean", -100, 0.0, 0),  # spatial
        ((2, 4, 3, 5), "none", -100, 0.1, 4),
        ((2, 4, 3, 5), "sum", -100, 0.0, 4),
    ]
    for xs, reduction, ignore_index, smoothing, n_ignored in cases:
        n, c = xs[0], xs[1]
        target = torch.randint(0, c, (n,) + xs[2:], dtype=torch.int64)
        if n_ignored:
            flat = target.view(-1)
            flat[torch.randperm(flat.numel())[:n_ignored]] = ignore_index
        cfg = dict(reduction=reduction, ignore_index=ignore_index, label_smoothing=smoothing)
        fn = lambda x, target: F.cross_entropy(x, target, reduction=reduction, ignore_index=ignore_index,
                                               label_smoothing=smoothing)
        w.add(cfg, {"x": 3 * randn(*xs), "target": target}, fn)
    w.save()


# ---- normalization: run real torch.nn modules through several steps ----------
#
# Tensors of case i: "case<i>.weight", "case<i>.bias" (when affine; random, not
# the ones/zeros init, so their gradients mean something), then for each
# training step s = 0, 1, ... "case<i>.step<s>.<name>" with x, gy, y, gx,
# gweight, gbias and, when the module tracks running stats, running_mean,
# running_var and num_batches_tracked as they are AFTER the step (the module
# starts from its init: running_mean 0, running_var 1, num_batches_tracked 0).
# Then "case<i>.eval.<name>" (x, gy, y, gx, gweight, gbias) for one forward and
# backward in eval mode on a new input. The parameters are never updated
# between steps; each step's gradients are fresh (the module's grads are reset).
# The config gives the module, its arguments and the number of steps, so a test
# can drive either the functional op (computing the factor 1/num_batches_tracked
# itself for momentum None) or the module.


def channel_input(shape, channel_dim=1):
    """randn with a random scale and shift per channel, so running stats move visibly."""
    c = shape[channel_dim]
    view = [1] * len(shape)
    view[channel_dim] = c
    scale = (0.5 + 2 * torch.rand(c, dtype=f64)).view(view)
    shift = (3 * randn(c)).view(view)
    return randn(*shape) * scale + shift


class NormWriter:
    def __init__(self, filename):
        self.filename = filename
        self.tensors = {}
        self.configs = []

    def _forward_backward(self, module, prefix, x):
        for p in module.parameters():
            p.grad = None
        x = x.clone().requires_grad_(True)
        y = module(x)
        gy = randn(*y.shape)
        y.backward(gy)
        t = self.tensors
        t[prefix + "x"] = x.detach().clone()
        t[prefix + "gy"] = gy
        t[prefix + "y"] = y.detach().clone()
        t[prefix + "gx"] = x.grad.detach().clone()
        for name in ("weight", "bias"):
            p = getattr(module, name, None)
            if p is not None:
                t[prefix + "g" + name] = p.grad.detach().clone()

    def add(self, config, module, make_input, steps=3):
        """Runs `steps` training steps on fresh inputs, then one eval step; records everything."""
        i = len(self.configs)
        module = module.to(f64)
        with torch.no_grad():
            for name in ("weight", "bias"):
                p = getattr(module, name, None)
                if p is not None:
                    p.copy_(1 + 0.5 * randn(*p.shape) if name == "weight" else 0.5 * randn(*p.shape))
                    self.tensors[f"case{i}.{name}"] = p.detach().clone()
        tracks = getattr(module, "running_mean", None) is not None
        module.train()
        for s in range(steps):
            prefix = f"case{i}.step{s}."
            self._forward_backward(module, prefix, make_input())
            if tracks:
                self.tensors[prefix + "running_mean"] = module.running_mean.detach().clone()
                self.tensors[prefix + "running_var"] = module.running_var.detach().clone()
                self.tensors[prefix + "num_batches_tracked"] = module.num_batches_tracked.detach().clone()
        module.eval()
        self._forward_backward(module, f"case{i}.eval.", make_input())
        self.configs.append(dict(config, steps=steps))

    def save(self):
        path = os.path.join(OUT_DIR, self.filename)
        save_file(self.tensors, path, metadata={"cases": json.dumps(self.configs, sort_keys=True)})
        print(f"{path}: {len(self.configs)} cases, {os.path.getsize(path)} bytes")


def batch_norm():
    w = NormWriter("batch_norm.safetensors")
    shapes = {"BatchNorm1d": [(7, 6), (3, 6, 7)], "BatchNorm2d": [(3, 6, 3, 5)], "BatchNorm3d": [(2, 5, 3, 2, 3)]}
    for module_name, shape_list in shapes.items():
        for shape in shape_list:
            for affine in (True, False):
                for momentum in (0.1, None):
                    cfg = dict(module=module_name, shape=shape, affine=affine, momentum=momentum,
                               track_running_stats=True, eps=1e-5)
                    m = getattr(torch.nn, module_name)(shape[1], eps=1e-5, momentum=momentum, affine=affine)
                    w.add(cfg, m, lambda: channel_input(shape))
    # Other eps and momentum; and no running stats, where eval uses the batch statistics too.
    for module_name, shape, affine, momentum, eps, track in [
            ("BatchNorm2d", (3, 6, 3, 5), True, 0.3, 1e-3, True),
            ("BatchNorm2d", (3, 6, 3, 5), True, 0.1, 1e-5, False),
            ("BatchNorm1d", (5, 6), False, 0.1, 1e-5, False)]:
        cfg = dict(module=module_name, shape=shape, affine=affine, momentum=momentum,
                   track_running_stats=track, eps=eps)
        m = getattr(torch.nn, module_name)(shape[1], eps=eps, momentum=momentum, affine=affine,
                                           track_running_stats=track)
        w.add(cfg, m, lambda: channel_input(shape))
    w.save()


def instance_norm():
    w = NormWriter("instance_norm.safetensors")
    # momentum None in InstanceNorm means 0.0: the running stats never move (not a cumulative average).
    for module_name, shape, affine, track, momentum in [
            ("InstanceNorm1d", (3, 6, 7), False, False, 0.1),
            ("InstanceNorm1d", (3, 6, 7), True, False, 0.1),
            ("InstanceNorm1d", (3, 6, 7), True, True, 0.1),
            ("InstanceNorm1d", (3, 6, 7), False, True, None),
            ("InstanceNorm2d", (3, 6, 3, 5), False, False, 0.1),
            ("InstanceNorm2d", (3, 6, 3, 5), True, False, 0.1),
            ("InstanceNorm2d", (3, 6, 3, 5), False, True, 0.1),
            ("InstanceNorm2d", (3, 6, 3, 5), True, True, 0.1)]:
        cfg = dict(module=module_name, shape=shape, affine=affine, momentum=momentum,
                   track_running_stats=track, eps=1e-5)
        m = getattr(torch.nn, module_name)(shape[1], eps=1e-5, momentum=momentum, affine=affine,
                                           track_running_stats=track)
        w.add(cfg, m, lambda: channel_input(shape), steps=3 if track else 1)
    w.save()


def layer_norm():
    w = NormWriter("layer_norm.safetensors")
    for shape, normalized_shape, affine, bias, eps in [
            ((5, 7), (7,), True, True, 1e-5),
            ((3, 4, 3, 5), (5,), True, True, 1e-5),
            ((3, 4, 3, 5), (5,), False, False, 1e-5),
            ((3, 4, 3, 5), (3, 5), True, True, 1e-5),
            ((3, 4, 3, 5), (3, 5), False, False, 1e-5),
            ((3, 4, 3, 5), (4, 3, 5), True, True, 1e-3),
            ((3, 4, 3, 5), (4, 3, 5), False, False, 1e-5),
            ((3, 4, 3, 5), (3, 5), True, False, 1e-5),  # weight only
            ((6, 7), (7,), True, False, 1e-5)]:
        cfg = dict(module="LayerNorm", shape=shape, normalized_shape=normalized_shape,
                   elementwise_affine=affine, bias=bias, eps=eps)
        m = torch.nn.LayerNorm(normalized_shape, eps=eps, elementwise_affine=affine, bias=bias)
        w.add(cfg, m, lambda: 2 * randn(*shape) + 1, steps=1)  # train and eval are the same op
    w.save()


def group_norm():
    w = NormWriter("group_norm.safetensors")
    for shape, groups, affine, eps in [
            ((3, 6, 2, 5), 2, True, 1e-5),
            ((3, 6, 2, 5), 2, False, 1e-5),
            ((3, 6, 2, 5), 3, True, 1e-5),
            ((3, 6, 2, 5), 3, False, 1e-3),
            ((3, 6, 2, 5), 6, True, 1e-5),  # GroupNorm(C, C): InstanceNorm-like
            ((3, 6, 2, 5), 1, True, 1e-5),  # GroupNorm(1, C): LayerNorm-like over (C, H, W)
            ((3, 6, 7), 3, True, 1e-5),
            ((2, 6, 3, 2, 3), 2, True, 1e-5),
            ((5, 6), 2, True, 1e-5)]:
        cfg = dict(module="GroupNorm", shape=shape, num_groups=groups, num_channels=shape[1],
                   affine=affine, eps=eps)
        m = torch.nn.GroupNorm(groups, shape[1], eps=eps, affine=affine)
        w.add(cfg, m, lambda: channel_input(shape), steps=1)  # train and eval are the same op
    w.save()


def safetensors_dtypes():
    """A file in every dtype minidl reads, with values tests/test_safetensors.cpp knows by heart."""
    tensors = {
        "f32": torch.arange(6, dtype=torch.float32).reshape(2, 3) - 2.5,
        "f64": torch.arange(4, dtype=f64) * 0.25,
        "i64": torch.tensor([-3, 0, 2**40], dtype=torch.int64),
        "u8": torch.arange(250, 256, dtype=torch.uint8).reshape(3, 1, 2),
        "f16": torch.tensor([1.5, -2.0, 65504.0], dtype=torch.float16),
        "bf16": torch.tensor([1.0, -0.5], dtype=torch.bfloat16),
        "scalar": torch.tensor(3.25, dtype=f64),
        "empty": torch.zeros(0, 3, dtype=torch.float32),
    }
    path = os.path.join(OUT_DIR, "safetensors_dtypes.safetensors")
    save_file(tensors, path, metadata={"format": "pt"})
    print(f"{path}: {len(tensors)} tensors, {os.path.getsize(path)} bytes")


# ---- optimizers and LR schedulers (tests/test_optim.cpp) ----------------------
#
# One file, optim.safetensors, with two kinds of case (config "kind"):
#   "optimizer": two float64 parameters p0 (3, 4) and p1 (5,) in one group;
#     "case<i>.p0", "case<i>.p1" are their initial values, and for each step s
#     "case<i>.step<s>.g0/g1" the gradients set before optimizer.step() and
#     "case<i>.step<s>.p0/p1" the parameters after it. The gradient scale
#     changes per step so that AMSGrad's running max matters.
#   "scheduler": an SGD (or config["optimizer"]) over two groups with initial
#     lrs config["lrs"]; "case<i>.lr" (steps + 1, groups) holds the lrs after
#     construction and after each scheduler.step(), and "case<i>.momentum"
#     the momentum (SGD) or beta1 (Adam) when OneCycleLR cycles it. config["scheduler"] names the torch class;
#     "SequentialLR" is LinearLR(warmup) followed by config["after"], as
#     minidl's LinearWarmup.


def optim_goldens():
    tensors, configs = {}, []

    def add_optimizer(name, steps=3, **kwargs):
        i = len(configs)
        params = [randn(3, 4).requires_grad_(True), randn(5).requires_grad_(True)]
        for k, p in enumerate(params):
            tensors[f"case{i}.p{k}"] = p.detach().clone()
        opt = getattr(torch.optim, name)(params, **kwargs)
        for s, scale in zip(range(steps), [2.0, 0.3, 1.0, 0.5]):
            for k, p in enumerate(params):
                p.grad = scale * randn(*p.shape)
                tensors[f"case{i}.step{s}.g{k}"] = p.grad.clone()
            opt.step()
            for k, p in enumerate(params):
                tensors[f"case{i}.step{s}.p{k}"] = p.detach().clone()
        cfg = dict(kind="optimizer", optimizer=name, steps=steps, **kwargs)
        if "betas" in cfg:
            cfg["betas"] = list(cfg["betas"])
        configs.append(cfg)

    add_optimizer("SGD", lr=0.1)
    add_optimizer("SGD", lr=0.1, momentum=0.9)
    add_optimizer("SGD", lr=0.1, momentum=0.9, nesterov=True)
    add_optimizer("SGD", lr=0.1, weight_decay=0.05)
    add_optimizer("SGD", lr=0.1, momentum=0.9, dampening=0.5, weight_decay=0.05)
    add_optimizer("SGD", lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01)
    add_optimizer("Adam", lr=0.01)
    add_optimizer("Adam", lr=0.01, weight_decay=0.1)
    add_optimizer("Adam", lr=0.01, amsgrad=True)
    add_optimizer("Adam", lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1, amsgrad=True)
    add_optimizer("AdamW", lr=0.01)
    add_optimizer("AdamW", lr=0.01, weight_decay=0.1, amsgrad=True)

    def add_scheduler(cfg, make, lrs=(0.1, 0.05), steps=30, optimizer="SGD"):
        i = len(configs)
        p0, p1 = torch.zeros(2, dtype=f64, requires_grad=True), torch.zeros(3, dtype=f64, requires_grad=True)
        groups = [{"params": [p0], "lr": lrs[0]}, {"params": [p1], "lr": lrs[1]}]
        opt = getattr(torch.optim, optimizer)(groups, lr=lrs[0])
        sched = make(opt)
        momentum = (lambda g: g["betas"][0]) if optimizer != "SGD" else (lambda g: g["momentum"])
        seq, mom = [[g["lr"] for g in opt.param_groups]], [[momentum(g) for g in opt.param_groups]]
        for _ in range(steps):
            opt.step()  # no gradients: changes nothing, keeps torch's order check quiet
            sched.step()
            seq.append([g["lr"] for g in opt.param_groups])
            mom.append([momentum(g) for g in opt.param_groups])
        tensors[f"case{i}.lr"] = torch.tensor(seq, dtype=f64)
        if cfg.get("cycle_momentum"):  # SGD's momentum or Adam's beta1, as OneCycleLR sets them
            tensors[f"case{i}.momentum"] = torch.tensor(mom, dtype=f64)
        configs.append(dict(cfg, kind="scheduler", optimizer=optimizer, lrs=list(lrs), steps=steps))

    S = torch.optim.lr_scheduler
    add_scheduler(dict(scheduler="StepLR", step_size=7, gamma=0.5), lambda o: S.StepLR(o, 7, gamma=0.5))
    add_scheduler(dict(scheduler="MultiStepLR", milestones=[5, 12, 12, 20], gamma=0.3),
                  lambda o: S.MultiStepLR(o, [5, 12, 12, 20], gamma=0.3))
    add_scheduler(dict(scheduler="CosineAnnealingLR", T_max=10, eta_min=0.001),  # runs past T_max
                  lambda o: S.CosineAnnealingLR(o, 10, eta_min=0.001))
    add_scheduler(dict(scheduler="CosineAnnealingLR", T_max=30, eta_min=0.0), lambda o: S.CosineAnnealingLR(o, 30))
    add_scheduler(dict(scheduler="LinearLR", start_factor=0.2, end_factor=1.0, total_iters=8),
                  lambda o: S.LinearLR(o, start_factor=0.2, end_factor=1.0, total_iters=8))
    for max_lr, pct, anneal, three, cycle, optimizer in [
            ([1.0, 0.5], 0.3, "cos", False, False, "SGD"), ([0.8, 0.4], 0.25, "linear", False, False, "SGD"),
            ([1.0, 0.5], 0.3, "cos", True, False, "SGD"), ([1.0, 0.5], 0.3, "cos", False, True, "SGD"),
            ([0.8, 0.4], 0.25, "linear", True, True, "Adam")]:
        add_scheduler(dict(scheduler="OneCycleLR", max_lr=max_lr, total_steps=30, pct_start=pct,
                           anneal_strategy=anneal, div_factor=25.0, final_div_factor=1e4, three_phase=three,
                           cycle_momentum=cycle, base_momentum=0.85, max_momentum=0.95),
                      lambda o: S.OneCycleLR(o, max_lr, total_steps=30, pct_start=pct, anneal_strategy=anneal,
                                             three_phase=three, cycle_momentum=cycle), optimizer=optimizer)
    add_scheduler(dict(scheduler="SequentialLR", warmup=5, start_factor=0.1,
                       after=dict(scheduler="CosineAnnealingLR", T_max=25, eta_min=1e-4)),
                  lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.1, total_iters=5),
                                               S.CosineAnnealingLR(o, 25, eta_min=1e-4)], milestones=[5]))
    add_scheduler(dict(scheduler="SequentialLR", warmup=3, start_factor=0.25,
                       after=dict(scheduler="StepLR", step_size=5, gamma=0.5)),
                  lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.25, total_iters=3),
                                               S.StepLR(o, 5, gamma=0.5)], milestones=[3]))
    add_scheduler(dict(scheduler="SequentialLR", warmup=4, start_factor=0.5,
                       after=dict(scheduler="MultiStepLR", milestones=[6, 10], gamma=0.1)),
                  lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.5, total_iters=4),
                                               S.MultiStepLR(o, [6, 10], gamma=0.1)], milestones=[4]))

    path = os.path.join(OUT_DIR, "optim.safetensors")
    save_file(tensors, path, metadata={"cases": json.dumps(configs, sort_keys=True)})
    print(f"{path}: {len(configs)} cases, {os.path.getsize(path)} bytes")


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    safetensors_dtypes()
    for make in [conv2d, linear, pooling, softmax, cross_entropy,
                 batch_norm, instance_norm, layer_norm, group_norm]:
        torch.manual_seed(0)
        make()
    torch.manual_seed(0)
    optim_goldens()


if __name__ == "__main__":
    main()
