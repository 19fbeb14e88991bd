#!/usr/bin/env python3
"""Runs bench_ops (minidl) and bench_torch.py (PyTorch) on the same machine,
alternating them for --rounds rounds, and prints a side-by-side table.

For each op, the time shown is the best (lowest) of the per-round medians:
on a shared machine interference only ever adds time, so the best round is
the closest to what each library can do. ratio = PyTorch time / minidl time
(> 1: minidl is faster).

Usage: python3 bench/run_bench.py [--build build] [--threads 2] [--reps 15] [--rounds 3] [--json out.jsonl]
                                  [--suites ops,norm] [--only matmul|conv|volume|overhead|activations|reduce|softmax]
Suites: ops (bench_ops: matmul, conv2d), norm (bench_norm: BN, GN, LN, IN) and

train (bench_train: one SGD training step of ResNet-18 at batch 64 and SmallNet
at batch 128, each model in its own process so peak RSS is per model; prints
images/s and peak resident memory). train is not in the default set: at 2
threads a step takes seconds, so 3 rounds x 15 reps take about 15 minutes;
use e.g. --suites train --reps 5; --models unet3d times the train_unet3d step
(UNet3d base width 16, batch 2, 32x64x64 patches, Adam, BCE + Dice).
"""
import argparse
import json
import os
import platform
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_lines(cmd, env=None):
    """The JSON lines a bench program prints (minidl-launch's "[rank R] " prefix removed)."""
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    lines = [line.split("] ", 1)[1] if line.startswith("[rank ") else line for line in out.splitlines()]
    return [json.loads(line) for line in lines if line.startswith("{")]


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_isa():
    """The vector ISA levels the numbers depend on (from /proc/cpuinfo's flags)."""
    wanted = ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile"]
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return "unknown"
    return " ".join(w for w in wanted if w in flags) or "no AVX2"


def print_table(header, rows, best, format_row):
    """The header, a rule as wide, then format_row(op, shape, minidl line, pytorch line)
    for each (op, shape) in rows that both libraries ran."""
    print(header)
    print("-" * len(header))
    for op, shape in rows:
        m, t = best.get(("minidl", op, shape)), best.get(("pytorch", op, shape))
        if m and t:
            print(format_row(op, shape, m, t))


def least_cpu_ms(raw, impl, op, shape):
    """The least cpu_ms over every raw line of (impl, op, shape) that has one."""
    return min(l["cpu_ms"] for l in raw if (l["impl"], l["op"], l["shape"]) == (impl, op, shape) and "cpu_ms" in l)


def print_cpu_table(raw, best, rows, first, op_w, shape_w, digits):
    """The CPU-time table of the rows both libraries timed with cpu_ms: the least cpu_ms of
    each side over every raw line, and their ratio."""
    rows = [r for r in rows if "cpu_ms" in best.get(("minidl",) + r, {}) and "cpu_ms" in best.get(("pytorch",) + r, {})]
    if not rows:
        return

    def cpu_row(op, shape, m, t):
        mc, tc = least_cpu_ms(raw, "minidl", op, shape), least_cpu_ms(raw, "pytorch", op, shape)
        return f"{op:<{op_w}} {shape:<{shape_w}} {mc:>14.{digits}f} {tc:>14.{digits}f} {tc / mc:>6.2f}"

    print()
    print_table(f"{first:<{op_w}} {'shape':<{shape_w}} {'minidl cpu ms':>14} {'torch cpu ms':>14} {'ratio':>6}",
                rows, best, cpu_row)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build", help="CMake build directory holding bench/bench_ops")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="also write every raw line to this file")
    parser.add_argument("--suites", default="ops,norm", help="comma-separated: ops, norm, train")
    parser.add_argument("--only", help="ops suite: one group of bench_ops (matmul, conv, volume: conv3d, conv_transpose3d, max_pool3d, trilinear upsampling at UNet3d shapes, overhead: per-call cost on tiny tensors, activations: exp, log, sigmoid, tanh, gelu on a (64, 256, 28, 28) activation, reduce: reductions, transposed copy, global and max pooling, or softmax: softmax, log_softmax and the class losses)")
    parser.add_argument("--isa", choices=["native", "avx2"], default="native",
                        help="avx2: PyTorch limited to AVX2 (ATEN_CPU_CAPABILITY=avx2), for a minidl build "
                             "made with -march=x86-64-v3 (make bench-avx2): what users without AVX-512 get")
    parser.add_argument("--models", default="resnet18,smallnet",
                        help="train suite: comma-separated models (resnet18, resnet20, resnet56, smallnet, unet3d: the train_unet3d step, unet3d_predict: predict_unet3d's sliding-window inference of a 64x128x128 volume, PyTorch side with MONAI)")
    parser.add_argument("--amp", default="off",
                        help="train suite: comma-separated modes, off and/or bf16 (the forward under CPU bfloat16 "
                             "autocast on both sides; resnet18 and smallnet)")
    args = parser.parse_args()

    suites = [s for s in args.suites.split(",") if s]
    programs = {"ops": "bench_ops", "norm": "bench_norm", "train": "bench_train"}
    # Suites run as several processes, one per model: the extra arguments of each.
    variants = {"train": [["--model", m] + (["--amp", a] if a != "off" else [])
                          for m in args.models.split(",") if m for a in args.amp.split(",") if a]}
    if args.only:
        variants["ops"] = [["--only", args.only]]
    for suite in suites:
        if suite not in programs:
            sys.exit(f"unknown suite {suite!r} (choose from {', '.join(programs)})")
        path = os.path.join(args.build, "bench", programs[suite])
        if not os.path.exists(path):
            sys.exit(f"{path} not found: build it first (cmake --build {args.build} --target {programs[suite]})")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    if args.isa == "avx2":
        # PyTorch's own kernels stop at AVX2; its convolutions (oneDNN) and BLAS
        # (MKL) choose their ISA themselves, so they are capped too.
        env["ATEN_CPU_CAPABILITY"] = "avx2"
        env["ONEDNN_MAX_CPU_ISA"] = "AVX2"
        env["MKL_ENABLE_INSTRUCTIONS"] = "AVX2"
        # minidl's bfloat16 dot products check the CPU at run time, not the
        # build's ISA: off, as on a CPU without AVX512-BF16.
        env["MINIDL_CPU_BF16_DOT"] = "0"
    common = ["--threads", str(args.threads), "--reps", str(args.reps)]

    raw = []
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds} ...", file=sys.stderr, flush=True)
        for suite in suites:
            for extra in variants.get(suite, [[]]):
                raw += run_lines([os.path.join(args.build, "bench", programs[suite])] + common + extra, env)
                raw += run_lines([sys.executable, os.path.join(HERE, "bench_torch.py"), "--suite", suite] + common +
                                 extra, env)
    if args.json:
        with open(args.json, "w") as f:
            for line in raw:
                f.write(json.dumps(line) + "\n")

    best = {}  # (impl, op, shape) -> best line
    order = []
    versions = {}
    for line in raw:
        key = (line["impl"], line["op"], line["shape"])
        versions[line["impl"]] = line.get("version", "")
        if (line["op"], line["shape"]) not in order:
            order.append((line["op"], line["shape"]))
        if key not in best or line["median_ms"] < best[key]["median_ms"]:
            best[key] = line

    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs; ISA: {cpu_isa()}; threads: {args.threads}")
    if args.isa == "avx2":
        print("AVX2-only comparison: minidl built for x86-64-v3, PyTorch with ATEN_CPU_CAPABILITY=avx2, "
              "ONEDNN_MAX_CPU_ISA=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2")
    print(f"minidl: {versions.get('minidl', '?')}; pytorch: {versions.get('pytorch', '?')}")
    print(f"best of {args.rounds} rounds, each the median of {args.reps} runs after 3 warm-ups")

    def time_row(op, shape, m, t):
        ratio = t["median_ms"] / m["median_ms"]
        return (f"{op:<22} {shape:<32} {m['median_ms']:>10.2f} {t['median_ms']:>10.2f} {m['gflops']:>12.1f} "
                f"{t['gflops']:>11.1f} {ratio:>6.2f}")

    print_table(f"{'op':<22} {'shape':<32} {'minidl ms':>10} {'torch ms':>10} {'minidl GF/s':>12} {'torch GF/s':>11} "
                f"{'ratio':>6}", order, best, time_row)
    train_rows = [(op, shape) for op, shape in order if "images_per_s" in best.get(("minidl", op, shape), {})]
    if train_rows:
        def train_row(op, shape, m, t):
            # Peak RSS: the largest over rounds (it is a high-water mark, not a speed).
            m_rss = max(l["peak_rss_mib"] for l in raw if (l["impl"], l["op"], l["shape"]) == ("minidl", op, shape))
            t_rss = max(l["peak_rss_mib"] for l in raw if (l["impl"], l["op"], l["shape"]) == ("pytorch", op, shape))
            return (f"{op:<22} {shape:<10} {m['images_per_s']:>12.1f} {t['images_per_s']:>12.1f} "
                    f"{m['images_per_s'] / t['images_per_s']:>6.2f} {m_rss:>20.0f} {t_rss:>19.0f}")

        print()
        print_table(f"{'training step':<22} {'shape':<10} {'minidl img/s':>12} {'torch img/s':>12} {'ratio':>6} "
                    f"{'minidl peak RSS MiB':>20} {'torch peak RSS MiB':>19}", train_rows, best, train_row)
        # Process CPU time of one step / threads, least over all reps and rounds: on a
        # loaded machine it moves much less than wall time.
        print_cpu_table(raw, best, train_rows, "training step", 22, 16, 1)
    # Ops and norm results carry cpu_ms (the median thread CPU time of a round's calls): the least over rounds,
    # which a loaded machine inflates much less than wall time (compare at --threads 1).
    print_cpu_table(raw, best, [r for r in order if r not in train_rows], "op", 30, 14, 2)
    print("ratio = minidl speed / PyTorch speed (PyTorch time / minidl time)")


if __name__ == "__main__":
    main()
