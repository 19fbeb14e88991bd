// Convolution gradients are bit-identical from run to run on several threads
// (as PyTorch's CPU convolutions), also when a thread is descheduled. The
// weight gradient sums over images; where the images are split over threads,
// each thread's partial sum must always cover the same images, or the sums
// are added in another order on a busy machine (the Winograd path once handed
// chunks to whichever thread was free: make train's accuracy moved between
// identical runs). Busy threads here compete for the cores so that dynamic
// scheduling shows: with the old Winograd scheduling this failed 4 runs of 5
// on a 2-core machine.
#include <omp.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>

#include "minidl/ops/cpu/bf16_gemm.h"
#include "minidl/ops/cpu/conv2d_kernels.h"
#include "tests/conv_geometry.h"
#include "tests/test_util.h"

using namespace minidl;

namespace {

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Burns a core until destroyed, so the kernel's threads get descheduled.
struct BusyThread {
  std::atomic<bool> stop{false};
  std::thread thread{[this] {
    volatile double x = 1.0;
    while (!stop.load(std::memory_order_relaxed)) x = x * 1.0000001 + 1e-9;
  }};
  ~BusyThread() {
    stop = true;
    thread.join();
  }
};

}  // namespace

TEST_CASE("conv2d weight gradients are bit-identical run to run on 3 threads, every algorithm") {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(3);
  const Conv2dGeometry g = minidl::testing::square(12, 32, 32, 16, 3, 1, 1);  // chunks of images spread over the threads
  REQUIRE(conv2d_threads(g) == 3);
  const std::vector<float> x = random_values(static_cast<size_t>(g.batch * g.in_channels * g.in_h * g.in_w), 1);
  const std::vector<float> dy = random_values(static_cast<size_t>(g.batch * g.out_channels * g.out_h * g.out_w), 2);
  const size_t w_size = static_cast<size_t>(g.out_channels * g.in_channels * 9);
  BusyThread busy1, busy2;  // one per core of a 2-core machine
  for (Conv2dAlgo algo :
       {Conv2dAlgo::kWinograd, Conv2dAlgo::kWinograd4, Conv2dAlgo::kIm2colGemm, Conv2dAlgo::kShiftedPlanes}) {
    INFO("algo=", static_cast<int>(algo));
    std::vector<float> first(w_size), dw(w_size), db(static_cast<size_t>(g.out_channels));
    conv2d_backward_weight_kernel<float>(g, dy.data(), x.data(), first.data(), db.data(), algo);
    int differing_runs = 0;
    for (int run = 0; run < 60; ++run) {
      conv2d_backward_weight_kernel<float>(g, dy.data(), x.data(), dw.data(), db.data(), algo);
      differing_runs += std::memcmp(dw.data(), first.data(), w_size * sizeof(float)) != 0;
    }
    CHECK(differing_runs == 0);
  }
  omp_set_num_threads(saved);
}

TEST_CASE("bfloat16 conv2d weight gradient (the dot-product path) is bit-identical run to run on 3 threads") {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(3);
  // F(4x4) would take this conv into float32 Winograd (ops/cpu/conv2d.cpp).
  const testing::NoWinograd4 no_f4;
  manual_seed(4);
  const Tensor x = randn({48, 32, 16, 16}).to(kBFloat16);  // 12 chunks of 4 images
  Tensor w = (randn({32, 32, 3, 3}) * 0.1).to(kBFloat16).requires_grad_();
  const Tensor dy = randn({48, 32, 16, 16}).to(kBFloat16);
  auto grad_bits = [&] {
    w.set_grad(Tensor());
    (conv2d(x, w, Tensor(), Conv2dParams{.padding = {1, 1}}) * dy).sum().backward();
    return w.grad().to(kFloat32).to_vector<float>();
  };
  const int64_t dot_before = cpu::bf16_gemm_counts().dot_product;
  BusyThread busy1, busy2;
  const std::vector<float> first = grad_bits();
  int differing_runs = 0;
  for (int run = 0; run < 30; ++run) differing_runs += grad_bits() != first;
  CHECK(differing_runs == 0);
  if (cpu::bf16_dot_enabled())
    CHECK(cpu::bf16_gemm_counts().dot_product > dot_before);
  else
    MESSAGE("this CPU has no AVX512-BF16: the float32 path ran");
  omp_set_num_threads(saved);
}
