// Which GPU test exercises each kernel table (DispatchStub, named by its op())
// on CUDA against the CPU. Shared by tests/test_cuda_ops.cpp (which exits 77
// without a device) and tests/test_cuda_registry.cpp (CUDA builds, runs
// without a GPU), so a CUDA kernel added without a cross-backend test fails
// the registry test on every CUDA CI run, GPU or not.
//
// An entry is "file: TEST_CASE" of the case(s) that run the op on both
// backends and compare (float16/bfloat16: test_cuda_ops_half); it is a claim
// checked by reading, not by the program (doctest does not list another
// executable's cases).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "minidl/core/dispatch.h"

namespace minidl::testing {

inline const std::map<std::string, const char*>& cuda_ops_coverage() {
#define MINIDL_OPS_CASE(c) "test_cuda_ops: " c
#define MINIDL_HALF_CASE(c) "; test_cuda_ops_half: " c
#define MINIDL_ELEMENTWISE_CASES \
  MINIDL_OPS_CASE("elementwise ops: shapes, views, broadcasting, empty; float32, float64") \
      MINIDL_HALF_CASE("float16/bfloat16 elementwise ops and their backward: shapes, views, broadcasting")
#define MINIDL_REDUCTION_CASES \
  MINIDL_OPS_CASE("reductions and softmax; float32, float64") \
      MINIDL_HALF_CASE("float16/bfloat16 reductions and softmax: sum, mean, var, max/min, argmax")
#define MINIDL_INDEX_SELECT_CASES \
  MINIDL_OPS_CASE("int64 pass") "; " MINIDL_OPS_CASE("pad, interpolate, index_select") \
      MINIDL_HALF_CASE("float16/bfloat16 pad, interpolate, index_select")
#define MINIDL_PAD_CASES \
  MINIDL_OPS_CASE("pad, interpolate, index_select") \
      MINIDL_HALF_CASE("float16/bfloat16 pad, interpolate, index_select")
#define MINIDL_NORM_CASES \
  MINIDL_OPS_CASE("normalization with running statistics; float32, float64") \
      MINIDL_HALF_CASE("float16/bfloat16 normalization: float32 or 16-bit weight/bias, running statistics")
#define MINIDL_DROPOUT_CASES \
  MINIDL_OPS_CASE("dropout: the same seed gives the same mask, about 1 - p kept, backward") \
      MINIDL_HALF_CASE("float16/bfloat16 dropout: the same seed gives the same mask, backward")
#define MINIDL_POOLING_CASES \
  MINIDL_OPS_CASE("pooling 2-D and 3-D, adaptive, empty batch; float32, float64") \
      MINIDL_HALF_CASE("float16/bfloat16 pooling: max, avg, adaptive (global) and their backward")
  static const std::map<std::string, const char*> table = {
      {"copy_", "every test_cuda_ops case (inputs and results cross with to()); "
                "test_cuda_runtime: copies: every dtype pair, both directions, strided views"},
      {"fill_", "test_cuda_runtime: fill_, zeros, full, item"},
      {"binary", MINIDL_ELEMENTWISE_CASES},
      {"binary_scalar", MINIDL_ELEMENTWISE_CASES},
      {"sum_to_shape", MINIDL_ELEMENTWISE_CASES},
      {"unary", MINIDL_ELEMENTWISE_CASES},
      {"unary_backward", MINIDL_ELEMENTWISE_CASES},
      {"sum", MINIDL_REDUCTION_CASES},
      {"sum_columns", MINIDL_REDUCTION_CASES},
      {"sum_backward", MINIDL_REDUCTION_CASES},
      {"var", MINIDL_REDUCTION_CASES},
      {"var_backward", MINIDL_REDUCTION_CASES},
      {"max/min", MINIDL_REDUCTION_CASES},
      {"max_backward", MINIDL_REDUCTION_CASES},
      {"max_backward_all", MINIDL_REDUCTION_CASES},
      {"softmax", MINIDL_REDUCTION_CASES},
      {"softmax_backward", MINIDL_REDUCTION_CASES},
      {"index_select", MINIDL_INDEX_SELECT_CASES},
      {"index_select_backward", MINIDL_PAD_CASES},
      {"matmul", "test_cuda_blas_dnn: cuBLAS matmul and batched matmul equal the CPU kernels, forward and backward"},
      {"linear", "test_cuda_blas_dnn: cuBLAS linear equals the CPU kernel, with and without bias, forward and backward"},
      {"linear_backward",
       "test_cuda_blas_dnn: cuBLAS linear equals the CPU kernel, with and without bias, forward and backward"},
      {"conv2d", "test_cuda_blas_dnn: cuDNN conv2d equals the CPU kernels: stride, padding, dilation, groups, depthwise"},
      {"conv2d_backward",
       "test_cuda_blas_dnn: cuDNN conv2d equals the CPU kernels: stride, padding, dilation, groups, depthwise"},
      {"conv3d", "test_cuda_blas_dnn: cuDNN conv3d equals the CPU kernels, forward and backward"},
      {"conv3d_backward", "test_cuda_blas_dnn: cuDNN conv3d equals the CPU kernels, forward and backward"},
      {"normalization forward", MINIDL_NORM_CASES},
      {"normalization backward", MINIDL_NORM_CASES},
      {"update running statistics", MINIDL_NORM_CASES},
      {"statistics from running statistics",
       MINIDL_NORM_CASES},
      {"batch_norm_gather_stats_with_counts", MINIDL_OPS_CASE("SyncBN building blocks")},
      {"batch_norm_backward_elemt_sums", MINIDL_OPS_CASE("SyncBN building blocks")},
      {"dropout", MINIDL_DROPOUT_CASES},
      {"dropout_backward", MINIDL_DROPOUT_CASES},
      {"cross_entropy", MINIDL_OPS_CASE("losses: weights, smoothing, ignore_index, reductions; float32, float64")},
      {"cross_entropy_backward",
       MINIDL_OPS_CASE("losses: weights, smoothing, ignore_index, reductions; float32, float64")},
      {"nll_loss", MINIDL_OPS_CASE("losses: weights, smoothing, ignore_index, reductions; float32, float64")},
      {"nll_loss_backward", MINIDL_OPS_CASE("losses: weights, smoothing, ignore_index, reductions; float32, float64")},
      {"mse_loss", MINIDL_OPS_CASE("losses: weights, smoothing, ignore_index, reductions; float32, float64")},
      {"mse_loss_backward", MINIDL_OPS_CASE("losses: weights, smoothing, ignore_index, reductions; float32, float64")},
      {"binary_cross_entropy",
       MINIDL_OPS_CASE("losses: weights, smoothing, ignore_index, reductions; float32, float64")},
      {"binary_cross_entropy_backward",
       MINIDL_OPS_CASE("losses: weights, smoothing, ignore_index, reductions; float32, float64")},
      {"binary_cross_entropy_with_logits",
       MINIDL_OPS_CASE("losses: weights, smoothing, ignore_index, reductions; float32, float64")},
      {"binary_cross_entropy_with_logits_backward",
       MINIDL_OPS_CASE("losses: weights, smoothing, ignore_index, reductions; float32, float64")},
      {"max_pool", MINIDL_POOLING_CASES},
      {"max_pool_backward", MINIDL_POOLING_CASES},
      {"avg_pool", MINIDL_POOLING_CASES},
      {"avg_pool_backward", MINIDL_POOLING_CASES},
      {"pad", MINIDL_PAD_CASES},
      {"pad_backward", MINIDL_PAD_CASES},
      {"upsample", MINIDL_PAD_CASES},
      {"upsample_backward", MINIDL_PAD_CASES},
      {"sgd_step", MINIDL_OPS_CASE("single-tensor optimizer kernels: sgd_step, adam_step, vector_norm, clip_grad_scale")},
      {"adam_step",
       MINIDL_OPS_CASE("single-tensor optimizer kernels: sgd_step, adam_step, vector_norm, clip_grad_scale")},
      {"vector_norm",
       MINIDL_OPS_CASE("single-tensor optimizer kernels: sgd_step, adam_step, vector_norm, clip_grad_scale")},
      {"clip_grad_scale",
       MINIDL_OPS_CASE("single-tensor optimizer kernels: sgd_step, adam_step, vector_norm, clip_grad_scale")},
      {"_fused_sgd_", "test_cuda_multi_tensor: _fused_sgd_ on CUDA equals the CPU kernels"},
      {"_fused_adam_", "test_cuda_multi_tensor: _fused_adam_ on CUDA equals the CPU kernels"},
      {"_foreach_norm", "test_cuda_multi_tensor: _foreach_norm and the multi-tensor clip on CUDA equal the CPU kernels"},
      {"_foreach_clip_grad_scale_",
       "test_cuda_multi_tensor: _foreach_norm and the multi-tensor clip on CUDA equal the CPU kernels"},
      {"amp_non_finite_check_and_unscale", "test_cuda_grad_scaler: GradScaler and its kernels on CUDA equal the CPU"},
      {"amp_update_scale", "test_cuda_grad_scaler: GradScaler and its kernels on CUDA equal the CPU"},
  };
#undef MINIDL_OPS_CASE
#undef MINIDL_HALF_CASE
#undef MINIDL_ELEMENTWISE_CASES
#undef MINIDL_REDUCTION_CASES
#undef MINIDL_INDEX_SELECT_CASES
#undef MINIDL_PAD_CASES
#undef MINIDL_NORM_CASES
#undef MINIDL_DROPOUT_CASES
#undef MINIDL_POOLING_CASES
  return table;
}

// What is wrong with the table against the registry, one message each: a
// stub with a CUDA kernel that no entry covers, and an entry naming no stub
// (a renamed op). Empty when complete. Registers the kernels first.
inline std::vector<std::string> cuda_ops_coverage_problems(int* covered_cuda_ops = nullptr) {
  ensure_kernels_registered();
  std::vector<std::string> problems;
  std::map<std::string, bool> stubs;  // name -> has a CUDA kernel
  for (const DispatchStubBase* stub : dispatch_stubs()) stubs[stub->op()] = stub->has_kernel(DeviceType::CUDA);
  int covered = 0;
  for (const auto& [name, has_cuda] : stubs) {
    if (!has_cuda) continue;
    if (cuda_ops_coverage().count(name) == 1) {
      ++covered;
    } else {
      problems.push_back("op " + name + " has a CUDA kernel but no cross-backend test: add a case to "
                         "tests/test_cuda_ops.cpp and an entry to tests/cuda_ops_coverage.h");
    }
  }
  for (const auto& [name, where] : cuda_ops_coverage())
    if (stubs.count(name) == 0) problems.push_back("coverage entry " + name + " names no stub (renamed?)");
  if (covered_cuda_ops != nullptr) *covered_cuda_ops = covered;
  return problems;
}

}  // namespace minidl::testing
