// The CPU-against-CUDA comparison of the cross-backend suites
// (tests/test_cuda_ops.cpp: float32/float64/int64; tests/test_cuda_ops_half.cpp:
// float16/bfloat16): run an op on the CPU and on the target with the same
// inputs, compare outputs and input gradients with a tolerance per dtype, and
// the shared main (exit 77 without a device, MINIDL_CUDA_OPS_DRY_RUN=1: the
// CPU as the target). Include after defining DOCTEST_CONFIG_IMPLEMENT.
#pragma once

#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "minidl/core/backend_settings.h"
#include "minidl/core/cuda.h"
#include "minidl/minidl.h"
#include "tests/test_util.h"

namespace minidl::testing::cross_backend {

inline Device g_target(DeviceType::CUDA, 0);  // the backend compared with the CPU (main() may dry-run on the CPU)

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

inline Tensor to_cpu(const Tensor& t) { return t.to(Device(kCPU)); }

// float16/bfloat16: both backends compute in float and round once, so they
// differ only where float's libm ulps flip a rounding (one 16-bit ulp, 2^-10
// or 2^-7 relative at most) or such a flip feeds a later op.
inline double rtol_of(DType d) {
  switch (d) {
    case DType::Float32: return 1.3e-6;
    case DType::Float64: return 1e-7;
    case DType::Float16: return 1e-3;
    case DType::BFloat16: return 1e-2;
    default: return 0.0;
  }
}
inline double atol_of(DType d) {
  switch (d) {
    case DType::Float32: return 1e-5;
    case DType::Float64: return 1e-7;
    case DType::Float16: return 1e-3;
    case DType::BFloat16: return 1e-2;
    default: return 0.0;
  }
}

inline bool close(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.device() != g_target) return false;
  const DType d = want.dtype();
  return minidl::testing::allclose(to_cpu(got), want, rtol_of(d), atol_of(d));
}

// A copy on the target (a clone first, so a CPU dry run gets its own storage).
inline Tensor on_target(const Tensor& t) { return t.defined() ? t.detach().clone().to(g_target) : t; }

// Runs f on the CPU inputs and on copies on the target (same values, same
// requires_grad); compares the outputs, then every input's gradient under the
// same random upstream gradient. Returns the target's inputs (ops that update
// an input in place, e.g. running statistics, are compared by the caller).
inline std::vector<Tensor> compare(const std::string& name, const OpFn& f, const std::vector<Tensor>& cpu_inputs) {
  CAPTURE(name);
  std::vector<Tensor> gpu_inputs;
  for (const Tensor& t : cpu_inputs) {
    Tensor g = on_target(t);
    if (t.requires_grad()) g.requires_grad_(true);
    gpu_inputs.push_back(g);
  }
  const Tensor y_cpu = f(cpu_inputs);
  const Tensor y_gpu = f(gpu_inputs);
  REQUIRE(y_gpu.device() == g_target);
  CHECK(close(y_gpu, y_cpu));
  bool any_grad = false;
  for (const Tensor& t : cpu_inputs) any_grad = any_grad || t.requires_grad();
  if (!any_grad || !is_floating(y_cpu.dtype())) return gpu_inputs;
  const Tensor up = randn(y_cpu.shape(), y_cpu.dtype());
  sum(mul(y_cpu, up)).backward();
  sum(mul(y_gpu, up.to(g_target))).backward();
  for (size_t i = 0; i < cpu_inputs.size(); ++i) {
    if (!cpu_inputs[i].requires_grad()) continue;
    CAPTURE(i);
    REQUIRE(gpu_inputs[i].grad().defined());
    CHECK(close(gpu_inputs[i].grad(), cpu_inputs[i].grad()));
  }
  return gpu_inputs;
}

inline Tensor leaf(const Shape& shape, DType dtype = kFloat32) { return randn(shape, dtype).requires_grad_(true); }
inline Tensor positive(const Shape& shape, DType dtype) { return add(rand(shape, dtype), 0.5); }


// Without a CUDA device: prints why and returns 77 (ctest: skipped), unless
// MINIDL_CUDA_OPS_DRY_RUN is set, which makes the CPU the target: it checks
// that every case is a valid program (shapes, CPU support, dtypes), never
// that CUDA is right.
inline int cross_backend_main(int argc, char** argv) {
  const bool dry_run = std::getenv("MINIDL_CUDA_OPS_DRY_RUN") != nullptr;
  if (!cuda::is_available()) {
    if (!dry_run) {
      std::printf("skipped: no CUDA device (%s)\n", cuda::unavailable_reason().c_str());
      return 77;
    }
    std::printf("dry run: the CPU against the CPU (checks the cases run, not CUDA)\n");
    g_target = Device(kCPU);
  }
  // float32 tolerances assume IEEE float32 products in cuBLAS/cuDNN.
  backends::BackendSettingsGuard no_tf32({.matmul_allow_tf32 = false, .cudnn_allow_tf32 = false});
  doctest::Context context(argc, argv);
  return context.run();
}

}  // namespace minidl::testing::cross_backend
