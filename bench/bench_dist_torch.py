#!/usr/bin/env python3
"""PyTorch's side of bench_dist: all_reduce(SUM) bandwidth over gloo between
local processes, float32, 4 KiB to 64 MiB; one JSON line per size from rank 0,
timed exactly as bench_dist.cpp (median of --reps, each enough back-to-back
calls to reach ~1 MiB)."""
import argparse
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch import median_ms  # noqa: E402


def worker(rank, world, port, reps):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    warm = torch.ones(1 << 18)  # warm the connections up, as bench_dist.cpp does
    for _ in range(20):
        dist.all_reduce(warm)
    nbytes = 4 << 10
    while nbytes <= 64 << 20:
        t = torch.ones(nbytes // 4)
        inner = max(1, (1 << 20) // nbytes)
        dist.barrier()

        def run():
            for _ in range(inner):
                dist.all_reduce(t)

        ms = median_ms(run, reps) / inner
        if rank == 0:
            print(json.dumps({"impl": "pytorch", "op": "all_reduce", "bytes": nbytes, "world": world,
                              "median_ms": round(ms, 4), "algbw_gbps": round(nbytes / (ms * 1e6), 4),
                              "version": torch.__version__}), flush=True)
        nbytes *= 4
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args.world, port, args.reps), nprocs=args.world)


if __name__ == "__main__":
    main()
