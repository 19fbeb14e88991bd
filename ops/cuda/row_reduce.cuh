// The one reduction pattern of the CUDA kernels: many independent rows, each
// reduced to one value. A block per row (threads stride over the row, then
// CUB's BlockReduce), or a thread per row when rows are short. No atomics:
// every element goes to a fixed thread and CUB combines in a fixed order, so
// results are deterministic run to run (they differ from the CPU's order, so
// compare with a tolerance).
//
// Few long rows are split into chunks across blocks first (see below).
//
// A Loader is a device functor with
//   using Row = ...;                     // what row r needs (its offsets)
//   Row row(int64_t r) const;
//   Acc operator()(const Row&, int64_t j) const;   // element j of the row, as Acc
// and Finish is called once per row by one thread: finish(r, row, acc).
// Combine must be associative and commutative (ties broken by index, say).
#pragma once

#include <cub/block/block_reduce.cuh>

#include "minidl/ops/cuda/launch.cuh"

namespace minidl::cuda_kernels {

// One thread's share of a row: elements j, j + kReduceThreads, ... below end,
// four loads issued before they are combined (one load in flight per thread
// left an H100 far under its memory bandwidth). The order of combination
// depends on the indices only, so results stay deterministic.
template <class Acc, class Loader, class Combine>
__device__ Acc strided_span(const Loader& load, const typename Loader::Row& row, int64_t j, int64_t end, Acc acc,
                            const Combine& combine) {
  constexpr int64_t T = kReduceThreads;
  for (; j + 3 * T < end; j += 4 * T) {
    const Acc v0 = load(row, j), v1 = load(row, j + T), v2 = load(row, j + 2 * T), v3 = load(row, j + 3 * T);
    acc = combine(acc, combine(combine(v0, v1), combine(v2, v3)));
  }
  for (; j < end; j += T) acc = combine(acc, load(row, j));
  return acc;
}

template <class Acc, class Loader, class Combine, class Finish>
__global__ void __launch_bounds__(kReduceThreads)
    block_rows_kernel(int64_t rows, int64_t len, Acc init, Loader load, Combine combine, Finish finish) {
  using BlockReduce = cub::BlockReduce<Acc, kReduceThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const auto row = load.row(r);
    const Acc total = BlockReduce(temp).Reduce(strided_span(load, row, threadIdx.x, len, init, combine), combine);
    if (threadIdx.x == 0) finish(r, row, total);
    __syncthreads();  // temp is reused by the next row
  }
}

template <class Acc, class Loader, class Combine, class Finish>
__global__ void thread_rows_kernel(int64_t rows, int64_t len, Acc init, Loader load, Combine combine, Finish finish) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const auto row = load.row(r);
    Acc acc = init;
    for (int64_t j = 0; j < len; ++j) acc = combine(acc, load(row, j));
    finish(r, row, acc);
  }
}

// Few long rows (a global sum, BatchNorm's per-channel statistics): each row
// is cut into chunks of kChunkLen elements, a block per chunk writes a
// partial result, and a thread per row combines its partials in chunk order
// before finish. Still deterministic: the partition depends on len only.
template <class Acc, class Loader, class Combine>
__global__ void __launch_bounds__(kReduceThreads)
    chunk_partials_kernel(int64_t len, int64_t chunks, int64_t chunk_len, Acc init, Loader load, Combine combine,
                          Acc* partials) {
  using BlockReduce = cub::BlockReduce<Acc, kReduceThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  const int64_t b = blockIdx.x, r = b / chunks, c = b % chunks;
  const auto row = load.row(r);
  const int64_t begin = c * chunk_len, end = begin + chunk_len < len ? begin + chunk_len : len;
  const Acc total = BlockReduce(temp).Reduce(strided_span(load, row, begin + threadIdx.x, end, init, combine), combine);
  if (threadIdx.x == 0) partials[b] = total;
}

template <class Acc, class Loader, class Combine, class Finish>
__global__ void combine_partials_kernel(int64_t rows, int64_t chunks, Acc init, Loader load, Combine combine,
                                        Finish finish, const Acc* partials) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Acc acc = init;
    for (int64_t c = 0; c < chunks; ++c) acc = combine(acc, partials[r * chunks + c]);
    finish(r, load.row(r), acc);
  }
}

// Rows shorter than this go a thread each (a block would idle most threads).
inline constexpr int64_t kThreadPerRowMaxLen = 32;
// Rows are split into chunks when there are fewer rows than this (about two
// blocks per SM of an H100) and a row is longer than two chunks.
inline constexpr int64_t kSplitRowsBelow = 256;
inline constexpr int64_t kChunkLen = 16384;

// How rows lie in memory. kInterleaved: element j of neighbouring rows are
// neighbours (columns of a row-major block: sum_columns, softmax over an inner
// dim); a thread per row then reads coalesced, so many such rows go a thread
// each whatever their length.
enum class RowAccess { kContiguous, kInterleaved };
inline constexpr int64_t kInterleavedThreadRows = 1024;

template <class Acc, class Loader, class Combine, class Finish>
void launch_row_reduce(const LaunchContext& ctx, int64_t rows, int64_t len, Acc init, Loader load, Combine combine,
                       Finish finish, const char* op, RowAccess access = RowAccess::kContiguous) {
  if (rows == 0) return;
  const int64_t chunks = (len + kChunkLen - 1) / kChunkLen;
  if (rows < kSplitRowsBelow && chunks > 2 && rows * chunks <= 0x7FFFFFFF) {
    Tensor partials = temp_buffer(rows * chunks * static_cast<int64_t>(sizeof(Acc)), ctx.device);
    Acc* p = static_cast<Acc*>(partials.raw_data());
    chunk_partials_kernel<<<static_cast<unsigned>(rows * chunks), kReduceThreads, 0, ctx.stream>>>(
        len, chunks, kChunkLen, init, load, combine, p);
    MINIDL_CUDA_KERNEL_LAUNCH_CHECK(op);
    combine_partials_kernel<<<blocks_for(rows), kThreads, 0, ctx.stream>>>(rows, chunks, init, load, combine, finish, p);
    MINIDL_CUDA_KERNEL_LAUNCH_CHECK(op);
    return;  // partials go back to the cache; the stream orders their reuse after these kernels
  }
  if (len <= kThreadPerRowMaxLen || (access == RowAccess::kInterleaved && rows >= kInterleavedThreadRows)) {
    thread_rows_kernel<<<blocks_for(rows), kThreads, 0, ctx.stream>>>(rows, len, init, load, combine, finish);
  } else {
    const int blocks = static_cast<int>(rows < kMaxBlocks ? rows : kMaxBlocks);
    block_rows_kernel<<<blocks, kReduceThreads, 0, ctx.stream>>>(rows, len, init, load, combine, finish);
  }
  MINIDL_CUDA_KERNEL_LAUNCH_CHECK(op);
}

template <class T>
struct SumOp {
  __host__ __device__ T operator()(const T& a, const T& b) const { return a + b; }
};

}  // namespace minidl::cuda_kernels
