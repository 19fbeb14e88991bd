// bf16_gemm (ops/cpu/bf16_gemm.h): the run-time choice of path, the threads,
// and the float32 path.
#include "minidl/ops/cpu/bf16_gemm.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "minidl/ops/cpu/convert_half.h"
#include "minidl/ops/cpu/gemm.h"

namespace minidl::cpu {

namespace {

std::atomic<int64_t> dot_calls{0}, float32_calls{0};

bool cpuid_has_avx512_bf16() {
#if defined(__x86_64__) && defined(__GNUC__)
  // libgcc's CPU model also checks that the OS saves the zmm registers (XCR0).
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

// op(X) stored rows x cols (pitch ld) widened into a contiguous float32 copy.
std::vector<float> widen(const BFloat16* x, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> wide(static_cast<size_t>(rows * cols));
  const auto to_f32 = half_convert_kernels().bf16_to_f32;
  for (int64_t r = 0; r < rows; ++r) to_f32(x + r * ld, wide.data() + r * cols, cols);
  return wide;
}

// The float32 path: the operands widened, Eigen's GEMM, bias added, then one rounding.
void gemm_float32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t lda,
                  const BFloat16* b, int64_t ldb, const Bf16GemmOut& out) {
  const int64_t a_cols = trans_a ? m : k, b_cols = trans_b ? k : n;
  const std::vector<float> wa = widen(a, trans_a ? k : m, a_cols, lda);
  const std::vector<float> wb = widen(b, trans_b ? n : k, b_cols, ldb);
  std::vector<float> tmp;
  float* c = out.f32;
  int64_t ldc = out.ldc;
  if (!c) {
    tmp.resize(static_cast<size_t>(m * n));
    c = tmp.data(), ldc = n;
  }
  detail::gemm_parallel(trans_a, trans_b, m, n, k, 1.0f, wa.data(), a_cols, wb.data(), b_cols,
                        out.f32 && out.accumulate ? 1.0f : 0.0f, c, ldc);
  if (out.row_bias || out.col_bias)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] += (out.row_bias ? static_cast<float>(out.row_bias[i]) : 0.0f) +
                          (out.col_bias ? static_cast<float>(out.col_bias[j]) : 0.0f);
  if (out.bf16)
    for (int64_t i = 0; i < m; ++i) half_convert_kernels().f32_to_bf16(c + i * ldc, out.bf16 + i * out.ldc, n);
}

// The dot-product path over the threads: C split along its longer side into
// one block per thread (as detail::gemm_parallel), each block single-threaded.
void gemm_dot(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t lda,
              const BFloat16* b, int64_t ldb, const Bf16GemmOut& out) {
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (threads <= 1 || flops < 4e6 || std::max(m, n) < 32)
    return bf16_gemm_avx512(trans_a, trans_b, m, n, k, a, lda, b, ldb, out);
  const bool split_rows = m >= n;
  const int64_t len = split_rows ? m : n, align = 48;  // whole micro-tiles (8 rows, 48 columns)
  int64_t chunk = (len + threads - 1) / threads;
  chunk = std::min(len, (chunk + align - 1) / align * align);
  const int64_t blocks = (len + chunk - 1) / chunk;
#pragma omp parallel for num_threads(static_cast<int>(blocks)) schedule(static, 1)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t start = blk * chunk, size = std::min(chunk, len - start);
    Bf16GemmOut part = out;
    const int64_t c_off = split_rows ? start * out.ldc : start;
    if (part.f32) part.f32 += c_off;
    if (part.bf16) part.bf16 += c_off;
    if (split_rows) {
      if (part.row_bias) part.row_bias += start;
      bf16_gemm_avx512(trans_a, trans_b, size, n, k, trans_a ? a + start : a + start * lda, lda, b, ldb, part);
    } else {
      if (part.col_bias) part.col_bias += start;
      bf16_gemm_avx512(trans_a, trans_b, m, size, k, a, lda, trans_b ? b + start * ldb : b + start, ldb, part);
    }
  }
}

// k = 0: C = bias (or 0), or C unchanged when accumulating.
void empty_product(int64_t m, int64_t n, const Bf16GemmOut& out) {
  if (out.f32 && out.accumulate) return;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const float v = (out.row_bias ? static_cast<float>(out.row_bias[i]) : 0.0f) +
                      (out.col_bias ? static_cast<float>(out.col_bias[j]) : 0.0f);
      if (out.f32) out.f32[i * out.ldc + j] = v;
      else out.bf16[i * out.ldc + j] = BFloat16(v);
    }
}

}  // namespace

bool cpu_has_avx512_bf16() {
  static const bool has = bf16_gemm_avx512_compiled() && cpuid_has_avx512_bf16();
  return has;
}

bool bf16_dot_enabled() {
  if (!cpu_has_avx512_bf16()) return false;
  const char* env = std::getenv("MINIDL_CPU_BF16_DOT");  // "0": force the float32 path
  return env == nullptr || std::strcmp(env, "0") != 0;
}

void bf16_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t lda,
               const BFloat16* b, int64_t ldb, const Bf16GemmOut& out) {
  if (m == 0 || n == 0) return;
  if (k == 0) return empty_product(m, n, out);
  if (bf16_dot_enabled()) {
    dot_calls.fetch_add(1, std::memory_order_relaxed);
    gemm_dot(trans_a, trans_b, m, n, k, a, lda, b, ldb, out);
  } else {
    float32_calls.fetch_add(1, std::memory_order_relaxed);
    gemm_float32(trans_a, trans_b, m, n, k, a, lda, b, ldb, out);
  }
}

Bf16GemmCounts bf16_gemm_counts() {
  return {dot_calls.load(std::memory_order_relaxed), float32_calls.load(std::memory_order_relaxed)};
}

}  // namespace minidl::cpu
