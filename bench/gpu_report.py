#!/usr/bin/env python3
"""Joins bench_gpu (minidl) and bench_gpu_torch.py (PyTorch) JSON lines into a
markdown table: time of each side, speedup = PyTorch time / minidl time (> 1:
minidl faster), and peak device memory for the training steps.

  python3 bench/gpu_report.py minidl.jsonl torch.jsonl [--device "NVIDIA H100 80GB HBM3"]
"""
import argparse
import json


def read(path):
    rows = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                r = json.loads(line)
                rows[(r["op"], r["shape"])] = r
    return rows


def print_table(intro, header, rows):
    """A markdown table after a line of text: step and shape left-aligned, numbers right; nothing without rows."""
    if not rows:
        return
    print(f"\n{intro}\n")
    print("| " + " | ".join(header) + " |")
    print("|---|---|" + "---:|" * (len(header) - 2))
    print("\n".join(rows))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("minidl")
    ap.add_argument("torch")
    ap.add_argument("--device", default="")
    a = ap.parse_args()
    ours, theirs = read(a.minidl), read(a.torch)
    version = next((r.get("version", "") for r in theirs.values()), "")
    print(f"GPU benchmarks{' on ' + a.device if a.device else ''}, PyTorch {version.replace('torch ', '')}; "
          "speedup = PyTorch ms / minidl ms")
    print()
    print("| op | shape | minidl ms | PyTorch ms | speedup | minidl TFLOP/s | peak MiB minidl / PyTorch |")
    print("|---|---|---:|---:|---:|---:|---|")
    for key, r in ours.items():
        t = theirs.get(key)
        tms = f"{t['median_ms']:.3f}" if t else "-"
        speed = f"{t['median_ms'] / r['median_ms']:.2f}x" if t else "-"
        tf = f"{r['tflops']:.1f}" if r.get("tflops") else ""
        peak = f"{r['peak_mib']:.0f} / {t['peak_mib']:.0f}" if t and "peak_mib" in r and "peak_mib" in t else ""
        print(f"| {key[0]} | {key[1]} | {r['median_ms']:.3f} | {tms} | {speed} | {tf} | {peak} |")
    # --deterministic's cost: each train_step_deterministic_<model> row against
    # the train_step_<model> row of the same side and batch.
    costs = []
    for (op, shape), r in ours.items():
        if not op.startswith("train_step_deterministic_"):
            continue
        base = ("train_step_" + op[len("train_step_deterministic_"):], shape)
        cost = lambda rows: (f"{rows[(op, shape)]['median_ms'] / rows[base]['median_ms']:.2f}x the time"
                             if (op, shape) in rows and base in rows else "-")
        costs.append(f"| {base[0]} | {shape} | {cost(ours)} | {cost(theirs)} |")
    print_table("Deterministic cuDNN (train_cifar10 --deterministic; PyTorch: cudnn.deterministic, benchmark off), "
                "against the same side's default step:", ["step", "shape", "minidl", "PyTorch"], costs)
    # Channels-last: minidl's channels-last step against both of PyTorch's
    # (its default NCHW one, what a user runs without asking, and its own
    # channels-last one).
    cl_rows = []
    for (op, shape), r in ours.items():
        if "_cl_" not in op or not op.startswith("train_step"):
            continue
        nchw = (op.replace("_cl_", "_"), shape)
        ratio = lambda key: (f"{theirs[key]['median_ms'] / r['median_ms']:.2f}x" if key in theirs else "-")
        cl_rows.append(f"| {op} | {shape} | {r['median_ms']:.3f} | {ratio(nchw)} | {ratio((op, shape))} |")
    print_table("Channels-last steps (core/memory_format.h), speedup against PyTorch's NCHW step and its "
                "channels-last one:", ["step", "shape", "minidl ms", "vs PyTorch NCHW", "vs PyTorch channels-last"],
                cl_rows)
    missing = [k for k in theirs if k not in ours]
    if missing:
        print(f"\nonly in PyTorch's run: {', '.join(f'{op} {shape}' for op, shape in missing)}")


if __name__ == "__main__":
    main()
