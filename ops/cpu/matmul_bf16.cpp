// matmul and linear on bfloat16 operands through bf16_gemm (ops/cpu/bf16_kernels.h):
//   batched   C[i] = op(A[i]) op(B[i]), rounded once; an accumulating batch
//             (several products into one C) sums C in float32, then rounds once
//   linear    y = x W^T + bias (bias added in float32 before the rounding)
//   backward  dx = dy W, dW = dy^T x, dbias = column sums of dy (float32 sums)
#include <omp.h>

#include <vector>

#include "minidl/ops/cpu/bf16_gemm.h"
#include "minidl/ops/cpu/bf16_kernels.h"

namespace minidl::cpu {

namespace {

const BFloat16* ptr(const Tensor& t) { return t.defined() ? t.data_ptr<BFloat16>() : nullptr; }
BFloat16* mut(const Tensor& t) { return t.defined() ? t.data_ptr<BFloat16>() : nullptr; }

Bf16GemmOut bf16_out(BFloat16* c, int64_t ldc, const BFloat16* col_bias = nullptr) {
  Bf16GemmOut out;
  out.bf16 = c, out.ldc = ldc, out.col_bias = col_bias;
  return out;
}

}  // namespace

bool bf16_dot_applies(std::initializer_list<const Tensor*> tensors) {
  if (!bf16_dot_enabled()) return false;
  for (const Tensor* t : tensors)
    if (t->defined() && (t->dtype() != kBFloat16 || !(t->device().is_cpu() || t->device().is_test()))) return false;
  return true;
}

void batched_gemm_bf16(const GemmBatch& g, const Tensor& a, const Tensor& b, const Tensor& c) {
  const int64_t count = static_cast<int64_t>(g.c_offset.size());
  const BFloat16* pa = ptr(a);
  const BFloat16* pb = ptr(b);
  BFloat16* pc = mut(c);
  if (g.accumulate) {  // one product after another into a float32 copy of c (contiguous)
    std::vector<float> sums(static_cast<size_t>(c.numel()));
    for (size_t i = 0; i < sums.size(); ++i) sums[i] = static_cast<float>(pc[i]);
    for (int64_t i = 0; i < count; ++i) {
      Bf16GemmOut out;
      out.f32 = sums.data() + g.c_offset[i], out.ldc = g.ldc, out.accumulate = true;
      bf16_gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, pa + g.a_offset[i], g.lda, pb + g.b_offset[i], g.ldb, out);
    }
    for (size_t i = 0; i < sums.size(); ++i) pc[i] = BFloat16(sums[i]);
    return;
  }
  auto one = [&](int64_t i) {
    bf16_gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, pa + g.a_offset[i], g.lda, pb + g.b_offset[i], g.ldb,
              bf16_out(pc + g.c_offset[i], g.ldc));
  };
  // As the float32 kernel: many products, one per thread; else each split.
  const int threads = omp_get_max_threads();
  if (threads > 1 && (count >= 4 * threads || count % threads == 0)) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) one(i);
    return;
  }
  for (int64_t i = 0; i < count; ++i) one(i);
}

void linear_forward_bf16(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y) {
  const int64_t in = w.size(1), out = w.size(0), rows = out == 0 ? 0 : y.numel() / out;
  bf16_gemm(false, true, rows, out, in, ptr(x), in, ptr(w), in, bf16_out(mut(y), out, ptr(bias)));
}

void linear_backward_bf16(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx, const Tensor& dw,
                          const Tensor& dbias) {
  const int64_t in = w.size(1), out = w.size(0), rows = in != 0 ? x.numel() / in : out == 0 ? 0 : dy.numel() / out;
  if (dx.defined()) bf16_gemm(false, false, rows, in, out, ptr(dy), out, ptr(w), in, bf16_out(mut(dx), in));
  if (dw.defined()) bf16_gemm(true, false, out, in, rows, ptr(dy), out, ptr(x), in, bf16_out(mut(dw), in));
  if (dbias.defined()) {
    std::vector<float> sums(static_cast<size_t>(out), 0.0f);
    const BFloat16* g = ptr(dy);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < out; ++j) sums[static_cast<size_t>(j)] += static_cast<float>(g[r * out + j]);
    BFloat16* db = mut(dbias);
    for (int64_t j = 0; j < out; ++j) db[j] = BFloat16(sums[static_cast<size_t>(j)]);
  }
}

}  // namespace minidl::cpu
