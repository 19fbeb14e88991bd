// Float32 GEMM on the packed micro-kernel of ops/cpu/conv2d_gemm.h, for
// ops/cpu/gemm.h (matmul, linear). Internal to ops/.
//
//   C = op(A) * op(B)  (+ C when accumulate); row-major, op(A) m x k, op(B) k x n
//
// Blocked as in BLIS: K in blocks of kKC; per block, op(B) packed in panels
// of kNR columns ([k][kNR]) for up to kNC columns, op(A) in tiles of kMR rows
// ([k][kMR]) for kMC rows at a time, which stay in L2 while the panels pass;
// the micro-kernel keeps a kMR x kNR tile of C in registers. Why not Eigen's
// GEMM: on an AVX-512 machine its kernel reached ~40% of the FMA peak (1024^3
// on one Zen 5 core: 107 GFLOP/s, this one ~230). Each output is summed over
// K in the same order whatever the blocks of C a thread gets, so results do
// not depend on the thread count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "minidl/ops/cpu/conv2d_gemm.h"
#include "minidl/ops/cpu/transpose8.h"

namespace minidl::detail {

// d[p * kMR + r] = s[r * lds + p] for r < kMR, p < 8: 8 columns of a tile of
// A's rows in the packed layout. (The scalar loop took ~5% of a 1024^3
// product on a Zen 3.)
// (The assertion stands outside the `if constexpr`: in a function that is
// not a template a discarded branch is still compiled, so an assertion inside
// it failed every AVX-512 build.)
inline void transpose_rows(const float* s, int64_t lds, float* d) {
  static_assert(conv2d_gemm::kMR == 8 || conv2d_gemm::kMR == 4);
  if constexpr (conv2d_gemm::kMR == 8)
    transpose8::block(s, lds, d, 8);
  else
    transpose8::block4(s, lds, d);
}

inline void packed_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                         const float* b, int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  using conv2d_gemm::any_tile;
  using conv2d_gemm::ceil_div;
  constexpr int64_t MR = conv2d_gemm::kMR, NR = conv2d_gemm::kNR<float>;
  // A B panel (kKC x kNR, 48 KB with AVX-512) is L1-sized; a block of A
  // (kMC x kKC, 128 KB) stays in L2; B's block (kKC x kNC, up to 2 MB) in L3.
  constexpr int64_t kKC = 256, kMC = 128, kNC = 2016;  // kNC: at most 42 panels of 48 (AVX-512), 84 of 24
  static_assert(kMC % MR == 0);
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i) std::fill_n(c + i * ldc, n, 0.f);
    return;
  }
  thread_local conv2d_gemm::Buffer<float> a_buf, b_buf;
  float* bpack = b_buf.get(std::min(kKC, k) * conv2d_gemm::round_up(std::min(kNC, n), NR));
  float* apack = a_buf.get(std::min(kKC, k) * kMC);
  // Column blocks of equal width (whole panels): 2048 columns as 2016 + 32
  // packed all of A again for one and a third panels.
  const int64_t nc_max = conv2d_gemm::round_up(ceil_div(n, ceil_div(n, kNC)), NR);
  for (int64_t jc = 0; jc < n; jc += nc_max) {
    const int64_t nc = std::min(nc_max, n - jc), panels = ceil_div(nc, NR);
    for (int64_t pc = 0; pc < k; pc += kKC) {
      const int64_t kc = std::min(kKC, k - pc);
      // op(B)[pc .. pc + kc)[jc .. jc + nc) as panels [panel][p][NR], zero past n.
      for (int64_t q = 0; q < panels; ++q) {
        float* d = bpack + q * kc * NR;
        const int64_t j0 = jc + q * NR, cols = std::min(NR, n - j0);
        if (!trans_b) {
          for (int64_t p = 0; p < kc; ++p, d += NR) {
            std::memcpy(d, b + (pc + p) * ldb + j0, static_cast<size_t>(cols) * sizeof(float));
            std::fill(d + cols, d + NR, 0.f);
          }
        } else {
          for (int64_t j = 0; j < NR; ++j)  // B^T's rows read along, the panel's columns written
            for (int64_t p = 0; p < kc; ++p) d[p * NR + j] = j < cols ? b[(j0 + j) * ldb + pc + p] : 0.f;
        }
      }
      for (int64_t ic = 0; ic < m; ic += kMC) {
        const int64_t mc = std::min(kMC, m - ic), tiles = ceil_div(mc, MR);
        // op(A)[ic .. ic + mc)[pc .. pc + kc) as tiles [tile][p][MR], zero past m.
        for (int64_t t = 0; t < tiles; ++t) {
          float* d = apack + t * kc * MR;
          const int64_t i0 = ic + t * MR, rows = std::min(MR, m - i0);
          if (trans_a) {
            for (int64_t p = 0; p < kc; ++p, d += MR) {
              std::memcpy(d, a + (pc + p) * lda + i0, static_cast<size_t>(rows) * sizeof(float));
              std::fill(d + rows, d + MR, 0.f);
            }
          } else {
            const float* src = a + i0 * lda + pc;
            int64_t p = 0;
            if (rows == MR)  // 8 columns of the tile's rows at a time, transposed in registers
              for (; p + 8 <= kc; p += 8) transpose_rows(src + p, lda, d + p * MR);
            for (; p < kc; ++p)
              for (int64_t r = 0; r < MR; ++r) d[p * MR + r] = r < rows ? src[r * lda + p] : 0.f;
          }
        }
        // Panel-major: a panel stays in L1 while the block's row tiles pass over it.
        for (int64_t q = 0; q < panels; ++q)
          for (int64_t t = 0; t < tiles; ++t) {
            const int64_t i0 = ic + t * MR, j0 = jc + q * NR;
            any_tile(kc, apack + t * kc * MR, bpack + q * kc * NR, c + i0 * ldc + j0, ldc, std::min(MR, m - i0),
                     std::min(NR, n - j0), accumulate || pc > 0);
          }
      }
    }
  }
}

}  // namespace minidl::detail
