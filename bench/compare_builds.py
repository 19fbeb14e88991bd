#!/usr/bin/env python3
"""Before/after: runs the same minidl bench programs from two build folders
(e.g. a worktree of the previous commit and this one), alternating them for
--rounds rounds on the same machine, and prints the best of the per-round
medians for each op with ratio = before / after (> 1: the new build is faster).

Usage: python3 bench/compare_builds.py --before ../baseline/build --after build
                                       [--rounds 3] [--reps 7] [--threads 2] [--train]
--train adds the training steps (bench_train: ResNet-18 at batch 64, SmallNet at 128).
"""
import argparse
import json
import os
import platform
import subprocess


def run_lines(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def programs(build, args):
    common = ["--threads", str(args.threads), "--reps", str(args.reps)]
    cmds = [[os.path.join(build, "bench", "bench_ops")] + common,
            [os.path.join(build, "bench", "bench_norm")] + common]
    if args.train:
        cmds += [[os.path.join(build, "bench", "bench_train"), "--model", "resnet18", "--batch", "64"] + common,
                 [os.path.join(build, "bench", "bench_train"), "--model", "smallnet", "--batch", "128"] + common]
    return cmds


def cpu_line():
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    flags = " " + info.get("flags", "") + " "
    isa = [f for f in ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "amx_tile") if f" {f} " in flags]
    return f"{info.get('model name', platform.processor())} ({os.cpu_count()} CPUs; {' '.join(isa)})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--train", action="store_true")
    args = ap.parse_args()
    best = {}  # (op, shape) -> {"before": ms, "after": ms}
    for _ in range(args.rounds):
        for side, build in (("before", args.before), ("after", args.after)):
            for cmd in programs(build, args):
                for r in run_lines(cmd):
                    key = (r["op"], r["shape"])
                    slot = best.setdefault(key, {})
                    slot[side] = min(slot.get(side, float("inf")), r["median_ms"])
    print(f"# {cpu_line()}; {args.threads} threads, best of {args.rounds} rounds x {args.reps} reps")
    print(f"{'op':<28} {'shape':<34} {'before ms':>10} {'after ms':>10} {'before/after':>12}")
    for (op, shape), t in best.items():
        if "before" in t and "after" in t:
            print(f"{op:<28} {shape:<34} {t['before']:>10.2f} {t['after']:>10.2f} {t['before'] / t['after']:>12.3f}")


if __name__ == "__main__":
    main()
