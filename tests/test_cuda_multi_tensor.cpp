// The multi-tensor optimizer kernels (_fused_sgd_, _fused_adam_ on CUDA,
// ops/cuda/fused_optim_multi.cu) against the CPU kernels: 45 parameters per
// call (two Adam launches), an empty one, one spanning two chunks and, for
// SGD, one longer than a launch's 320 chunks; float32, float64 and the
// 16-bit types (a half model, Apex's O3: computed in float); per-
// parameter first steps and step counts; and the optimizers end to end on a
// mixed-dtype group. Parameters are contiguous by contract (the optimizers
// refuse others), so there is no strided case. Tolerances allow for nvcc's
// fused multiply-adds (the CPU path rounds each product).
//
// Needs a CUDA device: without one (or in a build without -DMINIDL_CUDA=ON)
// it prints "skipped: no CUDA device (<reason>)" and exits 77, which CTest
// reports as skipped (SKIP_RETURN_CODE, tests/CMakeLists.txt), never passed.
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "minidl/core/cuda.h"
#include "minidl/ops/fused_optim.h"
#include "minidl/optim/adam.h"
#include "minidl/optim/clip_grad.h"
#include "minidl/optim/sgd.h"
#include "tests/cuda_test.h"
#include "tests/optim_step_cases.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::allclose;
using minidl::testing::max_abs_diff;
using minidl::testing::random_adam_step;
using minidl::testing::random_sgd_step;

MINIDL_CUDA_TEST_REQUIRES_DEVICE();

namespace {


const Device kGpu(DeviceType::CUDA, 0);

void expect_close(const Tensor& gpu, const Tensor& cpu) {
  REQUIRE(gpu.device() == kGpu);
  const Tensor got = gpu.to(kCPU);
  REQUIRE(got.shape() == cpu.shape());
  // 16-bit: both sides compute in float and round once; the device's fused
  // multiply-adds may move a result by one unit in the last place.
  const DType dt = cpu.dtype();
  const double rtol = dt == kFloat64 ? 1e-12 : dt == kFloat32 ? 1e-5 : dt == kFloat16 ? 2e-3 : 1e-2;
  const double atol = dt == kFloat64 ? 1e-12 : dt == kFloat32 ? 1e-6 : 1e-4;
  CHECK(allclose(got.to(kFloat64), cpu.to(kFloat64), rtol, atol));
}

std::vector<int64_t> sizes(bool huge) {
  std::vector<int64_t> s{70000, 0, 1};
  for (int k = 0; k < 42; ++k) s.push_back(1 + (k * 37) % 300);
  if (huge) s.push_back(320 * 65536 + 5);  // continues in a second launch
  return s;
}

Tensor on_gpu(const Tensor& t) { return t.defined() ? t.to(kGpu) : Tensor(); }

}  // namespace

TEST_CASE("_fused_sgd_ on CUDA equals the CPU kernels") {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16})
    for (double momentum : {0.0, 0.9})
      for (bool nesterov : {false, true}) {
        if (nesterov && momentum == 0.0) continue;
        CAPTURE(dtype_name(dt));
        CAPTURE(momentum);
        CAPTURE(nesterov);
        MultiStepArgs<SgdStepArgs> cpu, gpu;
        int k = 0;
        for (int64_t n : sizes(dt == kFloat32 && momentum != 0.0)) {
          const SgdStepArgs a = random_sgd_step(n, dt, momentum, nesterov, momentum != 0.0 && k++ % 3 == 0);
          SgdStepArgs b = a;
          b.param = on_gpu(a.param);
          b.grad = on_gpu(a.grad);
          b.momentum_buffer = on_gpu(a.momentum_buffer);
          cpu.tensors.push_back(a);
          gpu.tensors.push_back(b);
        }
        sgd_multi_step_stub(kCPU)(cpu);
        sgd_multi_step_stub(kGpu)(gpu);
        for (size_t i = 0; i < cpu.tensors.size(); ++i) {
          CAPTURE(i);
          expect_close(gpu.tensors[i].param, cpu.tensors[i].param);
          if (momentum != 0.0) expect_close(gpu.tensors[i].momentum_buffer, cpu.tensors[i].momentum_buffer);
        }
      }
}

TEST_CASE("_fused_adam_ on CUDA equals the CPU kernels") {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16})
    for (bool decoupled : {false, true})
      for (bool amsgrad : {false, true}) {
        CAPTURE(dtype_name(dt));
        CAPTURE(decoupled);
        CAPTURE(amsgrad);
        MultiStepArgs<AdamStepArgs> cpu, gpu;
        int k = 0;
        for (int64_t n : sizes(false)) {
          const AdamStepArgs a = random_adam_step(n, dt, decoupled, amsgrad, 1 + k++ % 5);
          AdamStepArgs b = a;
          b.param = on_gpu(a.param);
          b.grad = on_gpu(a.grad);
          b.exp_avg = on_gpu(a.exp_avg);
          b.exp_avg_sq = on_gpu(a.exp_avg_sq);
          b.max_exp_avg_sq = on_gpu(a.max_exp_avg_sq);
          cpu.tensors.push_back(a);
          gpu.tensors.push_back(b);
        }
        adam_multi_step_stub(kCPU)(cpu);
        adam_multi_step_stub(kGpu)(gpu);
        for (size_t i = 0; i < cpu.tensors.size(); ++i) {
          CAPTURE(i);
          expect_close(gpu.tensors[i].param, cpu.tensors[i].param);
          expect_close(gpu.tensors[i].exp_avg, cpu.tensors[i].exp_avg);
          expect_close(gpu.tensors[i].exp_avg_sq, cpu.tensors[i].exp_avg_sq);
          if (amsgrad) expect_close(gpu.tensors[i].max_exp_avg_sq, cpu.tensors[i].max_exp_avg_sq);
        }
      }
}

TEST_CASE("SGD and AdamW on CUDA parameters of mixed dtypes follow the CPU run") {
  std::vector<Tensor> cpu_params, gpu_params;
  for (int k = 0; k < 40; ++k) {
    const Tensor p = randn({k == 5 ? 0 : 1 + k % 7, 3}, k % 3 ? kFloat32 : kFloat64);
    cpu_params.push_back(p.clone().requires_grad_(true));
    gpu_params.push_back(p.to(kGpu).requires_grad_(true));
  }
  optim::SGD sgd_cpu(cpu_params, 0.05, 0.9, 0.0, 1e-4, true), sgd_gpu(gpu_params, 0.05, 0.9, 0.0, 1e-4, true);
  optim::AdamW adam_cpu(cpu_params, 1e-2, {0.9, 0.99}, 1e-8, 0.1, true),
      adam_gpu(gpu_params, 1e-2, {0.9, 0.99}, 1e-8, 0.1, true);
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < cpu_params.size(); ++i) {
      if (i == 7 && step == 0) continue;  // a parameter without a gradient in the first step
      const Tensor g = randn(cpu_params[i].shape(), cpu_params[i].dtype());
      cpu_params[i].set_grad(g);
      gpu_params[i].set_grad(g.to(kGpu));
    }
    sgd_cpu.step();
    sgd_gpu.step();
    adam_cpu.step();
    adam_gpu.step();
  }
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    CAPTURE(i);
    const double tol = cpu_params[i].dtype() == kFloat64 ? 1e-10 : 1e-5;
    CHECK(max_abs_diff(gpu_params[i].to(kCPU), cpu_params[i]) <= tol);
  }
}

TEST_CASE("_foreach_norm and the multi-tensor clip on CUDA equal the CPU kernels, run to run identical") {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    std::vector<Tensor> cpu_x, gpu_x;
    std::vector<int64_t> ns = sizes(dt == kFloat32);  // float32: one tensor over a launch's 320 chunks
    for (int k = 0; k < 100; ++k) ns.push_back(1 + k);  // over 128 tensors: two finishing batches
    for (int64_t n : ns) {
      cpu_x.push_back(randn({n}, dt));
      gpu_x.push_back(cpu_x.back().to(kGpu));
    }
    for (const double p : {1.0, 2.0, 3.0, std::numeric_limits<double>::infinity()}) {
      CAPTURE(dtype_name(dt));
      CAPTURE(p);
      VectorNormsArgs cpu{{}, cpu_x, p}, gpu{{}, gpu_x, p}, again{{}, gpu_x, p};
      const Tensor cpu_out = zeros({static_cast<int64_t>(ns.size())}, kFloat64);
      const Tensor gpu_out = cpu_out.to(kGpu), gpu_again = cpu_out.to(kGpu);
      for (int64_t k = 0; k < static_cast<int64_t>(ns.size()); ++k) {
        cpu.outs.push_back(cpu_out.select(0, k));
        gpu.outs.push_back(gpu_out.select(0, k));
        again.outs.push_back(gpu_again.select(0, k));
      }
      vector_norms_stub(kCPU)(cpu);
      vector_norms_stub(kGpu)(gpu);
      vector_norms_stub(kGpu)(again);
      CHECK(allclose(gpu_out.to(kCPU), cpu_out, 1e-12, 0.0));
      CHECK(max_abs_diff(gpu_out.to(kCPU), gpu_again.to(kCPU)) == 0.0);  // deterministic
    }
  }
}

TEST_CASE("clip_grad_norm_ on CUDA gradients of mixed dtypes follows the CPU") {
  std::vector<Tensor> cpu_params, gpu_params;
  for (int k = 0; k < 50; ++k) {
    const DType dt = std::array{kFloat64, kFloat32, kBFloat16, kFloat32, kFloat16}[k % 5];
    const Tensor p = zeros({k == 9 ? 0 : 2 + k % 5, 3}, dt);
    cpu_params.push_back(p.clone().requires_grad_(true));
    gpu_params.push_back(p.to(kGpu).requires_grad_(true));
    const Tensor g = randn({3, p.size(0)}, dt).t();  // strided gradients take the per-tensor path
    cpu_params.back().set_grad(k % 7 == 3 ? g : g.contiguous());
    gpu_params.back().set_grad(k % 7 == 3 ? g.contiguous().to(kGpu).t().contiguous().t() : g.contiguous().to(kGpu));
  }
  const double cpu_total = optim::clip_grad_norm_(cpu_params, 0.5);
  const double gpu_total = optim::clip_grad_norm_(gpu_params, 0.5);
  CHECK(gpu_total == doctest::Approx(cpu_total).epsilon(1e-12));
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    CAPTURE(i);
    expect_close(gpu_params[i].grad(), cpu_params[i].grad());
  }
}
