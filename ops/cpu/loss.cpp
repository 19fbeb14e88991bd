// CPU kernels of the losses (ops/loss.h's kernel interface): one loop over the
// (n, s) positions of the (N, C, S) view, parallel when large. Per-position
// losses are summed in float64 in a fixed order, so results do not depend on
// the thread count. The class-loss forwards sum the weights of the non-ignored
// targets (ReductionInfo::total_weight) in a serial pass; targets are in range
// (the op checked CPU ones).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "minidl/ops/binary_cross_entropy.h"
#include "minidl/ops/cpu/float32_compute.h"
#include "minidl/ops/loss.h"

namespace minidl {

namespace {

constexpr int64_t kParallelWork = 32768;

// weight[c] (1 without class weights).
template <class T>
inline double class_weight(const T* weight, int64_t c) {
  return weight ? static_cast<double>(weight[c]) : 1.0;
}

template <class T>
const T* weight_or_null(const ReductionInfo& r) {
  return r.weight.defined() ? r.weight.data_ptr<T>() : nullptr;
}

// Writes the summed weight[target] of the positions whose target is not
// ignore_index to r.total_weight.
template <class T>
void write_total_weight(const int64_t* target, const T* weight, int64_t positions, int64_t ignore_index,
                        const ReductionInfo& r) {
  double total = 0.0;
  for (int64_t i = 0; i < positions; ++i)
    if (target[i] != ignore_index) total += class_weight(weight, target[i]);
  *r.total_weight.data_ptr<double>() = total;
}

// out: per-position losses (None) or their sum / mean (a single value); the
// mean divides by r.total_weight (write_total_weight first; 0 gives nan).
template <class T>
void write_reduced(const std::vector<double>& losses, T* out, const ReductionInfo& r) {
  if (r.reduction == Reduction::None) {
    for (size_t i = 0; i < losses.size(); ++i) out[i] = static_cast<T>(losses[i]);
    return;
  }
  double s = 0.0;
  for (double l : losses) s += l;
  if (r.reduction == Reduction::Mean) s /= *r.total_weight.data_ptr<double>();
  out[0] = static_cast<T>(s);
}

// dL/dloss at a non-ignored position i given the upstream gradient of the
// (reduced) output; total is the forward's total weight (read once per call;
// 0 makes it inf, and the gradient nan where the class weight is 0, as PyTorch).
template <class T>
inline double position_weight(const T* grad_out, int64_t i, Reduction reduction, double total) {
  if (reduction == Reduction::None) return grad_out[i];
  if (reduction == Reduction::Sum) return grad_out[0];
  return grad_out[0] / total;
}

// ---- cross_entropy kernels ------------------------------------------------------------

template <class T>
void cross_entropy_forward_kernel(const T* x, const int64_t* target, T* lse_out, T* out, const ClassGeometry g,
                                  int64_t ignore_index, double eps, const ReductionInfo& r) {
  const int64_t C = g.C, S = g.S;
  const T* weight = weight_or_null<T>(r);
  write_total_weight(target, weight, g.positions(), ignore_index, r);
  std::vector<double> losses(static_cast<size_t>(g.positions()));
#pragma omp parallel for schedule(static) if (g.positions() * C >= kParallelWork)
  for (int64_t i = 0; i < g.positions(); ++i) {
    const T* xc = x + (i / S) * C * S + i % S;  // class c of this position is xc[c * S]
    T mx = -std::numeric_limits<T>::infinity();
    for (int64_t c = 0; c < C; ++c) mx = std::max(mx, xc[c * S]);
    double sum = 0.0;
    for (int64_t c = 0; c < C; ++c) sum += std::exp(xc[c * S] - mx);
    const double lse = static_cast<double>(mx) + std::log(sum);
    lse_out[i] = static_cast<T>(lse);
    const int64_t t = target[i];
    if (t == ignore_index) {
      losses[i] = 0.0;
      continue;
    }
    double loss = (1.0 - eps) * class_weight(weight, t) * (lse - static_cast<double>(xc[t * S]));
    if (eps > 0.0) {
      double smooth = 0.0;  // -sum_c w_c logp_c
      for (int64_t c = 0; c < C; ++c) smooth += class_weight(weight, c) * (lse - static_cast<double>(xc[c * S]));
      loss += eps * smooth / static_cast<double>(C);
    }
    losses[i] = loss;
  }
  write_reduced(losses, out, r);
}

template <class T>
void cross_entropy_backward_kernel(const T* grad_out, const T* x, const int64_t* target, const T* lse, T* gx,
                                   const ClassGeometry g, int64_t ignore_index, double eps, const ReductionInfo& r) {
  const int64_t C = g.C, S = g.S;
  const double uniform = C > 0 ? eps / static_cast<double>(C) : 0.0;
  const double total = *r.total_weight.data_ptr<double>();
  const T* weight = weight_or_null<T>(r);
  double weight_sum = static_cast<double>(C);  // sum_k w_k
  if (weight) {
    weight_sum = 0.0;
    for (int64_t c = 0; c < C; ++c) weight_sum += weight[c];
  }
#pragma omp parallel for schedule(static) if (g.positions() * C >= kParallelWork)
  for (int64_t i = 0; i < g.positions(); ++i) {
    const int64_t offset = (i / S) * C * S + i % S;
    const T* xc = x + offset;
    T* gc = gx + offset;
    const int64_t t = target[i];
    if (t == ignore_index) {
      for (int64_t c = 0; c < C; ++c) gc[c * S] = T(0);
      continue;
    }
    const double w = position_weight(grad_out, i, r.reduction, total);
    const double hard = (1.0 - eps) * class_weight(weight, t);  // weight of the target's one-hot
    const double softmax_scale = hard + uniform * weight_sum;
    const T l = lse[i];
    for (int64_t c = 0; c < C; ++c)
      gc[c * S] = static_cast<T>(w * (std::exp(xc[c * S] - l) * softmax_scale - uniform * class_weight(weight, c)));
    gc[t * S] -= static_cast<T>(w * hard);
  }
}

// ---- nll_loss kernels -------------------------------------------------------------------

template <class T>
void nll_loss_forward_kernel(const T* x, const int64_t* target, T* out, const ClassGeometry g, int64_t ignore_index,
                             const ReductionInfo& r) {
  const T* weight = weight_or_null<T>(r);
  write_total_weight(target, weight, g.positions(), ignore_index, r);
  std::vector<double> losses(static_cast<size_t>(g.positions()));
  for (int64_t i = 0; i < g.positions(); ++i) {
    const int64_t t = target[i];
    losses[i] = t == ignore_index ? 0.0
                                  : -class_weight(weight, t) *
                                        static_cast<double>(x[(i / g.S) * g.C * g.S + t * g.S + i % g.S]);
  }
  write_reduced(losses, out, r);
}

template <class T>
void nll_loss_backward_kernel(const T* grad_out, const int64_t* target, T* gx, const ClassGeometry g,
                              int64_t ignore_index, const ReductionInfo& r) {
  const double total = *r.total_weight.data_ptr<double>();
  const T* weight = weight_or_null<T>(r);
  std::fill(gx, gx + g.N * g.C * g.S, T(0));
  for (int64_t i = 0; i < g.positions(); ++i) {
    const int64_t t = target[i];
    if (t == ignore_index) continue;
    gx[(i / g.S) * g.C * g.S + t * g.S + i % g.S] =
        static_cast<T>(-class_weight(weight, t) * position_weight(grad_out, i, r.reduction, total));
  }
}

// ---- mse_loss kernels ---------------------------------------------------------------------

template <class T>
void mse_loss_forward_kernel(const T* x, const T* y, T* out, int64_t n, Reduction reduction) {
  if (reduction == Reduction::None) {
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
    for (int64_t i = 0; i < n; ++i) out[i] = (x[i] - y[i]) * (x[i] - y[i]);
    return;
  }
  // Fixed-size blocks summed in order: the result does not depend on the thread count.
  constexpr int64_t kBlock = 4096;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
  for (int64_t b = 0; b < blocks; ++b) {
    double s = 0.0;
    for (int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) {
      const double d = static_cast<double>(x[i]) - static_cast<double>(y[i]);
      s += d * d;
    }
    partial[b] = s;
  }
  double s = 0.0;
  for (double p : partial) s += p;
  if (reduction == Reduction::Mean) s = n > 0 ? s / static_cast<double>(n) : std::numeric_limits<double>::quiet_NaN();
  out[0] = static_cast<T>(s);
}

// gx = 2 (x - y) * w (when gx != nullptr), gy = -2 (x - y) * w (when gy != nullptr).
template <class T>
void mse_loss_backward_kernel(const T* grad_out, const T* x, const T* y, T* gx, T* gy, int64_t n, Reduction reduction) {
  if (n == 0) return;
  const T scale = reduction == Reduction::Mean ? static_cast<T>(2.0 / static_cast<double>(n)) : T(2);
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const T w = (reduction == Reduction::None ? grad_out[i] : grad_out[0]) * scale;
    const T d = (x[i] - y[i]) * w;
    if (gx) gx[i] = d;
    if (gy) gy[i] = -d;
  }
}

template <class T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

void cross_entropy_forward_cpu(const Tensor& x, const Tensor& target, const Tensor& lse, const Tensor& out,
                               const ClassGeometry& g, int64_t ignore_index, double eps, const ReductionInfo& r) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "cross_entropy", [&] {
    cross_entropy_forward_kernel(x.data_ptr<scalar_t>(), target.data_ptr<int64_t>(), lse.data_ptr<scalar_t>(),
                                 out.data_ptr<scalar_t>(), g, ignore_index, eps, r);
  });
}

void cross_entropy_backward_cpu(const Tensor& grad_out, const Tensor& x, const Tensor& target, const Tensor& lse,
                                const Tensor& gx, const ClassGeometry& g, int64_t ignore_index, double eps,
                                const ReductionInfo& r) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "cross_entropy_backward", [&] {
    cross_entropy_backward_kernel(grad_out.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), target.data_ptr<int64_t>(),
                                  lse.data_ptr<scalar_t>(), gx.data_ptr<scalar_t>(), g, ignore_index, eps, r);
  });
}

void nll_loss_forward_cpu(const Tensor& x, const Tensor& target, const Tensor& out, const ClassGeometry& g,
                          int64_t ignore_index, const ReductionInfo& r) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "nll_loss", [&] {
    nll_loss_forward_kernel(x.data_ptr<scalar_t>(), target.data_ptr<int64_t>(), out.data_ptr<scalar_t>(), g,
                            ignore_index, r);
  });
}

void nll_loss_backward_cpu(const Tensor& grad_out, const Tensor& target, const Tensor& gx, const ClassGeometry& g,
                           int64_t ignore_index, const ReductionInfo& r) {
  MINIDL_DISPATCH_FLOATING(gx.dtype(), "nll_loss_backward", [&] {
    nll_loss_backward_kernel(grad_out.data_ptr<scalar_t>(), target.data_ptr<int64_t>(), gx.data_ptr<scalar_t>(), g,
                             ignore_index, r);
  });
}

void mse_loss_forward_cpu(const Tensor& x, const Tensor& y, const Tensor& out, Reduction reduction) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "mse_loss", [&] {
    mse_loss_forward_kernel(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), x.numel(),
                            reduction);
  });
}

void mse_loss_backward_cpu(const Tensor& grad_out, const Tensor& x, const Tensor& y, const Tensor& gx, const Tensor& gy,
                           Reduction reduction) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "mse_loss_backward", [&] {
    mse_loss_backward_kernel(grad_out.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
                             data_or_null<scalar_t>(gx), data_or_null<scalar_t>(gy), x.numel(), reduction);
  });
}

}  // namespace

void register_loss_cpu_kernels() {
  cross_entropy_forward_stub.set(DeviceType::CPU, cpu::Float32Compute<cross_entropy_forward_cpu, 2, 3>::run);
  cross_entropy_backward_stub.set(DeviceType::CPU, cpu::Float32Compute<cross_entropy_backward_cpu, 4>::run);
  nll_loss_forward_stub.set(DeviceType::CPU, cpu::Float32Compute<nll_loss_forward_cpu, 2>::run);
  nll_loss_backward_stub.set(DeviceType::CPU, cpu::Float32Compute<nll_loss_backward_cpu, 2>::run);
  mse_loss_forward_stub.set(DeviceType::CPU, cpu::Float32Compute<mse_loss_forward_cpu, 2>::run);
  mse_loss_backward_stub.set(DeviceType::CPU, cpu::Float32Compute<mse_loss_backward_cpu, 3, 4>::run);
  register_bce_cpu_kernels();  // ops/cpu/binary_cross_entropy.cpp
}

}  // namespace minidl
