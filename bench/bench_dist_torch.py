#!/usr/bin/env python3
"""PyTorch's side of bench_dist: all_reduce(SUM) bandwidth over gloo between
local processes, float32, 4 KiB to 64 MiB; one JSON line per size from rank 0,
timed exactly as bench_dist.cpp (median of --reps, each enough back-to-back
calls to reach ~1 MiB), with the process's context switches per all_reduce
(getrusage, all threads) and the time its threads waited runnable for a core
(schedstat run_delay; --threads-detail 1: per thread on stderr; --bytes B: only that size)."""
import argparse
import json
import os
import resource
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch import median_ms  # noqa: E402


def schedstats():
    """tid -> (run_delay_ns, timeslices) of every thread of this process."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                _, delay, slices = (float(x) for x in f.read().split())
            out[int(tid)] = (delay, slices)
        except OSError:
            pass
    return out


def worker(rank, world, port, reps, only_bytes, detail, inner_arg):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    warm = torch.ones(1 << 18)  # warm the connections up, as bench_dist.cpp does
    for _ in range(20):
        dist.all_reduce(warm)
    nbytes = 4 << 10
    while nbytes <= 64 << 20:
        if only_bytes and nbytes != only_bytes:
            nbytes *= 4
            continue
        t = torch.ones(nbytes // 4)
        inner = inner_arg or max(1, (1 << 20) // nbytes)
        dist.barrier()

        def run():
            for _ in range(inner):
                dist.all_reduce(t)

        u0, s0 = resource.getrusage(resource.RUSAGE_SELF), schedstats()
        start = time.perf_counter()
        ms = median_ms(run, reps, warm_ms=0) / inner
        total_ms = (time.perf_counter() - start) * 1e3
        u1, s1 = resource.getrusage(resource.RUSAGE_SELF), schedstats()
        calls = inner * (reps + 3)  # median_ms runs 3 warm-up calls of run
        delay_us = runs = 0.0
        for tid, (d1, n1) in sorted(s1.items()):
            d0, n0 = s0.get(tid, (0.0, 0.0))
            delay_us += (d1 - d0) / 1e3 / calls
            runs += (n1 - n0) / calls
            if detail and rank == 0 and (n1 - n0) / calls > 0.01:
                print(f"bytes {nbytes} thread {tid}: run_delay {(d1 - d0) / 1e3 / calls:.1f} us, "
                      f"runs {(n1 - n0) / calls:.2f} per all_reduce", file=sys.stderr)
        if rank == 0:
            print(json.dumps({"impl": "pytorch", "op": "all_reduce", "bytes": nbytes, "world": world,
                              "median_ms": round(ms, 4),
                              "mean_ms": round(total_ms / calls, 4), "algbw_gbps": round(nbytes / (ms * 1e6), 4),
                              "vcsw": round((u1.ru_nvcsw - u0.ru_nvcsw) / calls, 2),
                              "ivcsw": round((u1.ru_nivcsw - u0.ru_nivcsw) / calls, 2),
                              "run_delay_us": round(delay_us, 1), "runs": round(runs, 2),
                              "version": torch.__version__}), flush=True)
        nbytes *= 4
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--bytes", type=int, default=0, help="only this size")
    parser.add_argument("--inner", type=int, default=0, help="calls per timing (0: enough for ~1 MiB)")
    parser.add_argument("--threads-detail", type=int, default=0, help="1: run_delay per thread on stderr")
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args.world, port, args.reps, args.bytes, args.threads_detail, args.inner), nprocs=args.world)


if __name__ == "__main__":
    main()
