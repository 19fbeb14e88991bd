// PyTorch's multi_tensor_apply: one functor over the elements of many tensors
// in a few launches, the tensors' addresses and scalars in the kernel
// arguments (why not a device table: ops/cuda/multi_tensor_math.h, which also
// has the packing plan the CPU tests check). CUDA builds only.
#pragma once

#include <array>
#include <vector>

#include "minidl/ops/cuda/launch.cuh"
#include "minidl/ops/cuda/multi_tensor_math.h"

namespace minidl::cuda_kernels {

template <int L, class Extra>
struct TensorListMeta {
  static constexpr int kMaxTensors = cuda_math::multi_tensor_max_tensors(L);
  void* ptrs[L][kMaxTensors];
  int64_t numel[kMaxTensors];
  Extra extra[kMaxTensors];
  unsigned char block_to_slot[cuda_math::kMultiTensorBlocks];
  int block_to_chunk[cuda_math::kMultiTensorBlocks];
};

// Block b runs op over chunk block_to_chunk[b] of the tensor in slot block_to_slot[b].
template <class Op>
__global__ void __launch_bounds__(cuda_math::kMultiTensorThreads)
    multi_tensor_kernel(TensorListMeta<Op::kDepth, typename Op::Extra> meta, Op op) {
  const int slot = meta.block_to_slot[blockIdx.x];
  void* ptr[Op::kDepth];
#pragma unroll
  for (int k = 0; k < Op::kDepth; ++k) ptr[k] = meta.ptrs[k][slot];
  const typename Op::Extra extra = meta.extra[slot];
  const int64_t c = meta.block_to_chunk[blockIdx.x];
  const int64_t end = cuda_math::chunk_end(c, cuda_math::kMultiTensorChunk, meta.numel[slot]);
  for (int64_t i = cuda_math::chunk_begin(c, cuda_math::kMultiTensorChunk) + threadIdx.x; i < end; i += blockDim.x)
    op(ptr, extra, i);
}

// lists.ptrs[k][l]: list l's buffer of tensor k (nullptr for an absent list,
// which op then must not read); numels[k], extras[k] likewise.
template <class Op>
void multi_tensor_apply(const LaunchContext& ctx, const cuda_math::MultiTensorLists<Op>& lists, const Op& op,
                        const char* name) {
  const auto& ptrs = lists.ptrs;
  const auto& numels = lists.numels;
  const auto& extras = lists.extras;
  using Meta = TensorListMeta<Op::kDepth, typename Op::Extra>;
  static_assert(sizeof(Meta) + sizeof(Op) <= 4096, "multi_tensor_apply: kernel arguments over 4 KB");
  static_assert(Meta::kMaxTensors <= 255, "block_to_slot is a byte");
  for (const cuda_math::MultiTensorLaunch& launch :
       cuda_math::plan_multi_tensor(numels, Meta::kMaxTensors, cuda_math::kMultiTensorBlocks,
                                    cuda_math::kMultiTensorChunk)) {
    Meta meta{};
    for (size_t s = 0; s < launch.tensors.size(); ++s) {
      const auto k = static_cast<size_t>(launch.tensors[s]);
      for (int l = 0; l < Op::kDepth; ++l) meta.ptrs[l][s] = ptrs[k][static_cast<size_t>(l)];
      meta.numel[s] = numels[k];
      meta.extra[s] = extras[k];
    }
    for (size_t b = 0; b < launch.blocks.size(); ++b) {
      meta.block_to_slot[b] = static_cast<unsigned char>(launch.blocks[b].first);
      meta.block_to_chunk[b] = static_cast<int>(launch.blocks[b].second);
    }
    multi_tensor_kernel<Op><<<static_cast<unsigned>(launch.blocks.size()), cuda_math::kMultiTensorThreads, 0,
                              ctx.stream>>>(meta, op);
    MINIDL_CUDA_KERNEL_LAUNCH_CHECK(name);
  }
}

}  // namespace minidl::cuda_kernels
