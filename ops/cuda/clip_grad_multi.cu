// CUDA kernels of clip_grad_norm_'s multi-tensor path (ops/fused_optim.h's
// vector_norms_stub = _foreach_norm, clip_grad_scale_multi_stub): the norms
// of all gradients of one dtype in a few launches and the scaling of all of
// them in a few more, on the current stream of their device; the total norm
// is never read on the host. The norms are deterministic (a fixed block per
// chunk, CUB's BlockReduce, partials combined in chunk order by one thread
// per tensor: ops/cuda/multi_tensor_math.h, run by the CPU tests), no
// atomics. float16/bfloat16 gradients are read as float and scaled in float.
// float32/float64/float16/bfloat16 checked against the CPU kernels on an H100
// (tests/test_cuda_multi_tensor, 2026-11-27).
#include <cub/block/block_reduce.cuh>

#include "minidl/ops/cuda/multi_tensor_apply.cuh"
#include "minidl/ops/fused_optim.h"

namespace minidl {

namespace {

using cuda_kernels::LaunchContext;
using cuda_math::kMultiTensorChunk;
using cuda_math::kMultiTensorThreads;
// extra: where the tensor's partials start; 64 tensors a launch keep it under 4 KB.
using PartialsMeta = cuda_kernels::TensorListMeta<1, int64_t, 64>;

// Block b: partials[offset + chunk] = the combined norm terms of its chunk.
template <class T>
__global__ void __launch_bounds__(kMultiTensorThreads)
    norm_partials_kernel(PartialsMeta meta, double p, double* partials) {
  using BlockReduce = cub::BlockReduce<double, kMultiTensorThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  const int slot = meta.block_to_slot[blockIdx.x];
  const T* x = static_cast<const T*>(meta.ptrs[0][slot]);
  const int64_t c = meta.block_to_chunk[blockIdx.x];
  const int64_t end = cuda_math::chunk_end(c, kMultiTensorChunk, meta.numel[slot]);
  const cuda_math::NormCombine combine{isinf(p) != 0};
  double acc = 0.0;
  for (int64_t i = cuda_math::chunk_begin(c, kMultiTensorChunk) + threadIdx.x; i < end; i += blockDim.x)
    acc = combine(acc, cuda_math::norm_term(static_cast<double>(cuda_math::to_opmath(x[i])), p));
  const double total = BlockReduce(temp).Reduce(acc, combine);
  if (threadIdx.x == 0) partials[meta.extra[slot] + c] = total;
}

// Up to kFinishBatch tensors' outputs and partial ranges, in the kernel arguments.
constexpr int kFinishBatch = 128;
struct FinishBatch {
  double* out[kFinishBatch];
  int64_t begin[kFinishBatch], count[kFinishBatch];
  int n;
};
static_assert(sizeof(FinishBatch) + 2 * sizeof(double*) <= 4096, "kernel arguments over 4 KB");

__global__ void norm_finish_kernel(FinishBatch batch, const double* partials, double p) {
  const int k = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (k < batch.n) *batch.out[k] = cuda_math::finish_from_partials(partials + batch.begin[k], batch.count[k], p);
}

void vector_norms_cuda(const VectorNormsArgs& args) {
  check_vector_norms(args);
  if (args.xs.empty()) return;
  const Device device = args.xs.front().device();
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(args.xs.front().dtype(), "_foreach_norm", [&] {
    const LaunchContext ctx(device);
    cuda_math::MultiTensorLists<1, int64_t> lists;
    for (const Tensor& x : args.xs) lists.numels.push_back(x.numel());
    const std::vector<int64_t> offsets = cuda_math::partial_offsets(lists.numels, kMultiTensorChunk);
    for (size_t k = 0; k < args.xs.size(); ++k) {
      lists.ptrs.push_back({args.xs[k].data_ptr<scalar_t>()});
      lists.extras.push_back(offsets[k]);
    }
    // Alive until the last kernel reading it is enqueued (the allocator reuses it in stream order).
    const Tensor partials = cuda_kernels::temp_buffer(offsets.back() * static_cast<int64_t>(sizeof(double)), device);
    double* part = static_cast<double*>(partials.raw_data());
    cuda_kernels::for_each_launch<PartialsMeta>(lists, [&](const PartialsMeta& meta, unsigned blocks) {
      norm_partials_kernel<scalar_t><<<blocks, kMultiTensorThreads, 0, ctx.stream>>>(meta, args.norm_type, part);
      MINIDL_CUDA_KERNEL_LAUNCH_CHECK("_foreach_norm");
    });
    for (size_t first = 0; first < args.xs.size(); first += kFinishBatch) {  // empty tensors too: norm 0
      FinishBatch batch{};
      batch.n = static_cast<int>(std::min<size_t>(kFinishBatch, args.xs.size() - first));
      for (int j = 0; j < batch.n; ++j) {
        const size_t k = first + static_cast<size_t>(j);
        batch.out[j] = args.outs[k].data_ptr<double>();
        batch.begin[j] = offsets[k];
        batch.count[j] = offsets[k + 1] - offsets[k];
      }
      norm_finish_kernel<<<1, kFinishBatch, 0, ctx.stream>>>(batch, part, args.norm_type);
      MINIDL_CUDA_KERNEL_LAUNCH_CHECK("_foreach_norm");
    }
  });
}

void clip_grad_scale_multi_cuda(const ClipGradScaleMultiArgs& args) {
  check_clip_grad_scale_multi(args);
  if (args.grads.empty()) return;
  const Device device = args.grads.front().device();
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(args.grads.front().dtype(), "clip_grad_norm_", [&] {
    using Op = cuda_math::ClipScaleOp<scalar_t>;
    const LaunchContext ctx(device);
    cuda_math::OpLists<Op> lists;
    for (const Tensor& g : args.grads) {
      lists.ptrs.push_back({g.data_ptr<scalar_t>()});
      lists.numels.push_back(g.numel());
      lists.extras.push_back(0);
    }
    cuda_kernels::multi_tensor_apply(ctx, lists, Op{args.total_norm.data_ptr<double>(), args.max_norm},
                                     "clip_grad_norm_");
  });
}

}  // namespace

void register_clip_grad_multi_cuda_kernels() {
  vector_norms_stub.set(DeviceType::CUDA, vector_norms_cuda);
  clip_grad_scale_multi_stub.set(DeviceType::CUDA, clip_grad_scale_multi_cuda);
}

}  // namespace minidl
