// bfloat16 against float32 for matmul, linear and conv2d (forward + backward)
// on the CPU: float32, bfloat16 on the AVX512-BF16 dot products, and
// bfloat16 on the float32 path (MINIDL_CPU_BF16_DOT=0: operands widened, the
// float32 kernels). The three run interleaved, one repetition each in turn,
// and the minimum of the repetitions is reported (a shared machine is noisy),
// in wall time and in the process's CPU time (which a busy machine disturbs
// less: with --threads 1 it counts only this process's work; with more,
// set OMP_WAIT_POLICY=passive so that waiting threads do not count).
// Prints one JSON object per op:
//   {"op":"conv2d_fwd_bwd","shape":"...","f32_ms":..,"bf16_dot_ms":..,"bf16_f32path_ms":..,"f32_over_bf16_dot":..,
//    "cpu_f32_ms":..,...}
// Options: --threads N (default 2), --reps N (default 15), --only gemm|layers|norms
// (layers: SmallNet's convs at batch 16 and the ops between them, batch 32;
// norms: GroupNorm, LayerNorm, InstanceNorm and avg pooling at 32x128x32x32).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_util.h"
#include "minidl/minidl.h"
#include "minidl/ops/cpu/bf16_gemm.h"

using namespace minidl;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// One forward + backward of f on leaves of the given shapes, in dtype.
struct Run {
  std::vector<Tensor> leaves;
  Fn f;
  Tensor grad;
  void operator()() const {
    for (Tensor t : leaves) t.set_grad(Tensor());  // a handle: resets the leaf's grad
    const Tensor y = f(leaves);
    y.backward(grad);
  }
};

Run make_run(const std::vector<Shape>& shapes, const Fn& f, DType dtype) {
  manual_seed(0);
  Run r;
  for (const Shape& s : shapes) r.leaves.push_back(randn(s).to(dtype).requires_grad_());
  r.f = f;
  r.grad = randn(f(r.leaves).shape()).to(dtype);
  return r;
}

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Wall and CPU seconds of one call.
std::pair<double, double> seconds(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = cpu_seconds();
  f();
  return {std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), cpu_seconds() - c0};
}

void compare(const std::string& op, const std::string& shape, const std::vector<Shape>& shapes, const Fn& f,
             int reps) {
  const Run f32 = make_run(shapes, f, kFloat32), bf16 = make_run(shapes, f, kBFloat16);
  auto dot = [&] { unsetenv("MINIDL_CPU_BF16_DOT"); bf16(); };
  auto no_dot = [&] { setenv("MINIDL_CPU_BF16_DOT", "0", 1); bf16(); unsetenv("MINIDL_CPU_BF16_DOT"); };
  const std::function<void()> modes[] = {[&] { f32(); }, dot, no_dot};
  double best[3], cpu[3];
  for (int m = 0; m < 3; ++m) modes[m](), best[m] = cpu[m] = std::numeric_limits<double>::infinity();  // warm-up
  for (int r = 0; r < reps; ++r)
    for (int m = 0; m < 3; ++m) {
      const auto [wall, used] = seconds(modes[m]);
      best[m] = std::min(best[m], wall), cpu[m] = std::min(cpu[m], used);
    }
  std::printf(
      "{\"op\":\"%s\",\"shape\":\"%s\",\"f32_ms\":%.3f,\"bf16_dot_ms\":%.3f,\"bf16_f32path_ms\":%.3f,"
      "\"f32_over_bf16_dot\":%.2f,\"f32path_over_dot\":%.2f,\"cpu_f32_ms\":%.3f,\"cpu_bf16_dot_ms\":%.3f,"
      "\"cpu_bf16_f32path_ms\":%.3f,\"cpu_f32_over_bf16_dot\":%.2f,\"cpu_f32path_over_dot\":%.2f}\n",
      op.c_str(), shape.c_str(), 1e3 * best[0], 1e3 * best[1], 1e3 * best[2], best[0] / best[1], best[2] / best[1],
      1e3 * cpu[0], 1e3 * cpu[1], 1e3 * cpu[2], cpu[0] / cpu[1], cpu[2] / cpu[1]);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Options options = bench::parse_options(argc, argv);
  omp_set_num_threads(options.threads);
  const int reps = options.reps;
  std::printf("{\"avx512_bf16\":%s,\"threads\":%d}\n", cpu::cpu_has_avx512_bf16() ? "true" : "false", options.threads);
  std::string only = "gemm";
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::strcmp(argv[i], "--only") == 0) only = argv[i + 1];
  using V = const std::vector<Tensor>&;
  const Conv2dParams pad1{.padding = {1, 1}};
  if (only == "layers") {
    compare("conv2d_fwd_bwd", "x 16x64x32x32, w 128x64x3x3", {{16, 64, 32, 32}, {128, 64, 3, 3}},
            [&](V a) { return conv2d(a[0], a[1], Tensor(), pad1); }, reps);
    compare("conv2d_fwd_bwd", "x 16x128x16x16, w 256x128x3x3", {{16, 128, 16, 16}, {256, 128, 3, 3}},
            [&](V a) { return conv2d(a[0], a[1], Tensor(), pad1); }, reps);
    compare("conv2d_fwd_bwd", "x 16x256x8x8, w 512x256x3x3", {{16, 256, 8, 8}, {512, 256, 3, 3}},
            [&](V a) { return conv2d(a[0], a[1], Tensor(), pad1); }, reps);
    compare("max_pool2d_fwd_bwd", "x 32x128x32x32, 2x2", {{32, 128, 32, 32}},
            [&](V a) { return max_pool2d(a[0], {2, 2}); }, reps);
    compare("adaptive_max_pool2d_fwd_bwd", "x 32x512x4x4 -> 1x1", {{32, 512, 4, 4}},
            [&](V a) { return adaptive_max_pool2d(a[0], {1, 1}); }, reps);
    compare("relu_fwd_bwd", "x 32x128x16x16", {{32, 128, 16, 16}}, [&](V a) { return relu(a[0]); }, reps);
    compare("batch_norm_fwd_bwd", "x 32x128x16x16, float32 weight", {{32, 128, 16, 16}, {128}, {128}},
            [&](V a) {
              return batch_norm(a[0], Tensor(), Tensor(), a[1].to(kFloat32), a[2].to(kFloat32), true, 0.1, 1e-5);
            },
            reps);
    compare("add_fwd_bwd", "32x64x32x32 + 32x64x32x32", {{32, 64, 32, 32}, {32, 64, 32, 32}},
            [&](V a) { return add(a[0], a[1]); }, reps);
    return 0;
  }
  if (only == "norms") {  // GroupNorm, LayerNorm, InstanceNorm with float32 parameters (autocast's), avg pooling
    const Shape x{32, 128, 32, 32};
    compare("group_norm_fwd_bwd", "x 32x128x32x32, 32 groups, float32 weight", {x, {128}, {128}},
            [&](V a) { return group_norm(a[0], 32, a[1].to(kFloat32), a[2].to(kFloat32)); }, reps);
    compare("layer_norm_fwd_bwd", "x 32x128x32x32 over (32), float32 weight", {x, {32}, {32}},
            [&](V a) { return layer_norm(a[0], {32}, a[1].to(kFloat32), a[2].to(kFloat32)); }, reps);
    compare("layer_norm_fwd_bwd", "x 32x128x32x32 over (128, 32, 32), no affine", {x},
            [&](V a) { return layer_norm(a[0], {128, 32, 32}); }, reps);
    compare("instance_norm_fwd_bwd", "x 32x128x32x32, float32 weight", {x, {128}, {128}},
            [&](V a) { return instance_norm(a[0], Tensor(), Tensor(), a[1].to(kFloat32), a[2].to(kFloat32)); },
            reps);
    compare("avg_pool2d_fwd_bwd", "x 32x128x32x32, 2x2", {x}, [&](V a) { return avg_pool2d(a[0], {2, 2}); }, reps);
    compare("avg_pool2d_fwd_bwd", "x 32x128x32x32, 3x3 s1 p1", {x},
            [&](V a) { return avg_pool2d(a[0], {3, 3}, {1, 1}, {1, 1}); }, reps);
    compare("adaptive_avg_pool2d_fwd_bwd", "x 32x512x4x4 -> 1x1", {{32, 512, 4, 4}},
            [&](V a) { return adaptive_avg_pool2d(a[0], {1, 1}); }, reps);
    return 0;
  }
  compare("matmul_fwd_bwd", "512x512 @ 512x512", {{512, 512}, {512, 512}}, [](V a) { return matmul(a[0], a[1]); },
          reps);
  compare("linear_fwd_bwd", "x 128x1024, W 1024x1024", {{128, 1024}, {1024, 1024}, {1024}},
          [](V a) { return linear(a[0], a[1], a[2]); }, reps);
  compare("conv2d_fwd_bwd", "x 64x32x32x32, w 32x32x3x3", {{64, 32, 32, 32}, {32, 32, 3, 3}},
          [&](V a) { return conv2d(a[0], a[1], Tensor(), pad1); }, reps);
  compare("conv2d_fwd_bwd", "x 64x64x16x16, w 64x64x3x3", {{64, 64, 16, 16}, {64, 64, 3, 3}},
          [&](V a) { return conv2d(a[0], a[1], Tensor(), pad1); }, reps);
  compare("conv2d_fwd_bwd", "x 64x128x8x8, w 128x128x3x3", {{64, 128, 8, 8}, {128, 128, 3, 3}},
          [&](V a) { return conv2d(a[0], a[1], Tensor(), pad1); }, reps);
  compare("conv2d_fwd_bwd", "x 64x256x4x4, w 256x256x3x3", {{64, 256, 4, 4}, {256, 256, 3, 3}},
          [&](V a) { return conv2d(a[0], a[1], Tensor(), pad1); }, reps);
  return 0;
}
