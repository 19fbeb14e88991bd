// ops/cpu/packed_sgemm.h (the float32 GEMM behind matmul and linear) against
// double loops: all four transpose cases, accumulate or overwrite, sizes
// that cross its blocks (K blocks of 256, row blocks of 128, column blocks
// of at most 2016, partial micro-tiles), row pitches wider than the rows, k = 0;
// and detail::gemm_parallel's split over threads gives bit-identical results.
#include <doctest/doctest.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <vector>

#include "minidl/ops/cpu/gemm.h"
#include "minidl/ops/cpu/packed_sgemm.h"

using namespace minidl;

namespace {

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& e : v) e = dist(gen);
  return v;
}

// C (m x n, pitch ldc) = op(A) op(B) (+ C) in double, for checking.
void check_case(bool ta, bool tb, int64_t m, int64_t n, int64_t k, bool accumulate) {
  INFO("trans_a=", ta, " trans_b=", tb, " m=", m, " n=", n, " k=", k, " accumulate=", accumulate);
  const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 7;  // pitches wider than rows
  const auto a = random_floats((ta ? k : m) * lda, 1), b = random_floats((tb ? n : k) * ldb, 2);
  auto c = random_floats(m * ldc, 3);
  const std::vector<float> c0 = c;
  detail::packed_sgemm(ta, tb, m, n, k, a.data(), lda, b.data(), ldb, accumulate, c.data(), ldc);
  int64_t bad = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t at = static_cast<size_t>(i * ldc + j);
      if (j >= n) {  // past the row: untouched
        bad += c[at] != c0[at];
        continue;
      }
      double want = accumulate ? c0[at] : 0.0;
      for (int64_t p = 0; p < k; ++p)
        want += static_cast<double>(ta ? a[static_cast<size_t>(p * lda + i)] : a[static_cast<size_t>(i * lda + p)]) *
                (tb ? b[static_cast<size_t>(j * ldb + p)] : b[static_cast<size_t>(p * ldb + j)]);
      bad += !(std::abs(c[at] - want) <= 1e-5 * (std::sqrt(static_cast<double>(k)) + std::abs(want)));
    }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("packed_sgemm matches double loops across its blocks") {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_case(ta, tb, 137, 61, 263, false);  // 2 K blocks, 2 row blocks, partial tiles and panels
      check_case(ta, tb, 9, 100, 5, true);
    }
  check_case(false, true, 20, 2100, 40, true);  // 2 column blocks (1056 + 1044)
  check_case(false, false, 3, 4, 0, false);     // k = 0: C = 0
  check_case(true, false, 3, 4, 0, true);       // k = 0, accumulate: C unchanged
}

TEST_CASE("gemm_parallel: the same bits on 1 and 3 threads (float32)") {
  const int saved = omp_get_max_threads();
  const int64_t m = 300, n = 200, k = 280;
  const auto a = random_floats(m * k, 4), b = random_floats(k * n, 5);
  std::vector<float> c1(static_cast<size_t>(m * n)), c3(c1.size());
  omp_set_num_threads(1);
  detail::gemm_parallel(false, false, m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, c1.data(), n);
  omp_set_num_threads(3);
  detail::gemm_parallel(false, false, m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, c3.data(), n);
  omp_set_num_threads(saved);
  CHECK(c1 == c3);
}
