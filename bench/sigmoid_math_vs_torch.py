#!/usr/bin/env python3
"""Sigmoid math only, 64x256x28x28 float32, 1 thread: minidl's vec::sigmoid
(bench/bench_sigmoid_math) against torch.sigmoid(x, out=y), interleaved, least
thread CPU time per round, best of --rounds. --isa avx2 caps PyTorch at AVX2
(use with a build made with -march=x86-64-v3)."""
import argparse, os, subprocess, sys, time


def torch_ms():
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x = torch.randn(64, 256, 28, 28)
    y = torch.empty_like(x)
    torch.sigmoid(x, out=y)
    best = 1e30
    for _ in range(15):
        t0 = time.thread_time()
        torch.sigmoid(x, out=y)
        best = min(best, time.thread_time() - t0)
    return best * 1e3


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--torch-only":
        print(f"{torch_ms():.3f}")
        sys.exit(0)
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--isa", choices=["native", "avx2"], default="native")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if a.isa == "avx2":
        env["ATEN_CPU_CAPABILITY"] = "avx2"
    m, t = [], []
    for _ in range(a.rounds):
        m.append(float(subprocess.check_output([os.path.join(a.build, "bench", "bench_sigmoid_math")], env=env)))
        t.append(float(subprocess.check_output([sys.executable, __file__, "--torch-only"], env=env)))
    print(f"sigmoid math 64x256x28x28 float32, 1 thread, cpu ms: minidl {min(m):.3f}  torch {min(t):.3f}  "
          f"ratio {min(t) / min(m):.2f} (isa {a.isa})")
