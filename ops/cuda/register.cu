// The CUDA backend's registration: the allocators first (only when a device
// can be used: otherwise allocator_for(CUDA) says why, and no CUDA tensor can
// exist), then one register_<family>_cuda_kernels() call per op family
// (ops/cuda/<family>.cu, ops/cudnn/). The kernels register whether or not a
// GPU is present, so tests/test_cuda_registry checks the table without one.
//
// A .cu file, so that nvcc compiles the core headers every kernel file will
// include (C++20 through nvcc is checked by every CUDA build).
#include "minidl/core/cuda/runtime.h"
#include "minidl/core/dispatch.h"

namespace minidl {

void register_copy_cuda_kernels();         // ops/cuda/copy.cu
void register_fill_cuda_kernels();         // ops/cuda/fill.cu
void register_binary_cuda_kernels();       // ops/cuda/binary.cu
void register_unary_cuda_kernels();        // ops/cuda/unary.cu
void register_reduce_cuda_kernels();       // ops/cuda/reduce.cu
void register_softmax_cuda_kernels();      // ops/cuda/softmax.cu
void register_shape_cuda_kernels();        // ops/cuda/shape_ops.cu
void register_matmul_cuda_kernels();       // ops/cuda/matmul.cu (cuBLAS)
void register_conv_cuda_kernels();         // ops/cudnn/conv.cpp (cuDNN): conv2d, conv3d
void register_norm_cuda_kernels();         // ops/cuda/norm_core.cu
void register_batch_norm_sync_cuda_kernels();  // ops/cuda/batch_norm_sync.cu
void register_dropout_cuda_kernels();      // ops/cuda/dropout.cu
void register_loss_cuda_kernels();         // ops/cuda/loss.cu (binary_cross_entropy too)
void register_pooling_cuda_kernels();      // ops/cuda/pooling.cu
void register_pad_cuda_kernels();          // ops/cuda/pad.cu
void register_interpolate_cuda_kernels();  // ops/cuda/upsample.cu
void register_fused_optim_cuda_kernels();  // ops/cuda/fused_optim.cu
void register_fused_optim_multi_cuda_kernels();  // ops/cuda/fused_optim_multi.cu (multi-tensor SGD/Adam)
void register_clip_grad_multi_cuda_kernels();    // ops/cuda/clip_grad_multi.cu (_foreach_norm, clip scaling)
void register_amp_cuda_kernels();          // ops/cuda/amp.cu (GradScaler)

void register_cuda_kernels() {
  if (cuda::is_available()) cuda::register_cuda_backend();
  register_copy_cuda_kernels();
  register_fill_cuda_kernels();
  register_binary_cuda_kernels();
  register_unary_cuda_kernels();
  register_reduce_cuda_kernels();
  register_softmax_cuda_kernels();
  register_shape_cuda_kernels();
  register_matmul_cuda_kernels();
  register_conv_cuda_kernels();
  register_norm_cuda_kernels();
  register_batch_norm_sync_cuda_kernels();
  register_dropout_cuda_kernels();
  register_loss_cuda_kernels();
  register_pooling_cuda_kernels();
  register_pad_cuda_kernels();
  register_interpolate_cuda_kernels();
  register_fused_optim_cuda_kernels();
  register_fused_optim_multi_cuda_kernels();
  register_clip_grad_multi_cuda_kernels();
  register_amp_cuda_kernels();
}

}  // namespace minidl
