#!/usr/bin/env python3
"""Writes tests/goldens/sliding_window.json: MONAI's sliding_window_inference
(monai.inferers) on small inputs, for tests/test_sliding_window.cpp.

    python3 -m pip install monai     # with torch
    python3 scripts/make_sliding_window_goldens.py

The inputs are not stored: both sides compute x[i] = sin(0.37 * i + 0.1 * c)
over the flat index i of each (N, C, *spatial) tensor, c its channel. The
predictor depends on where the window lies, so that the window placement and
the blending weights show in the result:
    predictor(w) = 2 * w + mean(w over channels and space, per window)
It writes window starts (dense_patch_slices), Gaussian importance maps
(compute_importance_map) and whole results.
"""
import json
import math
import os

import torch
from monai.data.utils import compute_importance_map, dense_patch_slices
from monai.inferers import sliding_window_inference
from monai.inferers.utils import _get_scan_interval
import monai

OUT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "goldens",
                                    "sliding_window.json"))


def inputs(shape):
    n = math.prod(shape)
    i = torch.arange(n, dtype=torch.float64).reshape(shape)
    c = torch.arange(shape[1], dtype=torch.float64).reshape([1, shape[1]] + [1] * (len(shape) - 2))
    return torch.sin(0.37 * i + 0.1 * c).float()


def predictor(w):
    return 2 * w + w.mean(dim=tuple(range(1, w.dim())), keepdim=True)


def main():
    starts = []
    for size in (1, 5, 7, 16, 33, 64):
        for roi in (1, 3, 5, 8, 16, 32):
            if roi > size:
                continue
            for overlap in (0.0, 0.25, 0.5, 0.625, 0.9):
                interval = _get_scan_interval([size], [roi], 1, [overlap])
                s = [int(sl[0].start) for sl in dense_patch_slices([size], [roi], interval)]
                starts.append({"size": size, "roi": roi, "overlap": overlap, "starts": s})

    maps = []
    for patch, sigma in (([5], 0.125), ([4, 6], 0.125), ([3, 8, 5], 0.25), ([64], 0.125)):
        m = compute_importance_map(patch, mode="gaussian", sigma_scale=sigma, device="cpu")
        maps.append({"patch": patch, "sigma_scale": sigma, "values": m.flatten().tolist()})

    cases = []
    for shape, roi, overlap, mode, sw, cval in (
        ([1, 1, 10, 9, 7], [4, 4, 4], 0.25, "constant", 1, 0.0),
        ([1, 1, 10, 9, 7], [4, 5, 3], 0.5, "gaussian", 3, 0.0),
        ([2, 2, 6, 8, 5], [4, 4, 4], 0.25, "gaussian", 4, 0.0),
        ([1, 1, 3, 9, 4], [4, 4, 6], 0.25, "constant", 2, 0.5),  # roi larger than the input: padded
        ([1, 2, 5, 6, 7], [8, -1, 3], 0.0, "gaussian", 1, -1.0),  # -1: the whole dim
        ([2, 1, 11, 13], [5, 4], 0.6, "gaussian", 5, 0.0),        # 2-D
    ):
        x = inputs(shape)
        y = sliding_window_inference(x, roi, sw, predictor, overlap=overlap, mode=mode, cval=cval)
        cases.append({"shape": shape, "roi": roi, "overlap": overlap, "mode": mode, "sw_batch_size": sw,
                      "cval": cval, "output": y.flatten().tolist()})

    with open(OUT, "w") as f:
        json.dump({"monai": monai.__version__, "torch": torch.__version__, "starts": starts,
                   "importance_maps": maps, "cases": cases}, f)
    print(f"wrote {OUT}: {len(starts)} start lists, {len(maps)} maps, {len(cases)} cases")


if __name__ == "__main__":
    main()
