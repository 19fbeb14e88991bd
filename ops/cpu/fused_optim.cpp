// CPU kernels of ops/fused_optim.h: OpenMP loops over one parameter's
// elements (the update formulas are in the header). The arithmetic is done in
// the parameter's dtype with the scalars rounded to it first, exactly as
// torch.optim's single-tensor path; norms accumulate in double. A float16 or
// bfloat16 parameter (a half model without master weights, Apex's O3) is
// updated in float32 and rounded once (DESIGN.md "Mixed precision"), so an
// update below half resolution leaves it unchanged.
#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "minidl/core/dtype.h"
#include "minidl/ops/cpu/float32_compute.h"
#include "minidl/ops/fused_optim.h"

namespace minidl {

namespace {

template <class T>
void sgd_step_typed(const SgdStepArgs& a) {
  T* p = a.param.data_ptr<T>();
  const T* grad = a.grad.data_ptr<T>();
  T* buf = a.momentum_buffer.defined() ? a.momentum_buffer.data_ptr<T>() : nullptr;
  const int64_t n = a.param.numel();
  const bool first_step = a.first_step, nesterov = a.nesterov, decay = a.weight_decay != 0.0;
  const T wd = static_cast<T>(a.weight_decay), mom = static_cast<T>(a.momentum);
  const T one_minus_damp = static_cast<T>(1.0 - a.dampening), neg_lr = static_cast<T>(-a.lr);
#pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    T g = grad[i];
    if (decay) g = g + wd * p[i];
    if (buf != nullptr) {
      buf[i] = first_step ? g : buf[i] * mom + one_minus_damp * g;
      g = nesterov ? g + mom * buf[i] : buf[i];
    }
    p[i] = p[i] + neg_lr * g;
  }
}

// Runs `kernel` on float32 copies of the 16-bit tensors among `tensors` (all
// of them args' members) and rounds the `written` ones back.
template <class Args, class Kernel>
void widened_step(const Args& a, std::initializer_list<Tensor Args::*> tensors,
                  std::initializer_list<Tensor Args::*> written, Kernel kernel) {
  Args wide = a;
  bool any = false;
  for (Tensor Args::*m : tensors)
    if (cpu::is_reduced_tensor(a.*m)) wide.*m = cpu::widen_to_float32(a.*m), any = true;
  if (!any) return kernel(a);
  kernel(wide);
  for (Tensor Args::*m : written)
    if (cpu::is_reduced_tensor(a.*m)) cpu::round_into(a.*m, wide.*m);
}

void sgd_step_cpu(const SgdStepArgs& args) {
  MINIDL_CHECK(!args.lr_tensor.defined(), "sgd_step: lr_tensor (capturable) is for the multi-tensor path only");
  widened_step(args, {&SgdStepArgs::param, &SgdStepArgs::grad, &SgdStepArgs::momentum_buffer},
               {&SgdStepArgs::param, &SgdStepArgs::momentum_buffer}, [](const SgdStepArgs& a) {
                 MINIDL_DISPATCH_FLOATING(a.param.dtype(), "SGD", [&] { sgd_step_typed<scalar_t>(a); });
               });
}

template <class T>
void adam_step_typed(const AdamStepArgs& a) {
  T* p = a.param.data_ptr<T>();
  const T* grad = a.grad.data_ptr<T>();
  T* m = a.exp_avg.data_ptr<T>();
  T* v = a.exp_avg_sq.data_ptr<T>();
  T* v_max = a.max_exp_avg_sq.defined() ? a.max_exp_avg_sq.data_ptr<T>() : nullptr;
  const int64_t n = a.param.numel();
  const bool decay = a.weight_decay != 0.0, decoupled = a.decoupled_weight_decay;
  const T wd = static_cast<T>(a.weight_decay), shrink = static_cast<T>(1.0 - a.lr * a.weight_decay);
  const T w1 = static_cast<T>(1.0 - a.beta1), b2 = static_cast<T>(a.beta2), w2 = static_cast<T>(1.0 - a.beta2);
  const T bc2 = static_cast<T>(a.bias_correction2_sqrt), eps = static_cast<T>(a.eps);
  const T neg_step = static_cast<T>(-a.step_size);
#pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    T g = grad[i];
    if (decay) {
      if (decoupled)
        p[i] = p[i] * shrink;
      else
        g = g + wd * p[i];
    }
    m[i] = m[i] + w1 * (g - m[i]);
    v[i] = v[i] * b2 + w2 * g * g;
    T second = v[i];
    if (v_max != nullptr) {
      v_max[i] = std::max(v_max[i], v[i]);
      second = v_max[i];
    }
    const T denom = std::sqrt(second) / bc2 + eps;
    p[i] = p[i] + neg_step * (m[i] / denom);
  }
}

void adam_step_cpu(const AdamStepArgs& args) {
  MINIDL_CHECK(!args.lr_tensor.defined() && !args.step_tensor.defined(),
               "adam_step: lr_tensor and step_tensor (capturable) are for the multi-tensor path only");
  using A = AdamStepArgs;
  widened_step(args, {&A::param, &A::grad, &A::exp_avg, &A::exp_avg_sq, &A::max_exp_avg_sq},
               {&A::param, &A::exp_avg, &A::exp_avg_sq, &A::max_exp_avg_sq}, [](const A& a) {
                 MINIDL_DISPATCH_FLOATING(a.param.dtype(), "Adam", [&] { adam_step_typed<scalar_t>(a); });
               });
}

// sum |x|^p (or max |x| when p is infinite), serial so the sum is the same
// on every run and thread count.
template <class T>
double abs_pow_sum(const T* x, int64_t n, double p) {
  double acc = 0.0;
  if (std::isinf(p)) {
    for (int64_t i = 0; i < n; ++i) {  // max that keeps a NaN, as PyTorch (std::max would drop it)
      const double a = std::abs(static_cast<double>(x[i]));
      if (std::isnan(a) || a > acc) acc = a;
      if (std::isnan(acc)) break;
    }
  } else if (p == 2.0) {
    for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  } else if (p == 1.0) {
    for (int64_t i = 0; i < n; ++i) acc += std::abs(static_cast<double>(x[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) acc += std::pow(std::abs(static_cast<double>(x[i])), p);
  }
  return acc;
}

void vector_norm_cpu(const Tensor& out, const Tensor& x, double norm_type) {
  const double acc = MINIDL_DISPATCH_FLOATING(x.dtype(), "vector_norm", [&] {
    return abs_pow_sum(x.data_ptr<scalar_t>(), x.numel(), norm_type);
  });
  *out.data_ptr<double>() = std::isinf(norm_type) ? acc : std::pow(acc, 1.0 / norm_type);
}

template <class T>
void scale_typed(T* g, int64_t n, double coef) {
  const auto c = static_cast<T>(coef);
#pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i) g[i] = g[i] * c;
}

void clip_grad_scale_cpu(const Tensor& grad, const Tensor& total_norm, double max_norm) {
  const double total = *total_norm.data_ptr<double>();
  const double coef = std::min(max_norm / (total + 1e-6), 1.0);  // NaN stays NaN, as PyTorch
  MINIDL_DISPATCH_FLOATING(grad.dtype(), "clip_grad_norm_",
                           [&] { scale_typed(grad.data_ptr<scalar_t>(), grad.numel(), coef); });
}

// The multi-tensor path on the CPU: the single-tensor kernel per entry (a
// launch costs nothing here), so both paths give the same bits.
// Capturable entries (host memory here: the CPU or the test device) are
// turned into plain ones with the host path's arithmetic, so both give the
// same bits.
void sgd_multi_step_cpu(const MultiStepArgs<SgdStepArgs>& args) {
  check_multi_step(args, "_fused_sgd_");
  for (const SgdStepArgs& a : args.tensors) {
    if (!a.lr_tensor.defined()) {
      sgd_step_cpu(a);
      continue;
    }
    SgdStepArgs plain = a;
    plain.lr = *a.lr_tensor.data_ptr<double>();
    plain.lr_tensor = Tensor();
    sgd_step_cpu(plain);
  }
}

void adam_multi_step_cpu(const MultiStepArgs<AdamStepArgs>& args) {
  check_multi_step(args, "_fused_adam_");
  for (const AdamStepArgs& a : args.tensors) {
    if (!a.lr_tensor.defined()) {
      adam_step_cpu(a);
      continue;
    }
    AdamStepArgs plain = a;
    float* step = a.step_tensor.data_ptr<float>();
    *step += 1.0f;  // as optim's increment_step
    const double t = static_cast<double>(*step);
    plain.lr = *a.lr_tensor.data_ptr<double>();
    plain.step_size = plain.lr / (1.0 - std::pow(a.beta1, t));
    plain.bias_correction2_sqrt = std::sqrt(1.0 - std::pow(a.beta2, t));
    plain.lr_tensor = Tensor();
    plain.step_tensor = Tensor();
    adam_step_cpu(plain);
  }
}

// 16-bit tensors (a half model's gradients, Apex's O3) through float32
// copies: the norm of the float32 values (exact), the scaling in float32
// rounded once into the gradient.
constexpr auto vector_norm_any = cpu::Float32Compute<vector_norm_cpu>::run;
constexpr auto clip_grad_scale_any = cpu::Float32Compute<clip_grad_scale_cpu, 0>::run;

void vector_norms_cpu(const VectorNormsArgs& args) {
  check_vector_norms(args);
  for (size_t i = 0; i < args.xs.size(); ++i) vector_norm_any(args.outs[i], args.xs[i], args.norm_type);
}

void clip_grad_scale_multi_cpu(const ClipGradScaleMultiArgs& args) {
  check_clip_grad_scale_multi(args);
  for (const Tensor& g : args.grads) clip_grad_scale_any(g, args.total_norm, args.max_norm);
}

}  // namespace

void register_fused_optim_cpu_kernels() {
  vector_norms_stub.set(DeviceType::CPU, vector_norms_cpu);
  clip_grad_scale_multi_stub.set(DeviceType::CPU, clip_grad_scale_multi_cpu);
  sgd_multi_step_stub.set(DeviceType::CPU, sgd_multi_step_cpu);
  adam_multi_step_stub.set(DeviceType::CPU, adam_multi_step_cpu);
  sgd_step_stub.set(DeviceType::CPU, sgd_step_cpu);
  adam_step_stub.set(DeviceType::CPU, adam_step_cpu);
  vector_norm_stub.set(DeviceType::CPU, vector_norm_any);
  clip_grad_scale_stub.set(DeviceType::CPU, clip_grad_scale_any);
}

}  // namespace minidl
