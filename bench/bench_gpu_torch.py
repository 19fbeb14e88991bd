#!/usr/bin/env python3
"""PyTorch twin of bench/bench_gpu.cpp: the same ops, shapes, settings and timing
(rounds of `iters` calls between two synchronizations, the median round per call),
one JSON object a line with the same op and shape names.

  python3 bench/bench_gpu_torch.py [--device cuda:0] [--rounds 7] [--suite all|ops|norms|pools|train|profile]
                                   [--model resnet18|smallnet] [--batch 128] [--amp off|fp16]

--suite profile: 3 warm-up steps, then 2 between torch.cuda.profiler.start
and stop, for `ncu --profile-from-start off` (bench_gpu --suite profile's twin).

Settings as bench_gpu: cudnn.benchmark on, cuDNN TF32 on (PyTorch's default),
matmul TF32 off unless the op name says tf32. Models from bench/bench_torch.py.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import ResNet18Cifar, small_net  # noqa: E402


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def median_ms(dev, iters, f, rounds, warmup=3):
    for _ in range(warmup):
        f()
    ms = []
    for _ in range(rounds):
        sync(dev)
        t0 = time.perf_counter()
        for _ in range(iters):
            f()
        sync(dev)
        ms.append((time.perf_counter() - t0) * 1e3 / iters)
    ms.sort()
    return ms[len(ms) // 2]


def report(op, shape, ms, flops, peak_mib=0.0, images_per_s=0.0):
    r = {"impl": "pytorch", "op": op, "shape": shape, "median_ms": round(ms, 4), "tflops": round(flops / (ms * 1e9), 2)}
    if peak_mib:
        r["peak_mib"] = round(peak_mib, 1)
    if images_per_s:
        r["images_per_s"] = round(images_per_s)
    r["version"] = "torch " + torch.__version__
    print(json.dumps(r), flush=True)


def leaf(shape, dev, scale=1.0, channels_last=False):
    t = (torch.randn(shape) * scale).to(dev)
    if channels_last:
        t = t.contiguous(memory_format=torch.channels_last)
    return t.requires_grad_()


def time_op(a, op, shape, fwd_flops, leaves, f, iters=20):
    with torch.no_grad():
        report(op + "_fwd", shape, median_ms(a.dev, iters, lambda: f(leaves), a.rounds), fwd_flops)
    grad = torch.ones_like(f(leaves).detach())

    def fwd_bwd():
        for t in leaves:
            t.grad = None
        f(leaves).backward(grad)

    report(op + "_fwd_bwd", shape, median_ms(a.dev, iters, fwd_bwd, a.rounds), 3 * fwd_flops)


def conv_suite(a):
    for cin, cout, hw, stride in [(3, 64, 32, 1), (64, 64, 32, 1), (64, 128, 32, 2), (128, 128, 16, 1),
                                  (128, 256, 16, 2), (256, 256, 8, 1), (256, 512, 8, 2), (512, 512, 4, 1)]:
        n, out = 128, hw // stride
        flops = 2.0 * n * cout * out * out * cin * 9
        shape = f"{n}x{cin}x{hw}x{hw}->{cout}/s{stride}"
        for cl in (False, True):  # conv3x3_cl: channels-last input, the weight as is (bench_gpu.cpp's twin)
            time_op(a, "conv3x3_cl" if cl else "conv3x3", shape, flops,
                    [leaf((n, cin, hw, hw), a.dev, 1.0, cl), leaf((cout, cin, 3, 3), a.dev, 0.05)],
                    lambda v, s=stride: F.conv2d(v[0], v[1], None, s, 1))


def norm_suite(a):
    s = (128, 64, 32, 32)
    shape = "x".join(map(str, s))
    # BatchNorm also at ResNet-18's batch-512 shapes (first and last stage) and ResNet-20's
    # 16 channels, as bench_gpu.cpp.
    for b in (s, (512, 64, 32, 32), (512, 512, 4, 4), (128, 16, 32, 32)):
        brm, brv = torch.zeros(b[1], device=a.dev), torch.ones(b[1], device=a.dev)
        for cl in (False, True):
            time_op(a, "batch_norm2d_train_cl" if cl else "batch_norm2d_train", "x".join(map(str, b)), 0,
                    [leaf(b, a.dev, 1.0, cl), leaf((b[1],), a.dev), leaf((b[1],), a.dev)],
                    lambda v, brm=brm, brv=brv: F.batch_norm(v[0], brm, brv, v[1], v[2], True))
    time_op(a, "group_norm32", shape, 0, [leaf(s, a.dev), leaf((64,), a.dev), leaf((64,), a.dev)],
            lambda v: F.group_norm(v[0], 32, v[1], v[2]))
    time_op(a, "layer_norm_chw", shape, 0, [leaf(s, a.dev), leaf((64, 32, 32), a.dev), leaf((64, 32, 32), a.dev)],
            lambda v: F.layer_norm(v[0], (64, 32, 32), v[1], v[2]))
    time_op(a, "instance_norm2d", shape, 0, [leaf(s, a.dev)], lambda v: F.instance_norm(v[0]))


def pool_suite(a):
    maps, head = (128, 64, 32, 32), (128, 512, 4, 4)
    for cl in (False, True):
        suffix = "_cl" if cl else ""
        time_op(a, "max_pool2x2" + suffix, "x".join(map(str, maps)), 0, [leaf(maps, a.dev, 1.0, cl)],
                lambda v: F.max_pool2d(v[0], 2))
        time_op(a, "max_pool3x3s2" + suffix, "x".join(map(str, maps)), 0, [leaf(maps, a.dev, 1.0, cl)],
                lambda v: F.max_pool2d(v[0], 3, 2, 1))
        time_op(a, "global_avg_pool" + suffix, "x".join(map(str, head)), 0, [leaf(head, a.dev, 1.0, cl)],
                lambda v: F.adaptive_avg_pool2d(v[0], 1))
    logits, volume = (8192, 1000), (2, 4, 32, 64, 64)
    time_op(a, "log_softmax_rows", "x".join(map(str, logits)), 0, [leaf(logits, a.dev)],
            lambda v: F.log_softmax(v[0], -1))
    time_op(a, "softmax_channels", "x".join(map(str, volume)), 0, [leaf(volume, a.dev)],
            lambda v: F.softmax(v[0], 1))


def matmul_suite(a):
    n = 4096
    x, y = torch.randn(n, n, device=a.dev), torch.randn(n, n, device=a.dev)
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        report("matmul_tf32" if tf32 else "matmul_fp32", "4096x4096x4096",
               median_ms(a.dev, 10, lambda: x @ y, a.rounds), 2.0 * n ** 3)
    torch.backends.cuda.matmul.allow_tf32 = False


def make_step(a, name, batch, fp16, channels_last=False):
    """bench_gpu's TrainStep: SGD lr 0.1 momentum 0.9 wd 5e-4 on a fixed random batch;
    fp16: the forward under torch.autocast float16 and a GradScaler; channels_last:
    model and input in torch.channels_last (PyTorch's recipe for it)."""
    torch.manual_seed(0)
    model = (ResNet18Cifar() if name == "resnet18" else small_net()).to(a.dev).train()
    x = torch.randn(batch, 3, 32, 32).to(a.dev)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    y = torch.randint(0, 10, (batch,)).to(a.dev)
    scaler = torch.amp.GradScaler(a.dev.type) if fp16 else None

    def step():
        with torch.autocast(a.dev.type, dtype=torch.float16, enabled=fp16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        if scaler is None:
            loss.backward()
            opt.step()
            return
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    return step


def train_step(a, name, batch, fp16=False, deterministic=False, channels_last=False):
    # deterministic: bench_gpu's train_step_deterministic_* twin (cuDNN's
    # deterministic algorithms, no benchmark search).
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = not deterministic
    step = make_step(a, name, batch, fp16, channels_last)
    step()
    cuda = a.dev.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(a.dev)
    ms = median_ms(a.dev, 5, step, a.rounds)
    peak = torch.cuda.max_memory_allocated(a.dev) / 2 ** 20 if cuda else 0.0
    kind = "train_step_fp16_" if fp16 else "train_step_deterministic_" if deterministic else "train_step_"
    kind += "cl_" if channels_last else ""
    report(kind + name, f"batch {batch}", ms, 0, peak, 1e3 * batch / ms)
    torch.backends.cudnn.deterministic = False
    torch.backends.cudnn.benchmark = True
    if not fp16 and not deterministic and not channels_last:
        report("train_step_host_" + name, f"batch {batch}", enqueue_ms(a.dev, step, a.rounds), 0)


def profile_steps(a):
    step = make_step(a, a.model, a.batch, a.amp == "fp16", a.memory_format == "channels-last")
    for _ in range(3):
        step()
    torch.cuda.synchronize(a.dev)
    torch.cuda.profiler.start()
    for _ in range(2):
        step()
    torch.cuda.synchronize(a.dev)
    torch.cuda.profiler.stop()
    cl = "cl_" if a.memory_format == "channels-last" else ""
    print(json.dumps({"impl": "pytorch", "op": "profile_" + cl + a.model, "shape": f"batch {a.batch}", "steps": 2}),
          flush=True)


def enqueue_ms(dev, f, rounds):
    """Median host time of one f() started on an idle device (bench_gpu.cpp's twin)."""
    ms = []
    for _ in range(rounds):
        sync(dev)
        t0 = time.perf_counter()
        f()
        ms.append((time.perf_counter() - t0) * 1e3)
    sync(dev)
    ms.sort()
    return ms[len(ms) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--suite", choices=["all", "ops", "norms", "pools", "train", "profile"], default="all")
    ap.add_argument("--model", choices=["resnet18", "smallnet"], default="resnet18")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--amp", choices=["off", "fp16"], default="off")
    ap.add_argument("--memory-format", choices=["contiguous", "channels-last"], default="contiguous",
                    help="--suite profile: the step's images and model")
    a = ap.parse_args()
    a.dev = torch.device(a.device)  # cpu: a dry run of this script where there is no GPU
    if a.dev.type == "cuda" and not torch.cuda.is_available():
        print("bench_gpu_torch: skipped: torch.cuda.is_available() is false")
        sys.exit(77)
    torch.backends.cudnn.benchmark = True
    if a.suite == "profile":
        if a.dev.type != "cuda":
            sys.exit("bench_gpu_torch.py --suite profile: the profiler markers need a CUDA device")
        profile_steps(a)
        return
    if a.suite == "norms":
        norm_suite(a)
        return
    if a.suite == "pools":
        pool_suite(a)
        return
    if a.suite != "train":
        conv_suite(a)
        norm_suite(a)
        pool_suite(a)
        matmul_suite(a)
    if a.suite != "ops":
        train_step(a, "resnet18", 128)
        train_step(a, "resnet18", 512)
        train_step(a, "smallnet", 128)
        train_step(a, "resnet18", 128, fp16=True)
        train_step(a, "smallnet", 128, fp16=True)
        train_step(a, "resnet18", 128, deterministic=True)
        train_step(a, "smallnet", 128, deterministic=True)
        train_step(a, "resnet18", 128, channels_last=True)
        train_step(a, "resnet18", 512, channels_last=True)
        train_step(a, "smallnet", 128, channels_last=True)
        train_step(a, "resnet18", 128, fp16=True, channels_last=True)


if __name__ == "__main__":
    main()
