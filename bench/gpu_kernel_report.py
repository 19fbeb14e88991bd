#!/usr/bin/env python3
"""Where a GPU training step's time goes, minidl next to PyTorch: the per-kernel
durations Nsight Compute measured (scripts/gpu-check.sh profile runs
`ncu --profile-from-start off --metrics gpu__time_duration.sum` around
bench_gpu --suite profile and bench_gpu_torch.py --suite profile, then exports
each report with `ncu --import R --csv --page raw`), summed by kind of kernel.

  python3 bench/gpu_kernel_report.py --steps 2 minidl.csv pytorch.csv [--title T]

Prints a markdown table (ms per step by kind, kernel count per step) and each
side's ten costliest kernels. ncu replays every kernel alone (here without
flushing caches or locking clocks), so the sums leave out launch gaps and
overlap: they say where GPU time goes, not the step's wall time.
"""
import argparse
import collections
import csv
import re
import sys

# First match wins: cuDNN's BatchNorm kernels say "cudnn", convolution
# kernels "gemm", norm kernels "reduce"; minidl's norm statistics run through
# the generic row reduction with the ShiftedSums of ops/cuda/norm_stats.cuh.
KINDS = [
    ("norm", r"norm|welford|Norm|bn_fw|bn_bw|batchnorm|ShiftedSums"),
    ("conv", r"conv|fprop|dgrad|wgrad|winograd|implicit_gemm|cudnn|fft"),
    ("matmul", r"gemm|cublas|cutlass|sm90_xmma"),
    ("pooling", r"pool"),
    ("loss/softmax", r"softmax|nll|cross_entropy|loss|log_softmax"),
    ("optimizer", r"optim|sgd|adam|multi_tensor|foreach|fused_"),
    ("reduce", r"reduce|Reduce"),
    ("copy/fill", r"copy|fill|memset|Memcpy|Memset"),
    ("elementwise", r"elementwise|vectorized|unrolled|binary|unary|relu|threshold|add|mul"),
]
UNIT_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}


def kind_of(name):
    for kind, pattern in KINDS:
        if re.search(pattern, name, re.IGNORECASE):
            return kind
    return "other"


def read_kernels(path):
    """[(kernel name, ns)] from ncu's raw CSV page: a header row, a units row, one row per kernel."""
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    start = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if start is None:
        sys.exit(f"gpu_kernel_report: {path}: no 'Kernel Name' column (not an ncu --csv --page raw export?)")
    header = rows[start]
    name_col = header.index("Kernel Name")
    time_col = next((i for i, h in enumerate(header) if h.startswith("gpu__time_duration")), None)
    if time_col is None:
        sys.exit(f"gpu_kernel_report: {path}: no gpu__time_duration column")
    scale, body = 1.0, rows[start + 1:]
    if body and body[0][time_col] in UNIT_NS:
        scale, body = UNIT_NS[body[0][time_col]], body[1:]
    kernels = []
    for r in body:
        if len(r) <= max(name_col, time_col):
            continue
        try:
            kernels.append((r[name_col], float(r[time_col].replace(",", "")) * scale))
        except ValueError:
            sys.exit(f"gpu_kernel_report: {path}: unreadable duration {r[time_col]!r} for {r[name_col]!r}")
    return kernels


def short(name, width=90):
    name = re.sub(r"\s+", " ", name)
    return name if len(name) <= width else name[:width - 3] + "..."


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("minidl_csv")
    ap.add_argument("pytorch_csv")
    ap.add_argument("--steps", type=int, default=2, help="training steps inside the profiled range")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    sides = {"minidl": read_kernels(a.minidl_csv), "PyTorch": read_kernels(a.pytorch_csv)}
    per_kind = {s: collections.defaultdict(lambda: [0.0, 0]) for s in sides}
    for side, kernels in sides.items():
        for name, ns in kernels:
            acc = per_kind[side][kind_of(name)]
            acc[0] += ns / 1e6 / a.steps
            acc[1] += 1
    if a.title:
        print(f"### {a.title}\n")
    print("| kind | minidl ms/step | kernels | PyTorch ms/step | kernels | PyTorch / minidl |")
    print("|---|---:|---:|---:|---:|---:|")
    kinds = [k for k, _ in KINDS] + ["other"]
    for kind in kinds + ["total"]:
        if kind == "total":
            m = [sum(v[0] for v in per_kind["minidl"].values()), sum(v[1] for v in per_kind["minidl"].values())]
            p = [sum(v[0] for v in per_kind["PyTorch"].values()), sum(v[1] for v in per_kind["PyTorch"].values())]
        else:
            m, p = per_kind["minidl"].get(kind, [0.0, 0]), per_kind["PyTorch"].get(kind, [0.0, 0])
        if not m[1] and not p[1]:
            continue
        ratio = f"{p[0] / m[0]:.2f}x" if m[0] > 0 and p[0] > 0 else ""
        label = f"**{kind}**" if kind == "total" else kind
        print(f"| {label} | {m[0]:.3f} | {m[1] // a.steps} | {p[0]:.3f} | {p[1] // a.steps} | {ratio} |")
    for side, kernels in sides.items():
        by_name = collections.defaultdict(lambda: [0.0, 0])
        for name, ns in kernels:
            by_name[name][0] += ns / 1e6 / a.steps
            by_name[name][1] += 1
        print(f"\n{side}: the ten costliest kernels (ms per step, launches per step)\n")
        for name, (ms, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:10]:
            print(f"- {ms:.3f} ms, {n // a.steps}x [{kind_of(name)}] `{short(name)}`")
    print()


if __name__ == "__main__":
    main()
