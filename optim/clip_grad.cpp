// clip_grad_norm_: total = ||(||g_1||_p, ..., ||g_k||_p)||_p over the defined
// gradients (max |g| for p = inf), then g_i *= min(1, max_norm / (total + 1e-6)).
// Not differentiable; runs under no_grad and overwrites the gradients in place.
#include "optim/clip_grad.h"

#include <algorithm>
#include <cmath>

#include "core/autograd/grad_mode.h"
#include "core/check.h"
#include "core/dtype.h"

namespace minidl::optim {

namespace {

// sum |x|^p (or max |x| when p is infinite), accumulated in double.
template <class T>
double abs_pow_sum(const T* x, int64_t n, double p) {
  double acc = 0.0;
  if (std::isinf(p)) {
    for (int64_t i = 0; i < n; ++i) acc = std::max(acc, std::abs(static_cast<double>(x[i])));
  } else if (p == 2.0) {
    for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  } else if (p == 1.0) {
    for (int64_t i = 0; i < n; ++i) acc += std::abs(static_cast<double>(x[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) acc += std::pow(std::abs(static_cast<double>(x[i])), p);
  }
  return acc;
}

double finish_norm(double acc, double p) { return std::isinf(p) ? acc : std::pow(acc, 1.0 / p); }

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  MINIDL_CHECK(norm_type > 0.0, "clip_grad_norm_: expected norm_type > 0 (or inf), got ", norm_type);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    MINIDL_CHECK(p.defined(), "clip_grad_norm_: got an undefined parameter");
    Tensor g = p.grad();
    if (!g.defined()) continue;
    MINIDL_CHECK(!g.is_cuda(), "clip_grad_norm_: only CPU gradients are supported");
    grads.push_back(g);
  }
  if (grads.empty()) return 0.0;

  // The norm of the per-gradient norms, as PyTorch (not one sum over all
  // elements, which differs in rounding).
  double acc = 0.0;
  for (const Tensor& g : grads) {
    const Tensor gc = g.contiguous();
    const double norm = MINIDL_DISPATCH_FLOATING(gc.dtype(), "clip_grad_norm_", [&] {
      return finish_norm(abs_pow_sum(gc.data_ptr<scalar_t>(), gc.numel(), norm_type), norm_type);
    });
    acc = std::isinf(norm_type) ? std::max(acc, norm) : acc + std::pow(norm, norm_type);
  }
  const double total = finish_norm(acc, norm_type);
  MINIDL_CHECK(!error_if_nonfinite || std::isfinite(total), "The total norm of order ", norm_type,
               " for gradients from `parameters` is non-finite, so it cannot be clipped. To disable this error "
               "and scale the gradients by the non-finite norm anyway, set `error_if_nonfinite=False`");
  const double clip_coef = std::min(max_norm / (total + 1e-6), 1.0);
  for (Tensor& g : grads) g.mul_(clip_coef);  // also when 1.0, as PyTorch: NaN spreads the same way
  return total;
}

}  // namespace minidl::optim

