// Elementwise unary ops and activations, y = f(x), dx = g * f'(x).
// Each op saves whichever of x and y gives the cheaper derivative:
//   neg         -x                      dx = -g                      saves nothing
//   exp         e^x                     dx = g*y                     saves y
//   log         ln x                    dx = g/x                     saves x
//   sqrt        x^(1/2)                 dx = g/(2y)                  saves y
//   rsqrt       x^(-1/2)                dx = -g*y^3/2                saves y
//   abs         |x|                     dx = g*sign(x)               saves x
//   pow         x^e                     dx = g*e*x^(e-1) (0 if e=0)  saves x
//   clamp       min(max(x, lo), hi)     dx = g if lo < x < hi        saves x
//   relu        max(x, 0)               dx = g if y > 0              saves y
//   leaky_relu  x>0 ? x : s*x           dx = x>0 ? g : s*g           saves x
//   sigmoid     1/(1+e^-x)              dx = g*y*(1-y)               saves y
//   tanh        tanh x                  dx = g*(1-y^2)               saves y
//   gelu        x*Phi(x)                dx = g*(Phi(x) + x*phi(x))   saves x
//   gelu tanh   x/2*(1+tanh(k(x+c x^3)))  (its exact derivative)      saves x
// Gradients overwrite (dx is a fresh tensor); the engine accumulates.
// neg, abs, clamp and relu also run on integer tensors (clamp with a
// floating bound computes in float32). exp, log, sqrt, rsqrt,
// sigmoid and tanh compute an integer tensor in float32, pow with a floating
// exponent too (ops/type_promotion.h); pow with an integer exponent keeps the
// integer dtype. leaky_relu and gelu need float32/float64, as PyTorch's.
// CPU kernels: ops/cpu/unary.cpp.
#include "minidl/ops/unary.h"

#include <cmath>
#include <utility>

#include "minidl/core/autocast.h"
#include "minidl/core/autograd/function.h"
#include "minidl/ops/binary.h"
#include "minidl/ops/type_promotion.h"

namespace minidl {

DispatchStub<UnaryFn> unary_stub("unary");
DispatchStub<UnaryBackwardFn> unary_backward_stub("unary_backward");

const char* unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return "neg";
    case UnaryOp::Exp: return "exp";
    case UnaryOp::Log: return "log";
    case UnaryOp::Sqrt: return "sqrt";
    case UnaryOp::Rsqrt: return "rsqrt";
    case UnaryOp::Abs: return "abs";
    case UnaryOp::Pow: return "pow";
    case UnaryOp::Clamp: return "clamp";
    case UnaryOp::Relu: return "relu";
    case UnaryOp::LeakyRelu: return "leaky_relu";
    case UnaryOp::Sigmoid: return "sigmoid";
    case UnaryOp::Tanh: return "tanh";
    case UnaryOp::Gelu: return "gelu";
    case UnaryOp::GeluTanh: return "gelu";
  }
  return "?";
}

namespace {

// ---- autograd functions --------------------------------------------------------

enum class Keep { Nothing, Input, Output };

// One Function per op (so grad_fn names read ExpBackward, ReluBackward, ...),
// all sharing this forward and backward.
template <class Self, UnaryOp kOp, Keep kKeep>
struct Unary : autograd::Function<Self> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const UnaryParams& p) {
    MINIDL_CHECK(x.defined(), unary_op_name(kOp), ": expected a defined tensor, got an undefined one");
    Tensor y = empty(x.shape(), x.options(), x.suggest_memory_format());  // channels-last stays so
    const std::vector<Tensor> v = in_memory_order(y, {x});
    unary_stub(x.device())(kOp, p, v[0], v[1]);
    if constexpr (kKeep == Keep::Input) ctx->save_for_backward({x});
    if constexpr (kKeep == Keep::Output) ctx->save_for_backward({y});
    ctx->saved_data["scalar"] = p.scalar;
    ctx->saved_data["lo"] = p.lo;
    ctx->saved_data["hi"] = p.hi;
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!ctx->needs_input_grad(0)) return {Tensor(), Tensor()};
    const Tensor& g = grads[0];
    const Tensor saved = kKeep == Keep::Nothing ? g : ctx->get_saved_variables()[0];
    UnaryParams p;
    p.scalar = ctx->saved_data["scalar"].to_double();
    p.lo = ctx->saved_data["lo"].to_double();
    p.hi = ctx->saved_data["hi"].to_double();
    Tensor dx = empty(g.shape(), g.options(), result_format(g.shape(), {g, saved}));
    const std::vector<Tensor> v = in_memory_order(dx, {g, saved});
    unary_backward_stub(g.device())(kOp, p, v[0], v[1], v[2]);
    return {dx, Tensor()};
  }
};

struct Neg : Unary<Neg, UnaryOp::Neg, Keep::Nothing> {};
struct Exp : Unary<Exp, UnaryOp::Exp, Keep::Output> {};
struct Log : Unary<Log, UnaryOp::Log, Keep::Input> {};
struct Sqrt : Unary<Sqrt, UnaryOp::Sqrt, Keep::Output> {};
struct Rsqrt : Unary<Rsqrt, UnaryOp::Rsqrt, Keep::Output> {};
struct Abs : Unary<Abs, UnaryOp::Abs, Keep::Input> {};
struct Pow : Unary<Pow, UnaryOp::Pow, Keep::Input> {};
struct Clamp : Unary<Clamp, UnaryOp::Clamp, Keep::Input> {};
struct Relu : Unary<Relu, UnaryOp::Relu, Keep::Output> {};
struct LeakyRelu : Unary<LeakyRelu, UnaryOp::LeakyRelu, Keep::Input> {};
struct Sigmoid : Unary<Sigmoid, UnaryOp::Sigmoid, Keep::Output> {};
struct Tanh : Unary<Tanh, UnaryOp::Tanh, Keep::Output> {};
struct Gelu : Unary<Gelu, UnaryOp::Gelu, Keep::Input> {};
struct GeluTanh : Unary<GeluTanh, UnaryOp::GeluTanh, Keep::Input> {};

}  // namespace

Tensor neg(const Tensor& x) { return Neg::apply(x, UnaryParams{}); }
Tensor exp(const Tensor& x) {
  return Exp::apply(amp::cast_args(amp::AmpOp::exp, float32_if_integer(x))[0], UnaryParams{});
}
Tensor log(const Tensor& x) {
  return Log::apply(amp::cast_args(amp::AmpOp::log, float32_if_integer(x))[0], UnaryParams{});
}
Tensor sqrt(const Tensor& x) { return Sqrt::apply(float32_if_integer(x), UnaryParams{}); }
Tensor rsqrt(const Tensor& x) { return Rsqrt::apply(float32_if_integer(x), UnaryParams{}); }
Tensor abs(const Tensor& x) { return Abs::apply(x, UnaryParams{}); }
Tensor relu(const Tensor& x) { return Relu::apply(x, UnaryParams{}); }
Tensor sigmoid(const Tensor& x) { return Sigmoid::apply(float32_if_integer(x), UnaryParams{}); }
Tensor tanh(const Tensor& x) { return Tanh::apply(float32_if_integer(x), UnaryParams{}); }

namespace {

// An integer tensor to a whole power, by repeated squaring in its own dtype
// (products wrap as PyTorch's; x^0 is 1, also for 0).
Tensor integer_pow(const Tensor& x, Scalar exponent) {
  MINIDL_CHECK(exponent.to_double() < 0x1p63, "pow: value cannot be converted to type int64_t without overflow");
  int64_t e = exponent.to_int64();
  MINIDL_CHECK(e >= 0, "pow: Integers to negative integer powers are not allowed.");
  Tensor result = ones_like(x), base = x;
  for (; e > 0; e >>= 1) {
    if (e & 1) result = mul(result, base);
    if (e > 1) base = mul(base, base);
  }
  return result;
}

}  // namespace

Tensor pow(const Tensor& x, Scalar exponent) {
  if (is_integer_tensor(x) && exponent.is_integral()) return integer_pow(x, exponent);
  return Pow::apply(amp::cast_args(amp::AmpOp::pow, float32_if_integer(x))[0],
                    UnaryParams{.scalar = exponent.to_double()});
}

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  // The slope becomes x's type: PyTorch refuses a finite one past it (1e39 for float32).
  if (x.defined() && is_floating(x.dtype())) check_scalar_fits(x.dtype(), negative_slope, "leaky_relu");
  return LeakyRelu::apply(x, UnaryParams{.scalar = negative_slope});
}

Tensor clamp(const Tensor& input, std::optional<Scalar> min, std::optional<Scalar> max) {
  MINIDL_CHECK(min.has_value() || max.has_value(), "clamp: At least one of 'min' or 'max' must not be None");
  // An integer tensor with a floating bound computes in float32 (PyTorch's promotion).
  const bool floating_bound = (min && min->is_floating_point()) || (max && max->is_floating_point());
  const Tensor x = floating_bound ? float32_if_integer(input) : input;
  if (x.defined() && is_integer_tensor(x)) {
    // PyTorch: a bound past the dtype on its own side clamps nothing and is
    // dropped (clamp(u8, -1, 5) is clamp(u8, max=5)); one past the far side
    // would clamp everything to a value the dtype cannot hold, and is refused.
    // Only integer bounds get here (a floating one made x float32); compared exactly.
    const bool u8 = x.dtype() == kUInt8;
    const auto below = [u8](Scalar s) { return s.fits_int64() && u8 && s.to_int64() < 0; };
    const auto above = [u8](Scalar s) { return !s.fits_int64() || (u8 && s.to_int64() > 255); };
    MINIDL_CHECK(!(min && above(*min)), "clamp: Clamp min value ", min ? min->to_double() : 0.0,
                 " is outside the representable range of ", scalar_type_name(x.dtype()));
    MINIDL_CHECK(!(max && below(*max)), "clamp: Clamp max value ", max ? max->to_double() : 0.0,
                 " is outside the representable range of ", scalar_type_name(x.dtype()));
    if (min && below(*min)) min.reset();
    if (max && above(*max)) max.reset();
  }
  UnaryParams p;  // an absent bound stays infinite: the integer kernels take the dtype's extreme
  if (min) p.lo = min->to_double();
  if (max) p.hi = max->to_double();
  if (x.defined()) {
    for (const auto& value : {min, max})  // a float32 tensor refuses 1e39
      if (value && is_floating(x.dtype())) check_scalar_fits(x.dtype(), value->to_double(), "clamp");
    // A NaN bound makes every element NaN with a zero gradient (PyTorch);
    // the Clamp kernels would need a NaN test per element on every device.
    if (std::isnan(p.lo) || std::isnan(p.hi)) return add(mul(x, 0.0), std::nan(""));
    // int64 bounds the kernels' double would round (past 2^53): maximum and
    // minimum with exact one-element tensors (no gradient on integers).
    if ((min && needs_exact_operand(x, *min)) || (max && needs_exact_operand(x, *max))) {
      Tensor y = min ? maximum(x, exact_operand(x, *min)) : x;
      return max ? minimum(y, exact_operand(x, *max)) : y;
    }
  }
  return Clamp::apply(x, p);
}

Tensor gelu(const Tensor& x, const std::string& approximate) {
  MINIDL_CHECK(approximate == "none" || approximate == "tanh",
               "gelu: approximate argument must be either none or tanh. (got '", approximate, "')");
  return approximate == "tanh" ? GeluTanh::apply(x, UnaryParams{}) : Gelu::apply(x, UnaryParams{});
}

Tensor Tensor::exp() const { return minidl::exp(*this); }
Tensor Tensor::log() const { return minidl::log(*this); }
Tensor Tensor::sqrt() const { return minidl::sqrt(*this); }
Tensor Tensor::abs() const { return minidl::abs(*this); }
Tensor Tensor::relu() const { return minidl::relu(*this); }
Tensor Tensor::pow(Scalar exponent) const { return minidl::pow(*this, exponent); }

}  // namespace minidl
