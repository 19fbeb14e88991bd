// The index math of the CUDA pad kernels (ops/cuda/pad.cu), shared with the
// CPU tests: ops/pad.h's PadGeometry as flat arrays (the per-dimension source
// maps, and their inverse: which output indices read each input index), the
// forward's source offset and the backward's gather over every output that
// read an input element (no atomics; a fixed order). Plain C++ with
// MINIDL_HOST_DEVICE, no CUDA header.
#pragma once

#include <cstdint>
#include <vector>

#include "minidl/core/half.h"  // MINIDL_HOST_DEVICE

namespace minidl::cuda_math {

inline constexpr int kMaxPadDims = 8;

struct PadMaps {
  int m = 0;  // padded dims, outermost first
  int64_t in_sizes[kMaxPadDims] = {}, out_sizes[kMaxPadDims] = {};
  int64_t in_plane = 1, out_plane = 1;
  // Into one array: source[d] has out_sizes[d] entries (input index or -1);
  // readers[d] lists, for each input index j, the outputs i with source[d][i] == j,
  // in increasing i, between reader_start[d][j] and reader_start[d][j + 1].
  const int64_t* source[kMaxPadDims] = {};
  const int64_t* reader_start[kMaxPadDims] = {};
  const int64_t* readers[kMaxPadDims] = {};

  // Offset in the input plane that output plane offset o reads, or -1 (padding value).
  MINIDL_HOST_DEVICE int64_t source_offset(int64_t o) const {
    int64_t offset = 0, stride = 1;
    for (int d = m - 1; d >= 0; --d) {
      const int64_t s = source[d][o % out_sizes[d]];
      o /= out_sizes[d];
      if (s < 0) return -1;
      offset += s * stride;
      stride *= in_sizes[d];
    }
    return offset;
  }

  // Calls f(output plane offset) for every output that reads input plane
  // offset e: the cartesian product of each dimension's readers, row-major.
  template <class F>
  MINIDL_HOST_DEVICE void for_each_reader(int64_t e, F&& f) const {
    int64_t j[kMaxPadDims], pos[kMaxPadDims];
    for (int d = m - 1; d >= 0; --d) {
      j[d] = e % in_sizes[d];
      e /= in_sizes[d];
    }
    for (int d = 0; d < m; ++d) {
      pos[d] = reader_start[d][j[d]];
      if (pos[d] == reader_start[d][j[d] + 1]) return;  // nobody reads this index
    }
    while (true) {
      int64_t o = 0;
      for (int d = 0; d < m; ++d) o = o * out_sizes[d] + readers[d][pos[d]];
      f(o);
      int d = m - 1;  // odometer over the reader lists
      for (; d >= 0; --d) {
        if (++pos[d] < reader_start[d][j[d] + 1]) break;
        pos[d] = reader_start[d][j[d]];
      }
      if (d < 0) return;
    }
  }
};

// Lays the maps out in `flat` (source, then reader_start, then readers, per
// dim) and returns their offsets there: pointers are set by bind().
struct PadMapsLayout {
  std::vector<int64_t> flat;
  int64_t source_at[kMaxPadDims] = {}, start_at[kMaxPadDims] = {}, readers_at[kMaxPadDims] = {};

  void bind(PadMaps& maps, const int64_t* base) const {
    for (int d = 0; d < maps.m; ++d) {
      maps.source[d] = base + source_at[d];
      maps.reader_start[d] = base + start_at[d];
      maps.readers[d] = base + readers_at[d];
    }
  }
};

// From the per-dimension sizes and source maps (ops/pad.h's PadGeometry).
// False when there are more than kMaxPadDims padded dims.
inline bool make_pad_maps(const std::vector<int64_t>& in_sizes, const std::vector<int64_t>& out_sizes,
                          const std::vector<std::vector<int64_t>>& source, PadMaps& maps, PadMapsLayout& layout) {
  maps = PadMaps();
  layout = PadMapsLayout();
  if (in_sizes.size() > static_cast<size_t>(kMaxPadDims)) return false;
  maps.m = static_cast<int>(in_sizes.size());
  for (int d = 0; d < maps.m; ++d) {
    maps.in_sizes[d] = in_sizes[d];
    maps.out_sizes[d] = out_sizes[d];
    maps.in_plane *= in_sizes[d];
    maps.out_plane *= out_sizes[d];
    std::vector<int64_t>& f = layout.flat;
    layout.source_at[d] = static_cast<int64_t>(f.size());
    f.insert(f.end(), source[d].begin(), source[d].end());
    std::vector<int64_t> count(static_cast<size_t>(in_sizes[d]) + 1, 0);
    for (int64_t s : source[d])
      if (s >= 0) ++count[static_cast<size_t>(s) + 1];
    for (size_t j = 1; j < count.size(); ++j) count[j] += count[j - 1];
    layout.start_at[d] = static_cast<int64_t>(f.size());
    f.insert(f.end(), count.begin(), count.end());
    layout.readers_at[d] = static_cast<int64_t>(f.size());
    std::vector<int64_t> readers(static_cast<size_t>(count.back()));
    std::vector<int64_t> next(count.begin(), count.end() - 1);
    for (size_t i = 0; i < source[d].size(); ++i)
      if (source[d][i] >= 0) readers[static_cast<size_t>(next[static_cast<size_t>(source[d][i])]++)] = static_cast<int64_t>(i);
    f.insert(f.end(), readers.begin(), readers.end());
  }
  return true;
}

}  // namespace minidl::cuda_math
