// Times the normalization layers' training step (forward, and forward +
// backward) on a CIFAR-ResNet-sized activation and prints one JSON object per
// line, like bench_ops:
//   {"impl":"minidl","op":"batch_norm_fwd_bwd","shape":"128x64x32x32",...}
// bench/bench_torch.py --norm prints the PyTorch twins; bench/run_bench.py
// runs both. Options: --threads N (default 2), --reps N (default 15).
//
// Cases (training mode, float32): BatchNorm2d(64) with running stats,
// GroupNorm(32, 64), LayerNorm([64, 32, 32]) (elementwise affine), and
// InstanceNorm2d(64) (its defaults: no affine, no running stats).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "minidl/minidl.h"
#include "minidl/ops/batch_norm.h"
#include "minidl/ops/group_norm.h"
#include "minidl/ops/instance_norm.h"
#include "minidl/ops/layer_norm.h"

using namespace minidl;

namespace {

bench::Options g_options;

double median_ms(const std::function<void()>& f) { return bench::median_ms(f, g_options.reps); }

void report(const std::string& op, const std::string& shape, double ms, double elements) {
  bench::print_result(op, shape, ms, elements, g_options.threads, "minidl");
}

void bench_case(const std::string& name, const Tensor& x, const Tensor& dy, const std::vector<Tensor>& params,
                const std::function<Tensor()>& f) {
  const std::string shape = "128x64x32x32";
  const double n = static_cast<double>(x.numel());
  {
    NoGradGuard no_grad;
    report(name + "_fwd", shape, median_ms([&] { (void)f(); }), n);
  }
  report(name + "_fwd_bwd", shape, median_ms([&] {
           Tensor(x).set_grad(Tensor());
           for (const Tensor& p : params) Tensor(p).set_grad(Tensor());
           f().backward(dy);
         }),
         n);
}

}  // namespace

static int program(int argc, char** argv) {
  g_options = bench::parse_options(argc, argv);
  manual_seed(0);
  const int64_t N = 128, C = 64, H = 32, W = 32;
  Tensor x = randn({N, C, H, W}).requires_grad_();
  const Tensor dy = randn({N, C, H, W});
  Tensor w = ones({C}).requires_grad_(), b = zeros({C}).requires_grad_();
  Tensor lw = ones({C, H, W}).requires_grad_(), lb = zeros({C, H, W}).requires_grad_();
  Tensor rm = zeros({C}), rv = ones({C});

  bench_case("batch_norm", x, dy, {w, b}, [&] { return batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5); });
  bench_case("group_norm", x, dy, {w, b}, [&] { return group_norm(x, 32, w, b, 1e-5); });
  bench_case("layer_norm", x, dy, {lw, lb}, [&] { return layer_norm(x, {C, H, W}, lw, lb, 1e-5); });
  bench_case("instance_norm", x, dy, {}, [&] { return instance_norm(x); });
  return 0;
}

int main(int argc, char** argv) {
  return minidl::examples::run_main_with_usage("bench_norm", "bench_norm [--threads N] [--reps N]",
                                               argc, argv, [&] { return program(argc, argv); });
}
