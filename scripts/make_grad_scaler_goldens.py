#!/usr/bin/env python3
"""Writes tests/goldens/grad_scaler.json: what torch.amp.GradScaler("cpu") does
over scripted training steps, which tests/test_grad_scaler.cpp replays with
minidl's amp::GradScaler and optim::SGD and compares exactly.

    python3 scripts/make_grad_scaler_goldens.py          # needs torch (pip)

Each case has a float32 and a float64 parameter, the losses sum(w * x) (their
scaled gradients are scale * x), and a scripted sequence of steps; some steps
then overwrite gradient elements with inf, -inf or NaN, some call unscale_
before step, one sets the scale by update(new_scale). After each step the
fixture records whether optimizer.step() ran, the scale, the growth tracker,
the gradients after unscaling and the parameters. The learning rate and
momentum are powers of two, so an SGD step rounds once whichever way it is
computed (fused multiply-add or not) and "exactly" is a fair demand.

Non-finite numbers are written as the strings "inf", "-inf" and "nan" (JSON
has no such numbers). Case "overflow" starts at 2**126 with growth factor 4:
growing would overflow float32, so the scale stays and the tracker resets.
"""
import json
import math
import os

import torch

OUT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "goldens",
                                    "grad_scaler.json"))


def num(v):
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def nums(t):
    return [num(v) for v in t.detach().reshape(-1).tolist()]


def value(s):
    return {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}[s] if isinstance(s, str) else s


def run_case(name, scaler_args, lr, momentum, steps, seed):
    g = torch.Generator().manual_seed(seed)
    w32 = torch.randn(5, generator=g, dtype=torch.float32).requires_grad_()
    w64 = torch.randn(3, generator=g, dtype=torch.float64).requires_grad_()
    params = {"w32": w32, "w64": w64}
    case = {"name": name, **scaler_args, "lr": lr, "momentum": momentum,
            "init": {k: nums(p) for k, p in params.items()}, "steps": []}
    scaler = torch.amp.GradScaler("cpu", **scaler_args)
    opt = torch.optim.SGD([w32, w64], lr=lr, momentum=momentum)
    for spec in steps:
        x = {"w32": torch.randn(5, generator=g, dtype=torch.float32),
             "w64": torch.randn(3, generator=g, dtype=torch.float64)}
        opt.zero_grad()
        losses = [(params[k] * x[k]).sum() for k in ("w32", "w64")]
        for scaled in scaler.scale(losses):
            scaled.backward()
        for k, i, v in spec.get("poison", []):
            with torch.no_grad():
                params[k].grad[i] = value(v)
        if spec.get("unscale"):
            scaler.unscale_(opt)
        before = {k: p.detach().clone() for k, p in params.items()}
        scaler.step(opt)
        stepped = not sum(v.item() for v in scaler._found_inf_per_device(opt).values())
        moved = any(not torch.equal(before[k], p.detach()) for k, p in params.items())
        assert stepped == moved or not stepped, (name, spec)
        grads = {k: nums(p.grad) for k, p in params.items()}
        if "new_scale" in spec:
            scaler.update(new_scale=spec["new_scale"])
        else:
            scaler.update()
        record = {"x": {k: nums(v) for k, v in x.items()}, "poison": spec.get("poison", []),
                  "unscale": bool(spec.get("unscale")), "stepped": stepped, "scale": scaler.get_scale(),
                  "growth_tracker": scaler._get_growth_tracker(), "grads": grads,
                  "params": {k: nums(p) for k, p in params.items()}}
        if "new_scale" in spec:
            record["new_scale"] = spec["new_scale"]
        case["steps"].append(record)
    case["state_dict"] = scaler.state_dict()
    return case


def main():
    cases = [
        run_case("default_factors", {"init_scale": 2.0 ** 10, "growth_interval": 3}, lr=0.125, momentum=0.5,
                 steps=[{}, {}, {},                                    # third clean step: scale x2
                        {"poison": [["w32", 1, "inf"]]},               # skipped, scale /2
                        {"unscale": True},
                        {"poison": [["w64", 2, "nan"]]},
                        {"poison": [["w32", 0, "-inf"], ["w64", 0, "inf"]]},
                        {}, {"unscale": True}, {},                     # grows again
                        {}, {"new_scale": 300.0},                      # set by hand, tracker kept at 1
                        {}, {},                                        # 300 grows to 600
                        {"poison": [["w32", 4, "nan"]], "unscale": True}],
                 seed=0),
        run_case("odd_factors", {"init_scale": 1000.0, "growth_factor": 3.0, "backoff_factor": 0.3,
                                 "growth_interval": 2},
                 lr=0.25, momentum=0.0,
                 steps=[{}, {}, {}, {"poison": [["w64", 1, "-inf"]]}, {}, {}, {}, {"poison": [["w32", 2, "nan"]]},
                        {}, {}],
                 seed=1),
        run_case("overflow", {"init_scale": 2.0 ** 126, "growth_factor": 4.0, "growth_interval": 1},
                 lr=0.5, momentum=0.0, steps=[{}, {}, {"poison": [["w32", 0, "inf"]]}, {}, {}], seed=2),
    ]
    with open(OUT, "w") as f:
        json.dump({"torch_version": torch.__version__, "cases": cases}, f, separators=(",", ":"), allow_nan=False)
        f.write("\n")


if __name__ == "__main__":
    main()
