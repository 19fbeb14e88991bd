#!/usr/bin/env python3
"""PyTorch twin of bench_ops.cpp: same ops, shapes, warm-up and median, one
JSON object per line. Usage: python3 bench/bench_torch.py [--threads 2] [--reps 15] [--suite ops|norm|train] [--only matmul|conv|volume|overhead|activations|reduce|softmax]
(--suite norm: the twin of bench_norm.cpp; --suite train [--model resnet18|resnet20|resnet56|smallnet|unet3d|unet3d_predict]: the twin of
bench_train.cpp, one model per process so peak_rss_mib is that model's)"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import ResNet18Cifar, ResNetCifarHe, bce_dice_loss, small_net  # noqa: E402


LAST_CPU_MS = [0.0]  # median CPU time of this thread over the last median_ms's runs (report's cpu_ms)


def median_ms(f, reps, warm_ms=50):
    # Warm-up as bench_util.h's median_ms: at least 3 calls and at least 50 ms;
    # warm_ms=0: exactly 3, where f runs collectives (every rank must call it
    # equally often, else one waits in a collective the other never joins).
    warm_until = time.perf_counter() + warm_ms / 1e3
    calls = 0
    while calls < 3 or time.perf_counter() < warm_until:
        f()
        calls += 1
    times, cpu = [], []
    for _ in range(reps):
        c0 = time.thread_time()
        t0 = time.perf_counter()
        f()
        times.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.thread_time() - c0) * 1e3)
    LAST_CPU_MS[0] = statistics.median(cpu)
    return statistics.median(times)


def report(op, shape, ms, flops, threads):
    print(json.dumps({"impl": "pytorch", "op": op, "shape": shape, "median_ms": round(ms, 3),
                      "gflops": round(flops / (ms * 1e6), 1), "threads": threads,
                      "version": "torch " + torch.__version__, "cpu_ms": round(LAST_CPU_MS[0], 3)}), flush=True)


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


def bench_conv3d(N, C, K, D, H, W, k, stride, pad, args, transposed=False):
    """Twin of bench_ops.cpp's bench_conv3d (--only volume)."""
    torch.manual_seed(0)
    shape = f"N{N} C{C} K{K} {D}x{H}x{W} k{k} s{stride} p{pad}"
    x = torch.randn(N, C, D, H, W)
    w = (torch.randn(C, K, k, k, k) if transposed else torch.randn(K, C, k, k, k)) * 0.05
    out = (lambda i: (i - 1) * stride - 2 * pad + k) if transposed else (lambda i: (i + 2 * pad - k) // stride + 1)
    voxels = D * H * W if transposed else out(D) * out(H) * out(W)
    flops = 2.0 * N * K * C * k ** 3 * voxels
    fn = F.conv_transpose3d if transposed else F.conv3d
    name = "conv_transpose3d" if transposed else "conv3d"
    with torch.no_grad():
        report(name + "_fwd", shape, median_ms(lambda: fn(x, w, None, stride, pad), args.reps), flops, args.threads)
    x.requires_grad_()
    w.requires_grad_()
    dy = torch.ones(N, K, out(D), out(H), out(W))

    def fwd_bwd():
        x.grad = None
        w.grad = None
        fn(x, w, None, stride, pad).backward(dy)

    report(name + "_fwd_bwd", shape, median_ms(fwd_bwd, args.reps), 3 * flops, args.threads)


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


def bench_train_unet3d(args):
    """Twin of bench_train.cpp's unet3d_step: the train_unet3d step on a (N, 1, 32, 64, 64) patch."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
    from unet_reference import UNet
    torch.manual_seed(0)
    model = UNet(3, 1, 1, 16, "batchnorm")
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == 1401265, f"unet3d: {n_params} parameters, minidl has 1401265"
    model.train()
    batch = args.batch or 2
    opt = torch.optim.Adam(model.parameters(), lr=2e-4, weight_decay=1e-4)
    x = torch.randn(batch, 1, 32, 64, 64)
    y = (torch.rand(batch, 1, 32, 64, 64) > 0.8).float()

    amp = args.amp == "bf16"
    cpu = [float("inf")]  # least process CPU time of a step / threads, as bench_train.cpp's cpu_ms

    def step():
        c0 = time.process_time()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            logits = model(x)
        loss = bce_dice_loss(logits.float(), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        cpu[0] = min(cpu[0], (time.process_time() - c0) * 1e3 / args.threads)

    ms = median_ms(step, args.reps)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB
    shape = f"batch {batch} patch 32x64x64" + (" bf16" if amp else "")
    print(json.dumps({"impl": "pytorch", "op": "train_step_unet3d", "shape": shape,
                      "median_ms": round(ms, 3), "gflops": 0.0, "threads": args.threads,
                      "version": "torch " + torch.__version__, "images_per_s": round(1e3 * batch / ms, 1),
                      "peak_rss_mib": round(peak, 1), "cpu_ms": round(cpu[0], 3)}), flush=True)


def bench_unet3d_predict(args):
    """Twin of bench_train.cpp's unet3d_predict: MONAI's sliding_window_inference of the UNet3d in eval mode."""
    from monai.inferers import sliding_window_inference  # python3 -m pip install monai
    import monai
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
    from unet_reference import UNet
    torch.manual_seed(0)
    model = UNet(3, 1, 1, 16, "batchnorm").eval()
    volume = torch.randn(1, 1, 64, 128, 128)
    cpu = [float("inf")]

    def run():
        c0 = time.process_time()
        with torch.inference_mode():
            sliding_window_inference(volume, (32, 64, 64), 4, model, overlap=0.5, mode="gaussian")
        cpu[0] = min(cpu[0], (time.process_time() - c0) * 1e3 / args.threads)

    ms = median_ms(run, args.reps)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB
    print(json.dumps({"impl": "pytorch", "op": "train_step_unet3d_predict",
                      "shape": "volume 64x128x128, windows 32x64x64, overlap 0.5, gaussian, 4 a batch",
                      "median_ms": round(ms, 3), "gflops": 0.0, "threads": args.threads,
                      "version": f"torch {torch.__version__}, monai {monai.__version__}",
                      "images_per_s": round(1e3 / ms, 1), "peak_rss_mib": round(peak, 1),
                      "cpu_ms": round(cpu[0], 3)}), flush=True)


def bench_train(args):
    """Twin of bench_train.cpp: one SGD training step of a CIFAR model on a fixed random batch."""
    if args.model == "unet3d":
        return bench_train_unet3d(args)
    if args.model == "unet3d_predict":
        return bench_unet3d_predict(args)
    torch.manual_seed(0)
    model = {"resnet18": ResNet18Cifar, "resnet20": lambda: ResNetCifarHe(3), "resnet56": lambda: ResNetCifarHe(9),
             "smallnet": small_net}[args.model]()
    expected = {"resnet18": 11173962, "resnet20": 272474, "resnet56": 855770, "smallnet": 1557066}[args.model]
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == expected, f"{args.model}: {n_params} parameters, minidl has {expected}"
    model.train()
    batch = args.batch or (64 if args.model == "resnet18" else 128)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(batch, 3, 32, 32)
    y = torch.randint(0, 10, (batch,))

    amp = args.amp == "bf16"

    cpu = [float("inf")]  # least process CPU time of a step / threads, as bench_train.cpp's cpu_ms

    def step():
        c0 = time.process_time()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        cpu[0] = min(cpu[0], (time.process_time() - c0) * 1e3 / args.threads)

    ms = median_ms(step, args.reps)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB
    shape = f"batch {batch}" + (" bf16" if amp else "")
    print(json.dumps({"impl": "pytorch", "op": "train_step_" + args.model, "shape": shape,
                      "median_ms": round(ms, 3), "gflops": 0.0, "threads": args.threads,
                      "version": "torch " + torch.__version__, "images_per_s": round(1e3 * batch / ms, 1),
                      "peak_rss_mib": round(peak, 1), "cpu_ms": round(cpu[0], 3)}), flush=True)
    if args.profile:
        phases = {"forward": [], "loss+zero_grad": [], "backward": [], "sgd step": []}
        for _ in range(args.reps):
            t0 = time.perf_counter()
            logits = model(x)
            t1 = time.perf_counter()
            loss = F.cross_entropy(logits, y)
            opt.zero_grad()
            t2 = time.perf_counter()
            loss.backward()
            t3 = time.perf_counter()
            opt.step()
            t4 = time.perf_counter()
            for k, a, b in zip(phases, (t0, t1, t2, t3), (t1, t2, t3, t4)):
                phases[k].append((b - a) * 1e3)
        print("# phases (median ms): " + ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in phases.items()))
        if args.model == "smallnet":
            profile_smallnet_ops(batch, args.reps)
        elif args.model == "resnet18":
            profile_resnet18_convs(batch, args.reps, amp)


def bench_volume(args):
    """Twin of bench_ops.cpp's bench_volume: MaxPool3d(2) and trilinear x2 on (2, 32, 32, 64, 64)."""
    torch.manual_seed(0)
    x = torch.randn(2, 32, 32, 64, 64)
    name = "2x32x32x64x64"
    pool_taps, up_taps = 8.0 * x.numel() / 8, 8.0 * x.numel() * 8
    up = lambda a: F.interpolate(a, scale_factor=2.0, mode="trilinear", align_corners=False)
    with torch.no_grad():
        report("max_pool3d_fwd", name, median_ms(lambda: F.max_pool3d(x, 2), args.reps), pool_taps, args.threads)
        report("upsample_trilinear_fwd", name, median_ms(lambda: up(x), args.reps), up_taps, args.threads)
    x.requires_grad_()
    dy_pool, dy_up = torch.ones(2, 32, 16, 32, 32), torch.ones(2, 32, 64, 128, 128)

    def pool_fwd_bwd():
        x.grad = None
        F.max_pool3d(x, 2).backward(dy_pool)

    def up_fwd_bwd():
        x.grad = None
        up(x).backward(dy_up)

    report("max_pool3d_fwd_bwd", name, median_ms(pool_fwd_bwd, args.reps), 2 * pool_taps, args.threads)
    report("upsample_trilinear_fwd_bwd", name, median_ms(up_fwd_bwd, args.reps), 2 * up_taps, args.threads)


def bench_overhead(args):
    """Twin of bench_ops.cpp's bench_overhead (--only overhead): 1000 calls per timed run on tiny tensors."""
    torch.manual_seed(0)
    calls = "x1000 calls"

    def per_1000(f):
        def run():
            for _ in range(1000):
                f()
        return median_ms(run, args.reps)

    a, b = torch.randn(1), torch.randn(1)
    with torch.no_grad():
        report("overhead_add", "1 element, " + calls, per_1000(lambda: a + b), 0, args.threads)
    ag, bg = torch.randn(1).requires_grad_(), torch.randn(1).requires_grad_()
    report("overhead_add_grad", "1 element, requires_grad, " + calls, per_1000(lambda: ag + bg), 0, args.threads)
    x = torch.randn(4, 16)
    w, bias = (torch.randn(16, 16) * 0.1).requires_grad_(), torch.zeros(16).requires_grad_()

    def linear_fwd_bwd():
        w.grad = bias.grad = None
        F.linear(x, w, bias).sum().backward()

    report("overhead_linear_fwd_bwd", "(4,16)x(16,16), sum, backward, " + calls, per_1000(linear_fwd_bwd), 0,
           args.threads)
    mlp = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
    sgd = torch.optim.SGD(mlp.parameters(), lr=0.01, momentum=0.9)
    target = torch.randn(4, 1)

    def mlp_step():
        sgd.zero_grad()
        F.mse_loss(mlp(x), target).backward()
        sgd.step()

    report("overhead_mlp_step", "3x Linear(16) + ReLU, MSE, SGD momentum, batch 4, " + calls, per_1000(mlp_step), 0,
           args.threads)


def bench_activations(args):
    """Twin of bench_ops.cpp's bench_activations (--only activations): exp, log, sigmoid, tanh, gelu and
    gelu tanh on (64, 256, 28, 28), forward and forward + backward; "gflops" = G elements/s."""
    torch.manual_seed(0)
    shape, name = (64, 256, 28, 28), "64x256x28x28"
    x, positive, dy = torch.randn(*shape), torch.rand(*shape) + 0.5, torch.ones(*shape)
    n = float(x.numel())
    ops = [("exp", torch.exp), ("log", torch.log), ("sigmoid", torch.sigmoid), ("tanh", torch.tanh),
           ("gelu", F.gelu), ("gelu_tanh", lambda v: F.gelu(v, approximate="tanh"))]
    for op, f in ops:
        inp = (positive if op == "log" else x).detach()
        with torch.no_grad():
            report(op + "_fwd", name, median_ms(lambda: f(inp), args.reps), n, args.threads)
        inp.requires_grad_()

        def fwd_bwd():
            inp.grad = None
            f(inp).backward(dy)

        report(op + "_fwd_bwd", name, median_ms(fwd_bwd, args.reps), 2 * n, args.threads)


def bench_reduce(args):
    """Twin of bench_ops.cpp's bench_reduce (--only reduce)."""
    torch.manual_seed(0)
    x, m = torch.randn(64, 256, 28, 28), torch.randn(4096, 4096)
    xs, ms = "64x256x28x28", "4096x4096"

    def timed(op, shape, f):
        report(op, shape, median_ms(f, args.reps), 0, args.threads)

    with torch.no_grad():
        timed("transpose_contiguous", ms, lambda: m.transpose(0, 1).contiguous())
        timed("adaptive_avg_pool2d_1", xs, lambda: F.adaptive_avg_pool2d(x, 1))
        timed("amax_last_dim", ms, lambda: torch.amax(m, 1))
        timed("sum_all", xs, lambda: torch.sum(x))
        timed("mean_dim1", xs, lambda: torch.mean(x, 1))
        timed("sum_last_dim", ms, lambda: torch.sum(m, 1))
        timed("max_pool2d_3x3s2p1_fwd", xs, lambda: F.max_pool2d(x, 3, 2, 1))
        xb = x.bfloat16()
        timed("max_pool2d_3x3s2p1_fwd_bf16", xs, lambda: F.max_pool2d(xb, 3, 2, 1))
    xg = x.clone().requires_grad_()
    dy_pool, dy_gap = torch.ones(64, 256, 14, 14), torch.ones(64, 256, 1, 1)

    def gap_fwd_bwd():
        xg.grad = None
        F.adaptive_avg_pool2d(xg, 1).backward(dy_gap)

    def pool_fwd_bwd():
        xg.grad = None
        F.max_pool2d(xg, 3, 2, 1).backward(dy_pool)

    timed("adaptive_avg_pool2d_1_fwd_bwd", xs, gap_fwd_bwd)
    timed("max_pool2d_3x3s2p1_fwd_bwd", xs, pool_fwd_bwd)


def bench_softmax(args):
    """Twin of bench_ops.cpp's bench_softmax (--only softmax)."""
    cases = [((256, 1000), -1, "256x1000 dim -1"), ((64, 32000), -1, "64x32000 dim -1"),
             ((8, 21, 128, 128), 1, "8x21x128x128 dim 1")]
    for shape, dim, name in cases:
        torch.manual_seed(0)
        x = torch.randn(*shape) * 3.0
        dy = torch.randn(*shape)
        n = float(x.numel())
        for log in (False, True):
            op = "log_softmax" if log else "softmax"
            fn = F.log_softmax if log else F.softmax
            with torch.no_grad():
                report(op + "_fwd", name, median_ms(lambda: fn(x, dim), args.reps), n, args.threads)
            x.requires_grad_()

            def fwd_bwd():
                x.grad = None
                fn(x, dim).backward(dy)

            report(op + "_fwd_bwd", name, median_ms(fwd_bwd, args.reps), 2 * n, args.threads)
            x.requires_grad_(False)
    for shape, _, name in (cases[0], cases[2]):
        torch.manual_seed(0)
        x = torch.randn(*shape) * 3.0
        target = torch.randint(0, shape[1], (shape[0],) + shape[2:])
        n = float(x.numel())
        label = name.split(" ")[0]
        with torch.no_grad():
            report("cross_entropy_fwd", label, median_ms(lambda: F.cross_entropy(x, target), args.reps), n,
                   args.threads)
        x.requires_grad_()

        def ce_fwd_bwd():
            x.grad = None
            F.cross_entropy(x, target).backward()

        report("cross_entropy_fwd_bwd", label, median_ms(ce_fwd_bwd, args.reps), 2 * n, args.threads)
    torch.manual_seed(0)
    x = (torch.randn(8, 21, 128, 128) * 3.0).requires_grad_()
    probs = F.softmax(torch.randn(8, 21, 128, 128), 1)

    def probs_fwd_bwd():
        x.grad = None
        F.cross_entropy(x, probs).backward()

    report("cross_entropy_probs_fwd_bwd", "8x21x128x128", median_ms(probs_fwd_bwd, args.reps), 2.0 * x.numel(),
           args.threads)
    logp = F.log_softmax(torch.randn(8, 21, 128, 128), 1).requires_grad_()
    target = torch.randint(0, 21, (8, 128, 128))

    def nll_fwd_bwd():
        logp.grad = None
        F.nll_loss(logp, target).backward()

    report("nll_loss_fwd_bwd", "8x21x128x128", median_ms(nll_fwd_bwd, args.reps), 2.0 * logp.numel(), args.threads)


def time_op(name, leaves, f, reps):
    """Twin of bench_train.cpp's time_op: forward + backward with a ones upstream gradient."""
    times = []
    for r in range(reps + 1):
        for t in leaves:
            t.grad = None
        t0 = time.perf_counter()
        out = f(*leaves)
        out.backward(torch.ones_like(out))
        if r > 0:
            times.append((time.perf_counter() - t0) * 1e3)
    print(f"# op {name:<34} fwd+bwd {statistics.median(times):8.1f} ms", flush=True)


def profile_resnet18_convs(n, reps, amp=False):
    """Twin of bench_train.cpp's profile_resnet18_convs: each kind of ResNet-18 conv once a stage."""
    def conv(cin, cout, hw, k, stride):
        x = torch.randn(n, cin, hw, hw, requires_grad=True)
        w = (torch.randn(cout, cin, k, k) * 0.05).requires_grad_()

        def f(a, b):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                return F.conv2d(a, b, None, stride, k // 2)
        time_op(f"conv{k}x{k}{' s2 ' if stride > 1 else ' '}{cin}->{cout} @{hw}", [x, w], f, reps)

    c, hw = 64, 32
    while c <= 512:
        if c > 64:
            conv(c // 2, c, hw * 2, 3, 2)
            conv(c // 2, c, hw * 2, 1, 2)
        conv(c, c, hw, 3, 1)
        c, hw = c * 2, hw // 2


def profile_smallnet_ops(n, reps):
    cin, hw = 3, 32
    for i, cout in enumerate((64, 128, 256, 512)):
        x = torch.randn(n, cin, hw, hw, requires_grad=True)
        w = (torch.randn(cout, cin, 3, 3) * 0.05).requires_grad_()
        time_op(f"conv3x3 {cin}->{cout} @{hw}", [x, w], lambda a, b: F.conv2d(a, b, None, 1, 1), reps)
        out_hw = hw
        if i > 0:
            yy = torch.randn(n, cout, hw, hw, requires_grad=True)
            time_op(f"max_pool2d 2x2 C{cout} @{hw}", [yy], lambda a: F.max_pool2d(a, 2), reps)
            out_hw = hw // 2
        z = torch.randn(n, cout, out_hw, out_hw, requires_grad=True)
        g, b = torch.ones(cout, requires_grad=True), torch.zeros(cout, requires_grad=True)
        rm, rv = torch.zeros(cout), torch.ones(cout)
        time_op(f"batch_norm+relu C{cout} @{out_hw}", [z, g, b],
                lambda a, gg, bb: F.relu(F.batch_norm(a, rm, rv, gg, bb, True)), reps)
        cin, hw = cout, out_hw


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--suite", choices=["ops", "norm", "train"], default="ops")
    parser.add_argument("--only", choices=["matmul", "conv", "volume", "overhead", "activations", "reduce", "softmax"], help="--suite ops: run one group")
    parser.add_argument("--model", choices=["resnet18", "resnet20", "resnet56", "smallnet", "unet3d", "unet3d_predict"], default="smallnet", help="--suite train only")
    parser.add_argument("--batch", type=int, default=0, help="--suite train: 0 = 64 for resnet18, 128 for resnet20/56 and smallnet, 2 for unet3d")
    parser.add_argument("--profile", type=int, default=0, help="--suite train: 1 = also print phase and per-op times")
    parser.add_argument("--amp", choices=["off", "bf16"], default="off",
                        help="--suite train (resnet18, smallnet): the forward under torch.autocast('cpu', bfloat16)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.suite == "norm":
        bench_norm(args)
        return
    if args.suite == "train":
        bench_train(args)
        return
    want = lambda group: args.only in (None, group)
    if want("matmul"):
        bench_matmul(1024, args)
    if want("conv"):
        bench_conv(128, 64, 64, 32, 32, 3, 1, 1, args)
        bench_conv(128, 128, 128, 16, 16, 3, 1, 1, args)
        bench_conv(128, 64, 128, 32, 32, 3, 2, 1, args)
        bench_conv(128, 3, 64, 32, 32, 3, 1, 1, args)
        # CIFAR ResNet-18 at batch 64 (the same cases as bench_ops.cpp).
        for c, hw in [(64, 32), (128, 16), (256, 8), (512, 4)]:
            bench_conv(64, c, c, hw, hw, 3, 1, 1, args)
        for c, hw in [(64, 32), (128, 16), (256, 8)]:
            bench_conv(64, c, 2 * c, hw, hw, 3, 2, 1, args)
            bench_conv(64, c, 2 * c, hw, hw, 1, 2, 0, args)
    if want("volume"):
        bench_conv3d(2, 32, 32, 32, 64, 64, 3, 1, 1, args)  # the target: a UNet3d 3x3x3 conv
        bench_conv3d(2, 64, 32, 16, 32, 32, 2, 2, 0, args, transposed=True)  # UNet3d upsampling
        bench_volume(args)
    if want("overhead"):
        bench_overhead(args)
    if want("activations"):
        bench_activations(args)
    if want("reduce"):
        bench_reduce(args)
    if want("softmax"):
        bench_softmax(args)

if __name__ == "__main__":
    main()
