// CUDA kernels of the losses (ops/loss.h and ops/binary_cross_entropy.h
// kernel interfaces): cross_entropy (label smoothing, ignore_index, class
// weights), nll_loss, mse_loss and binary_cross_entropy(_with_logits),
// forward and backward. Class losses run a thread per (n, s) position
// (looping over the C classes), write per-position float64 losses, then the
// total weight and the sum / mean come from single-row CUB reductions: no
// atomics, deterministic, and the targets never leave the device (the mean's
// divisor is read on the device). Targets outside [0, C) (other than
// ignore_index) and BCE inputs outside [0, 1] stop the kernel with __trap, a
// device-side assert as PyTorch's; the ops check CPU tensors on the host.
// Math in ops/cuda/loss_math.h, shared with the CPU tests. float32/float64
// checked against the CPU kernels on an H100 (tests/test_cuda_ops, 2026-11-27);
// the __trap on a bad target or input is not run on a GPU.
#include "minidl/ops/binary_cross_entropy.h"
#include "minidl/ops/cuda/launch.cuh"
#include "minidl/ops/cuda/loss_math.h"
#include "minidl/ops/cuda/row_reduce.cuh"
#include "minidl/ops/loss.h"

namespace minidl {

namespace {

using cuda_kernels::LaunchContext;
using cuda_kernels::linear;
using cuda_math::Offsets;


int reduction_code(Reduction r) { return r == Reduction::None ? 0 : r == Reduction::Mean ? 1 : 2; }

template <class T>
const T* weight_or_null(const ReductionInfo& r) {
  return r.weight.defined() ? r.weight.data_ptr<T>() : nullptr;
}

template <class T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

__device__ inline void check_target(int64_t t, int64_t C, int64_t ignore_index) {
  if (t != ignore_index && (t < 0 || t >= C)) __trap();  // "Target out of bounds"
}

// ---- the shared reduction tail: total weight, then None / Sum / Mean ----------

template <class T>
struct TargetWeightLoader {
  const int64_t* target;
  const T* weight;
  int64_t ignore_index;
  using Row = int64_t;
  __device__ Row row(int64_t) const { return 0; }
  __device__ double operator()(Row, int64_t i) const {
    const int64_t t = target[i];
    return t == ignore_index ? 0.0 : cuda_math::class_weight(weight, t);
  }
};

struct ScalarStore {
  double* out;
  __device__ void operator()(int64_t, int64_t, double v) const { *out = v; }
};

struct DoubleLoader {
  const double* v;
  using Row = int64_t;
  __device__ Row row(int64_t) const { return 0; }
  __device__ double operator()(Row, int64_t i) const { return v[i]; }
};

template <class T>
struct ReducedStore {  // out[0] = sum (/ divisor: *total, or n when total is null)
  T* out;
  const double* total;
  double n;
  bool mean;
  __device__ void operator()(int64_t, int64_t, double s) const {
    out[0] = static_cast<T>(mean ? s / (total ? *total : n) : s);
  }
};

template <class T>
struct CastFunctor {
  T* out;
  const double* in;
  __device__ void operator()(const Offsets<1>& o) const { out[o.v[0]] = static_cast<T>(in[o.v[0]]); }
};

// Writes out from the per-position losses; total_weight first (always, as the CPU kernel).
template <class T>
void write_reduced(const LaunchContext& ctx, const double* losses, int64_t positions, const int64_t* target,
                   int64_t ignore_index, const ReductionInfo& r, const Tensor& out, const char* op) {
  double* total = r.total_weight.data_ptr<double>();
  cuda_kernels::launch_row_reduce(ctx, 1, positions, 0.0, TargetWeightLoader<T>{target, weight_or_null<T>(r), ignore_index},
                                  cuda_kernels::SumOp<double>(), ScalarStore{total}, op);
  if (r.reduction == Reduction::None) {
    cuda_kernels::launch_elementwise(ctx, positions, linear(positions, op), CastFunctor<T>{out.data_ptr<T>(), losses}, op);
    return;
  }
  cuda_kernels::launch_row_reduce(ctx, 1, positions, 0.0, DoubleLoader{losses}, cuda_kernels::SumOp<double>(),
                                  ReducedStore<T>{out.data_ptr<T>(), total, 0.0, r.reduction == Reduction::Mean}, op);
}

// ---- cross_entropy -------------------------------------------------------------------

template <class T>
struct CrossEntropyForward {
  const T* x;
  const int64_t* target;
  const T* weight;
  T* lse_out;
  double* losses;
  int64_t C, S, ignore_index;
  double eps;
  __device__ void operator()(const Offsets<1>& o) const {
    const int64_t i = o.v[0];
    const T* xc = x + (i / S) * C * S + i % S;
    const double lse = cuda_math::log_sum_exp(xc, C, S);
    lse_out[i] = static_cast<T>(lse);
    const int64_t t = target[i];
    check_target(t, C, ignore_index);
    losses[i] = t == ignore_index ? 0.0 : cuda_math::cross_entropy_loss(xc, C, S, t, lse, eps, weight);
  }
};

void cross_entropy_forward_cuda(const Tensor& x, const Tensor& target, const Tensor& lse, const Tensor& out,
                                const ClassGeometry& g, int64_t ignore_index, double eps, const ReductionInfo& r) {
  MINIDL_CUDA_DISPATCH_FLOATING(x.dtype(), "cross_entropy", [&] {
    using T = scalar_t;
    const LaunchContext ctx(x.device());
    const int64_t positions = g.positions();
    Tensor buf = cuda_kernels::temp_buffer(positions * static_cast<int64_t>(sizeof(double)), x.device());
    auto* losses = static_cast<double*>(buf.raw_data());
    const int64_t* tp = target.data_ptr<int64_t>();
    cuda_kernels::launch_elementwise(ctx, positions, linear(positions, "cross_entropy"),
                                     CrossEntropyForward<T>{x.data_ptr<T>(), tp, weight_or_null<T>(r), lse.data_ptr<T>(),
                                                            losses, g.C, g.S, ignore_index, eps},
                                     "cross_entropy");
    write_reduced<T>(ctx, losses, positions, tp, ignore_index, r, out, "cross_entropy");
  });
}

template <class T>
struct CrossEntropyBackward {
  const T *grad_out, *x, *lse, *weight;
  const int64_t* target;
  const double* total;
  T* gx;
  int64_t C, S, ignore_index;
  double eps;
  int reduction;
  __device__ void operator()(const Offsets<1>& o) const {
    const int64_t i = o.v[0], offset = (i / S) * C * S + i % S;
    const int64_t t = target[i];
    check_target(t, C, ignore_index);
    if (t == ignore_index) {
      for (int64_t c = 0; c < C; ++c) gx[offset + c * S] = T(0);
      return;
    }
    double weight_sum = static_cast<double>(C);
    if (weight) {
      weight_sum = 0.0;
      for (int64_t c = 0; c < C; ++c) weight_sum += static_cast<double>(weight[c]);
    }
    const double w = cuda_math::position_weight(grad_out, i, reduction, *total);
    const T l = lse[i];
    for (int64_t c = 0; c < C; ++c)
      gx[offset + c * S] = cuda_math::cross_entropy_grad<T>(x[offset + c * S], l, c, t, w, eps, C, weight_sum, weight);
  }
};

void cross_entropy_backward_cuda(const Tensor& grad_out, const Tensor& x, const Tensor& target, const Tensor& lse,
                                 const Tensor& gx, const ClassGeometry& g, int64_t ignore_index, double eps,
                                 const ReductionInfo& r) {
  MINIDL_CUDA_DISPATCH_FLOATING(x.dtype(), "cross_entropy_backward", [&] {
    using T = scalar_t;
    const LaunchContext ctx(x.device());
    const int64_t positions = g.positions();
    cuda_kernels::launch_elementwise(
        ctx, positions, linear(positions, "cross_entropy_backward"),
        CrossEntropyBackward<T>{grad_out.data_ptr<T>(), x.data_ptr<T>(), lse.data_ptr<T>(), weight_or_null<T>(r),
                                target.data_ptr<int64_t>(), r.total_weight.data_ptr<double>(), gx.data_ptr<T>(), g.C,
                                g.S, ignore_index, eps, reduction_code(r.reduction)},
        "cross_entropy_backward");
  });
}

// ---- nll_loss -------------------------------------------------------------------------

template <class T>
struct NllForward {
  const T* x;
  const int64_t* target;
  const T* weight;
  double* losses;
  int64_t C, S, ignore_index;
  __device__ void operator()(const Offsets<1>& o) const {
    const int64_t i = o.v[0], t = target[i];
    check_target(t, C, ignore_index);
    losses[i] = t == ignore_index ? 0.0
                                  : -cuda_math::class_weight(weight, t) *
                                        static_cast<double>(x[(i / S) * C * S + t * S + i % S]);
  }
};

void nll_loss_forward_cuda(const Tensor& x, const Tensor& target, const Tensor& out, const ClassGeometry& g,
                           int64_t ignore_index, const ReductionInfo& r) {
  MINIDL_CUDA_DISPATCH_FLOATING(x.dtype(), "nll_loss", [&] {
    using T = scalar_t;
    const LaunchContext ctx(x.device());
    const int64_t positions = g.positions();
    Tensor buf = cuda_kernels::temp_buffer(positions * static_cast<int64_t>(sizeof(double)), x.device());
    auto* losses = static_cast<double*>(buf.raw_data());
    const int64_t* tp = target.data_ptr<int64_t>();
    cuda_kernels::launch_elementwise(
        ctx, positions, linear(positions, "nll_loss"),
        NllForward<T>{x.data_ptr<T>(), tp, weight_or_null<T>(r), losses, g.C, g.S, ignore_index}, "nll_loss");
    write_reduced<T>(ctx, losses, positions, tp, ignore_index, r, out, "nll_loss");
  });
}

template <class T>
struct NllBackward {  // writes the whole column of a position: 0 except at the target
  const T *grad_out, *weight;
  const int64_t* target;
  const double* total;
  T* gx;
  int64_t C, S, ignore_index;
  int reduction;
  __device__ void operator()(const Offsets<1>& o) const {
    const int64_t i = o.v[0], offset = (i / S) * C * S + i % S, t = target[i];
    check_target(t, C, ignore_index);
    for (int64_t c = 0; c < C; ++c) gx[offset + c * S] = T(0);
    if (t == ignore_index) return;
    gx[offset + t * S] = static_cast<T>(-cuda_math::class_weight(weight, t) *
                                        cuda_math::position_weight(grad_out, i, reduction, *total));
  }
};

void nll_loss_backward_cuda(const Tensor& grad_out, const Tensor& target, const Tensor& gx, const ClassGeometry& g,
                            int64_t ignore_index, const ReductionInfo& r) {
  MINIDL_CUDA_DISPATCH_FLOATING(gx.dtype(), "nll_loss_backward", [&] {
    using T = scalar_t;
    const LaunchContext ctx(gx.device());
    const int64_t positions = g.positions();
    cuda_kernels::launch_elementwise(
        ctx, positions, linear(positions, "nll_loss_backward"),
        NllBackward<T>{grad_out.data_ptr<T>(), weight_or_null<T>(r), target.data_ptr<int64_t>(),
                       r.total_weight.data_ptr<double>(), gx.data_ptr<T>(), g.C, g.S, ignore_index,
                       reduction_code(r.reduction)},
        "nll_loss_backward");
  });
}

// ---- mse_loss --------------------------------------------------------------------------

template <class T>
struct SquaredError {
  T* out;
  const T *x, *y;
  __device__ void operator()(const Offsets<1>& o) const {
    const int64_t i = o.v[0];
    out[i] = (x[i] - y[i]) * (x[i] - y[i]);
  }
};

template <class T>
struct SquaredErrorLoader {
  const T *x, *y;
  using Row = int64_t;
  __device__ Row row(int64_t) const { return 0; }
  __device__ double operator()(Row, int64_t i) const {
    const double d = static_cast<double>(x[i]) - static_cast<double>(y[i]);
    return d * d;
  }
};

void mse_loss_forward_cuda(const Tensor& x, const Tensor& y, const Tensor& out, Reduction reduction) {
  MINIDL_CUDA_DISPATCH_FLOATING(x.dtype(), "mse_loss", [&] {
    using T = scalar_t;
    const LaunchContext ctx(x.device());
    const int64_t n = x.numel();
    if (reduction == Reduction::None) {
      cuda_kernels::launch_elementwise(ctx, n, linear(n, "mse_loss"),
                                       SquaredError<T>{out.data_ptr<T>(), x.data_ptr<T>(), y.data_ptr<T>()}, "mse_loss");
      return;
    }
    // n == 0: an empty row sums to 0, and the mean 0/0 is nan, as the CPU kernel.
    cuda_kernels::launch_row_reduce(ctx, 1, n, 0.0, SquaredErrorLoader<T>{x.data_ptr<T>(), y.data_ptr<T>()},
                                    cuda_kernels::SumOp<double>(),
                                    ReducedStore<T>{out.data_ptr<T>(), nullptr, static_cast<double>(n),
                                                    reduction == Reduction::Mean},
                                    "mse_loss");
  });
}

template <class T>
struct MseBackward {
  const T *grad_out, *x, *y;
  T *gx, *gy;  // each optional
  T scale;
  bool none;
  __device__ void operator()(const Offsets<1>& o) const {
    const int64_t i = o.v[0];
    const T w = (none ? grad_out[i] : grad_out[0]) * scale;
    const T d = (x[i] - y[i]) * w;
    if (gx) gx[i] = d;
    if (gy) gy[i] = -d;
  }
};

void mse_loss_backward_cuda(const Tensor& grad_out, const Tensor& x, const Tensor& y, const Tensor& gx,
                            const Tensor& gy, Reduction reduction) {
  MINIDL_CUDA_DISPATCH_FLOATING(x.dtype(), "mse_loss_backward", [&] {
    using T = scalar_t;
    const int64_t n = x.numel();
    if (n == 0) return;
    const LaunchContext ctx(x.device());
    const T scale = reduction == Reduction::Mean ? static_cast<T>(2.0 / static_cast<double>(n)) : T(2);
    cuda_kernels::launch_elementwise(ctx, n, linear(n, "mse_loss_backward"),
                                     MseBackward<T>{grad_out.data_ptr<T>(), x.data_ptr<T>(), y.data_ptr<T>(),
                                                    data_or_null<T>(gx), data_or_null<T>(gy), scale,
                                                    reduction == Reduction::None},
                                     "mse_loss_backward");
  });
}

// ---- binary cross-entropy (elementwise, before weight and reduction) ----------------------

template <class T>
struct BceForward {
  const T *x, *t;
  T* out;
  __device__ void operator()(const Offsets<1>& o) const {
    const int64_t i = o.v[0];
    if (!(x[i] >= T(0) && x[i] <= T(1))) __trap();  // "all elements of input should be between 0 and 1"
    out[i] = cuda_math::bce_loss(x[i], t[i]);
  }
};

template <class T>
struct BceBackward {
  const T *g, *x, *t;
  T *gx, *gt;
  __device__ void operator()(const Offsets<1>& o) const {
    const int64_t i = o.v[0];
    if (gx) gx[i] = cuda_math::bce_grad_input(g[i], x[i], t[i]);
    if (gt) gt[i] = cuda_math::bce_grad_target(g[i], x[i]);
  }
};

template <class T>
struct BceLogitsForward {
  const T *x, *t, *pw;
  T* out;
  __device__ void operator()(const Offsets<1>& o) const {
    const int64_t i = o.v[0];
    out[i] = cuda_math::bce_logits_loss(x[i], t[i], pw ? pw[i] : T(1), pw != nullptr);
  }
};

template <class T>
struct BceLogitsBackward {
  const T *g, *x, *t, *pw;
  T *gx, *gt;
  __device__ void operator()(const Offsets<1>& o) const {
    const int64_t i = o.v[0];
    const T p = pw ? pw[i] : T(1);
    if (gx) gx[i] = cuda_math::bce_logits_grad_input(g[i], x[i], t[i], p, pw != nullptr);
    if (gt) gt[i] = cuda_math::bce_logits_grad_target(g[i], x[i], p, pw != nullptr);
  }
};

template <class F>
void run_elementwise(const Tensor& x, F f, const char* op) {
  const LaunchContext ctx(x.device());
  const int64_t n = x.numel();
  cuda_kernels::launch_elementwise(ctx, n, linear(n, op), f, op);
}

void bce_forward_cuda(const Tensor& x, const Tensor& t, const Tensor& out) {
  MINIDL_CUDA_DISPATCH_FLOATING(x.dtype(), "binary_cross_entropy", [&] {
    run_elementwise(x, BceForward<scalar_t>{x.data_ptr<scalar_t>(), t.data_ptr<scalar_t>(), out.data_ptr<scalar_t>()},
                    "binary_cross_entropy");
  });
}

void bce_backward_cuda(const Tensor& g, const Tensor& x, const Tensor& t, const Tensor& gx, const Tensor& gt) {
  MINIDL_CUDA_DISPATCH_FLOATING(x.dtype(), "binary_cross_entropy_backward", [&] {
    run_elementwise(x,
                    BceBackward<scalar_t>{g.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), t.data_ptr<scalar_t>(),
                                          data_or_null<scalar_t>(gx), data_or_null<scalar_t>(gt)},
                    "binary_cross_entropy_backward");
  });
}

void bce_logits_forward_cuda(const Tensor& x, const Tensor& t, const Tensor& pw, const Tensor& out) {
  MINIDL_CUDA_DISPATCH_FLOATING(x.dtype(), "binary_cross_entropy_with_logits", [&] {
    run_elementwise(x,
                    BceLogitsForward<scalar_t>{x.data_ptr<scalar_t>(), t.data_ptr<scalar_t>(),
                                               data_or_null<scalar_t>(pw), out.data_ptr<scalar_t>()},
                    "binary_cross_entropy_with_logits");
  });
}

void bce_logits_backward_cuda(const Tensor& g, const Tensor& x, const Tensor& t, const Tensor& pw, const Tensor& gx,
                              const Tensor& gt) {
  MINIDL_CUDA_DISPATCH_FLOATING(x.dtype(), "binary_cross_entropy_with_logits_backward", [&] {
    run_elementwise(x,
                    BceLogitsBackward<scalar_t>{g.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), t.data_ptr<scalar_t>(),
                                                data_or_null<scalar_t>(pw), data_or_null<scalar_t>(gx),
                                                data_or_null<scalar_t>(gt)},
                    "binary_cross_entropy_with_logits_backward");
  });
}

}  // namespace

void register_loss_cuda_kernels() {
  cross_entropy_forward_stub.set(DeviceType::CUDA, cross_entropy_forward_cuda);
  cross_entropy_backward_stub.set(DeviceType::CUDA, cross_entropy_backward_cuda);
  nll_loss_forward_stub.set(DeviceType::CUDA, nll_loss_forward_cuda);
  nll_loss_backward_stub.set(DeviceType::CUDA, nll_loss_backward_cuda);
  mse_loss_forward_stub.set(DeviceType::CUDA, mse_loss_forward_cuda);
  mse_loss_backward_stub.set(DeviceType::CUDA, mse_loss_backward_cuda);
  bce_forward_stub.set(DeviceType::CUDA, bce_forward_cuda);
  bce_backward_stub.set(DeviceType::CUDA, bce_backward_cuda);
  bce_logits_forward_stub.set(DeviceType::CUDA, bce_logits_forward_cuda);
  bce_logits_backward_stub.set(DeviceType::CUDA, bce_logits_backward_cuda);
}

}  // namespace minidl
