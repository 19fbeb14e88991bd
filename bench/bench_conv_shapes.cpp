// conv2d at chosen shapes, per pass, on the raw kernels: the tool behind the
// stride-2 and 1x1 measurements of ops/cpu/conv2d_kernels.cpp's rule, and
// the minidl half of bench/conv_shapes_vs_torch.py (which runs PyTorch's
// twin interleaved with it). Wall time, min and median of --reps calls
// after 2 warm-ups, and the least process CPU time per thread
// (robust to other processes on a shared machine); one JSON line per shape and pass.
//   build/bench/bench_conv_shapes [--threads 2] [--reps 20] [--algo auto|im2col|shifted|winograd|winograd4]
//                                 [--pass fwd|grad_input|grad_weight] N,C,K,H,k,stride,pad ...
// winograd: F(2x2, 3x3); winograd4: F(4x4, 3x3) (its grad weight is F(2x2)'s).
// A shape mm,M,N,K times the float32 matrix product (M x K) (K x N) instead
// (ops/cpu/gemm.h's gemm_parallel, as matmul runs it), as pass "fwd".
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "minidl/ops/cpu/conv2d_kernels.h"
#include "minidl/ops/cpu/gemm.h"

using namespace minidl;

namespace {

double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

struct Times {
  double min_ms, median_ms, cpu_ms;  // wall min and median; min process CPU time / threads
};

Times time_it(const std::function<void()>& f, int reps, int threads) {
  for (int i = 0; i < 2; ++i) f();
  std::vector<double> ms;
  double cpu = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double c0 = cpu_ms();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    cpu = std::min(cpu, (cpu_ms() - c0) / threads);
  }
  std::sort(ms.begin(), ms.end());
  return {ms.front(), ms[ms.size() / 2], cpu};
}

// 64-byte aligned, as minidl's CPU allocator hands out tensor storage and
// PyTorch's does: a std::vector's own buffer is only 16-byte aligned, and
// vector stores into it straddle cache lines.
template <class T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <class U>
  Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  template <class U>
  bool operator==(const Aligned64<U>&) const { return true; }
};
template <class T>
using Buffer = std::vector<T, Aligned64<T>>;

Conv2dAlgo parse_algo(const std::string& s) {
  if (s == "im2col") return Conv2dAlgo::kIm2colGemm;
  if (s == "shifted") return Conv2dAlgo::kShiftedPlanes;
  if (s == "winograd") return Conv2dAlgo::kWinograd;
  if (s == "winograd4") return Conv2dAlgo::kWinograd4;
  if (s == "auto") return Conv2dAlgo::kAuto;
  throw examples::UsageError("--algo: expected auto, im2col, shifted, winograd or winograd4, got " + s);
}

}  // namespace

static int program(int argc, char** argv) {
  const bench::Options o = bench::parse_options(argc, argv);
  Conv2dAlgo algo = Conv2dAlgo::kAuto;
  std::string algo_name = "auto";
  std::vector<std::string> shapes;
  std::string only_pass;  // --pass: time only this pass (for a profiler)
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" || a == "--reps") {
      ++i;
    } else if (a == "--algo" && i + 1 < argc) {
      algo_name = argv[++i];
      algo = parse_algo(algo_name);
    } else if (a == "--pass" && i + 1 < argc) {
      only_pass = argv[++i];
    } else {
      shapes.push_back(a);
    }
  }
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  for (const std::string& s : shapes) {
    if (long long M, N, K; std::sscanf(s.c_str(), "mm,%lld,%lld,%lld", &M, &N, &K) == 3) {
      Buffer<float> a(static_cast<size_t>(M * K)), b(static_cast<size_t>(K * N)), c(static_cast<size_t>(M * N));
      for (float& v : a) v = normal(rng);
      for (float& v : b) v = normal(rng);
      const Times t = time_it(
          [&] { detail::gemm_parallel(false, false, M, N, K, 1.f, a.data(), K, b.data(), N, 0.f, c.data(), N); },
          o.reps, o.threads);
      std::printf("{\"impl\":\"minidl\",\"algo\":\"gemm\",\"shape\":\"%s\",\"pass\":\"fwd\",\"min_ms\":%.4f,"
                  "\"median_ms\":%.4f,\"cpu_ms\":%.4f}\n",
                  s.c_str(), t.min_ms, t.median_ms, t.cpu_ms);
      std::fflush(stdout);
      continue;
    }
    long long N, C, K, H, k, st, p;
    if (std::sscanf(s.c_str(), "%lld,%lld,%lld,%lld,%lld,%lld,%lld", &N, &C, &K, &H, &k, &st, &p) != 7)
      throw examples::UsageError("shape: expected N,C,K,H,k,stride,pad, got " + s);
    Conv2dGeometry g;
    g.batch = N, g.in_channels = C, g.out_channels = K, g.in_h = g.in_w = H;
    g.kernel_h = g.kernel_w = k, g.stride_h = g.stride_w = st, g.pad_h = g.pad_w = p;
    conv2d_set_output_size(g);
    Buffer<float> x(static_cast<size_t>(N * C * H * H)), w(static_cast<size_t>(K * C * k * k));
    Buffer<float> y(static_cast<size_t>(N * K * g.out_h * g.out_w)), dx(x.size()), dw(w.size());
    for (float& v : x) v = normal(rng);
    for (float& v : w) v = 0.05f * normal(rng);
    for (float& v : y) v = normal(rng);  // doubles as dy
    const std::pair<std::string, std::function<void()>> passes[] = {
        {"fwd", [&] { conv2d_forward_kernel<float>(g, x.data(), w.data(), nullptr, y.data(), algo); }},
        {"grad_input", [&] { conv2d_backward_input_kernel<float>(g, y.data(), w.data(), dx.data(), algo); }},
        {"grad_weight",
         [&] { conv2d_backward_weight_kernel<float>(g, y.data(), x.data(), dw.data(), nullptr, algo); }}};
    for (const auto& [name, f] : passes) {
      if (!only_pass.empty() && name != only_pass) continue;
      const Times t = time_it(f, o.reps, o.threads);
      std::printf("{\"impl\":\"minidl\",\"algo\":\"%s\",\"shape\":\"%s\",\"pass\":\"%s\",\"min_ms\":%.4f,"
                  "\"median_ms\":%.4f,\"cpu_ms\":%.4f}\n",
                  algo_name.c_str(), s.c_str(), name.c_str(), t.min_ms, t.median_ms, t.cpu_ms);
      std::fflush(stdout);
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  return minidl::examples::run_main_with_usage(
      "bench_conv_shapes", "bench_conv_shapes [--threads N] [--reps N] [--algo A] [--pass P] N,C,K,H,k,stride,pad ...",
      argc, argv, [&] { return program(argc, argv); });
}
