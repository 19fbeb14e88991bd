#!/usr/bin/env python3
"""all_reduce bandwidth, minidl (Gloo through dist::ProcessGroupGloo, launched
by minidl-launch) next to PyTorch (torch.distributed gloo), on this machine,
alternating for --rounds rounds.

Usage: python3 bench/run_bench_dist.py [--build build] [--world 2] [--reps 15] [--rounds 3] [--busy N]
                                       [--bytes B] [--inner N] [--variants auto,ring,exchange,...]
--busy N starts N busy-loop processes (nice 0, one per core for "another job
shares the cores") before the first round and stops them after the last, so
both libraries run under the same deliberate contention.
--variants runs minidl once per MINIDL_GLOO_ALLREDUCE value ("auto": unset,
the size-based choice; "rsag+BYTES" also sets MINIDL_GLOO_RSAG_SEGMENT) in
each round, in rotating order with PyTorch.
Per size: the median over rounds of each round's median time, with the
rounds' min-max spread; ratio = PyTorch time / minidl time (> 1: minidl faster);
vcsw = voluntary context switches (blocking waits) of rank 0's process per
all_reduce, and mean = all calls' total time / calls (slow calls included),
both medians over rounds.
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
    parser.add_argument("--bytes", type=int, default=0, help="only this size")
    parser.add_argument("--inner", type=int, default=0, help="calls per timing (0: enough for ~1 MiB)")
    parser.add_argument("--variants", default="auto", help="MINIDL_GLOO_ALLREDUCE values, comma-separated")
    args = parser.parse_args()
    launch = os.path.join(args.build, "bin", "minidl-launch")
    bench = os.path.join(args.build, "bench", "bench_dist")
    for p in (launch, bench):
        if not os.path.exists(p):
            sys.exit(f"{p} not found: build it first (cmake --build {args.build} --target bench_dist minidl-launch)")
    variants = args.variants.split(",")
    size_args = (["--bytes", str(args.bytes)] if args.bytes else []) + (["--inner", str(args.inner)] if args.inner else [])
    runs, vcsw, means = {}, {}, {}
    version = "?"
    busy = start_busy(args.busy)
    try:
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds} ...", file=sys.stderr, flush=True)
            jobs = []
            for v in variants:
                env = dict(os.environ)
                env.pop("MINIDL_GLOO_ALLREDUCE", None)
                algo, _, segment = v.partition("+")
                if algo != "auto":
                    env["MINIDL_GLOO_ALLREDUCE"] = algo
                if segment:
                    env["MINIDL_GLOO_RSAG_SEGMENT"] = segment
                name = "minidl" if v == "auto" else f"minidl-{v}"
                jobs.append((name, [launch, "--nproc-per-node", str(args.world), bench, "--reps", str(args.reps),
                                    "--threads", "1"] + size_args, env))
            jobs.append(("pytorch", [sys.executable, os.path.join(HERE, "bench_dist_torch.py"), "--world",
                                     str(args.world), "--reps", str(args.reps)] + size_args, None))
            # Rotate the order, so a drift in the load favours none of them.
            k = r % len(jobs)
            for name, cmd, env in jobs[k:] + jobs[:k]:
                for l in run_lines(cmd, env=env):
                    version = l.get("version", version)
                    runs.setdefault((name, l["bytes"]), []).append(l["median_ms"])
                    vcsw.setdefault((name, l["bytes"]), []).append(l.get("vcsw", float("nan")))
                    means.setdefault((name, l["bytes"]), []).append(l.get("mean_ms", float("nan")))
    finally:
        for p in busy:
            p.kill()
            p.wait()
    names = ["minidl" if v == "auto" else f"minidl-{v}" for v in variants]
    print(f"all_reduce(SUM) float32, {args.world} processes on loopback; pytorch {version}; {cpu_model()}, "
          f"{os.cpu_count()} CPUs; {args.busy} busy-loop processes; median [min-max] over {args.rounds} rounds "
          f"of the median of {args.reps}; vcsw: voluntary context switches of rank 0 per all_reduce")
    for name in names:
        print(f"{name}:")
        print(f"{'bytes':>10} {'minidl ms':>24} {'torch ms':>24} {'minidl GB/s':>12} {'torch GB/s':>11} "
              f"{'ratio':>6} {'vcsw':>6} {'torch vcsw':>10} {'mean ms':>8} {'torch mean':>10}")
        for nbytes in sorted({b for _, b in runs}):
            m, t = runs.get((name, nbytes)), runs.get(("pytorch", nbytes))
            if m and t:
                mm, tm = statistics.median(m), statistics.median(t)
                ms = f"{mm:.4f} [{min(m):.3f}-{max(m):.3f}]"
                ts = f"{tm:.4f} [{min(t):.3f}-{max(t):.3f}]"
                print(f"{nbytes:>10} {ms:>24} {ts:>24} {nbytes / (mm * 1e6):>12.3f} {nbytes / (tm * 1e6):>11.3f} "
                      f"{tm / mm:>6.2f} {statistics.median(vcsw[(name, nbytes)]):>6.2f} "
                      f"{statistics.median(vcsw[('pytorch', nbytes)]):>10.2f} "
                      f"{statistics.median(means[(name, nbytes)]):>8.3f} {statistics.median(means[('pytorch', nbytes)]):>10.3f}")


if __name__ == "__main__":
    main()
