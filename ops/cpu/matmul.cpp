// CPU kernels of matmul and linear (ops/matmul.h's kernel interface), on the
// Eigen GEMM of ops/cpu/gemm.h; bfloat16 on the dot-product GEMM of
// ops/cpu/bf16_kernels.h where the CPU has it, else through Float32Compute.
#include <omp.h>

#include <algorithm>

#include "minidl/ops/cpu/bf16_kernels.h"
#include "minidl/ops/cpu/float32_compute.h"
#include "minidl/ops/cpu/gemm.h"
#include "minidl/ops/matmul.h"

namespace minidl {

namespace {

template <class T>
void batched_gemm_kernel(const GemmBatch& g, const T* a, const T* b, T* c) {
  const int64_t count = static_cast<int64_t>(g.c_offset.size());
  const T beta = g.accumulate ? T(1) : T(0);
  const int threads = omp_get_max_threads();
  // Many independent products: one per thread, each single-threaded. Otherwise
  // (few products, or several accumulating into one C) split each product.
  if (!g.accumulate && threads > 1 && (count >= 4 * threads || count % threads == 0)) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i)
      detail::gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, T(1), a + g.a_offset[i], g.lda, b + g.b_offset[i],
                   g.ldb, beta, c + g.c_offset[i], g.ldc);
    return;
  }
  for (int64_t i = 0; i < count; ++i)
    detail::gemm_parallel(g.trans_a, g.trans_b, g.m, g.n, g.k, T(1), a + g.a_offset[i], g.lda,
                          b + g.b_offset[i], g.ldb, beta, c + g.c_offset[i], g.ldc);
}

void batched_gemm_cpu(const GemmBatch& g, const Tensor& a, const Tensor& b, const Tensor& c) {
  MINIDL_DISPATCH_FLOATING(c.dtype(), "matmul", [&] {
    batched_gemm_kernel<scalar_t>(g, a.data_ptr<scalar_t>(), b.data_ptr<scalar_t>(), c.data_ptr<scalar_t>());
  });
}

template <class T>
void linear_forward_kernel(int64_t rows, int64_t in, int64_t out, const T* x, const T* w, const T* bias, T* y) {
  detail::gemm_parallel(false, true, rows, out, in, T(1), x, in, w, in, T(0), y, out);
  if (bias == nullptr) return;
#pragma omp parallel for schedule(static) if (rows * out > 32768)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < out; ++j) y[r * out + j] += bias[j];
}

template <class T>
void linear_backward_kernel(int64_t rows, int64_t in, int64_t out, const T* x, const T* w, const T* dy, T* dx,
                            T* dw, T* dbias) {
  if (dx) detail::gemm_parallel(false, false, rows, in, out, T(1), dy, out, w, in, T(0), dx, in);
  if (dw) detail::gemm_parallel(true, false, out, in, rows, T(1), dy, out, x, in, T(0), dw, in);
  if (dbias) {
    std::fill(dbias, dbias + out, T(0));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < out; ++j) dbias[j] += dy[r * out + j];
  }
}

template <class T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

void linear_forward_cpu(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y) {
  const int64_t in = w.size(1), out = w.size(0), rows = out == 0 ? 0 : y.numel() / out;
  MINIDL_DISPATCH_FLOATING(x.dtype(), "linear", [&] {
    linear_forward_kernel<scalar_t>(rows, in, out, x.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(),
                                    ptr_or_null<scalar_t>(bias), y.data_ptr<scalar_t>());
  });
}

void linear_backward_cpu(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx, const Tensor& dw,
                         const Tensor& dbias) {
  // Rows from x: with out_features = 0, dy is empty but dx (rows x in) must still be written (zeros).
  const int64_t in = w.size(1), out = w.size(0), rows = in != 0 ? x.numel() / in : out == 0 ? 0 : dy.numel() / out;
  MINIDL_DISPATCH_FLOATING(x.dtype(), "linear", [&] {
    linear_backward_kernel<scalar_t>(rows, in, out, x.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(),
                                     dy.data_ptr<scalar_t>(), ptr_or_null<scalar_t>(dx),
                                     ptr_or_null<scalar_t>(dw), ptr_or_null<scalar_t>(dbias));
  });
}

// The registered kernels: bfloat16 dot products when they apply, else the
// float32 kernels, 16-bit tensors widened.
void batched_gemm_any(const GemmBatch& g, const Tensor& a, const Tensor& b, const Tensor& c) {
  if (cpu::bf16_dot_applies({&a, &b, &c})) return cpu::batched_gemm_bf16(g, a, b, c);
  cpu::Float32Compute<batched_gemm_cpu, 3>::run(g, a, b, c);
}

void linear_forward_any(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y) {
  if (cpu::bf16_dot_applies({&x, &w, &bias, &y})) return cpu::linear_forward_bf16(x, w, bias, y);
  cpu::Float32Compute<linear_forward_cpu, 3>::run(x, w, bias, y);
}

void linear_backward_any(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx, const Tensor& dw,
                         const Tensor& dbias) {
  if (cpu::bf16_dot_applies({&x, &w, &dy, &dx, &dw, &dbias})) return cpu::linear_backward_bf16(x, w, dy, dx, dw, dbias);
  cpu::Float32Compute<linear_backward_cpu, 3, 4, 5>::run(x, w, dy, dx, dw, dbias);
}

}  // namespace

void register_matmul_cpu_kernels() {
  batched_gemm_stub.set(DeviceType::CPU, batched_gemm_any);
  linear_forward_stub.set(DeviceType::CPU, linear_forward_any);
  linear_backward_stub.set(DeviceType::CPU, linear_backward_any);
}

}  // namespace minidl
