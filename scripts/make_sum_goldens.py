#!/usr/bin/env python3
"""Writes tests/goldens/float32_sums.json: PyTorch's float32 row sums (its
cascade sum, torch.sum(x, 1) on CPU) and the exact sums of the same values,
which tests/test_reduce_fast_paths.cpp uses to check that minidl's float32
sums are at least as accurate as PyTorch's.

    python3 scripts/make_sum_goldens.py          # needs torch and numpy (pip)

The values are not stored: both sides compute them from a hash of the global
index g = row * n + i (exact in float32, see values()), so the fixture is a few
numbers per row. "exact" is math.fsum of the float32 values (the correctly
rounded sum). PyTorch's numbers come from the machine that ran this script
(ISA noted in "torch_isa").
"""
import json
import math
import os

import numpy as np
import torch

OUT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "goldens",
                                    "float32_sums.json"))
# rows, row length, offset: zero-mean values of 16 binary magnitudes (cancellation),
# then positive-offset values, where a float32 running sum drifts.
CASES = [(16, 65536, 0.0), (4, 1000003, 1.0), (64, 4099, 0.1), (8, 262144, -0.3)]


def values(rows, n, offset):
    """x[g] = float32((m - 2^23) / 2^24 * 2^e + offset) with m the low 24 bits and
    e in [-8, 7] from the top bits of h, a mixed 32-bit hash of the global index g
    (h = g * 2654435761 + 12345, then twice h ^= h >> 16, h *= 0x45d9f3b, and a
    last h ^= h >> 16, all mod 2^32; without the mixing, values 16 apart form a
    lattice whose rounding errors add up coherently). The product before the
    offset is exact in double; the one rounding is to float32."""
    mask = np.uint64(0xFFFFFFFF)
    g = np.arange(rows * n, dtype=np.uint64)
    h = (g * np.uint64(2654435761) + np.uint64(12345)) & mask
    for _ in range(2):
        h ^= h >> np.uint64(16)
        h = (h * np.uint64(0x45D9F3B)) & mask
    h ^= h >> np.uint64(16)
    m = (h & np.uint64(0xFFFFFF)).astype(np.float64)
    e = ((h >> np.uint64(24)) % np.uint64(16)).astype(np.int64) - 8
    x = np.ldexp((m - 2.0**23) / 2.0**24, e) + offset
    return x.astype(np.float32).reshape(rows, n)


def main():
    torch.set_num_threads(1)
    cases = []
    for rows, n, offset in CASES:
        x = values(rows, n, offset)
        torch_sums = torch.from_numpy(x).sum(1)
        cases.append({
            "rows": rows, "n": n, "offset": offset,
            "torch": [float(v) for v in torch_sums],
            "exact": [math.fsum(float(v) for v in row) for row in x],
            "sum_abs": [math.fsum(abs(float(v)) for v in row) for row in x],
        })
    doc = {"torch_version": torch.__version__, "torch_isa": torch.backends.cpu.get_cpu_capability(),
           "cases": cases}
    with open(OUT, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    for c in cases:
        err = sum(abs(t - e) for t, e in zip(c["torch"], c["exact"]))
        print(f"rows {c['rows']} n {c['n']} offset {c['offset']}: PyTorch's total |error| {err:.3g}")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
