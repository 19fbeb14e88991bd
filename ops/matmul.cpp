// Matrix products, as torch.matmul, torch.bmm and F.linear (CPU kernels: ops/cpu/matmul.cpp,
// on Eigen's GEMM).
//   matmul  C[i] = A[i] B[i] over the broadcast batch dims (A, B at least 2-D
//           inside MatMul; matmul() maps 1-D operands and 3-D x 2-D onto it).
//           dA[i] = dC[i] B[i]^T, dB[i] = A[i]^T dC[i], each summed over the
//           batch entries that broadcast onto the same matrix of A or B.
//           Saves A and B.
//   linear  y = x W^T + bias, x viewed as rows x in_features.
//           dx = dy W, dW = dy^T x, dbias = sum of dy over the rows. Saves x and W.
// Gradients overwrite (new tensors); the engine accumulates.
#include "minidl/ops/matmul.h"

#include <algorithm>
#include <vector>

#include "minidl/core/autocast.h"
#include "minidl/core/autograd/function.h"

namespace minidl {

DispatchStub<BatchedGemmFn> batched_gemm_stub("matmul");
DispatchStub<LinearForwardFn> linear_forward_stub("linear");
DispatchStub<LinearBackwardFn> linear_backward_stub("linear_backward");

namespace {

// ---- batch bookkeeping ------------------------------------------------------------

Shape batch_dims(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

// Element offset of each matrix of a contiguous (batch..., r, c) tensor when
// its batch dims are broadcast to `batch` (a size-1 or missing dim repeats).
std::vector<int64_t> broadcast_offsets(const Shape& own_batch, const Shape& batch, int64_t matrix_numel) {
  const size_t nd = batch.size(), lead = nd - own_batch.size();
  Shape stride(nd, 0);
  int64_t s = matrix_numel;
  for (size_t d = nd; d-- > lead;) {
    stride[d] = own_batch[d - lead] == 1 ? 0 : s;
    s *= own_batch[d - lead];
  }
  const int64_t count = numel_of(batch);
  std::vector<int64_t> offsets(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    int64_t rest = i, off = 0;
    for (size_t d = nd; d-- > 0;) {
      off += (rest % batch[d]) * stride[d];
      rest /= batch[d];
    }
    offsets[static_cast<size_t>(i)] = off;
  }
  return offsets;
}

std::vector<int64_t> dense_offsets(int64_t count, int64_t matrix_numel) {
  std::vector<int64_t> offsets(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) offsets[static_cast<size_t>(i)] = i * matrix_numel;
  return offsets;
}

bool has_repeats(const std::vector<int64_t>& offsets) {
  std::vector<int64_t> s = offsets;
  std::sort(s.begin(), s.end());
  return std::adjacent_find(s.begin(), s.end()) != s.end();
}

// Both operands at least 2-D, shapes already checked.
struct MatMul : autograd::Function<MatMul> {
  static Tensor forward(AutogradContext* ctx, const Tensor& a_in, const Tensor& b_in) {
    const Tensor a = a_in.contiguous(), b = b_in.contiguous();
    const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
    const Shape batch = broadcast_shapes(batch_dims(a), batch_dims(b), "matmul");
    Shape out_shape = batch;
    out_shape.push_back(m);
    out_shape.push_back(n);
    Tensor c = empty(out_shape, a.options());
    GemmBatch g;
    g.m = m, g.n = n, g.k = k, g.lda = k, g.ldb = n, g.ldc = n;
    g.a_offset = broadcast_offsets(batch_dims(a), batch, m * k);
    g.b_offset = broadcast_offsets(batch_dims(b), batch, k * n);
    g.c_offset = dense_offsets(numel_of(batch), m * n);
    batched_gemm_stub(c.device())(g, a, b, c);
    ctx->save_for_backward({a, b});
    return c;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Tensor &a = saved[0], &b = saved[1];
    const Tensor dc = grads[0].contiguous();
    const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
    const Shape batch = batch_dims(dc);
    const auto a_off = broadcast_offsets(batch_dims(a), batch, m * k);
    const auto b_off = broadcast_offsets(batch_dims(b), batch, k * n);
    const auto c_off = dense_offsets(numel_of(batch), m * n);
    Tensor da, db;
    if (ctx->needs_input_grad(0)) {  // dA = dC B^T
      GemmBatch g;
      g.trans_b = true;
      g.m = m, g.n = k, g.k = n, g.lda = n, g.ldb = n, g.ldc = k;
      g.a_offset = c_off, g.b_offset = b_off, g.c_offset = a_off;
      g.accumulate = has_repeats(a_off);
      da = g.accumulate ? zeros(a.shape(), a.options()) : empty_like(a);
      batched_gemm_stub(dc.device())(g, dc, b, da);
    }
    if (ctx->needs_input_grad(1)) {  // dB = A^T dC
      GemmBatch g;
      g.trans_a = true;
      g.m = k, g.n = n, g.k = m, g.lda = k, g.ldb = n, g.ldc = n;
      g.a_offset = a_off, g.b_offset = c_off, g.c_offset = b_off;
      g.accumulate = has_repeats(b_off);
      db = g.accumulate ? zeros(b.shape(), b.options()) : empty_like(b);
      batched_gemm_stub(dc.device())(g, a, dc, db);
    }
    return {da, db};
  }
};

struct Linear : autograd::Function<Linear> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in) {
    const Tensor x = x_in.contiguous(), w = w_in.contiguous();
    const Tensor bias = bias_in.defined() ? bias_in.contiguous() : Tensor();
    Shape out_shape = x.shape();
    out_shape.back() = w.size(0);
    Tensor y = empty(out_shape, x.options());
    linear_forward_stub(x.device())(x, w, bias, y);
    ctx->save_for_backward({x, w});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &w = saved[1];
    const Tensor dy = grads[0].contiguous();
    Tensor dx = ctx->needs_input_grad(0) ? empty_like(x) : Tensor();
    Tensor dw = ctx->needs_input_grad(1) ? empty_like(w) : Tensor();
    Tensor dbias = ctx->needs_input_grad(2) ? empty({w.size(0)}, w.options())
                                            : Tensor();
    linear_backward_stub(dy.device())(x, w, dy, dx, dw, dbias);
    return {dx, dw, dbias};
  }
};

void check_operands(const Tensor& a, const Tensor& b, const char* op) {
  MINIDL_CHECK(a.defined() && b.defined(), op, ": got an undefined tensor");
  MINIDL_CHECK(a.dtype() == b.dtype(), op, ": expected m1 and m2 to have the same dtype, but got: ",
               dtype_name(a.dtype()), " != ", dtype_name(b.dtype()));
  MINIDL_CHECK(a.device() == b.device(), op,
               ": Expected all tensors to be on the same device, but found at least two devices, ",
               a.device(), " and ", b.device(), "!");
  MINIDL_CHECK(is_floating(a.dtype()), op, ": expected float32 or float64 tensors, got ", dtype_name(a.dtype()));
}

std::string mat_str(int64_t r, int64_t c) { return std::to_string(r) + "x" + std::to_string(c); }

}  // namespace


Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  const auto cast = amp::cast_args(amp::AmpOp::matmul, a_in, b_in);
  const Tensor &a = cast[0], &b = cast[1];
  check_operands(a, b, "matmul");
  const int64_t da = a.dim(), db = b.dim();
  MINIDL_CHECK(da >= 1 && db >= 1, "both arguments to matmul need to be at least 1D, but they are ", da, "D and ",
               db, "D");
  if (da == 1 && db == 1) {  // dot product
    MINIDL_CHECK(a.size(0) == b.size(0), "inconsistent tensor size, expected tensor [", a.size(0), "] and src [",
                 b.size(0), "] to have the same number of elements, but got ", a.size(0), " and ", b.size(0),
                 " elements respectively");
    return MatMul::apply(a.reshape({1, a.size(0)}), b.reshape({b.size(0), 1})).reshape({});
  }
  if (db == 1) {  // matrix (or batch of matrices) times vector
    const int64_t rows = a.numel() / std::max<int64_t>(a.size(-1), 1);
    MINIDL_CHECK(a.size(-1) == b.size(0), "size mismatch, got input (", rows, "), mat (",
                 mat_str(rows, a.size(-1)), "), vec (", b.size(0), ")");
    Shape out_shape(a.shape().begin(), a.shape().end() - 1);
    return MatMul::apply(a.reshape({rows, a.size(-1)}), b.reshape({b.size(0), 1})).reshape(out_shape);
  }
  if (db == 2) {
    // vector x matrix, matrix x matrix, or (batch..., m, k) x (k, n) folded
    // into one (batch*m, k) x (k, n) product, as PyTorch does.
    const int64_t k = a.size(-1);
    const int64_t rows = a.numel() / std::max<int64_t>(k, 1);
    MINIDL_CHECK(k == b.size(0), "mm: mat1 and mat2 shapes cannot be multiplied (", mat_str(rows, k), " and ",
                 mat_str(b.size(0), b.size(1)), ")");
    if (da == 2) return MatMul::apply(a, b);
    Shape out_shape(a.shape().begin(), a.shape().end() - 1);
    out_shape.push_back(b.size(1));
    return MatMul::apply(a.reshape({rows, k}), b).reshape(out_shape);
  }
  // Batched (db >= 3), with broadcasting of the batch dims. A 1-D `a` becomes a
  // 1-row matrix whose dim is dropped from the result.
  const Tensor a2 = da == 1 ? a.reshape({1, a.size(0)}) : a;
  const int64_t k = a2.size(-1), kb = b.size(-2);
  const Shape batch = broadcast_shapes(batch_dims(a2), batch_dims(b), "matmul");
  const int64_t count = numel_of(batch);
  MINIDL_CHECK(k == kb, "Expected size for first two dimensions of batch2 tensor to be: [", count, ", ", k,
               "] but got: [", count, ", ", kb, "].");
  Tensor c = MatMul::apply(a2, b);
  if (da == 1) {
    Shape out_shape = batch;
    out_shape.push_back(b.size(-1));
    c = c.reshape(out_shape);
  }
  return c;
}

Tensor bmm(const Tensor& a_in, const Tensor& b_in) {
  const auto cast = amp::cast_args(amp::AmpOp::bmm, a_in, b_in);
  const Tensor &a = cast[0], &b = cast[1];
  check_operands(a, b, "bmm");
  MINIDL_CHECK(a.dim() == 3, "batch1 must be a 3D tensor");
  MINIDL_CHECK(b.dim() == 3, "batch2 must be a 3D tensor");
  MINIDL_CHECK(b.size(0) == a.size(0) && b.size(1) == a.size(2),
               "Expected size for first two dimensions of batch2 tensor to be: [", a.size(0), ", ", a.size(2),
               "] but got: [", b.size(0), ", ", b.size(1), "].");
  return MatMul::apply(a, b);
}

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  const auto cast = amp::cast_args(amp::AmpOp::linear, x_in, weight_in, bias_in);
  const Tensor &x = cast[0], &weight = cast[1], &bias = cast[2];
  check_operands(x, weight, "linear");
  MINIDL_CHECK(x.dim() >= 1, "linear: expected input with at least 1 dimension, but got a 0-D tensor");
  MINIDL_CHECK(weight.dim() == 2, "linear: expected weight of size (out_features, in_features), but got weight of size ",
               shape_str(weight.shape()));
  const int64_t in = x.size(-1);
  if (in != weight.size(1)) {
    int64_t rows = 1;
    for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
    MINIDL_FAIL("linear: mat1 and mat2 shapes cannot be multiplied (", mat_str(rows, in), " and ",
                mat_str(weight.size(1), weight.size(0)), ")");
  }
  if (bias.defined()) {
    MINIDL_CHECK(bias.dtype() == x.dtype(), "linear: expected bias to have dtype ", dtype_name(x.dtype()),
                 " (as input), but got ", dtype_name(bias.dtype()));
    MINIDL_CHECK(bias.device() == x.device(),
                 "linear: Expected all tensors to be on the same device, but found at least two devices, ",
                 x.device(), " and ", bias.device(), "!");
    MINIDL_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "linear: expected bias of size [",
                 weight.size(0), "] (out_features), but got bias of size ", shape_str(bias.shape()));
  }
  return Linear::apply(x, weight, bias);
}

Tensor Tensor::matmul(const Tensor& other) const { return minidl::matmul(*this, other); }

}  // namespace minidl
