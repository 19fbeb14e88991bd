// Packing the im2col operand of ops/cpu/conv2d_im2col.cpp's forward: X_t,
// the input pixels that tap t of each GEMM column reads, for a block of
// channels, as panels [panel][channel][kNR]. Internal to ops/cpu/.
//
// The general way is a gather per column (offsets precomputed per tap, -1 in
// the padding). Gathers are slow (on AMD Zen they took 28% of a 3x3 stride-2
// forward at 16x16 -> 8x8), and the columns are rarely arbitrary: along an
// output row, tap t reads every stride-th input pixel. So each group of 8
// columns is classified once per tap, and for all channels:
//   kStep1 / kStep2: each half of the group (4 columns) reads x[base + s*k]
//     (s = 1 or 2) for its valid columns: two plain 8-float loads and one
//     shuffle instead of a gather (padding columns masked to 0);
//   kGather: anything else (and near the end of x, where a load of 8 would
//     read past it).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "minidl/ops/cpu/conv2d_gemm.h"
#include "minidl/ops/cpu/transpose8.h"

namespace minidl::conv2d_pack {

// Whether T's panels are packed with loads: float, with panels of whole
// groups of 8 (not in SSE-only builds, whose panels are 12 wide).
template <class T>
constexpr bool kLoads = std::is_same_v<T, float> && conv2d_gemm::kNR<T> % 8 == 0;

enum class GroupKind : int8_t { kGather, kStep1, kStep2 };

// How one group of 8 columns is read: the source of each half (4 columns).
struct Group8 {
  int64_t base[2] = {0, 0};
  GroupKind kind = GroupKind::kGather;
};

// Classifies the `cols` columns (a multiple of 8) whose offsets are `off`
// (from a channel's plane start; -1 in the padding). Loads of 8 floats from
// base must stay below `limit` (relative to the same start, for every channel
// that will be packed) and above 0.
template <class Off>
void classify(const Off* off, int64_t cols, int64_t step, int64_t limit, Group8* groups) {
  for (int64_t q = 0; q < cols / 8; ++q) {
    Group8& grp = groups[q];
    grp.kind = GroupKind::kGather;
    if (step != 1 && step != 2) continue;
    bool ok = true;
    for (int h = 0; h < 2 && ok; ++h) {
      const Off* o = off + q * 8 + h * 4;
      int64_t base = -1;
      for (int k = 0; k < 4 && ok; ++k) {
        if (o[k] < 0) continue;
        if (base < 0) base = int64_t{o[k]} - step * k;
        ok = base >= 0 && int64_t{o[k]} == base + step * k;
      }
      base = std::max<int64_t>(base, 0);  // a half all in the padding reads (and drops) x[0..7]
      ok = ok && base + 8 <= limit;
      grp.base[h] = base;
    }
    if (ok) grp.kind = step == 1 ? GroupKind::kStep1 : GroupKind::kStep2;
  }
}

// X_t for np panels of kc channels from x (channel c's plane at x + c * HW):
// bpack[i][c][jj] = x[c][off[i * kNR + jj]], 0 where the offset is < 0.
// groups: from classify over the same offsets, or nullptr (gather only);
// ignored unless kLoads<T>.
template <class T, class Off>
void pack_panels(bool parallel, int64_t np, int64_t kc, const T* x, int64_t HW, const Off* offsets,
                 const Group8* groups, T* bpack) {
  constexpr int64_t NR = conv2d_gemm::kNR<T>;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t i = 0; i < np; ++i) {
    const Off* off = offsets + i * NR;
    T* d0 = bpack + i * kc * NR;
    if constexpr (kLoads<T>) {
      if (groups) {
        typedef float F8 __attribute__((vector_size(32)));
        typedef int32_t I8 __attribute__((vector_size(32)));
        constexpr int64_t G = NR / 8;
        const Group8* grp = groups + i * G;
        I8 valid[G];
        for (int64_t q = 0; q < G; ++q)
          for (int k = 0; k < 8; ++k) valid[q][k] = off[q * 8 + k] >= 0 ? -1 : 0;
        // Channel by channel, the panel's groups inner: each channel's row
        // of the panel is read and written once. (Group by group, every
        // group walked all kc channels, HW apart: with 32x32 maps, HW * 4 =
        // 4 KB, they all fell into one L1 set, and packing was 28% of a 3x3
        // stride-2 forward; Zen 5, 1 thread, 64 x 64 -> 128 at 32x32: 15.3
        // -> 13.4 ms.)
        for (int64_t c = 0; c < kc; ++c) {
          const T* src = x + c * HW;
          T* d = d0 + c * NR;
          for (int64_t q = 0; q < G; ++q, d += 8) {
            if (grp[q].kind == GroupKind::kGather) {
              const Off* o = off + q * 8;
#pragma omp simd
              for (int64_t jj = 0; jj < 8; ++jj) d[jj] = o[jj] >= 0 ? src[std::max<Off>(o[jj], 0)] : T(0);
              continue;
            }
            F8 lo, hi;
            std::memcpy(&lo, src + grp[q].base[0], sizeof lo);
            std::memcpy(&hi, src + grp[q].base[1], sizeof hi);
            // The shuffles' lanes are constants (__builtin_shufflevector: GCC >= 12 and clang).
            const F8 v = grp[q].kind == GroupKind::kStep2 ? __builtin_shufflevector(lo, hi, 0, 2, 4, 6, 8, 10, 12, 14)
                                                          : __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 8, 9, 10, 11);
            const I8 m = reinterpret_cast<I8>(v) & valid[q];
            std::memcpy(d, &m, sizeof m);
          }
        }
        continue;
      }
    }
    T* d = d0;
    for (int64_t c = 0; c < kc; ++c, d += NR) {
      const T* src = x + c * HW;
      // Branch-free, so that it vectorizes to a gather and a
      // blend: padding reads offset 0 (always in range), then drops it.
#pragma omp simd
      for (int64_t jj = 0; jj < NR; ++jj) {
        const T v = src[std::max<Off>(off[jj], 0)];
        d[jj] = off[jj] >= 0 ? v : T(0);
      }
    }
  }
}

// ---- images innermost (conv2d_plan::ColumnOrder::kImagesInner) -----------------------------

// xt[c * plane + p * images + n] = x[n * image_stride + c * HW + p] for `channels` channels of
// `images` images: x with the images innermost, so that one pixel of
// consecutive images is a run. Float in 8 x 8 blocks through registers. 16
// images at a time, each read as one sequential stream over its channels
// (all images at once were too many streams for the prefetchers; pixels
// outer made x's rows, C * HW floats apart, evict one another from L1), and
// xt written in whole cache lines.
template <class T>
void images_inner(bool parallel, int64_t images, int64_t channels, int64_t HW, int64_t image_stride, const T* x,
                  T* xt, int64_t plane) {
  constexpr int64_t B = 8;
  for (int64_t n0 = 0; n0 < images; n0 += 2 * B) {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t c = 0; c < channels; ++c) {
      T* dst = xt + c * plane;
      const T* src = x + c * HW;
      for (int64_t p0 = 0; p0 < HW; p0 += B)
        for (int64_t n1 = n0; n1 < std::min(images, n0 + 2 * B); n1 += B) {
          const int64_t p_end = std::min(HW, p0 + B), n_end = std::min(images, n1 + B);
          if constexpr (std::is_same_v<T, float>)
            if (p_end - p0 == B && n_end - n1 == B) {
              transpose8::block(src + n1 * image_stride + p0, image_stride, dst + p0 * images + n1, images);
              continue;
            }
          for (int64_t p = p0; p < p_end; ++p)
            for (int64_t n = n1; n < n_end; ++n) dst[p * images + n] = src[n * image_stride + p];
        }
    }
  }
}

// Whether the product's columns are images innermost in whole groups of 8:
// column_of[(n + k) * P + q] == column_of[n * P + q] + k for n a multiple
// of 8 and k < 8, and column_of[n * P + q] a multiple of 8 (what
// images_outer needs).
inline bool images_in_eights(const int64_t* column_of, int64_t images, int64_t P) {
  if (images % 8 != 0) return false;
  for (int64_t n = 0; n < images; n += 8)
    for (int64_t k = 1; k < 8; ++k)
      for (int64_t q = 0; q < P; ++q)
        if (column_of[(n + k) * P + q] != column_of[n * P + q] + k) return false;
  for (int64_t n = 0; n < images; n += 8)
    for (int64_t q = 0; q < P; ++q)
      if (column_of[n * P + q] % 8 != 0) return false;
  return true;
}

// The inverse of images_inner for the product: y[n * y_image + m * P + q] =
// out[m * cols + column_of[n * P + q]] + bias[m] for `rows` rows m, where
// images_in_eights holds (out 32-byte aligned, cols a multiple of 8). 8 x 8
// blocks (8 pixels of 8 images) through registers: the scalar gather by
// columns it replaces was 7% of a 3x3 stride-2 forward on 32x32 maps (Zen 4,
// 1 thread).
inline void images_outer(bool parallel, int64_t rows, int64_t images, int64_t P, const int64_t* column_of,
                         const float* out, int64_t cols, const float* bias, float* y, int64_t y_image) {
  using transpose8::F8;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t m = 0; m < rows; ++m) {
    const float bm = bias ? bias[m] : 0.0f;
    const F8 bv = {bm, bm, bm, bm, bm, bm, bm, bm};
    const float* om = out + m * cols;
    for (int64_t n = 0; n < images; n += 8) {
      const int64_t* col = column_of + n * P;
      float* yn = y + n * y_image + m * P;
      int64_t q = 0;
      for (; q + 8 <= P; q += 8) {
        F8 r[8];
        for (int k = 0; k < 8; ++k) {
          // Aligned (images_in_eights): x86-64-v3 builds split unaligned
          // 32-byte loads in two, which went through the stack here.
          F8 v;
          std::memcpy(&v, __builtin_assume_aligned(om + col[q + k], 32), sizeof(F8));
          r[k] = v + bv;
        }
        transpose8::store_columns(r, yn + q, y_image);
      }
      for (; q < P; ++q)
        for (int64_t k = 0; k < 8; ++k) yn[k * y_image + q] = om[col[q] + k] + bm;
    }
  }
}

// Where a vector of L columns comes from: a run of xt's channel planes
// (>= 0: its start), zeros (kZero: every column in the padding), or, where
// the columns are not one pixel of consecutive images, x column by column
// (kColumns).
inline constexpr int64_t kZero = -1, kColumns = -2;

// The panels of X_t from xt (channel c's plane at xt + c * plane) by vectors,
// as pack_panels does from x by columns: vsrc[i * NR / L + q] says where
// vector q of panel i comes from; offsets (pack_panels') are read for kColumns only.
// Panels with skip[i] set are left alone (the GEMM reads them from xt).
template <class T, class Off>
void pack_vectors(bool parallel, int64_t np, int64_t kc, const T* xt, int64_t plane, const int64_t* vsrc, const T* x,
                  int64_t HW, const Off* offsets, const char* skip, T* bpack) {
  constexpr int64_t NR = conv2d_gemm::kNR<T>, L = conv2d_gemm::kLanes<T>, NV = NR / L;
  static_assert(NR % L == 0);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t i = 0; i < np; ++i) {
    if (skip[i]) continue;
    const int64_t* vs = vsrc + i * NV;
    if (std::all_of(vs, vs + NV, [](int64_t s) { return s != kColumns; })) {
      // Row by row (each row of the panel written whole), zeros from a
      // vector of zeros: no branch per row.
      alignas(64) static const T zeros[NR / NV] = {};
      const T* src[NV];
      int64_t step[NV];
      for (int64_t q = 0; q < NV; ++q) {
        src[q] = vs[q] >= 0 ? xt + vs[q] : zeros;
        step[q] = vs[q] >= 0 ? plane : 0;
      }
      T* d = bpack + i * kc * NR;
      for (int64_t c = 0; c < kc; ++c, d += NR)
        for (int64_t q = 0; q < NV; ++q) conv2d_gemm::store(d + q * L, conv2d_gemm::load(src[q] + c * step[q]));
      continue;
    }
    for (int64_t q = 0; q < NV; ++q) {
      T* d = bpack + i * kc * NR + q * L;
      const int64_t s = vs[q];
      if (s >= 0) {
        const T* src = xt + s;
        for (int64_t c = 0; c < kc; ++c, d += NR, src += plane) conv2d_gemm::store(d, conv2d_gemm::load(src));
      } else if (s == kZero) {
        for (int64_t c = 0; c < kc; ++c, d += NR) conv2d_gemm::store(d, conv2d_gemm::Vec<T>{});
      } else {
        const Off* off = offsets + i * NR + q * L;
        for (int64_t c = 0; c < kc; ++c, d += NR)
          for (int64_t jj = 0; jj < L; ++jj) d[jj] = off[jj] >= 0 ? x[c * HW + off[jj]] : T(0);
      }
    }
  }
}

}  // namespace minidl::conv2d_pack
