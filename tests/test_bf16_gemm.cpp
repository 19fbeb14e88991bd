// bf16_gemm (ops/cpu/bf16_gemm.h), both paths, against a float64 reference
// of the same bfloat16 inputs: odd and edge shapes, K = 1, several K blocks,
// several column and row blocks, the four transposes, padded leading dimensions,
// bias per row and per column, float32 accumulation, the threaded split.
// Which path ran is checked through bf16_gemm_counts(): on a CPU with
// AVX512-BF16 the dot-product path must run; without it the test says so.
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "minidl/ops/cpu/bf16_gemm.h"
#include "tests/test_util.h"

using namespace minidl;
using cpu::Bf16GemmOut;

namespace {

// Sets MINIDL_CPU_BF16_DOT for the scope (the variable is read per call).
struct DotOverride {
  explicit DotOverride(bool dot) { setenv("MINIDL_CPU_BF16_DOT", dot ? "1" : "0", 1); }
  ~DotOverride() { unsetenv("MINIDL_CPU_BF16_DOT"); }
};

std::vector<BFloat16> random_bf16(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d;
  std::vector<BFloat16> v(n);
  for (auto& x : v) x = BFloat16(d(rng));
  return v;
}

struct Case {
  bool trans_a, trans_b;
  int64_t m, n, k;
  int64_t pad = 0;  // extra leading-dimension elements
  bool bf16_out = true, accumulate = false, row_bias = false, col_bias = false;
};

std::string describe(const Case& c) {
  return "trans_a " + std::to_string(c.trans_a) + " trans_b " + std::to_string(c.trans_b) + " m " +
         std::to_string(c.m) + " n " + std::to_string(c.n) + " k " + std::to_string(c.k) + " pad " +
         std::to_string(c.pad) + (c.bf16_out ? " bf16 out" : " f32 out") + (c.accumulate ? " accumulate" : "") +
         (c.row_bias ? " row bias" : "") + (c.col_bias ? " col bias" : "");
}

// Runs one case and checks every element: the float64 sum of the exact
// products, then (bfloat16 out) one rounding. Tolerance: float32 summation
// of k terms (k * 2^-24 * sum |a b|, twice over for safety) plus, for a
// bfloat16 C, half a bfloat16 ulp of the result.
void run_case(const Case& c, std::mt19937& rng) {
  INFO(describe(c));
  const int64_t a_rows = c.trans_a ? c.k : c.m, a_cols = c.trans_a ? c.m : c.k, lda = a_cols + c.pad;
  const int64_t b_rows = c.trans_b ? c.n : c.k, b_cols = c.trans_b ? c.k : c.n, ldb = b_cols + c.pad;
  const int64_t ldc = c.n + c.pad;
  const auto a = random_bf16(static_cast<size_t>(a_rows * lda), rng);
  const auto b = random_bf16(static_cast<size_t>(b_rows * ldb), rng);
  const auto rb = random_bf16(static_cast<size_t>(c.m), rng), cb = random_bf16(static_cast<size_t>(c.n), rng);
  std::vector<float> c32(static_cast<size_t>(c.m * ldc));
  for (auto& x : c32) x = static_cast<float>(rng() % 7) - 3.0f;
  const std::vector<float> c32_before = c32;
  std::vector<BFloat16> c16(static_cast<size_t>(c.m * ldc), BFloat16(-99.0f));
  Bf16GemmOut out;
  out.ldc = ldc;
  out.accumulate = c.accumulate;
  if (c.bf16_out) out.bf16 = c16.data();
  else out.f32 = c32.data();
  if (c.row_bias) out.row_bias = rb.data();
  if (c.col_bias) out.col_bias = cb.data();
  cpu::bf16_gemm(c.trans_a, c.trans_b, c.m, c.n, c.k, a.data(), lda, b.data(), ldb, out);
  auto A = [&](int64_t i, int64_t p) { return static_cast<double>(static_cast<float>(c.trans_a ? a[p * lda + i] : a[i * lda + p])); };
  auto B = [&](int64_t p, int64_t j) { return static_cast<double>(static_cast<float>(c.trans_b ? b[j * ldb + p] : b[p * ldb + j])); };
  int64_t bad = 0;
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t at = static_cast<size_t>(i * ldc + j);
      if (j >= c.n) {  // past the columns: untouched
        if (c.bf16_out ? c16[at].x != BFloat16(-99.0f).x : c32[at] != c32_before[at]) ++bad;
        continue;
      }
      double ref = 0, mag = 0;
      for (int64_t p = 0; p < c.k; ++p) ref += A(i, p) * B(p, j), mag += std::abs(A(i, p) * B(p, j));
      if (c.row_bias) ref += static_cast<float>(rb[static_cast<size_t>(i)]);
      if (c.col_bias) ref += static_cast<float>(cb[static_cast<size_t>(j)]);
      if (!c.bf16_out && c.accumulate) ref += c32_before[at];
      const double got = c.bf16_out ? static_cast<float>(c16[at]) : c32[at];
      const double tol = 2.0 * static_cast<double>(c.k + 2) * std::ldexp(mag + std::abs(ref) + 4.0, -24) +
                         (c.bf16_out ? std::ldexp(std::abs(ref), -8) * 1.001 : 0.0);
      if (!(std::abs(got - ref) <= tol)) {
        if (bad < 5) MESSAGE("C[", i, "][", j, "] = ", got, ", want ", ref, " +- ", tol);
        ++bad;
      }
    }
  CHECK(bad == 0);
}

std::vector<Case> cases() {
  std::vector<Case> all;
  const int64_t dims[][3] = {{1, 1, 1},   {1, 1, 2},    {7, 5, 1},     {8, 48, 2},   {9, 49, 3},   {17, 33, 31},
                             {3, 100, 7}, {33, 17, 64}, {50, 20, 255}, {24, 96, 256}, {13, 61, 257}, {10, 11, 600},
                             {3, 3100, 5},  {300, 20, 41},  // past one block of columns; of rows
                             {24, 96, 383}, {24, 96, 384}, {13, 61, 385}, {9, 50, 769}};  // K blocks of 384
  for (const auto& d : dims)
    for (int t = 0; t < 4; ++t) all.push_back({(t & 1) != 0, (t & 2) != 0, d[0], d[1], d[2], t == 3 ? 3 : 0});
  // Outputs and epilogues.
  all.push_back({false, false, 21, 50, 300, 1, false, false});
  all.push_back({true, false, 21, 50, 300, 0, false, true});
  all.push_back({false, true, 19, 37, 9, 2, true, false, true, false});
  all.push_back({false, true, 19, 37, 600, 0, true, false, true, true});
  all.push_back({true, true, 9, 70, 5, 0, false, true, false, true});
  // Big enough for the threads to split C (by rows, then by columns).
  all.push_back({false, true, 200, 150, 300});
  all.push_back({true, false, 40, 300, 513, 0, false, true});
  return all;
}

}  // namespace

TEST_CASE("bf16_gemm: the dot-product path against a float64 reference, and that it ran") {
  if (!cpu::cpu_has_avx512_bf16()) {
    MESSAGE("this CPU has no AVX512-BF16: the dot-product path cannot run here; bf16_gemm uses the float32 path");
    CHECK_FALSE(cpu::bf16_dot_enabled());
    return;
  }
  std::mt19937 rng(1);
  const auto before = cpu::bf16_gemm_counts();
  for (const Case& c : cases()) run_case(c, rng);
  const auto after = cpu::bf16_gemm_counts();
  CHECK(after.dot_product - before.dot_product == static_cast<int64_t>(cases().size()));
  CHECK(after.float32 == before.float32);
}

TEST_CASE("bf16_gemm: MINIDL_CPU_BF16_DOT=0 forces the float32 path, which meets the same reference") {
  DotOverride off(false);
  CHECK_FALSE(cpu::bf16_dot_enabled());
  std::mt19937 rng(2);
  const auto before = cpu::bf16_gemm_counts();
  for (const Case& c : cases()) run_case(c, rng);
  const auto after = cpu::bf16_gemm_counts();
  CHECK(after.float32 - before.float32 == static_cast<int64_t>(cases().size()));
  CHECK(after.dot_product == before.dot_product);
}

TEST_CASE("bf16_gemm: k = 0 gives the bias (or leaves an accumulated C alone)") {
  std::vector<BFloat16> c16(6, BFloat16(5.0f));
  const std::vector<BFloat16> rb = {BFloat16(1.0f), BFloat16(2.0f)};
  Bf16GemmOut out;
  out.bf16 = c16.data(), out.ldc = 3, out.row_bias = rb.data();
  cpu::bf16_gemm(false, false, 2, 3, 0, nullptr, 0, nullptr, 3, out);
  CHECK(static_cast<float>(c16[0]) == 1.0f);
  CHECK(static_cast<float>(c16[5]) == 2.0f);
  std::vector<float> c32(6, 5.0f);
  Bf16GemmOut acc;
  acc.f32 = c32.data(), acc.ldc = 3, acc.accumulate = true;
  cpu::bf16_gemm(false, false, 2, 3, 0, nullptr, 0, nullptr, 3, acc);
  CHECK(c32[4] == 5.0f);
}
