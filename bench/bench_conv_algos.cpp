// conv2d's algorithms side by side on the raw kernels: for 3x3 stride-1
// shapes, the direct path (what conv2d_pick_algo takes without Winograd:
// shifted planes from 16x16 output maps up, im2col below) against Winograd,
// F(2x2) and F(4x4), per pass, in process CPU time (robust to other processes on the machine).
// The measurements behind the rule in ops/cpu/conv2d_kernels.cpp; not part of
// run_bench.py (PyTorch has no such switch).
//   build/bench/bench_conv_algos [--threads 1] [--reps 3]
// prints one line per shape: ms per call, direct / F(2x2) / F(4x4), per pass.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "bench/bench_util.h"
#include "minidl/ops/cpu/conv2d_kernels.h"

using namespace minidl;

namespace {

double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// Best of `reps` calls after one warm-up; process CPU time divided by the
// threads, so that 1 and 2 threads read alike when the threads are busy.
double best_ms(const std::function<void()>& f, int reps, int threads) {
  f();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = cpu_ms();
    f();
    best = std::min(best, (cpu_ms() - t0) / threads);
  }
  return best;
}

}  // namespace

static int program(int argc, char** argv) {
  bench::Options o;
  o.threads = 1, o.reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--threads") o.threads = std::max<int>(1, examples::parse_int_arg(argv[i + 1], argv[i]));
    if (std::string(argv[i]) == "--reps") o.reps = std::max<int>(1, examples::parse_int_arg(argv[i + 1], argv[i]));
  }
  omp_set_num_threads(o.threads);
  struct Shape {
    int64_t N, C, K, HW;
  };
  const Shape shapes[] = {{64, 64, 64, 32},     {64, 128, 128, 16},  {64, 256, 256, 8},  {64, 512, 512, 4},
                          {128, 64, 128, 32},   {128, 128, 256, 16}, {128, 256, 512, 8}, {128, 64, 64, 8},
                          {128, 32, 32, 32},    {128, 32, 32, 16},   {128, 16, 16, 32}};
  std::printf("3x3 stride 1 pad 1, %d thread(s), best of %d; ms per call, direct / Winograd F(2x2) / F(4x4) "
              "(speed-ups over direct)\n",
              o.threads, o.reps);
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  for (const Shape& s : shapes) {
    Conv2dGeometry g;
    g.batch = s.N, g.in_channels = s.C, g.out_channels = s.K, g.in_h = g.in_w = s.HW;
    g.kernel_h = g.kernel_w = 3, g.pad_h = g.pad_w = 1;
    conv2d_set_output_size(g);
    std::vector<float> x(static_cast<size_t>(s.N * s.C * s.HW * s.HW)), w(static_cast<size_t>(s.K * s.C * 9));
    std::vector<float> y(static_cast<size_t>(s.N * s.K * g.out_h * g.out_w)), dx(x.size()), dw(w.size());
    for (float& v : x) v = normal(rng);
    for (float& v : w) v = 0.1f * normal(rng);
    for (float& v : y) v = normal(rng);  // doubles as dy
    const Conv2dAlgo direct = g.out_h * g.out_w >= 256 ? Conv2dAlgo::kShiftedPlanes : Conv2dAlgo::kIm2colGemm;
    auto time = [&](Conv2dAlgo algo) {
      return std::vector<double>{
          best_ms([&] { conv2d_forward_kernel<float>(g, x.data(), w.data(), nullptr, y.data(), algo); }, o.reps,
                  o.threads),
          best_ms([&] { conv2d_backward_input_kernel<float>(g, y.data(), w.data(), dx.data(), algo); }, o.reps,
                  o.threads),
          best_ms([&] { conv2d_backward_weight_kernel<float>(g, y.data(), x.data(), dw.data(), nullptr, algo); },
                  o.reps, o.threads)};
    };
    const std::vector<double> d = time(direct), wg = time(Conv2dAlgo::kWinograd), w4 = time(Conv2dAlgo::kWinograd4);
    std::printf("N%-3lld %3lld -> %3lld %2lldx%-2lld |", static_cast<long long>(s.N), static_cast<long long>(s.C),
                static_cast<long long>(s.K), static_cast<long long>(s.HW), static_cast<long long>(s.HW));
    const char* names[] = {"forward", "grad input", "grad weight"};
    for (size_t i = 0; i < 3; ++i)
      std::printf(" %s %7.2f / %7.2f / %7.2f (%.2fx, %.2fx)%s", names[i], d[i], wg[i], w4[i], d[i] / wg[i],
                  d[i] / w4[i], i < 2 ? " |" : "");
    const Conv2dAlgo rule = conv2d_pick_algo(g);
    std::printf("%s\n", rule == Conv2dAlgo::kWinograd    ? "  [rule: F(2x2)]"
                        : rule == Conv2dAlgo::kWinograd4 ? "  [rule: F(4x4)]"
                                                         : "  [rule: direct]");
    std::fflush(stdout);
  }
  return 0;
}

int main(int argc, char** argv) {
  return minidl::examples::run_main_with_usage("bench_conv_algos", "bench_conv_algos [--threads N] [--reps N]",
                                               argc, argv, [&] { return program(argc, argv); });
}
