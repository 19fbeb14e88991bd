// Sigmoid's math alone: vec::sigmoid (ops/cpu/array_math.h, the CPU kernel's
// functor) over 64x256x28x28 float32 into a preallocated output, 1 thread,
// least thread CPU time of 15 calls. bench/sigmoid_math_vs_torch.py runs it
// next to PyTorch's torch.sigmoid(x, out=y) (the op benches also time the
// output's allocation, which dominates PyTorch's numbers there).
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "minidl/ops/cpu/array_math.h"

static double thread_ms() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

int main() {
  const Eigen::Index n = Eigen::Index(64) * 256 * 28 * 28;
  Eigen::ArrayXf x(n), y(n);
  std::mt19937 gen(0);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (Eigen::Index i = 0; i < n; ++i) x[i] = normal(gen);
  y = minidl::vec::sigmoid(x);  // warm-up: pages touched
  double best = 1e30;
  for (int r = 0; r < 15; ++r) {
    const double t0 = thread_ms();
    y = minidl::vec::sigmoid(x);
    best = std::min(best, thread_ms() - t0);
  }
  std::printf("%.3f\n", best);
  return y[0] == y[0] ? 0 : 1;  // keep y used
}
