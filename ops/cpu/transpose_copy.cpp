// Tiled copy of a transposed view (see ops/cpu/transpose_copy.h): d[i * ldd + j]
// = s[i + j * lds] for i < M, j < N, for every index of the outer dims.
// Panels of 64 bytes of dst columns (16 floats) are walked down i: each dst row
// gets whole cache lines, and the panel's source rows are read as sequential
// streams (a few pages at a time, not one page per element). 4-byte types move
// 8x8 blocks through registers (ops/cpu/transpose8.h: shuffles copy bits, so
// int32 and NaN payloads pass unchanged); other sizes and the edges go element
// by element in the same order. Bit copies: the result does not depend on the
// tiling or on the thread count.
#include "minidl/ops/cpu/transpose_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "minidl/core/dtype.h"
#include "minidl/ops/cpu/strided_loop.h"
#include "minidl/ops/cpu/transpose8.h"

namespace minidl {

namespace {

constexpr int64_t kPanelBytes = 64;  // one cache line of dst columns
constexpr int64_t kParallelNumel = 32768;

// Element by element over i in [i0, i1), j in [j0, j1).
template <class T>
void copy_elements(const T* s, int64_t lds, T* d, int64_t ldd, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j = j0; j < j1; ++j) d[i * ldd + j] = s[i + j * lds];
}

// One panel of dst columns [j0, j1) (j1 - j0 <= the panel width).
template <class T>
void copy_panel(const T* s, int64_t lds, T* d, int64_t ldd, int64_t M, int64_t j0, int64_t j1) {
  int64_t i = 0;
  if constexpr (sizeof(T) == 4) {
    const auto* sf = reinterpret_cast<const float*>(s);
    auto* df = reinterpret_cast<float*>(d);
    const int64_t j8 = j0 + (j1 - j0) / 8 * 8;  // 8-wide blocks of the panel
    if (j8 > j0) {
      for (; i + 8 <= M; i += 8)
        for (int64_t j = j0; j < j8; j += 8) transpose8::block(sf + i + j * lds, lds, df + i * ldd + j, ldd);
    }
    copy_elements(s, lds, d, ldd, 0, i, j8, j1);  // the panel's last columns (fewer than 8)
  }
  copy_elements(s, lds, d, ldd, i, M, j0, j1);  // the rows the blocks left (all of them for other sizes)
}

template <class T>
void copy_matrices(const T* src, const Shape& src_outer_strides, T* dst, const Shape& dst_outer_strides,
                   const Shape& outer, int64_t M, int64_t N, int64_t lds, int64_t ldd) {
  constexpr int64_t panel = std::max<int64_t>(1, kPanelBytes / static_cast<int64_t>(sizeof(T)));
  const int64_t panels = (N + panel - 1) / panel;
  int64_t count = 1;
  for (int64_t o : outer) count *= o;
  const int64_t tasks = count * panels;
#pragma omp parallel for schedule(static) if (tasks > 1 && count * M * N >= kParallelNumel)
  for (int64_t t = 0; t < tasks; ++t) {
    int64_t rest = t / panels, so = 0, dof = 0;
    for (size_t k = outer.size(); k-- > 0;) {
      const int64_t idx = rest % outer[k];
      rest /= outer[k];
      so += idx * src_outer_strides[k];
      dof += idx * dst_outer_strides[k];
    }
    const int64_t j0 = (t % panels) * panel;
    copy_panel(src + so, lds, dst + dof, ldd, M, j0, std::min(N, j0 + panel));
  }
}

}  // namespace

bool copy_transposed_cpu(const Tensor& dst, const Tensor& src) {
  // Cheap exits first: most copies (clones, small tensors) are not transposes.
  if (dst.dtype() != src.dtype() || src.is_contiguous() || dst.numel() < 64 || dst.shape() != src.shape())
    return false;
  // Dims contiguous on both sides merged (size-1 dims dropped), as for_each_row does.
  const MergedDims<2> m = merge_dims<2>(dst.shape(), {dst.strides(), src.strides()});
  if (m.empty) return false;  // nothing to copy: the general loop returns at once
  const Shape &dims = m.dims, &ds = m.strides[0], &ss = m.strides[1];
  const size_t nd = dims.size();
  if (nd < 2 || ds[nd - 1] != 1 || ss[nd - 2] != 1 || ss[nd - 1] == 1) return false;
  const int64_t M = dims[nd - 2], N = dims[nd - 1];
  if (M < 8 || N < 8) return false;  // short runs: the general loop is as good
  const Shape outer(dims.begin(), dims.end() - 2), so(ss.begin(), ss.end() - 2), dso(ds.begin(), ds.end() - 2);
  const int64_t lds = ss[nd - 1], ldd = ds[nd - 2];
  auto run = [&](auto tag) {
    using T = decltype(tag);
    copy_matrices(static_cast<const T*>(src.raw_data()), so, static_cast<T*>(dst.raw_data()), dso, outer, M, N, lds,
                  ldd);
  };
  switch (element_size(dst.dtype())) {
    case 1: run(uint8_t{}); return true;
    case 2: run(uint16_t{}); return true;
    case 4: run(uint32_t{}); return true;
    case 8: run(uint64_t{}); return true;
    default: return false;
  }
}

}  // namespace minidl
