#!/usr/bin/env python3
"""PyTorch's twin of bench_ddp.cpp: the small net's training step, one process
(--world 1) or DDP over gloo (--world N, torch.multiprocessing), --threads
per process, --batch per process; rank 0 prints one JSON line. PyTorch's
SyncBatchNorm refuses CPU tensors, so only BatchNorm is measured."""
import argparse
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch import median_ms  # noqa: E402
from torch_models import small_net  # noqa: E402


def worker(rank, world, port, args):
    torch.set_num_threads(args.threads)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = small_net()
    model.train()
    net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    torch.manual_seed(1 + rank)
    x = torch.randn(args.batch, 3, 32, 32)
    y = torch.randint(0, 10, (args.batch,))

    def step():
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    if world > 1:
        dist.barrier()
    ms = median_ms(step, args.reps, warm_ms=0)  # the same number of steps on every rank
    if rank == 0:
        print(json.dumps({"impl": "pytorch", "op": "ddp_step_smallnet", "norm": "batchnorm", "world": world,
                          "batch": args.batch, "threads": args.threads, "median_ms": round(ms, 3),
                          "images_per_s": round(1e3 * world * args.batch / ms, 1),
                          "version": torch.__version__}), flush=True)
    if world > 1:
        dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    if args.world == 1:
        worker(0, 1, 0, args)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args.world, port, args), nprocs=args.world)


if __name__ == "__main__":
    main()
