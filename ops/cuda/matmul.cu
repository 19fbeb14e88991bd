// matmul / batched matmul / F.linear on cuBLAS (ops/matmul.h's kernel
// interface; the math and what is saved: ops/matmul.cpp).
//   Row-major products through the transpose identity (ops/cuda/gemm_args.h);
//   cublasGemmStridedBatchedEx when a batch's offsets are evenly strided and
//   no two products write one C, else one cublasGemmEx per product in order.
//   float32: CUBLAS_COMPUTE_32F, or _32F_FAST_TF32 when
//   backends::cuda::matmul::allow_tf32() (off by default, as PyTorch);
//   float64: CUBLAS_COMPUTE_64F; float16/bfloat16: 16-bit storage, float32
//   compute (the CPU kernels refuse these dtypes, so nothing compares them yet).
//   linear: y = ones*bias (rank-1 GEMM) then y += x W^T (beta = 1);
//   dbias = ones^T dy. Every output overwrites, except GemmBatch::accumulate
//   (beta = 1), which the op asks for on zeroed outputs.
// Everything is enqueued on the current stream of the tensors' device (the
// cuBLAS handle is bound to it on fetch); nothing here synchronizes.
#include <cuda_runtime_api.h>

#include "minidl/core/backend_settings.h"
#include "minidl/core/cuda/library_handles.h"
#include "minidl/core/cuda/runtime.h"
#include "minidl/core/half.h"
#include "minidl/ops/cuda/gemm_args.h"
#include "minidl/ops/matmul.h"

namespace minidl {

namespace {

using cuda_gemm::ColumnMajorGemm;
using cuda_gemm::RowMajorGemm;

// cuBLAS's types for one dtype: storage, compute, and the scalar type of
// alpha/beta (the compute type's: double for 64F, float otherwise).
struct BlasTypes {
  cudaDataType_t data;
  cublasComputeType_t compute;
  bool double_scalars;
};

BlasTypes blas_types(DType dtype, const char* op) {
  switch (dtype) {
    case DType::Float32:
      return {CUDA_R_32F, backends::cuda::matmul::allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
              false};
    case DType::Float64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F, true};
    case DType::Float16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F, false};
    case DType::BFloat16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, false};
    default: MINIDL_FAIL(op, ": expected a floating-point tensor on CUDA, got ", dtype_name(dtype));
  }
}

cublasOperation_t blas_op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

// alpha = 1 and beta in the compute type's scalar type (cuBLAS reads them
// through void*; pointer mode host, the handle's default).
struct Scalars {
  double d_alpha = 1, d_beta = 0;
  float f_alpha = 1, f_beta = 0;
  Scalars(bool accumulate) : d_beta(accumulate ? 1 : 0), f_beta(accumulate ? 1.f : 0.f) {}
  const void* alpha(const BlasTypes& t) const {
    return t.double_scalars ? static_cast<const void*>(&d_alpha) : &f_alpha;
  }
  const void* beta(const BlasTypes& t) const { return t.double_scalars ? static_cast<const void*>(&d_beta) : &f_beta; }
};

// The handle for one call, with the state this file relies on set
// explicitly: handles are shared by every op of the thread, and a math mode
// left behind (TF32, or CUDA 13's emulated FP32/FP64 modes) would otherwise
// change our results. As PyTorch: TF32 tensor-op math for float32 only when
// allowed, default math otherwise; alpha/beta read from host memory.
cublasHandle_t handle_for(int device, DType dtype) {
  cublasHandle_t h = cuda::cublas_handle(device);
  const bool tf32 = dtype == DType::Float32 && backends::cuda::matmul::allow_tf32();
  MINIDL_CUBLAS_CHECK(cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  MINIDL_CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  return h;
}

char* at(const Tensor& t, int64_t element_offset) {
  return static_cast<char*>(t.raw_data()) + element_offset * static_cast<int64_t>(element_size(t.dtype()));
}

// C = 0 for a product with k == 0 (cuBLAS wants lda >= 1 then; PyTorch also
// zero-fills instead of calling it). C is m rows of n elements, ldc apart.
void zero_rows(void* c, int64_t m, int64_t n, int64_t ldc, DType dtype, cudaStream_t stream, const char* op) {
  const size_t es = element_size(dtype);
  MINIDL_CUDA_CHECK_OP(cudaMemset2DAsync(c, static_cast<size_t>(ldc) * es, 0, static_cast<size_t>(n) * es,
                                         static_cast<size_t>(m), stream),
                       op);
}

// One row-major product C = A B (+ C when accumulate) on the current stream.
void gemm(int device, DType dtype, const RowMajorGemm& g, const void* a, const void* b, void* c, bool accumulate,
          const char* op) {
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) {
    if (!accumulate) zero_rows(c, g.m, g.n, g.ldc, dtype, cuda::current_stream(device), op);
    return;
  }
  const BlasTypes t = blas_types(dtype, op);
  const ColumnMajorGemm cm = cuda_gemm::to_column_major(g);
  const Scalars s(accumulate);
  MINIDL_CUBLAS_CHECK(cublasGemmEx(handle_for(device, dtype), blas_op(cm.trans_first), blas_op(cm.trans_second),
                                   cm.m, cm.n, cm.k, s.alpha(t), b, t.data, cm.ld_first, a, t.data, cm.ld_second,
                                   s.beta(t), c, t.data, cm.ldc, t.compute, CUBLAS_GEMM_DEFAULT));
}

void batched_gemm_cuda(const GemmBatch& g, const Tensor& a, const Tensor& b, const Tensor& c) {
  const char* op = "matmul";
  const int device = c.device().index;
  cuda::DeviceGuard guard(c.device());
  const cuda_gemm::GemmBatchPlan p = cuda_gemm::plan_batch(g);
  if (p.count == 0 || g.m == 0 || g.n == 0) return;
  const RowMajorGemm one{g.trans_a, g.trans_b, g.m, g.n, g.k, g.lda, g.ldb, g.ldc};
  if (g.k == 0) {  // every C is 0 (or unchanged when accumulating into zeros)
    if (!g.accumulate)
      for (size_t i = 0; i < g.c_offset.size(); ++i)
        gemm(device, c.dtype(), one, nullptr, nullptr, at(c, g.c_offset[i]), false, op);
    return;
  }
  if (!p.strided) {
    for (size_t i = 0; i < g.c_offset.size(); ++i)
      gemm(device, c.dtype(), one, at(a, g.a_offset[i]), at(b, g.b_offset[i]), at(c, g.c_offset[i]), g.accumulate, op);
    return;
  }
  const BlasTypes t = blas_types(c.dtype(), op);
  const Scalars s(p.accumulate);
  const ColumnMajorGemm& cm = p.gemm;
  MINIDL_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      handle_for(device, c.dtype()), blas_op(cm.trans_first), blas_op(cm.trans_second), cm.m, cm.n, cm.k, s.alpha(t),
      at(b, p.b_first), t.data, cm.ld_first, p.b_stride, at(a, p.a_first), t.data, cm.ld_second, p.a_stride,
      s.beta(t), at(c, p.c_first), t.data, cm.ldc, p.c_stride, p.count, t.compute, CUBLAS_GEMM_DEFAULT));
}

// ---- a vector of ones (the rank-1 GEMMs of linear's bias) -------------------

template <class T>
__global__ void fill_ones_kernel(T* out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = T(1.0f);
}

Tensor ones_on(int64_t n, const Tensor& like, const char* op) {
  Tensor t = empty({n}, like.options());
  if (n == 0) return t;
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  cudaStream_t stream = cuda::current_stream(like.device().index);
  switch (like.dtype()) {
    case DType::Float32: fill_ones_kernel<<<blocks, threads, 0, stream>>>(t.data_ptr<float>(), n); break;
    case DType::Float64: fill_ones_kernel<<<blocks, threads, 0, stream>>>(t.data_ptr<double>(), n); break;
    case DType::Float16: fill_ones_kernel<<<blocks, threads, 0, stream>>>(t.data_ptr<Half>(), n); break;
    case DType::BFloat16: fill_ones_kernel<<<blocks, threads, 0, stream>>>(t.data_ptr<BFloat16>(), n); break;
    default: MINIDL_FAIL(op, ": expected a floating-point tensor on CUDA, got ", dtype_name(like.dtype()));
  }
  MINIDL_CUDA_KERNEL_LAUNCH_CHECK(op);
  return t;
}

// ---- linear -------------------------------------------------------------------

void linear_forward_cuda(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y) {
  const char* op = "linear";
  const int64_t in = w.size(1), out = w.size(0), rows = out == 0 ? 0 : y.numel() / out;
  const int device = y.device().index;
  cuda::DeviceGuard guard(y.device());
  if (rows == 0 || out == 0) return;
  bool accumulate = false;
  if (bias.defined()) {
    const Tensor ones = ones_on(rows, y, op);  // freed after the call: stream-ordered reuse
    gemm(device, y.dtype(), cuda_gemm::linear_bias_gemm(rows, out), ones.raw_data(), bias.raw_data(),
         y.raw_data(), false, op);
    accumulate = true;
  }
  gemm(device, y.dtype(), cuda_gemm::linear_forward_gemm(rows, in, out), x.raw_data(), w.raw_data(), y.raw_data(),
       accumulate, op);
}

void linear_backward_cuda(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx, const Tensor& dw,
                          const Tensor& dbias) {
  const char* op = "linear_backward";
  // rows from x when it has columns: with out == 0, dx (rows x in) is still
  // wanted, as zeros (a k = 0 product), and dy.numel() / out cannot say rows.
  const int64_t in = w.size(1), out = w.size(0);
  const int64_t rows = in > 0 ? x.numel() / in : (out > 0 ? dy.numel() / out : 0);
  const int device = dy.device().index;
  cuda::DeviceGuard guard(dy.device());
  const DType dt = dy.dtype();
  if (dx.defined())
    gemm(device, dt, cuda_gemm::linear_dx_gemm(rows, in, out), dy.raw_data(), w.raw_data(), dx.raw_data(), false, op);
  if (dw.defined())
    gemm(device, dt, cuda_gemm::linear_dw_gemm(rows, in, out), dy.raw_data(), x.raw_data(), dw.raw_data(), false, op);
  if (dbias.defined()) {
    const Tensor ones = ones_on(rows, dy, op);
    gemm(device, dt, cuda_gemm::linear_dbias_gemm(rows, out), ones.raw_data(), dy.raw_data(), dbias.raw_data(),
         false, op);
  }
}

}  // namespace

void register_matmul_cuda_kernels() {
  batched_gemm_stub.set(DeviceType::CUDA, batched_gemm_cuda);
  linear_forward_stub.set(DeviceType::CUDA, linear_forward_cuda);
  linear_backward_stub.set(DeviceType::CUDA, linear_backward_cuda);
}

}  // namespace minidl
