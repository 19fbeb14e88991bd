#!/usr/bin/env python3
"""all_reduce bandwidth, minidl (Gloo through dist::ProcessGroupGloo, launched
by minidl-launch) next to PyTorch (torch.distributed gloo), on this machine,
alternating for --rounds rounds.

Usage: python3 bench/run_bench_dist.py [--build build] [--world 2] [--reps 15] [--rounds 3] [--busy N]
--busy N starts N busy-loop processes (nice 0, one per core for "another job
shares the cores") before the first round and stops them after the last, so
both libraries run under the same deliberate contention.
Per size: the median over rounds of each round's median time, with the
rounds' min-max spread; ratio = PyTorch time / minidl time (> 1: minidl faster).
"""
import argparse
import os
import statistics
import subprocess
import sys

from run_bench import cpu_model, run_lines

HERE = os.path.dirname(os.path.abspath(__file__))


def start_busy(n):
    # One plain spinning process per requested core, at the default priority.
    return [subprocess.Popen(["nice", "-n", "0", sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy", type=int, default=0, help="busy-loop processes competing for the cores")
    args = parser.parse_args()
    launch = os.path.join(args.build, "bin", "minidl-launch")
    bench = os.path.join(args.build, "bench", "bench_dist")
    for p in (launch, bench):
        if not os.path.exists(p):
            sys.exit(f"{p} not found: build it first (cmake --build {args.build} --target bench_dist minidl-launch)")
    runs = {}
    version = "?"
    busy = start_busy(args.busy)
    try:
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds} ...", file=sys.stderr, flush=True)
            # Alternate which library goes first, so a drift in the load favours neither.
            cmds = [[launch, "--nproc-per-node", str(args.world), bench, "--reps", str(args.reps), "--threads", "1"],
                    [sys.executable, os.path.join(HERE, "bench_dist_torch.py"), "--world", str(args.world),
                     "--reps", str(args.reps)]]
            for cmd in (cmds if r % 2 == 0 else cmds[::-1]):
                for l in run_lines(cmd):
                    version = l.get("version", version)
                    runs.setdefault((l["impl"], l["bytes"]), []).append(l["median_ms"])
    finally:
        for p in busy:
            p.kill()
            p.wait()
    print(f"all_reduce(SUM) float32, {args.world} processes on loopback; pytorch {version}; {cpu_model()}, "
          f"{os.cpu_count()} CPUs; {args.busy} busy-loop processes; median [min-max] over {args.rounds} rounds "
          f"of the median of {args.reps}")
    print(f"{'bytes':>10} {'minidl ms':>24} {'torch ms':>24} {'minidl GB/s':>12} {'torch GB/s':>11} {'ratio':>6}")
    for nbytes in sorted({b for _, b in runs}):
        m, t = runs.get(("minidl", nbytes)), runs.get(("pytorch", nbytes))
        if m and t:
            mm, tm = statistics.median(m), statistics.median(t)
            ms = f"{mm:.4f} [{min(m):.3f}-{max(m):.3f}]"
            ts = f"{tm:.4f} [{min(t):.3f}-{max(t):.3f}]"
            print(f"{nbytes:>10} {ms:>24} {ts:>24} {nbytes / (mm * 1e6):>12.3f} {nbytes / (tm * 1e6):>11.3f} "
                  f"{tm / mm:>6.2f}")


if __name__ == "__main__":
    main()
