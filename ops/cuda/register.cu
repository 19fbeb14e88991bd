// The CUDA backend's registration: the allocators first (only when a device
// can be used: otherwise allocator_for(CUDA) says why, and no CUDA tensor can
// exist), then one register_<family>_cuda_kernels() call per op family, as
// each family gains a CUDA kernel (ops/cuda/<family>.cu). Until then an op on
// a CUDA tensor says it has no CUDA kernel yet.
//
// A .cu file, so that nvcc compiles the core headers every kernel file will
// include (C++20 through nvcc is checked by every CUDA build).
#include "minidl/core/cuda/runtime.h"
#include "minidl/core/dispatch.h"

namespace minidl {

void register_copy_cuda_kernels();    // ops/cuda/copy.cu
void register_fill_cuda_kernels();    // ops/cuda/fill.cu
void register_amp_cuda_kernels();     // ops/cuda/amp.cu (GradScaler)
void register_matmul_cuda_kernels();  // ops/cuda/matmul.cu (cuBLAS)
void register_conv_cuda_kernels();    // ops/cudnn/conv.cpp (cuDNN): conv2d, conv3d

void register_cuda_kernels() {
  if (cuda::is_available()) cuda::register_cuda_backend();
  register_copy_cuda_kernels();
  register_fill_cuda_kernels();
  register_amp_cuda_kernels();
  register_matmul_cuda_kernels();
  register_conv_cuda_kernels();
}

}  // namespace minidl
