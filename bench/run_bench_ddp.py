#!/usr/bin/env python3
"""DDP scaling of the small net on this machine, minidl next to PyTorch:
  single  1 process x 2 threads x batch 128
  ddp     2 processes x 1 thread x batch 64 (DDP over gloo; same global batch)
  syncbn  as ddp with SyncBatchNorm (minidl only: PyTorch's SyncBN refuses CPU)
Each setting alternates between the libraries for --rounds rounds; the best
round counts. Prints images/s, the scaling ratio ddp/single of each library,
and SyncBN's extra time per step over BN.

Usage: python3 bench/run_bench_ddp.py [--build build] [--reps 10] [--rounds 3]
"""
import argparse
import os
import sys

from run_bench import run_lines

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    launch = os.path.join(args.build, "bin", "minidl-launch")
    bench = os.path.join(args.build, "bench", "bench_ddp")
    reps = ["--reps", str(args.reps)]
    torch_py = [sys.executable, os.path.join(HERE, "bench_ddp_torch.py")]
    settings = {
        ("minidl", "single"): [bench, "--threads", "2", "--batch", "128"] + reps,
        ("minidl", "ddp"): [launch, "--nproc-per-node", "2", bench, "--threads", "1", "--batch", "64"] + reps,
        ("minidl", "syncbn"): [launch, "--nproc-per-node", "2", bench, "--threads", "1", "--batch", "64",
                               "--norm", "syncbatchnorm"] + reps,
        ("pytorch", "single"): torch_py + ["--world", "1", "--threads", "2", "--batch", "128"] + reps,
        ("pytorch", "ddp"): torch_py + ["--world", "2", "--threads", "1", "--batch", "64"] + reps,
    }
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)  # each setting sets its own thread count
    best = {}
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds} ...", file=sys.stderr, flush=True)
        for key, cmd in settings.items():
            for l in run_lines(cmd, env):
                if key not in best or l["median_ms"] < best[key]["median_ms"]:
                    best[key] = l
    print(f"small net training step, best of {args.rounds} rounds (median of {args.reps} steps each)")
    print(f"{'setting':<44} {'minidl img/s':>13} {'torch img/s':>12}")
    names = {"single": "1 process x 2 threads x batch 128",
             "ddp": "2 processes x 1 thread x batch 64 (DDP, BN)",
             "syncbn": "2 processes x 1 thread x batch 64 (SyncBN)"}
    for s, name in names.items():
        m, t = best.get(("minidl", s)), best.get(("pytorch", s))
        print(f"{name:<44} {m['images_per_s'] if m else float('nan'):>13.1f} "
              f"{t['images_per_s'] if t else float('nan'):>12.1f}")
    for impl in ("minidl", "pytorch"):
        a, b = best[(impl, "single")], best[(impl, "ddp")]
        print(f"{impl} scaling ddp / single: {b['images_per_s'] / a['images_per_s']:.3f}")
    bn, sbn = best[("minidl", "ddp")], best[("minidl", "syncbn")]
    print(f"minidl SyncBN step {sbn['median_ms']:.1f} ms vs BN {bn['median_ms']:.1f} ms: "
          f"+{sbn['median_ms'] - bn['median_ms']:.1f} ms ({100 * (sbn['median_ms'] / bn['median_ms'] - 1):.1f}%)")


if __name__ == "__main__":
    main()
