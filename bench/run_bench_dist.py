#!/usr/bin/env python3
"""all_reduce bandwidth, minidl (Gloo through dist::ProcessGroupGloo, launched
by minidl-launch) next to PyTorch (torch.distributed gloo), on this machine,
alternating for --rounds rounds; the best round's median per size.

Usage: python3 bench/run_bench_dist.py [--build build] [--world 2] [--reps 15] [--rounds 3]
ratio = minidl bandwidth / PyTorch bandwidth.
"""
import argparse
import os
import sys

from run_bench import run_lines

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    launch = os.path.join(args.build, "bin", "minidl-launch")
    bench = os.path.join(args.build, "bench", "bench_dist")
    for p in (launch, bench):
        if not os.path.exists(p):
            sys.exit(f"{p} not found: build it first (cmake --build {args.build} --target bench_dist minidl-launch)")
    best = {}
    version = "?"
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds} ...", file=sys.stderr, flush=True)
        raw = run_lines([launch, "--nproc-per-node", str(args.world), bench, "--reps", str(args.reps), "--threads", "1"])
        raw += run_lines([sys.executable, os.path.join(HERE, "bench_dist_torch.py"), "--world", str(args.world),
                      "--reps", str(args.reps)])
        for l in raw:
            version = l.get("version", version)
            key = (l["impl"], l["bytes"])
            if key not in best or l["median_ms"] < best[key]["median_ms"]:
                best[key] = l
    print(f"all_reduce(SUM) float32, {args.world} processes on loopback; pytorch {version}; "
          f"best of {args.rounds} rounds, median of {args.reps}")
    print(f"{'bytes':>10} {'minidl ms':>10} {'torch ms':>10} {'minidl GB/s':>12} {'torch GB/s':>11} {'ratio':>6}")
    for nbytes in sorted({b for _, b in best}):
        m, t = best.get(("minidl", nbytes)), best.get(("pytorch", nbytes))
        if m and t:
            print(f"{nbytes:>10} {m['median_ms']:>10.4f} {t['median_ms']:>10.4f} {m['algbw_gbps']:>12.3f} "
                  f"{t['algbw_gbps']:>11.3f} {t['median_ms'] / m['median_ms']:>6.2f}")


if __name__ == "__main__":
    main()
