// How a row-major product becomes cuBLAS's column-major call: pure host
// arithmetic, no CUDA headers, so tests/test_gpu_host_logic.cpp checks it on
// the CPU in every build (by running the plan through a reference
// column-major GEMM and comparing with the row-major product).
//
// The transpose identity: a row-major r x c matrix with leading dimension ld
// is, read column-major, its transpose (c x r, same ld). So the row-major
//   C (m x n) = op(A) op(B)
// is the column-major
//   C^T (n x m) = op(B)^T op(A)^T,
// i.e. cuBLAS gets our B as its first operand and our A as its second, with
// m and n swapped and each operand's transpose flag kept (op(B)^T read
// column-major is B read row-major when op is the identity, so "no
// transpose" stays "no transpose").
#pragma once

#include <climits>
#include <cstdint>
#include <vector>

#include "minidl/core/check.h"
#include "minidl/ops/matmul.h"

namespace minidl::cuda_gemm {

// One row-major product C = op(A) op(B) (+ beta C), as GemmBatch describes one.
struct RowMajorGemm {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
};

// cublasGemmEx's arguments, in its order. first = our B, second = our A.
struct ColumnMajorGemm {
  bool trans_first = false, trans_second = false;  // CUBLAS_OP_T when true
  int m = 0, n = 0, k = 0;
  int ld_first = 0, ld_second = 0, ldc = 0;
};

inline int checked_int(int64_t v, const char* what) {
  MINIDL_CHECK(v >= 0 && v <= INT_MAX, "matmul (cuBLAS): ", what, " = ", v,
               " does not fit cuBLAS's 32-bit int; split the product");
  return static_cast<int>(v);
}

inline ColumnMajorGemm to_column_major(const RowMajorGemm& g) {
  ColumnMajorGemm c;
  c.trans_first = g.trans_b;
  c.trans_second = g.trans_a;
  c.m = checked_int(g.n, "n");
  c.n = checked_int(g.m, "m");
  c.k = checked_int(g.k, "k");
  c.ld_first = checked_int(g.ldb, "ldb");
  c.ld_second = checked_int(g.lda, "lda");
  c.ldc = checked_int(g.ldc, "ldc");
  return c;
}

// A GemmBatch as cuBLAS calls. Offsets are in elements of our a, b, c.
struct GemmBatchPlan {
  ColumnMajorGemm gemm;
  bool accumulate = false;  // beta = 1, else 0
  // strided: one cublasGemmStridedBatchedEx over `count` products, product i
  // at a_first + i * a_stride (etc.); a stride may be 0 (a broadcast operand).
  // Only when no two products write the same C (cuBLAS may run batch entries
  // concurrently). Otherwise one cublasGemmEx per product, in order: calls on
  // one stream run one after another, so accumulating products cannot race.
  bool strided = false;
  int count = 0;
  int64_t a_first = 0, b_first = 0, c_first = 0;
  int64_t a_stride = 0, b_stride = 0, c_stride = 0;
};

// offsets[i] == offsets[0] + i * stride for every i, stride >= 0 (count 1: stride 0).
inline bool arithmetic(const std::vector<int64_t>& offsets, int64_t& stride) {
  stride = offsets.size() > 1 ? offsets[1] - offsets[0] : 0;
  if (stride < 0) return false;
  for (size_t i = 1; i < offsets.size(); ++i)
    if (offsets[i] - offsets[i - 1] != stride) return false;
  return true;
}

inline GemmBatchPlan plan_batch(const GemmBatch& g) {
  MINIDL_ASSERT(g.a_offset.size() == g.c_offset.size() && g.b_offset.size() == g.c_offset.size(),
                "GemmBatch offsets of different lengths");
  GemmBatchPlan p;
  p.gemm = to_column_major({g.trans_a, g.trans_b, g.m, g.n, g.k, g.lda, g.ldb, g.ldc});
  p.accumulate = g.accumulate;
  p.count = checked_int(static_cast<int64_t>(g.c_offset.size()), "batch count");
  if (p.count == 0) return p;
  p.a_first = g.a_offset[0], p.b_first = g.b_offset[0], p.c_first = g.c_offset[0];
  // Accumulating batches repeat a C matrix by definition (ops/matmul.cpp):
  // never one concurrent call. A non-accumulating batch has distinct C's.
  p.strided = !g.accumulate && arithmetic(g.a_offset, p.a_stride) && arithmetic(g.b_offset, p.b_stride) &&
              arithmetic(g.c_offset, p.c_stride) && (p.count == 1 || p.c_stride != 0);
  if (!p.strided) p.a_stride = p.b_stride = p.c_stride = 0;
  return p;
}

// The products of F.linear (ops/matmul.h: x rows x in, W out x in, y rows x
// out, all contiguous row-major). dbias is ones(1 x rows) * dy, and the bias
// term of y is ones(rows x 1) * bias(1 x out): rank-1 GEMMs, so every dtype
// cuBLAS takes works without a hand-written reduction or broadcast.
inline RowMajorGemm linear_forward_gemm(int64_t rows, int64_t in, int64_t out) {  // y = x W^T
  return {false, true, rows, out, in, in, in, out};
}
inline RowMajorGemm linear_bias_gemm(int64_t rows, int64_t out) {  // y = ones bias
  return {false, false, rows, out, 1, 1, out, out};
}
inline RowMajorGemm linear_dx_gemm(int64_t rows, int64_t in, int64_t out) {  // dx = dy W
  return {false, false, rows, in, out, out, in, in};
}
inline RowMajorGemm linear_dw_gemm(int64_t rows, int64_t in, int64_t out) {  // dW = dy^T x
  return {true, false, out, in, rows, out, in, in};
}
inline RowMajorGemm linear_dbias_gemm(int64_t rows, int64_t out) {  // dbias = ones^T dy
  return {false, false, 1, out, rows, rows, out, out};
}

}  // namespace minidl::cuda_gemm
