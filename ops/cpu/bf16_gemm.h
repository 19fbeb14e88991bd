// GEMM on bfloat16 operands with float32 accumulation: what CPU bfloat16
// autocast runs matmul, linear and conv2d on (ops/cpu/matmul_bf16.cpp,
// ops/cpu/conv2d_bf16.cpp). Internal to ops/.
//
//   C = op(A) * op(B) (+ bias)      or      C += op(A) * op(B)
//   op(A) is m x k (A stored k x m when trans_a), op(B) is k x n; row-major,
//   each matrix with its own leading dimension, as detail::gemm (ops/cpu/gemm.h).
//
// Two paths, chosen per call:
//   dot product  AVX512-BF16's vdpbf16ps (ops/cpu/bf16_gemm_avx512.cpp):
//                operands packed as bfloat16 pairs, products summed in
//                float32 registers, the result rounded to bfloat16 once.
//   float32      the operands widened to float32 and the Eigen GEMM of
//                ops/cpu/gemm.h; the same products, summed in another order.
// The dot-product path runs when the CPU has AVX512-BF16 (CPUID, checked at
// run time: the library may be built for x86-64-v3 and run on a CPU that has
// it, or the other way round) unless the environment variable
// MINIDL_CPU_BF16_DOT is "0", which forces the float32 path (for tests, and to
// measure what the dot products buy).
#pragma once

#include <cstdint>

#include "minidl/core/half.h"

namespace minidl::cpu {

// Whether this CPU (and OS) executes AVX512-BF16 instructions; false on
// other architectures and when the compiler could not build the kernel.
bool cpu_has_avx512_bf16();
// cpu_has_avx512_bf16() and MINIDL_CPU_BF16_DOT is not "0" (read each call).
bool bf16_dot_enabled();

// Where the product goes. Exactly one of f32 and bf16 is set.
struct Bf16GemmOut {
  float* f32 = nullptr;         // float32 C: overwritten, or added to with accumulate
  BFloat16* bf16 = nullptr;     // bfloat16 C: overwritten, rounded once
  int64_t ldc = 0;
  bool accumulate = false;      // f32 only
  const BFloat16* row_bias = nullptr;  // bias[i] added to row i before rounding (conv2d)
  const BFloat16* col_bias = nullptr;  // bias[j] added to column j (linear)
};

// Runs on the calling thread's OpenMP team: C is split into one block per
// thread (as detail::gemm_parallel) when big enough and not already inside a
// parallel region.
void bf16_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t lda,
               const BFloat16* b, int64_t ldb, const Bf16GemmOut& out);

// How many bf16_gemm calls each path has run in this process, so tests can
// tell which one did.
struct Bf16GemmCounts {
  int64_t dot_product = 0;
  int64_t float32 = 0;
};
Bf16GemmCounts bf16_gemm_counts();

// The single-threaded dot-product kernel (ops/cpu/bf16_gemm_avx512.cpp);
// call only when cpu_has_avx512_bf16(). k >= 1, m, n >= 1.
void bf16_gemm_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t lda,
                      const BFloat16* b, int64_t ldb, const Bf16GemmOut& out);
// Whether bf16_gemm_avx512 was compiled in (an x86-64 compiler that knows the target).
bool bf16_gemm_avx512_compiled();

}  // namespace minidl::cpu
