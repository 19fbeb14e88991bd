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

// MaxTensors: PyTorch's per-depth limit, lower where Extra is wide.
template <int L, class Extra, int MaxTensors = cuda_math::multi_tensor_max_tensors(L)>
struct TensorListMeta {
  static constexpr int kMaxTensors = MaxTensors;
  void* ptrs[L][kMaxTensors];
  int64_t numel[kMaxTensors];
  Extra extra[kMaxTensors];
  unsigned char block_to_slot[cuda_math::kMultiTensorBlocks];
  int block_to_chunk[cuda_math::kMultiTensorBlocks];
};

// Block b runs op, bound to the tensor in slot block_to_slot[b] (once a
// block: ops/cuda/multi_tensor_math.h), over chunk block_to_chunk[b] of it.
template <class Op>
__global__ void __launch_bounds__(cuda_math::kMultiTensorThreads)
    multi_tensor_kernel(TensorListMeta<Op::kDepth, typename Op::Extra> meta, Op op) {
  const int slot = meta.block_to_slot[blockIdx.x];
  void* ptr[Op::kDepth];
#pragma unroll
  for (int k = 0; k < Op::kDepth; ++k) ptr[k] = meta.ptrs[k][slot];
  const auto element = op.bind(meta.extra[slot]);
  const int64_t c = meta.block_to_chunk[blockIdx.x];
  const int64_t end = cuda_math::chunk_end(c, cuda_math::kMultiTensorChunk, meta.numel[slot]);
  for (int64_t i = cuda_math::chunk_begin(c, cuda_math::kMultiTensorChunk) + threadIdx.x; i < end; i += blockDim.x)
    element(ptr, i);
}

// Calls launch(meta, blocks) once per launch of the plan for these lists:
// lists.ptrs[k][l] is list l's buffer of tensor k (nullptr for an absent list,
// which the op then must not read); numels[k], extras[k] likewise.
template <class Meta, int L, class Extra, class Launch>
void for_each_launch(const cuda_math::MultiTensorLists<L, Extra>& lists, Launch&& launch) {
  static_assert(Meta::kMaxTensors <= 255, "block_to_slot is a byte");
  static_assert(sizeof(Meta) <= 4096 - 128, "multi_tensor_apply: kernel arguments over 4 KB");
  for (const cuda_math::MultiTensorLaunch& plan :
       cuda_math::plan_multi_tensor(lists.numels, Meta::kMaxTensors, cuda_math::kMultiTensorBlocks,
                                    cuda_math::kMultiTensorChunk)) {
    Meta meta{};
    for (size_t s = 0; s < plan.tensors.size(); ++s) {
      const auto k = static_cast<size_t>(plan.tensors[s]);
      for (int l = 0; l < L; ++l) meta.ptrs[l][s] = lists.ptrs[k][static_cast<size_t>(l)];
      meta.numel[s] = lists.numels[k];
      meta.extra[s] = lists.extras[k];
    }
    for (size_t b = 0; b < plan.blocks.size(); ++b) {
      meta.block_to_slot[b] = static_cast<unsigned char>(plan.blocks[b].first);
      meta.block_to_chunk[b] = static_cast<int>(plan.blocks[b].second);
    }
    launch(meta, static_cast<unsigned>(plan.blocks.size()));
  }
}

// op.bind(extra)(ptr, i) for every element i of every tensor of the lists.
template <class Op>
void multi_tensor_apply(const LaunchContext& ctx, const cuda_math::MultiTensorLists<Op::kDepth, typename Op::Extra>& lists,
                        const Op& op, const char* name) {
  static_assert(sizeof(TensorListMeta<Op::kDepth, typename Op::Extra>) + sizeof(Op) <= 4096,
                "multi_tensor_apply: kernel arguments over 4 KB");
  using Meta = TensorListMeta<Op::kDepth, typename Op::Extra>;
  for_each_launch<Meta>(lists, [&](const Meta& meta, unsigned blocks) {
    multi_tensor_kernel<Op><<<blocks, cuda_math::kMultiTensorThreads, 0, ctx.stream>>>(meta, op);
    MINIDL_CUDA_KERNEL_LAUNCH_CHECK(name);
  });
}

}  // namespace minidl::cuda_kernels
