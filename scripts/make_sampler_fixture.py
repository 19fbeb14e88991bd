#!/usr/bin/env python3
"""Writes tests/goldens/distributed_sampler.json, the indices PyTorch's
torch.utils.data.DistributedSampler yields with shuffle=False, which
tests/test_distributed_sampler.cpp compares minidl's DistributedSampler against.

    python3 scripts/make_sampler_fixture.py          # needs torch (pip)

shuffle=False is deterministic in PyTorch too, so these are exact indices
(padding by repeating leading indices, drop_last truncation, strided ranks).
Grid: dataset lengths x world sizes x drop_last, every rank. One case per line:
{"n", "world", "drop_last", "num_samples" (len(sampler)), "ranks": [[indices of rank 0], ...]}.
"""
import json
import os

import torch
from torch.utils.data import DistributedSampler

OUT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "goldens",
                                    "distributed_sampler.json"))
LENGTHS = [0, 1, 5, 7, 10, 11, 16, 17]
WORLD_SIZES = [1, 2, 3, 4, 8]


def main():
    lines = []
    for n in LENGTHS:
        for world in WORLD_SIZES:
            for drop_last in (False, True):
                samplers = [DistributedSampler(range(n), num_replicas=world, rank=r, shuffle=False,
                                               drop_last=drop_last) for r in range(world)]
                lens = {len(s) for s in samplers}
                assert len(lens) == 1, lens
                case = {"n": n, "world": world, "drop_last": drop_last, "num_samples": lens.pop(),
                        "ranks": [[int(i) for i in s] for s in samplers]}
                lines.append(json.dumps(case, separators=(",", ":")))
    with open(OUT, "w") as f:
        f.write('{"torch_version":' + json.dumps(torch.__version__) + ',"cases":[\n')
        f.write(",\n".join(lines))
        f.write("\n]}\n")
    print(f"wrote {len(lines)} cases to {OUT}")


if __name__ == "__main__":
    main()
