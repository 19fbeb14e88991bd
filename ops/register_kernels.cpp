// Explicit registration of every built-in CPU kernel (and, in a CUDA build,
// the CUDA ones), then the test device's mirror of the CPU kernels. Called
// once, lazily, by the first kernel lookup or non-CPU allocator lookup.
#include <mutex>

#include "minidl/core/dispatch.h"
#include "minidl/core/parallel.h"
#include "minidl/core/test_device.h"

namespace minidl {

void register_copy_cpu_kernels();
void register_binary_cpu_kernels();
void register_unary_cpu_kernels();
void register_reduce_cpu_kernels();
void register_shape_cpu_kernels();
void register_matmul_cpu_kernels();
void register_conv2d_cpu_kernels();
void register_conv3d_cpu_kernels();
void register_pad_cpu_kernels();
void register_pooling_cpu_kernels();
void register_interpolate_cpu_kernels();
void register_dropout_cpu_kernels();
void register_softmax_cpu_kernels();
void register_loss_cpu_kernels();
void register_norm_cpu_kernels();
void register_batch_norm_sync_cpu_kernels();
void register_fused_optim_cpu_kernels();
void register_amp_cpu_kernels();
#ifdef MINIDL_WITH_CUDA
void register_cuda_kernels();
#endif

void ensure_kernels_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    init_num_threads_from_env();
    register_copy_cpu_kernels();
    register_binary_cpu_kernels();
    register_unary_cpu_kernels();
    register_reduce_cpu_kernels();
    register_shape_cpu_kernels();
    register_matmul_cpu_kernels();
    register_conv2d_cpu_kernels();
    register_conv3d_cpu_kernels();
    register_pad_cpu_kernels();
    register_pooling_cpu_kernels();
    register_interpolate_cpu_kernels();
    register_dropout_cpu_kernels();
    register_softmax_cpu_kernels();
    register_loss_cpu_kernels();
    register_norm_cpu_kernels();
    register_batch_norm_sync_cpu_kernels();
    register_fused_optim_cpu_kernels();
    register_amp_cpu_kernels();
#ifdef MINIDL_WITH_CUDA
    register_cuda_kernels();
#endif
    register_test_device();  // last: mirrors the CPU kernels registered above
  });
}

}  // namespace minidl
