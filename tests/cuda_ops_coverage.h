// Which GPU test exercises each kernel table (DispatchStub, named by its op())
// on CUDA against the CPU. Shared by tests/test_cuda_ops.cpp (which exits 77
// without a device) and tests/test_cuda_registry.cpp (CUDA builds, runs
// without a GPU), so a CUDA kernel added without a cross-backend test fails
// the registry test on every CUDA CI run, GPU or not.
//
// An entry is "file: TEST_CASE" of the case(s) that run the op on both
// backends and compare; it is a claim checked by reading, not by the program
// (doctest does not list another executable's cases).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "minidl/core/dispatch.h"

namespace minidl::testing {

inline const std::map<std::string, const char*>& cuda_ops_coverage() {
#define MINIDL_OPS_CASE(c) "test_cuda_ops: " c
  static const std::map<std::string, const char*> table = {
      {"copy_", "every test_cuda_ops case (inputs and results cross with to()); "
                "test_cuda_runtime: copies: every dtype pair, both directions, strided views"},
      {"fill_", "test_cuda_runtime: fill_, zeros, full, item"},
      {"binary", MINIDL_OPS_CASE("elementwise ops: shapes, views, broadcasting, empty; float32, float64")},
      {"binary_scalar", MINIDL_OPS_CASE("elementwise ops: shapes, views, broadcasting, empty; float32, float64")},
      {"sum_to_shape", MINIDL_OPS_CASE("elementwise ops: shapes, views, broadcasting, empty; float32, float64")},
      {"unary", MINIDL_OPS_CASE("elementwise ops: shapes, views, broadcasting, empty; float32, float64")},
      {"unary_backward", MINIDL_OPS_CASE("elementwise ops: shapes, views, broadcasting, empty; float32, float64")},
      {"sum", MINIDL_OPS_CASE("reductions and softmax; float32, float64")},
      {"sum_columns", MINIDL_OPS_CASE("reductions and softmax; float32, float64")},
      {"sum_backward", MINIDL_OPS_CASE("reductions and softmax; float32, float64")},
      {"var", MINIDL_OPS_CASE("reductions and softmax; float32, float64")},
      {"var_backward", MINIDL_OPS_CASE("reductions and softmax; float32, float64")},
      {"max/min", MINIDL_OPS_CASE("reductions and softmax; float32, float64")},
      {"max_backward", MINIDL_OPS_CASE("reductions and softmax; float32, float64")},
      {"max_backward_all", MINIDL_OPS_CASE("reductions and softmax; float32, float64")},
      {"softmax", MINIDL_OPS_CASE("reductions and softmax; float32, float64")},
      {"softmax_backward", MINIDL_OPS_CASE("reductions and softmax; float32, float64")},
      {"index_select", MINIDL_OPS_CASE("int64 pass") "; " MINIDL_OPS_CASE("pad, interpolate, index_select")},
      {"index_select_backward", MINIDL_OPS_CASE("pad, interpolate, index_select")},
      {"matmul", "test_cuda_blas_dnn: cuBLAS matmul and batched matmul equal the CPU kernels, forward and backward"},
      {"linear", "test_cuda_blas_dnn: cuBLAS linear equals the CPU kernel, with and without bias, forward and backward"},
      {"linear_backward",
       "test_cuda_blas_dnn: cuBLAS linear equals the CPU kernel, with and without bias, forward and backward"},
      {"conv2d", "test_cuda_blas_dnn: cuDNN conv2d equals the CPU kernels: stride, padding, dilation, groups, depthwise"},
      {"conv2d_backward",
       "test_cuda_blas_dnn: cuDNN conv2d equals the CPU kernels: stride, padding, dilation, groups, depthwise"},
      {"conv3d", "test_cuda_blas_dnn: cuDNN conv3d equals the CPU kernels, forward and backward"},
      {"conv3d_backward", "test_cuda_blas_dnn: cuDNN conv3d equals the CPU kernels, forward and backward"},
      {"normalization forward", MINIDL_OPS_CASE("normalization with running statistics; float32, float64")},
      {"normalization backward", MINIDL_OPS_CASE("normalization with running statistics; float32, float64")},
      {"update running statistics", MINIDL_OPS_CASE("normalization with running statistics; float32, float64")},
      {"statistics from running statistics",
       MINIDL_OPS_CASE("normalization with running statistics; float32, float64")},
      {"batch_norm_gather_stats_with_counts", MINIDL_OPS_CASE("SyncBN building blocks")},
      {"batch_norm_backward_elemt_sums", MINIDL_OPS_CASE("SyncBN building blocks")},
      {"dropout", MINIDL_OPS_CASE("dropout: the same seed gives the same mask, about 1 - p kept, backward")},
      {"dropout_backward", MINIDL_OPS_CASE("dropout: the same seed gives the same mask, about 1 - p kept, backward")},
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
      {"max_pool", MINIDL_OPS_CASE("pooling 2-D and 3-D, adaptive, empty batch; float32, float64")},
      {"max_pool_backward", MINIDL_OPS_CASE("pooling 2-D and 3-D, adaptive, empty batch; float32, float64")},
      {"avg_pool", MINIDL_OPS_CASE("pooling 2-D and 3-D, adaptive, empty batch; float32, float64")},
      {"avg_pool_backward", MINIDL_OPS_CASE("pooling 2-D and 3-D, adaptive, empty batch; float32, float64")},
      {"pad", MINIDL_OPS_CASE("pad, interpolate, index_select")},
      {"pad_backward", MINIDL_OPS_CASE("pad, interpolate, index_select")},
      {"upsample", MINIDL_OPS_CASE("pad, interpolate, index_select")},
      {"upsample_backward", MINIDL_OPS_CASE("pad, interpolate, index_select")},
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
