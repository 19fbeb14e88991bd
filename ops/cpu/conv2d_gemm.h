// The packed GEMM that the small-map conv2d paths share (ops/cpu/conv2d_im2col.cpp,
// ops/cpu/conv2d_winograd.cpp), blocked as in BLIS: the left operand packed in
// tiles of kMR rows ([k][kMR]), the right one in panels of kNR columns
// ([k][kNR]), and a micro-kernel that keeps a kMR x kNR tile of the product
// in registers (24 of the 32 AVX-512 registers, 12 of AVX2's 16). Internal to ops/.
#pragma once

#include <algorithm>
#include <cstdint>

#include "minidl/core/allocator.h"
#include "minidl/ops/cpu/conv2d_simd.h"

namespace minidl::conv2d_gemm {

using conv2d_simd::broadcast;
using conv2d_simd::in_register;
using conv2d_simd::kLanes;
using conv2d_simd::load;
using conv2d_simd::store;
using conv2d_simd::Vec;

constexpr int kNV = 3;  // vectors per micro-tile row
// Rows of a micro-tile (the broadcast operand): as many as the accumulator
// registers allow, 8 with AVX-512's 32 registers, 4 with AVX2's 16 (8 rows
// there spilled half the accumulators to the stack inside the k loop: the
// x86-64-v3 build's GEMM ran at half speed).
constexpr int64_t kMR = conv2d_simd::kAccRegs / kNV;
template <class T>
constexpr int64_t kNR = kNV * kLanes<T>;  // columns of a micro-tile (48 floats, 24 doubles)

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }  // a >= 0, b > 0

// Uninitialized buffer that only grows, from the CPU allocator (64-byte
// aligned; huge pages from 2 MiB, so a big one costs a few page faults).
template <class T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { release(); }
  T* get(int64_t n) {
    if (n > size_ || !data_) {
      release();
      size_ = std::max<int64_t>(n, 1);
      data_ = static_cast<T*>(allocator_for(DeviceType::CPU)->allocate(static_cast<size_t>(size_) * sizeof(T), kCPU));
    }
    return data_;
  }
  T* data() const { return data_; }

 private:
  void release() {
    if (data_) allocator_for(DeviceType::CPU)->deallocate(data_);
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  int64_t size_ = 0;
};

// Scratch that stays with the calling thread between calls, one buffer per
// Slot: a training step runs the same convolutions again and again, and a
// fresh buffer per call costs a page fault per page (the kernel zeroes every
// page first: 12% of a ResNet-18 step before this existed). Buffers only
// grow. Two uses on one thread at the same time need different slots.
enum class Slot { kWeights, kOperandA, kOperandB, kProduct, kSums, kTransform, kRows, kCount };

template <class T>
T* thread_buffer(Slot slot, int64_t n) {
  thread_local Buffer<T> buffers[static_cast<int>(Slot::kCount)];
  return buffers[static_cast<int>(slot)].get(n);
}

// ---- micro-kernel ------------------------------------------------------------------------

// C's tile is needed at the end: fetched into L1 while the products run
// (C lies in L2 or beyond, its rows far apart: waiting for it at the end
// took a tenth of the tile's time).
template <class T, int NV>
[[gnu::always_inline]] inline void prefetch_tile(const T* c, int64_t ldc) {
  for (int r = 0; r < kMR; ++r)
    for (int v = 0; v < NV; ++v) __builtin_prefetch(c + r * ldc + v * kLanes<T>);
}

// c (+)= acc. Fully unrolled, so that acc stays in registers (else GCC kept
// it on the stack around the loop).
template <class T, int NV>
[[gnu::always_inline]] inline void write_tile(const Vec<T> (&acc)[kMR][NV], T* c, int64_t ldc, bool accumulate) {
  constexpr int64_t L = kLanes<T>;
  if (accumulate) {
#pragma GCC unroll 8
    for (int r = 0; r < kMR; ++r)
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) store(c + r * ldc + v * L, load(c + r * ldc + v * L) + acc[r][v]);
  } else {
#pragma GCC unroll 8
    for (int r = 0; r < kMR; ++r)
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) store(c + r * ldc + v * L, acc[r][v]);
  }
}

// c[r][j] (+)= sum_{k < kc} a[k*kMR + r] * b[k*PV*L + j] for r < kMR and
// j < NV vectors of L lanes, from panels PV vectors wide (their first NV
// vectors: NV < PV at a panel cut short).
template <class T, int NV, int PV = kNV>
void micro_tile(int64_t kc, const T* a, const T* b, T* c, int64_t ldc, bool accumulate) {
  using V = Vec<T>;
  constexpr int64_t L = kLanes<T>, NR = PV * L;
  V acc[kMR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) acc[r][v] = V{};
  if (accumulate) prefetch_tile<T, NV>(c, ldc);
  for (int64_t k = 0; k < kc; ++k, a += kMR, b += NR) {
    V x[NV];
    for (int v = 0; v < NV; ++v) {
      x[v] = load(b + v * L);
      in_register(x[v]);
    }
    for (int r = 0; r < kMR; ++r) {
      const V ar = broadcast(a[r]);
      for (int v = 0; v < NV; ++v) acc[r][v] += ar * x[v];
    }
  }
  write_tile<T, NV>(acc, c, ldc, accumulate);
}

// micro_tile with NV whole vectors from anywhere, over one or more taps in
// turn with the tile of C in registers throughout: tap t's left operand at
// a[t] (kc x kMR, packed), vector v of its B row k at src[t * NV + v] +
// k * step[t * NV + v] (step 0: the same vector every row). The forward's
// images-innermost panels read straight from x transposed (no copy into a
// packed panel: that copy was 5% of a 3x3 stride-2 forward on 8x8 maps), and
// a panel's taps summed in registers write its tile once, not once per tap.
// A full kMR x (NV vectors) tile of C only.
template <class T, int NV = kNV>
void micro_tile_taps(int64_t taps, int64_t kc, const T* const* a, const T* const* src, const int64_t* step, T* c,
                     int64_t ldc, bool accumulate) {
  using V = Vec<T>;
  V acc[kMR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) acc[r][v] = V{};
  if (accumulate) prefetch_tile<T, NV>(c, ldc);
  for (int64_t t = 0; t < taps; ++t) {
    const T* at = a[t];
    const T* b[NV];
    int64_t bstep[NV];
    for (int v = 0; v < NV; ++v) {
      b[v] = src[t * NV + v];
      bstep[v] = step[t * NV + v];
    }
    for (int64_t k = 0; k < kc; ++k, at += kMR) {
      V x[NV];
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) {
        x[v] = load(b[v]);
        in_register(x[v]);
        b[v] += bstep[v];
      }
      for (int r = 0; r < kMR; ++r) {
        const V ar = broadcast(at[r]);
        for (int v = 0; v < NV; ++v) acc[r][v] += ar * x[v];
      }
    }
  }
  write_tile<T, NV>(acc, c, ldc, accumulate);
}

// micro_tile for the rows x cols corner of a tile (at an edge of C): the
// fewest vectors that cover cols, through a tile on the stack unless full.
// PV: the panels' width in vectors (kNV, or 2 where C's columns come in 32s).
template <class T, int PV = kNV>
void any_tile(int64_t kc, const T* a, const T* b, T* c, int64_t ldc, int64_t rows, int64_t cols, bool accumulate) {
  constexpr int64_t L = kLanes<T>, NR = PV * L;
  static_assert(PV == 2 || PV == 3);
  const int64_t nv = (cols + L - 1) / L;
  auto run = [&](T* dst, int64_t ld, bool acc) {
    if constexpr (PV == 3)
      if (nv == 3) micro_tile<T, 3, PV>(kc, a, b, dst, ld, acc);
    if (nv == 2) micro_tile<T, 2, PV>(kc, a, b, dst, ld, acc);
    if (nv == 1) micro_tile<T, 1, PV>(kc, a, b, dst, ld, acc);
  };
  if (rows == kMR && cols == nv * L) return run(c, ldc, accumulate);
  alignas(64) T tile[kMR * NR];
  run(tile, NR, false);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j)
      c[r * ldc + j] = accumulate ? c[r * ldc + j] + tile[r * NR + j] : tile[r * NR + j];
}

}  // namespace minidl::conv2d_gemm
