// Row-major GEMM for the ops that need matrix products (matmul, linear):
// float32 on ops/cpu/packed_sgemm.h, float64 on Eigen. Internal to ops/: not
// part of the public API.
//
//   C = alpha * op(A) * op(B) + beta * C      (beta is 0 or 1)
//   op(A) is m x k (A stored k x m when trans_a), op(B) is k x n; every
//   matrix is row-major with its own leading dimension (row pitch).
//
// gemm() runs on the calling thread (inside a parallel region Eigen stays
// single-threaded). gemm_parallel() splits C into one block per OpenMP thread
// along its longer side and runs Eigen single-threaded in each. On a quiet
// machine that is as fast as Eigen's own OpenMP GEMM; when another process
// competes for a core it held up twice as well in our measurements, as the
// blocks need no synchronization until the end (bench/RESULTS.md).
#pragma once

#include <omp.h>

// Eigen's AVX-512 packet code trips GCC 12's -Wmaybe-uninitialized (false
// positives inside avx512fintrin.h once inlined here).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "minidl/ops/cpu/packed_sgemm.h"

namespace minidl::detail {

template <class T>
using RowMajorMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>,
                               Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T>
using ConstRowMajorMap =
    Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, Eigen::Unaligned,
               Eigen::OuterStride<>>;

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  // float32 on the packed micro-kernel (ops/cpu/packed_sgemm.h: ~2x Eigen's
  // GEMM with AVX-512); Eigen for float64 and alpha != 1.
  if constexpr (std::is_same_v<T, float>)
    if (alpha == 1.f && (beta == 0.f || beta == 1.f))
      return packed_sgemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta == 1.f, c, ldc);
  RowMajorMap<T> C(c, m, n, Eigen::OuterStride<>(ldc));
  if (k == 0) {
    if (beta == T(0)) C.setZero();
    return;
  }
  // A stored as rows x cols with pitch lda; op(A) = A or A^T.
  ConstRowMajorMap<T> A(a, trans_a ? k : m, trans_a ? m : k, Eigen::OuterStride<>(lda));
  ConstRowMajorMap<T> B(b, trans_b ? n : k, trans_b ? k : n, Eigen::OuterStride<>(ldb));
  auto run = [&](const auto& opa, const auto& opb) {
    if (beta == T(0))
      C.noalias() = alpha * opa * opb;
    else
      C.noalias() += alpha * opa * opb;
  };
  if (!trans_a && !trans_b) run(A, B);
  if (!trans_a && trans_b) run(A, B.transpose());
  if (trans_a && !trans_b) run(A.transpose(), B);
  if (trans_a && trans_b) run(A.transpose(), B.transpose());
}

// Same contract as gemm(); parallel over blocks of C when the product is big
// enough and we are not already inside a parallel region.
template <class T>
void gemm_parallel(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                   int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (threads <= 1 || flops < 4e6 || std::max(m, n) < 32) {
    gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Split the longer side of C into `threads` blocks, rounded to whole
  // micro-tiles: packed_sgemm's rows (8: a multiple of kMR) or columns (kNR),
  // 48 for Eigen's (double) AVX-512 tiles. (48 rows split 1024 as 528 + 496.)
  const bool split_rows = m >= n;
  const int64_t len = split_rows ? m : n;
  const int64_t align = !std::is_same_v<T, float> ? 48 : split_rows ? 8 : conv2d_gemm::kNR<float>;
  int64_t chunk = (len + threads - 1) / threads;
  chunk = std::min(len, (chunk + align - 1) / align * align);
  const int64_t blocks = (len + chunk - 1) / chunk;
#pragma omp parallel for num_threads(static_cast<int>(blocks)) schedule(static, 1)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t start = blk * chunk;
    const int64_t size = std::min(chunk, len - start);
    if (split_rows) {
      const T* a_blk = trans_a ? a + start : a + start * lda;
      gemm(trans_a, trans_b, size, n, k, alpha, a_blk, lda, b, ldb, beta, c + start * ldc, ldc);
    } else {
      const T* b_blk = trans_b ? b + start * ldb : b + start;
      gemm(trans_a, trans_b, m, size, k, alpha, a, lda, b_blk, ldb, beta, c + start, ldc);
    }
  }
}

}  // namespace minidl::detail

#pragma GCC diagnostic pop
