// The dot-product path of bf16_gemm (ops/cpu/bf16_gemm.h): AVX512-BF16's
// vdpbf16ps, which multiplies pairs of bfloat16 and adds both products to a
// float32 lane (acc[j] += a[2p] * b[2p][j] + a[2p+1] * b[2p+1][j]).
//
// Blocked as in BLIS, single-threaded (bf16_gemm splits C over the threads):
//   for each block of kNC columns of C, for each block of kKC of K:
//     pack op(B) in panels of kNR columns: [pair p][column j] -> 32 bits
//       holding B(2p, j) | B(2p+1, j) << 16, the layout vdpbf16ps reads;
//     for each block of kMC rows: pack op(A) in tiles of kMR rows
//       ([pair p][row r] -> A(r, 2p) | A(r, 2p+1) << 16);
//       the micro-kernel keeps a kMR x kNR tile of C in 24 zmm registers,
//       broadcasting one A pair per row against 3 vectors of B pairs.
// An odd K (or an edge of M or N) is padded with zeros in the packed
// panels, so every product is whole; only the stores are masked.
//
// Results: each K block's tile is added to the previous blocks' partial sums
// in float32; bias (a bfloat16 per row or per column) is added with the
// first block, and a bfloat16 C is rounded once (vcvtneps2bf16: nearest
// even, as Tensor::to) after the last. With several K blocks, a bfloat16 C
// keeps its partial sums in a float32 scratch of its size.
//
// Compiled for every x86-64 build: the functions carry the target attribute
// below, so an x86-64-v3 (AVX2) build has them too; bf16_gemm calls them only
// when CPUID says the CPU can run them.
#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include "minidl/ops/cpu/bf16_gemm.h"
#include "minidl/ops/cpu/transpose8.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MINIDL_BF16_KERNEL 1
#include <immintrin.h>
// GCC 12's false positives inside avx512fintrin.h once inlined (as in ops/cpu/gemm.h).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace minidl::cpu {

#if MINIDL_BF16_KERNEL

namespace {

#define MINIDL_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

constexpr int64_t kMR = 8;        // rows of a micro-tile (pack_a_tile's vector loops assume 8)
constexpr int kNV = 3;            // 16-lane vectors per micro-tile row
constexpr int64_t kNR = kNV * 16; // columns of a micro-tile
constexpr int64_t kKC = 384;      // K block (even: pairs never straddle blocks); a B panel is 36 KiB (L1: 48)
constexpr int64_t kMC = 144;      // rows per A block (108 KiB: L2; 288 measured no faster)
constexpr int64_t kNC = 3072;     // columns per B block (1.5 MiB: L3)

// A buffer that only grows, 64-byte aligned, kept per thread between calls.
template <class T>
class Scratch {
 public:
  T* get(int64_t n) {
    if (n > size_) {
      data_.reset(static_cast<T*>(::operator new(static_cast<size_t>(n) * sizeof(T), std::align_val_t(64))));
      size_ = n;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(T* p) const { ::operator delete(p, std::align_val_t(64)); }
  };
  std::unique_ptr<T, Free> data_;
  int64_t size_ = 0;
};

const uint16_t* bits(const BFloat16* p) { return reinterpret_cast<const uint16_t*>(p); }

uint32_t pair(uint16_t lo, uint16_t hi) { return static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16; }

// op(A) rows [i0, i0 + kMR) (rows >= m are 0), K [p0, p0 + kc), as [pair][row].
// A whole tile goes through registers, eight pairs (or, transposed, one pair)
// of its eight rows at a time: the weights of a convolution are packed once
// per chunk of images, and element by element that was a quarter of the
// forward's time on 4x4 maps.
void pack_a_tile(bool trans, const uint16_t* a, int64_t lda, int64_t m, int64_t i0, int64_t p0, int64_t kc,
                 uint32_t* dst) {
  const int64_t kp = (kc + 1) / 2;
  int64_t p_done = 0;  // pairs [0, p_done) of every row written by the vector loops
  if (i0 + kMR <= m && !trans) {  // A(i, q) = a[i * lda + q]: 8 rows x 8 pairs, transposed
    for (; p_done + 8 <= kc / 2; p_done += 8) {
      transpose8::F8 rows[kMR];
      for (int64_t r = 0; r < kMR; ++r) std::memcpy(&rows[r], a + (i0 + r) * lda + p0 + 2 * p_done, sizeof rows[r]);
      transpose8::store_columns(rows, reinterpret_cast<float*>(dst + p_done * kMR), kMR);
    }
  } else if (i0 + kMR <= m) {  // A(i, q) = a[q * lda + i]: rows 2p and 2p + 1 interleaved
    typedef uint16_t U8 __attribute__((vector_size(16)));
    typedef uint16_t U16 __attribute__((vector_size(32)));
    for (; p_done < kc / 2; ++p_done) {
      U8 lo, hi;
      std::memcpy(&lo, a + (p0 + 2 * p_done) * lda + i0, sizeof lo);
      std::memcpy(&hi, a + (p0 + 2 * p_done + 1) * lda + i0, sizeof hi);
      const U16 pairs = __builtin_shufflevector(lo, hi, 0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
      std::memcpy(dst + p_done * kMR, &pairs, sizeof pairs);
    }
  }
  for (int64_t r = 0; r < kMR; ++r) {
    const int64_t i = i0 + r;
    if (i >= m) {
      for (int64_t p = 0; p < kp; ++p) dst[p * kMR + r] = 0;
    } else if (!trans) {  // A(i, q) = a[i * lda + q]: the pairs are adjacent
      const uint16_t* src = a + i * lda + p0;
      for (int64_t p = p_done; p < kc / 2; ++p) {
        uint32_t v;
        std::memcpy(&v, src + 2 * p, sizeof v);
        dst[p * kMR + r] = v;
      }
      if (kc % 2) dst[(kp - 1) * kMR + r] = src[kc - 1];
    } else {  // A(i, q) = a[q * lda + i]
      const uint16_t* src = a + p0 * lda + i;
      for (int64_t p = p_done; p < kp; ++p)
        dst[p * kMR + r] = pair(src[2 * p * lda], 2 * p + 1 < kc ? src[(2 * p + 1) * lda] : 0);
    }
  }
}

// r[i] (16 lanes of 32 bits) = r[j][i] for i, j < 16: the 16 x 16 transpose
// in four rounds of in-lane unpacks and 128-bit lane shuffles.
MINIDL_BF16_TARGET inline void transpose16(__m512i (&r)[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // u[4g + c], lane L: column 4L + c of rows 4g .. 4g + 3.
  for (int g = 0; g < 16; g += 4) {
    u[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
    u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
    u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
    u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
  }
  for (int h = 0; h < 16; h += 8)
    for (int c = 0; c < 4; ++c) {
      t[h + c] = _mm512_shuffle_i32x4(u[h + c], u[h + 4 + c], 0x88);
      t[h + 4 + c] = _mm512_shuffle_i32x4(u[h + c], u[h + 4 + c], 0xdd);
    }
  for (int c = 0; c < 8; ++c) {
    r[c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0x88);
    r[8 + c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0xdd);
  }
}

// op(B) columns [j0, j0 + cols) (cols <= kNR; the rest of the panel 0), K
// [p0, p0 + kc), as [pair][column].
MINIDL_BF16_TARGET void pack_b_panel(bool trans, const uint16_t* b, int64_t ldb, int64_t j0, int64_t cols, int64_t p0,
                                     int64_t kc, uint32_t* dst) {
  const int64_t kp = (kc + 1) / 2;
  if (!trans) {  // B(q, j) = b[q * ldb + j]: two rows interleaved, 16 columns at a time
    // Lane 2j takes row 0's column j (a[j]), lane 2j + 1 row 1's (b[j] = index 32 + j).
    alignas(64) int16_t order[32];
    for (int j = 0; j < 16; ++j) order[2 * j] = static_cast<int16_t>(j), order[2 * j + 1] = static_cast<int16_t>(32 + j);
    const __m512i idx = _mm512_load_si512(order);
    for (int64_t p = 0; p < kp; ++p) {
      const uint16_t* r0 = b + (p0 + 2 * p) * ldb + j0;
      const uint16_t* r1 = 2 * p + 1 < kc ? r0 + ldb : nullptr;
      for (int64_t v = 0; v < kNV; ++v) {
        const int64_t c = std::clamp<int64_t>(cols - 16 * v, 0, 16);
        const __mmask16 mask = static_cast<__mmask16>((1u << c) - 1u);
        const __m512i lo = _mm512_zextsi256_si512(_mm256_maskz_loadu_epi16(mask, r0 + 16 * v));
        const __m512i hi = r1 ? _mm512_zextsi256_si512(_mm256_maskz_loadu_epi16(mask, r1 + 16 * v)) : _mm512_setzero_si512();
        _mm512_store_si512(dst + p * kNR + 16 * v, _mm512_permutex2var_epi16(lo, idx, hi));
      }
    }
    return;
  }
  // B(q, j) = b[j * ldb + q]: the pairs are adjacent in memory, so blocks of
  // 16 columns x 16 pairs are loaded as 32-bit lanes and transposed.
  for (int64_t v = 0; v < kNV; ++v) {
    const int64_t c = std::clamp<int64_t>(cols - 16 * v, 0, 16);
    const uint16_t* base = b + (j0 + 16 * v) * ldb + p0;
    for (int64_t p = 0; p < kc / 2; p += 16) {
      const int64_t np = std::min<int64_t>(16, kc / 2 - p);
      const __mmask16 pmask = static_cast<__mmask16>((1u << np) - 1u);
      __m512i r[16];
      for (int64_t j = 0; j < 16; ++j)
        r[j] = j < c ? _mm512_maskz_loadu_epi32(pmask, base + j * ldb + 2 * p) : _mm512_setzero_si512();
      transpose16(r);
      for (int64_t q = 0; q < np; ++q) _mm512_store_si512(dst + (p + q) * kNR + 16 * v, r[q]);
    }
    if (kc % 2)
      for (int64_t j = 0; j < 16; ++j) dst[(kp - 1) * kNR + 16 * v + j] = j < c ? base[j * ldb + kc - 1] : 0;
  }
}

// How one tile's sums are finished: value = acc (+ prev) (+ bias), stored to
// f32 or rounded into bf16. Pointers are at the tile's first element.
struct TileStore {
  float* f32 = nullptr;
  BFloat16* bf16 = nullptr;
  int64_t ldc = 0;
  const float* prev = nullptr;  // partial sums so far (may be f32 itself)
  int64_t ldp = 0;
  const uint16_t* row_bias = nullptr;  // at the tile's first row
  const uint16_t* col_bias = nullptr;  // at the tile's first column
};

MINIDL_BF16_TARGET inline __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

template <int NV>
MINIDL_BF16_TARGET void micro_tile(int64_t kp, const uint32_t* a, const uint32_t* b, int64_t rows, int64_t cols,
                                   const TileStore& s) {
  // The previous K blocks' sums are read only after the loop, and C is far
  // bigger than L2 (each K block passes over it): fetched now, their misses
  // overlap the dot products instead of stalling the stores (~8% of the
  // kernel's time went to those adds).
  if (s.prev)
    for (int64_t r = 0; r < rows; ++r)
      for (int v = 0; v < NV; ++v) _mm_prefetch(reinterpret_cast<const char*>(s.prev + r * s.ldp + 16 * v), _MM_HINT_T0);
  __m512 acc[kMR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kp; ++p, a += kMR, b += kNR) {
    __m512bh x[NV];
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) x[v] = (__m512bh)_mm512_load_si512(b + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < kMR; ++r) {
      const __m512bh ar = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r]));
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], ar, x[v]);
    }
  }
  __mmask16 mask[NV];
  __m512 cb[NV];
  for (int v = 0; v < NV; ++v) {
    const int64_t c = std::clamp<int64_t>(cols - 16 * v, 0, 16);
    mask[v] = static_cast<__mmask16>((1u << c) - 1u);
    cb[v] = s.col_bias ? widen(_mm256_maskz_loadu_epi16(mask[v], s.col_bias + 16 * v)) : _mm512_setzero_ps();
  }
  for (int64_t r = 0; r < rows; ++r) {
    const __m512 rb = s.row_bias ? widen(_mm256_set1_epi16(static_cast<short>(s.row_bias[r]))) : _mm512_setzero_ps();
    for (int v = 0; v < NV; ++v) {
      __m512 y = _mm512_add_ps(acc[r][v], _mm512_add_ps(rb, cb[v]));
      if (s.prev) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mask[v], s.prev + r * s.ldp + 16 * v));
      if (s.f32) {
        _mm512_mask_storeu_ps(s.f32 + r * s.ldc + 16 * v, mask[v], y);
      } else {
        const __m256i h = (__m256i)_mm512_cvtneps_pbh(y);
        _mm256_mask_storeu_epi16(s.bf16 + r * s.ldc + 16 * v, mask[v], h);
      }
    }
  }
}

MINIDL_BF16_TARGET void any_tile(int64_t kp, const uint32_t* a, const uint32_t* b, int64_t rows, int64_t cols,
                                 const TileStore& s) {
  if (cols > 32) return micro_tile<3>(kp, a, b, rows, cols, s);
  if (cols > 16) return micro_tile<2>(kp, a, b, rows, cols, s);
  micro_tile<1>(kp, a, b, rows, cols, s);
}

MINIDL_BF16_TARGET void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const BFloat16* a,
                             int64_t lda, const BFloat16* b, int64_t ldb, const Bf16GemmOut& out) {
  thread_local Scratch<uint32_t> a_buf, b_buf;
  thread_local Scratch<float> sums_buf;
  const int64_t k_blocks = (k + kKC - 1) / kKC;
  // A bfloat16 C summed over several K blocks keeps its partial sums here.
  float* sums = out.bf16 && k_blocks > 1 ? sums_buf.get(m * n) : nullptr;
  const int64_t kp_max = (std::min(k, kKC) + 1) / 2;
  uint32_t* apack = a_buf.get(kMC * kp_max);
  uint32_t* bpack = b_buf.get((std::min(n, kNC) + kNR - 1) / kNR * kNR * kp_max);
  for (int64_t jc = 0; jc < n; jc += kNC) {
    const int64_t nc = std::min(kNC, n - jc), panels = (nc + kNR - 1) / kNR;
    for (int64_t pc = 0; pc < k; pc += kKC) {
      const int64_t kc = std::min(kKC, k - pc), kp = (kc + 1) / 2;
      const bool first = pc == 0, last = pc + kc == k;
      for (int64_t q = 0; q < panels; ++q)
        pack_b_panel(trans_b, bits(b), ldb, jc + q * kNR, std::min(kNR, nc - q * kNR), pc, kc, bpack + q * kp * kNR);
      for (int64_t ic = 0; ic < m; ic += kMC) {
        const int64_t mc = std::min(kMC, m - ic), tiles = (mc + kMR - 1) / kMR;
        for (int64_t t = 0; t < tiles; ++t)
          pack_a_tile(trans_a, bits(a), lda, m, ic + t * kMR, pc, kc, apack + t * kp * kMR);
        for (int64_t q = 0; q < panels; ++q)
          for (int64_t t = 0; t < tiles; ++t) {
            const int64_t i = ic + t * kMR, j = jc + q * kNR;
            TileStore s;
            if (first) {
              s.row_bias = out.row_bias ? bits(out.row_bias) + i : nullptr;
              s.col_bias = out.col_bias ? bits(out.col_bias) + j : nullptr;
            }
            if (out.f32) {
              s.f32 = out.f32 + i * out.ldc + j, s.ldc = out.ldc;
              if (!first || out.accumulate) s.prev = s.f32, s.ldp = out.ldc;
            } else if (sums && !last) {
              s.f32 = sums + i * n + j, s.ldc = n;
              if (!first) s.prev = s.f32, s.ldp = n;
            } else {
              s.bf16 = out.bf16 + i * out.ldc + j, s.ldc = out.ldc;
              if (sums) s.prev = sums + i * n + j, s.ldp = n;
            }
            any_tile(kp, apack + t * kp * kMR, bpack + q * kp * kNR, std::min(kMR, m - i), std::min(kNR, nc - q * kNR),
                     s);
          }
      }
    }
  }
}

}  // namespace

// Without the target attribute: in C++, GCC takes functions of one name with
// different targets for versions of one function.
void bf16_gemm_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t lda,
                      const BFloat16* b, int64_t ldb, const Bf16GemmOut& out) {
  gemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, out);
}

bool bf16_gemm_avx512_compiled() { return true; }

#else  // not x86-64: the dot-product path does not exist

void bf16_gemm_avx512(bool, bool, int64_t, int64_t, int64_t, const BFloat16*, int64_t, const BFloat16*, int64_t,
                      const Bf16GemmOut&) {}
bool bf16_gemm_avx512_compiled() { return false; }

#endif

}  // namespace minidl::cpu
