// Which cuDNN algorithm runs a convolution, chosen once per ConvKey
// (ops/cudnn/conv_key.h) and cached for the process:
//   - backends::cudnn::benchmark() off (default): cuDNN's heuristic ranking
//     (cudnnGet*Algorithm_v7), the first usable entry;
//   - on: cudnnFind*AlgorithmEx times the candidates on the real buffers
//     (it writes the output buffer, which the caller overwrites next) with a
//     workspace from the caching allocator, three times (one timing can be
//     far off), the usable entry with the best time;
//   - deterministic(): only entries reported CUDNN_DETERMINISTIC, in both modes;
//   - an entry whose workspace the caching allocator cannot give is skipped
//     for the next one (PyTorch does the same);
//   - math type: float32 gets CUDNN_FMA_MATH unless cudnn allow_tf32 (then the
//     entry's own, which may use TF32 tensor cores), 16-bit inputs tensor-op
//     math, float64 the default.
// "Usable": status SUCCESS and a workspace-size query that succeeds for the
// math type we will run with. CUDA build only.
#pragma once

#include <cudnn.h>

#include <cstddef>

#include "minidl/core/tensor.h"
#include "minidl/ops/cudnn/conv_key.h"
#include "minidl/ops/cudnn/descriptors.h"

namespace minidl::cudnn_conv {

// The descriptors of one call: x/y tensors, w filter, the convolution.
struct ConvDescriptors {
  ConvShape shape;
  DType dtype;
  TensorDescriptor x, y;
  FilterDescriptor w;
  ConvolutionDescriptor conv;
  ConvDescriptors(const ConvShape& s, DType dt, const char* op)
      : shape(s), dtype(dt), x(dt, s.x_sizes(), s.x_strides(), s.nd(), op),
        y(dt, s.y_sizes(), s.y_strides(), s.nd(), op), w(dt, s.w_sizes(), s.nd(), s.channels_last, op),
        conv(s, dt, op) {}
};

struct AlgoChoice {
  int algo = 0;  // a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;  // bytes, for this algo and math type
};

// A choice with its workspace (undefined when it needs none), allocated
// from the caching allocator for the current stream: keep it alive until
// the cuDNN call is enqueued.
struct ChosenAlgo {
  AlgoChoice choice;
  Tensor workspace;
  void* workspace_ptr() const { return workspace.defined() ? workspace.raw_data() : nullptr; }
};

// The math type requested before a search (descriptor state during it).
cudnnMathType_t requested_math(DType dtype, bool allow_tf32);

// Each sets d.conv's math type to the choice's before returning. The
// pointers are only read (or the output written) in benchmark mode. A
// candidate whose workspace cannot be allocated gives way to the next.
ChosenAlgo choose_forward(cudnnHandle_t h, ConvDescriptors& d, const ConvKey& key, const void* x, const void* w,
                          void* y);
ChosenAlgo choose_backward_data(cudnnHandle_t h, ConvDescriptors& d, const ConvKey& key, const void* w,
                                const void* dy, void* dx);
ChosenAlgo choose_backward_filter(cudnnHandle_t h, ConvDescriptors& d, const ConvKey& key, const void* x,
                                  const void* dy, void* dw);

// Entries in the process-wide cache (all directions); clear for tests.
size_t conv_algo_cache_size();
void clear_conv_algo_cache();

}  // namespace minidl::cudnn_conv
