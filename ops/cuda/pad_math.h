// The index math of pad, shared by the CPU op (ops/pad.cpp: pad_source_index
// builds PadGeometry's source tables) and the CUDA kernels (ops/cuda/pad.cu),
// and tested on the CPU: the per-dimension source rule, the forward's source
// offset and the backward's gather over every output that read an input
// element (no atomics; a fixed order). All of it is computed per thread from
// the sizes, pads and mode (PadMaps, a kernel argument): no index table is
// uploaded, so the kernels can be captured in a CUDA graph. Plain C++ with
// MINIDL_HOST_DEVICE, no CUDA header.
#pragma once

#include <cstdint>
#include <vector>

#include "minidl/core/half.h"  // MINIDL_HOST_DEVICE

namespace minidl::cuda_math {

inline constexpr int kMaxPadDims = 8;

// ops/pad.h's PadMode as an int (its order; ops/pad.cpp static_asserts it).
inline constexpr int kPadConstant = 0, kPadReflect = 1, kPadReplicate = 2, kPadCircular = 3;

// Circular padding: how many input indices are left once the negative pads
// have cropped (PyTorch crops first, then wraps within what is left).
MINIDL_HOST_DEVICE inline int64_t circular_kept(int64_t left, int64_t in, int64_t out) {
  const int64_t right = out - in - left;
  return in - (left < 0 ? -left : 0) - (right < 0 ? -right : 0);
}

// The input index that output index i of one padded dimension (in + left +
// right = out) reads, or -1 where it is the padding value: reflect mirrors
// without repeating the edge, replicate clamps, circular wraps within the
// cropped input (as PyTorch's _pad_circular: a positive pad copies from the
// cropped centre, so with input 0 1 2 3 4 and pads (2, -1) it gives 2 3 0 1 2 3).
MINIDL_HOST_DEVICE inline int64_t pad_source_index(int64_t i, int64_t left, int64_t in, int64_t out, int mode) {
  const int64_t s = i - left;
  if (s >= 0 && s < in) return s;
  switch (mode) {
    case kPadReflect: return s < 0 ? -s : 2 * (in - 1) - s;
    case kPadReplicate: return s < 0 ? 0 : in - 1;
    case kPadCircular: {
      const int64_t kept = circular_kept(left, in, out);
      if (kept <= 0) return -1;  // nothing to wrap (ops/pad.cpp refuses a positive pad here)
      const int64_t first_kept = left < 0 ? -left : 0, centre = i - (left > 0 ? left : 0);
      return first_kept + ((centre % kept) + kept) % kept;
    }
    default: return -1;
  }
}

// The output indices of one padded dimension that read input index j, in
// increasing order: a range, up to three single indices, a range.
struct PadReaders {
  int64_t lo_begin = 0, lo_end = 0;  // replicate's left pad when j == 0
  int64_t single[3] = {};
  int n_single = 0;
  int64_t hi_begin = 0, hi_end = 0;  // replicate's right pad when j == in - 1

  MINIDL_HOST_DEVICE int64_t count() const { return (lo_end - lo_begin) + n_single + (hi_end - hi_begin); }
  MINIDL_HOST_DEVICE int64_t at(int64_t k) const {
    if (k < lo_end - lo_begin) return lo_begin + k;
    k -= lo_end - lo_begin;
    if (k < n_single) return single[k];
    return hi_begin + (k - n_single);
  }
};

// Per dimension, with pads below the size (reflect) or positive pads at most
// the cropped size (circular) as ops/pad.cpp checks, each input index is read
// directly (i = j + left), mirrored once on either side (reflect), wrapped
// once on either side, a cropped length away (circular) or repeated over a
// whole pad (replicate, the edges).
// Every candidate is checked against pad_source_index, so an index outside
// [0, out) or a wrong guess is dropped rather than trusted.
MINIDL_HOST_DEVICE inline PadReaders pad_readers(int64_t j, int64_t left, int64_t in, int64_t out, int mode) {
  PadReaders r;
  auto reads = [&](int64_t i) { return i >= 0 && i < out && pad_source_index(i, left, in, out, mode) == j; };
  auto single = [&](int64_t i) {
    if (reads(i)) r.single[r.n_single++] = i;
  };
  if (mode == kPadReplicate && j == 0) {
    r.lo_end = left < out ? left : out;
    if (r.lo_end <= 0 || !reads(0) || !reads(r.lo_end - 1)) r.lo_end = 0;  // clamped: all or none read j
  }
  if (mode == kPadReflect && j >= 1) single(left - j);
  const int64_t kept = mode == kPadCircular ? circular_kept(left, in, out) : 0;
  if (mode == kPadCircular) single(j + left - kept);
  single(j + left);
  if (mode == kPadReflect && j <= in - 2) single(left + 2 * (in - 1) - j);
  if (mode == kPadCircular) single(j + left + kept);
  if (mode == kPadReplicate && j == in - 1) {
    r.hi_begin = left + in > 0 ? left + in : 0;
    r.hi_end = out;
    if (r.hi_begin >= r.hi_end || !reads(r.hi_begin) || !reads(r.hi_end - 1)) r.hi_begin = r.hi_end = 0;
  }
  return r;
}

// ops/pad.h's PadGeometry for a kernel: per padded dim (outermost first) its
// sizes and left pad, and the mode.
struct PadMaps {
  int m = 0;  // padded dims, outermost first
  int mode = kPadConstant;
  int64_t in_sizes[kMaxPadDims] = {}, out_sizes[kMaxPadDims] = {}, left[kMaxPadDims] = {};
  int64_t in_plane = 1, out_plane = 1;

  // Offset in the input plane that output plane offset o reads, or -1 (padding value).
  MINIDL_HOST_DEVICE int64_t source_offset(int64_t o) const {
    int64_t offset = 0, stride = 1;
    for (int d = m - 1; d >= 0; --d) {
      const int64_t s = pad_source_index(o % out_sizes[d], left[d], in_sizes[d], out_sizes[d], mode);
      o /= out_sizes[d];
      if (s < 0) return -1;
      offset += s * stride;
      stride *= in_sizes[d];
    }
    return offset;
  }

  // Calls f(output plane offset) for every output that reads input plane
  // offset e, in increasing order: the cartesian product of each dimension's
  // readers, row-major.
  template <class F>
  MINIDL_HOST_DEVICE void for_each_reader(int64_t e, F&& f) const {
    PadReaders r[kMaxPadDims];
    int64_t pos[kMaxPadDims];
    for (int d = m - 1; d >= 0; --d) {
      r[d] = pad_readers(e % in_sizes[d], left[d], in_sizes[d], out_sizes[d], mode);
      e /= in_sizes[d];
      pos[d] = 0;
      if (r[d].count() == 0) return;  // nobody reads this index
    }
    while (true) {
      int64_t o = 0;
      for (int d = 0; d < m; ++d) o = o * out_sizes[d] + r[d].at(pos[d]);
      f(o);
      int d = m - 1;  // odometer over the reader lists
      for (; d >= 0; --d) {
        if (++pos[d] < r[d].count()) break;
        pos[d] = 0;
      }
      if (d < 0) return;
    }
  }
};

// From the per-dimension sizes and left pads (ops/pad.h's PadGeometry) and the
// mode (kPadConstant...). False when there are more than kMaxPadDims padded dims.
inline bool make_pad_maps(const std::vector<int64_t>& in_sizes, const std::vector<int64_t>& out_sizes,
                          const std::vector<int64_t>& left, int mode, PadMaps& maps) {
  maps = PadMaps();
  if (in_sizes.size() > static_cast<size_t>(kMaxPadDims)) return false;
  maps.m = static_cast<int>(in_sizes.size());
  maps.mode = mode;
  for (int d = 0; d < maps.m; ++d) {
    maps.in_sizes[d] = in_sizes[d];
    maps.out_sizes[d] = out_sizes[d];
    maps.left[d] = left[d];
    maps.in_plane *= in_sizes[d];
    maps.out_plane *= out_sizes[d];
  }
  return true;
}

}  // namespace minidl::cuda_math
