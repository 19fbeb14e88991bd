#!/usr/bin/env python3
"""Fixtures for minidl's autocast tests (tests/test_autocast_policy.cpp, tests/test_autocast_model.cpp).

tests/goldens/autocast_dtypes.json
  For CPU autocast with bfloat16 and with float16: each op's output dtype in
  the installed PyTorch, for three input variants:
    f32    every floating input float32
    low    every floating input in the autocast dtype
    mixed  the first floating input in the autocast dtype, the others float32
  ("error: ..." where PyTorch raises; the test skips those and says so).
  The shapes here only need to be valid; the test builds its own inputs.
  For CUDA float16 there is no GPU on the machines that write this fixture, so
  the CUDA part is PyTorch's documented policy per op (docs/source/amp.rst,
  "CUDA Ops that can autocast to float16 / float32 / promote"), transcribed
  below; the test checks minidl's CUDA table against it.

tests/goldens/autocast_model.safetensors
  A conv-BN-ReLU-maxpool-linear model run forward and backward under CPU
  bfloat16 autocast in PyTorch: input, float32 parameters, output logits (and
  their dtype), loss, parameter gradients, BN running stats after the step.

Run: python3 scripts/make_autocast_goldens.py   (writes both files)
"""
import json
import os

import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "goldens")

# name -> (list of (shape, kind) inputs, callable). kind: "x" a floating input
# that follows the variant; "p" a floating parameter that stays float32 (BN's
# weight, bias and running stats); "label" an int64 class index tensor.
def _ops():
    def pos(t):
        return t.abs() + 0.5
    return {
        "conv2d": ([((2, 3, 6, 6), "x"), ((4, 3, 3, 3), "x"), ((4,), "x")], lambda x, w, b: F.conv2d(x, w, b)),
        "conv3d": ([((1, 2, 3, 4, 4), "x"), ((3, 2, 2, 2, 2), "x"), ((3,), "x")], lambda x, w, b: F.conv3d(x, w, b)),
        "conv_transpose2d": ([((1, 3, 4, 4), "x"), ((3, 2, 3, 3), "x"), ((2,), "x")],
                             lambda x, w, b: F.conv_transpose2d(x, w, b)),
        "conv_transpose3d": ([((1, 2, 3, 3, 3), "x"), ((2, 2, 2, 2, 2), "x"), ((2,), "x")],
                             lambda x, w, b: F.conv_transpose3d(x, w, b)),
        "matmul": ([((3, 4), "x"), ((4, 5), "x")], lambda a, b: torch.matmul(a, b)),
        "bmm": ([((2, 3, 4), "x"), ((2, 4, 5), "x")], lambda a, b: torch.bmm(a, b)),
        "linear": ([((3, 4), "x"), ((5, 4), "x"), ((5,), "x")], lambda x, w, b: F.linear(x, w, b)),
        "softmax": ([((3, 5), "x")], lambda x: F.softmax(x, 1)),
        "log_softmax": ([((3, 5), "x")], lambda x: F.log_softmax(x, 1)),
        "layer_norm": ([((2, 3, 4), "x"), ((4,), "x"), ((4,), "x")], lambda x, w, b: F.layer_norm(x, (4,), w, b)),
        "group_norm": ([((2, 4, 3), "x"), ((4,), "x"), ((4,), "x")], lambda x, w, b: F.group_norm(x, 2, w, b)),
        "sum": ([((3, 4), "x")], lambda x: x.sum()),
        "exp": ([((3, 4), "x")], lambda x: x.exp()),
        "log": ([((3, 4), "x")], lambda x: pos(x).log()),
        "pow": ([((3, 4), "x")], lambda x: x.pow(2.0)),
        "max_pool3d": ([((1, 2, 4, 4, 4), "x")], lambda x: F.max_pool3d(x, 2)),
        "avg_pool3d": ([((1, 2, 4, 4, 4), "x")], lambda x: F.avg_pool3d(x, 2)),
        "adaptive_max_pool3d": ([((1, 2, 4, 4, 4), "x")], lambda x: F.adaptive_max_pool3d(x, 1)),
        "adaptive_avg_pool3d": ([((1, 2, 4, 4, 4), "x")], lambda x: F.adaptive_avg_pool3d(x, 1)),
        "adaptive_max_pool3d_with_indices": ([((1, 2, 4, 4, 4), "x")],
                                             lambda x: F.adaptive_max_pool3d(x, 1, return_indices=True)[0]),
        # pad: reflection_pad1d/2d and replication_pad1d/2d/3d are on the CPU fp32 list;
        # reflect over 3 dims, circular and constant are on none.
        "reflection_pad1d": ([((2, 3, 5), "x")], lambda x: F.pad(x, (1, 2), mode="reflect")),
        "reflection_pad2d": ([((1, 2, 4, 4), "x")], lambda x: F.pad(x, (1, 1, 2, 0), mode="reflect")),
        "reflection_pad3d": ([((1, 2, 3, 4, 4), "x")], lambda x: F.pad(x, (1, 1, 1, 1, 1, 1), mode="reflect")),
        "replication_pad1d": ([((2, 3, 5), "x")], lambda x: F.pad(x, (1, 2), mode="replicate")),
        "replication_pad2d": ([((1, 2, 4, 4), "x")], lambda x: F.pad(x, (1, 1, 2, 0), mode="replicate")),
        "replication_pad3d": ([((1, 2, 3, 4, 4), "x")], lambda x: F.pad(x, (1, 1, 1, 1, 1, 1), mode="replicate")),
        "circular_pad2d": ([((1, 2, 4, 4), "x")], lambda x: F.pad(x, (1, 1, 1, 1), mode="circular")),
        "constant_pad2d": ([((1, 2, 4, 4), "x")], lambda x: F.pad(x, (1, 1, 1, 1))),
        "cross_entropy": ([((3, 5), "x"), ((3,), "label")], lambda x, t: F.cross_entropy(x, t)),
        "nll_loss": ([((3, 5), "x"), ((3,), "label")], lambda x, t: F.nll_loss(x, t)),
        "mse_loss": ([((3, 4), "x"), ((3, 4), "x")], lambda x, y: F.mse_loss(x, y)),
        "binary_cross_entropy": ([((3, 4), "x"), ((3, 4), "x")],
                                 lambda x, y: F.binary_cross_entropy(x.sigmoid(), y.sigmoid())),
        "binary_cross_entropy_with_logits": ([((3, 4), "x"), ((3, 4), "x")],
                                             lambda x, y: F.binary_cross_entropy_with_logits(x, y.sigmoid())),
        "add": ([((3, 4), "x"), ((3, 4), "x")], lambda a, b: a + b),
        "sub": ([((3, 4), "x"), ((3, 4), "x")], lambda a, b: a - b),
        "mul": ([((3, 4), "x"), ((3, 4), "x")], lambda a, b: a * b),
        "div": ([((3, 4), "x"), ((3, 4), "x")], lambda a, b: a / pos(b)),
        "cat": ([((3, 4), "x"), ((3, 4), "x")], lambda a, b: torch.cat([a, b])),
        "stack": ([((3, 4), "x"), ((3, 4), "x")], lambda a, b: torch.stack([a, b])),
        # On no list: they run in their input's dtype (the layers of a CNN after a conv).
        "relu": ([((3, 4), "x")], lambda x: F.relu(x)),
        "mean": ([((3, 4), "x")], lambda x: x.mean()),
        "max_pool2d": ([((1, 2, 4, 4), "x")], lambda x: F.max_pool2d(x, 2)),
        "avg_pool2d": ([((1, 2, 4, 4), "x")], lambda x: F.avg_pool2d(x, 2)),
        "adaptive_avg_pool2d": ([((1, 2, 4, 4), "x")], lambda x: F.adaptive_avg_pool2d(x, 1)),
        "batch_norm": ([((2, 3, 4, 4), "x"), ((3,), "p"), ((3,), "p"), ((3,), "p"), ((3,), "p")],
                       lambda x, rm, rv, w, b: F.batch_norm(x, rm, rv.abs() + 1, w, b, training=True)),
        "dropout": ([((3, 4), "x")], lambda x: F.dropout(x, 0.5, training=True)),
        "flatten": ([((2, 3, 4), "x")], lambda x: torch.flatten(x, 1)),
    }


DTYPE_NAME = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
              torch.bfloat16: "bfloat16", torch.int64: "int64"}

# PyTorch's documented CUDA lists (docs/source/amp.rst), restricted to the ops above.
CUDA_LOWER = {"conv2d", "conv3d", "conv_transpose2d", "conv_transpose3d", "matmul", "bmm", "linear"}
CUDA_FP32 = {"exp", "log", "pow", "softmax", "log_softmax", "sum", "layer_norm", "group_norm", "cross_entropy",
             "nll_loss", "mse_loss", "binary_cross_entropy_with_logits"}
CUDA_PROMOTE = {"cat", "stack"}  # autocast_mode.cpp: KERNEL_CUDA(cat / stack, promote)
CUDA_BANNED = {"binary_cross_entropy"}
# add/sub/mul/div are on no list; PyTorch's type promotion gives the widest dtype.
CUDA_TYPE_PROMOTION = {"add", "sub", "mul", "div"}


def cuda_policy(name):
    if name in CUDA_LOWER: return "lower_precision_fp"
    if name in CUDA_FP32: return "fp32"
    if name in CUDA_PROMOTE or name in CUDA_TYPE_PROMOTION: return "promote"
    if name in CUDA_BANNED: return "banned"
    return "fallthrough"


def make_inputs(specs, variant, low):
    torch.manual_seed(0)
    out, first = [], True
    for shape, kind in specs:
        if kind == "label":
            out.append(torch.randint(0, 5, shape))
            continue
        t = torch.randn(shape)
        if kind == "x":
            if variant == "low" or (variant == "mixed" and first):
                t = t.to(low)
            first = False
        out.append(t)
    return out


def dtype_cases():
    cases = []
    for name, (specs, fn) in _ops().items():
        n_x = sum(1 for _, k in specs if k == "x")
        variants = ["f32", "low"] + (["mixed"] if n_x >= 2 else [])
        for low, low_name in [(torch.bfloat16, "bfloat16"), (torch.float16, "float16")]:
            for v in variants:
                inputs = make_inputs(specs, v, low)
                try:
                    with torch.autocast("cpu", dtype=low):
                        y = fn(*inputs)
                    got = DTYPE_NAME[y.dtype]
                except Exception as e:  # noqa: BLE001 - recorded, the test skips it
                    got = "error: " + str(e).splitlines()[0][:120]
                cases.append({"device": "cpu", "dtype": low_name, "op": name, "variant": v, "out": got})
    policies = [{"op": name, "cuda_policy": cuda_policy(name)} for name in _ops()]
    return {"torch_version": torch.__version__,
            "note": "cpu cases run in the installed torch; cuda_policy transcribed from docs/source/amp.rst "
                    "(no GPU when written)",
            "cases": cases, "cuda": policies}


def model_fixture():
    from safetensors.torch import save_file
    torch.manual_seed(1)
    conv = torch.nn.Conv2d(3, 8, 3, padding=1)
    bn = torch.nn.BatchNorm2d(8)
    fc = torch.nn.Linear(8 * 4 * 4, 5)
    x = torch.randn(4, 3, 8, 8)
    labels = torch.tensor([0, 3, 1, 4])
    tensors = {"x": x, "labels": labels}
    for prefix, m in [("conv", conv), ("bn", bn), ("fc", fc)]:
        for k, v in m.state_dict().items():
            if k != "num_batches_tracked":
                tensors[f"{prefix}.{k}"] = v.detach().clone()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = conv(x)
        b = bn(a)
        r = F.relu(b)
        p = F.max_pool2d(r, 2)
        logits = fc(torch.flatten(p, 1))
        loss = F.cross_entropy(logits, labels)
    loss.backward()
    meta = {"conv_dtype": DTYPE_NAME[a.dtype], "bn_dtype": DTYPE_NAME[b.dtype], "relu_dtype": DTYPE_NAME[r.dtype],
            "pool_dtype": DTYPE_NAME[p.dtype], "logits_dtype": DTYPE_NAME[logits.dtype],
            "loss_dtype": DTYPE_NAME[loss.dtype], "torch_version": torch.__version__}
    tensors["logits"] = logits.float().detach()
    tensors["loss"] = loss.detach().reshape(())
    for prefix, m in [("conv", conv), ("bn", bn), ("fc", fc)]:
        for k, v in m.named_parameters():
            meta[f"grad_dtype.{prefix}.{k}"] = DTYPE_NAME[v.grad.dtype]
            tensors[f"grad.{prefix}.{k}"] = v.grad.detach().clone()
    tensors["after.bn.running_mean"] = bn.running_mean.clone()
    tensors["after.bn.running_var"] = bn.running_var.clone()
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    save_file(tensors, os.path.join(OUT, "autocast_model.safetensors"), metadata={"info": json.dumps(meta)})


if __name__ == "__main__":
    d = dtype_cases()
    with open(os.path.join(OUT, "autocast_dtypes.json"), "w") as f:
        f.write('{"torch_version":' + json.dumps(d["torch_version"]) + ',"note":' + json.dumps(d["note"]) +
                ',"cases":[\n' + ",\n".join(json.dumps(c) for c in d["cases"]) + '],\n"cuda":[\n' +
                ",\n".join(json.dumps(c) for c in d["cuda"]) + "]}\n")
    model_fixture()
    print("wrote", len(d["cases"]), "dtype cases and the model fixture")
