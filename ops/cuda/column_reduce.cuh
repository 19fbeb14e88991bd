// Tiled column reduction: `cols` independent columns of `len` values each,
// where value j of neighbouring columns are neighbours in memory (LayerNorm's
// weight/bias gradients: a column per channel over the rows). PyTorch's
// layer_norm GammaBetaBackward pattern: a 2-D block of 32 columns x 16 row
// slices, each thread summing a strided subset of one chunk's rows, combined
// in shared memory in a fixed order; more than one chunk writes partials that
// launch_row_reduce combines in chunk order. No atomics; the order is
// cuda_math::ColumnTiling's (tile sizes and their reasoning there), checked
// on the host by tests/test_cuda_kernel_math.cpp. Ran on an H100 in the norms'
// parameter-gradient cases (tests/test_cuda_ops, test_cuda_ops_half, 2026-11-27)
// with 128-row chunks; the longer chunks of long columns (at most
// ColumnTiling::kMaxChunks) are compiled, not run on a GPU (2026-11-28).
//
// A Loader is row_reduce.cuh's (row(c), operator()(row, j)); Finish is called
// once per column, finish(c, row, acc), where row is load.row(c) after one
// chunk and the column index c (int64_t) after the second pass.
#pragma once

#include "minidl/ops/cuda/launch.cuh"
#include "minidl/ops/cuda/reduce_math.h"
#include "minidl/ops/cuda/row_reduce.cuh"

namespace minidl::cuda_kernels {

using Tiling = cuda_math::ColumnTiling;

template <bool kLong, class Acc, class Loader, class Combine, class Finish>
__global__ void __launch_bounds__(Tiling::kCols* Tiling::kSlices)
    column_tile_kernel(int64_t cols, int64_t len, int64_t chunk_rows, Acc init, Loader load, Combine combine,
                       Finish finish, Acc* partials) {
  // Raw storage: Acc may have default member initializers (no __shared__ constructor).
  __shared__ alignas(Acc) unsigned char raw[sizeof(Acc) * Tiling::kCols * Tiling::kSlices];
  Acc* tile = reinterpret_cast<Acc*>(raw);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t b = blockIdx.y, c = static_cast<int64_t>(blockIdx.x) * Tiling::kCols + tx;
  const int64_t end = Tiling::chunk_end(chunk_rows, b, len);
  Acc acc = init;
  if (c < cols) {
    const auto row = load.row(c);
    // Rows k = 0, 1, ... of this slice in order (Tiling::row), eight at a
    // time. kLong: chunks longer than kMinChunkRows repeat the unrolled
    // pass; a kernel of its own, as the loop costs the 128-row kernels
    // (LayerNorm's, H100-measured) 8-12 more registers (ptxas -v, sm_90).
    constexpr int kUnroll = static_cast<int>(Tiling::kMinChunkRows / Tiling::kSlices);
    const int64_t rows = kLong ? chunk_rows : Tiling::kMinChunkRows;
    for (int64_t k0 = 0; k0 == 0 || (kLong && Tiling::row(rows, b, ty, k0) < end); k0 += kUnroll) {
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int64_t j = Tiling::row(rows, b, ty, k0 + k);
        if (j < end) acc = combine(acc, load(row, j));
      }
    }
  }
  tile[ty * Tiling::kCols + tx] = acc;
  __syncthreads();
  if (ty != 0 || c >= cols) return;
  Acc total = tile[tx];
  for (int t = 1; t < Tiling::kSlices; ++t) total = combine(total, tile[t * Tiling::kCols + tx]);
  if (partials)
    partials[b * cols + c] = total;
  else
    finish(c, load.row(c), total);
}

// Column c's chunk partials, for the second pass (interleaved rows: the
// partials of neighbouring columns are neighbours).
template <class Acc>
struct ChunkPartialsLoader {
  const Acc* partials;
  int64_t cols;
  using Row = int64_t;
  __device__ Row row(int64_t c) const { return c; }
  __device__ Acc operator()(Row c, int64_t b) const { return partials[b * cols + c]; }
};

// Whether launch_column_reduce takes these sizes (the chunks index gridDim.y).
inline bool column_reduce_applies(int64_t cols, int64_t len) {
  return cols > 0 && len > 0 && Tiling::chunks(len) <= 65535 &&
         (cols + Tiling::kCols - 1) / Tiling::kCols <= 0x7FFFFFFF;
}

template <class Acc, class Loader, class Combine, class Finish>
void launch_column_reduce(const LaunchContext& ctx, int64_t cols, int64_t len, Acc init, Loader load,
                          Combine combine, Finish finish, const char* op) {
  const int64_t chunks = Tiling::chunks(len), chunk_rows = Tiling::chunk_rows(len);
  const dim3 block(Tiling::kCols, Tiling::kSlices);
  const dim3 grid(static_cast<unsigned>((cols + Tiling::kCols - 1) / Tiling::kCols), static_cast<unsigned>(chunks));
  if (chunks == 1) {  // len <= kMinChunkRows
    column_tile_kernel<false><<<grid, block, 0, ctx.stream>>>(cols, len, chunk_rows, init, load, combine, finish,
                                                              static_cast<Acc*>(nullptr));
    MINIDL_CUDA_KERNEL_LAUNCH_CHECK(op);
    return;
  }
  Tensor partials = temp_buffer(chunks * cols * static_cast<int64_t>(sizeof(Acc)), ctx.device);
  Acc* p = static_cast<Acc*>(partials.raw_data());
  if (chunk_rows > Tiling::kMinChunkRows)
    column_tile_kernel<true><<<grid, block, 0, ctx.stream>>>(cols, len, chunk_rows, init, load, combine, finish, p);
  else
    column_tile_kernel<false><<<grid, block, 0, ctx.stream>>>(cols, len, chunk_rows, init, load, combine, finish, p);
  MINIDL_CUDA_KERNEL_LAUNCH_CHECK(op);
  // Chunk order per column; the stream orders the partials' reuse after it.
  launch_row_reduce(ctx, cols, chunks, init, ChunkPartialsLoader<Acc>{p, cols}, combine, finish, op,
                    RowAccess::kInterleaved);
}

}  // namespace minidl::cuda_kernels
