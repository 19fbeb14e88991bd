#!/usr/bin/env python3
"""minidl's conv2d kernels (bench/bench_conv_shapes) against PyTorch's at the
same shapes, per pass (forward, grad input, grad weight), alternating the two
programs for --rounds rounds on the same machine. For each round the ratio is
PyTorch's time / minidl's (> 1: minidl faster; --metric: wall median or min,
or the least process CPU time per thread, robust to other processes); the table shows the
median ratio over rounds, its range (the spread from the machine's noise), and
the least of each side's times over the rounds.

Usage: python3 bench/conv_shapes_vs_torch.py [--build build] [--isa native|avx2] [--threads 2]
           [--reps 20] [--rounds 5] [--algo auto] N,C,K,H,k,stride,pad ... [mm,M,N,K ...]
(mm,M,N,K: the float32 matrix product (M x K) (K x N), torch.mm against minidl's GEMM.)
(--isa avx2: PyTorch capped to AVX2 like run_bench.py --isa avx2, for a build-avx2 minidl.)
As a child (--torch-child) it times PyTorch and prints bench_conv_shapes' JSON lines.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def torch_child(args):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(args.threads)
    for s in args.shapes:
        if s.startswith("mm,"):  # a float32 matrix product (M x K) (K x N), as pass "fwd"
            M, Nc, Kc = (int(v) for v in s.split(",")[1:])
            torch.manual_seed(0)
            a, b = torch.randn(M, Kc), torch.randn(Kc, Nc)
            time_passes(args, s, {"fwd": lambda: torch.mm(a, b)})
            continue
        N, C, K, H, k, st, p = (int(v) for v in s.split(","))
        torch.manual_seed(0)
        x, w = torch.randn(N, C, H, H), torch.randn(K, C, k, k) * 0.05
        oh = (H + 2 * p - k) // st + 1
        dy = torch.randn(N, K, oh, oh)
        conv_bwd = torch.ops.aten.convolution_backward
        passes = {
            "fwd": lambda: F.conv2d(x, w, None, st, p),
            "grad_input": lambda: conv_bwd(dy, x, w, None, [st, st], [p, p], [1, 1], False, [0, 0], 1,
                                           [True, False, False]),
            "grad_weight": lambda: conv_bwd(dy, x, w, None, [st, st], [p, p], [1, 1], False, [0, 0], 1,
                                            [False, True, False]),
        }
        time_passes(args, s, passes)


def time_passes(args, s, passes):
    import torch
    with torch.no_grad():
        for name, f in passes.items():
            for _ in range(2):
                f()
            ms, cpu = [], 1e30
            for _ in range(args.reps):
                c0, t0 = time.process_time(), time.perf_counter()
                f()
                ms.append((time.perf_counter() - t0) * 1e3)
                cpu = min(cpu, (time.process_time() - c0) * 1e3 / args.threads)
            ms.sort()
            print(json.dumps({"impl": "pytorch", "shape": s, "pass": name, "min_ms": ms[0],
                              "median_ms": ms[len(ms) // 2], "cpu_ms": cpu}), flush=True)


def lines(cmd, env):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--isa", choices=["native", "avx2"], default="native")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--algo", default="auto")
    ap.add_argument("--metric", choices=["median_ms", "min_ms", "cpu_ms"], default="median_ms",
                    help="what each round's ratio compares: wall median or min, or the least CPU time per thread")
    ap.add_argument("--baseline", help="another bench_conv_shapes binary (e.g. built from main), run in the same "
                    "rounds: its ratio is shown too")
    ap.add_argument("--torch-child", action="store_true")
    ap.add_argument("shapes", nargs="+")
    args = ap.parse_args()
    if args.torch_child:
        return torch_child(args)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    if args.isa == "avx2":
        env.update(ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2", MKL_ENABLE_INSTRUCTIONS="AVX2")
    common = ["--threads", str(args.threads), "--reps", str(args.reps)]
    rounds, base_rounds = [], []
    for r in range(args.rounds):
        if args.baseline:
            base_rounds.append(lines([args.baseline] + common + ["--algo", args.algo] + args.shapes, env))
        m = lines([os.path.join(args.build, "bench", "bench_conv_shapes")] + common + ["--algo", args.algo] +
                  args.shapes, env)
        t = lines([sys.executable, os.path.abspath(__file__), "--torch-child"] + common + args.shapes, env)
        rounds.append((m, t))
    print(f"{args.build} ({args.isa}), {args.threads} threads, {args.rounds} rounds x {args.reps} reps, algo {args.algo}, "
          f"ratio of {args.metric}")
    print(f"{'shape N,C,K,H,k,s,p':<24} {'pass':<12} {'minidl ms':>10} {'torch ms':>10} "
          f"{'ratio (median of rounds)':>25} {'range':>12}" + ("   baseline ratio, range" if args.baseline else ""))
    for s in args.shapes:
        for p in ["fwd"] if s.startswith("mm,") else ["fwd", "grad_input", "grad_weight"]:
            def pick(ls):
                return next(l for l in ls if l["shape"] == s and l["pass"] == p)
            ratios = [pick(t)[args.metric] / pick(m)[args.metric] for m, t in rounds]
            mmin = min(pick(m)[args.metric] for m, _ in rounds)
            tmin = min(pick(t)[args.metric] for _, t in rounds)
            line = (f"{s:<24} {p:<12} {mmin:>10.3f} {tmin:>10.3f} {statistics.median(ratios):>25.2f} "
                    f"{min(ratios):>5.2f}-{max(ratios):<5.2f}")
            if args.baseline:
                b = [pick(t)[args.metric] / pick(bl)[args.metric] for bl, (_, t) in zip(base_rounds, rounds)]
                line += f"   {statistics.median(b):>5.2f} {min(b):>5.2f}-{max(b):<5.2f}"
            print(line)


if __name__ == "__main__":
    main()
