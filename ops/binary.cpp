// Elementwise binary ops with NumPy/PyTorch broadcasting, and the in-place
// arithmetic methods (add_, sub_, mul_, div_, fill_, zero_).
//   add  y = a + alpha*b     da = g            db = alpha*g
//   sub  y = a - alpha*b     da = g            db = -alpha*g
//   mul  y = a*b             da = g*b          db = g*a         (saves b for da, a for db)
//   div  y = a/b             da = g/b          db = -g*a/b^2    (saves b, and a for db)
//   maximum/minimum          the chosen input gets g; ties split it 0.5/0.5 (saves a, b)
//   eq, gt, lt               0/1 in a's dtype; not differentiable
// Every input grad is summed back to that input's shape (sum_to_shape) and
// overwrites; the engine accumulates. A scalar operand (x * 0.5, 1 - x) is a
// kernel argument, never a tensor:
//   a + s, a - s   da = g          s - a   da = -g
//   a * s          da = g*s        a / s   da = g/s
//   s / a          da = -((g/a)*s)/a (saves a)
// (the same operations, in the same order, as the tensor forms with a 0-d s).
// Promotion as PyTorch's: an integer tensor with a floating scalar, and any
// division of integer tensors, compute in float32.
// CPU kernels: ops/cpu/binary.cpp.
#include "minidl/ops/binary.h"

#include <cmath>

#include "minidl/core/autocast.h"
#include "minidl/core/autograd/function.h"
#include "minidl/ops/type_promotion.h"
#include "minidl/ops/unary.h"

namespace minidl {

bool is_integer_tensor(const Tensor& t) { return t.defined() && !is_floating(t.dtype()); }
Tensor float32_if_integer(const Tensor& t) { return is_integer_tensor(t) ? t.to(kFloat32) : t; }
bool in_integer_range(DType dtype, double value) {
  return dtype == kUInt8 ? value >= 0.0 && value < 256.0 : value >= -0x1p63 && value < 0x1p63;
}

// The one-element tensor is made on a's device from two halves that doubles
// hold exactly (no host copy, so it also works inside a CUDA graph capture).
bool needs_exact_operand(const Tensor& a, Scalar s) {
  return s.rounds_in_double() && a.defined() && a.dtype() == kInt64;
}
Tensor exact_operand(const Tensor& a, Scalar s) {
  const int64_t v = s.to_int64();
  Tensor t = full({}, static_cast<double>(v >> 32), a.options());
  t.mul_(int64_t{1} << 32).add_(v & 0xffffffff);
  return t;
}

DispatchStub<BinaryFn> binary_stub("binary");
DispatchStub<BinaryScalarFn> binary_scalar_stub("binary_scalar");
DispatchStub<SumToFn> sum_to_stub("sum_to_shape");
DispatchStub<FillFn> fill_stub("fill_");

const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
    case BinaryOp::Maximum: return "maximum";
    case BinaryOp::Minimum: return "minimum";
    case BinaryOp::Eq: return "eq";
    case BinaryOp::Gt: return "gt";
    case BinaryOp::Lt: return "lt";
  }
  return "?";
}

namespace {

// ---- helpers ---------------------------------------------------------------------


// A handle that walks `t` as if expanded to `shape` (stride 0 on broadcast
// dims), with no autograd: kernel operands only.
Tensor broadcast_view(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  Shape strides(shape.size(), 0);
  const size_t lead = shape.size() - static_cast<size_t>(t.dim());
  for (size_t i = 0; i < static_cast<size_t>(t.dim()); ++i)
    if (t.shape()[i] == shape[lead + i]) strides[lead + i] = t.strides()[i];
  return make_view(t, shape, std::move(strides), t.storage_offset());
}

// A scalar operand checked against x's dtype, as the kernels take it. A
// uint8 tensor takes an integer modulo 256, as PyTorch casts it (u8 + 300
// adds 44, u8 * -1 multiplies by 255, u8 > -1 compares with 255).
double scalar_operand(const Tensor& x, double value, const char* op) {
  MINIDL_CHECK(x.defined(), op, ": expected a defined tensor, got an undefined one");
  if (x.dtype() == kUInt8 && value == std::trunc(value) && std::abs(value) < 0x1p63)
    value = static_cast<uint8_t>(static_cast<int64_t>(value));
  // A float operand too large for a float16 tensor becomes inf, as PyTorch's
  // wrapped scalars do (x + 1e5); fill_, clamp and alpha refuse it.
  if (!is_floating(x.dtype())) check_scalar_fits(x.dtype(), value, op);
  return value;
}

// out = op(a, s) (or op(s, a)) in a new tensor of a's dtype and device.
Tensor binary_scalar_forward(BinaryOp op, const Tensor& a, double s, bool scalar_first, const char* name) {
  s = scalar_operand(a, s, name);
  Tensor out = empty(a.shape(), a.options(), a.suggest_memory_format());  // channels-last stays so
  if (out.is_contiguous()) {  // the common case, without in_memory_order's copies of the handles
    binary_scalar_stub(a.device())(op, out, a, s, scalar_first);
    return out;
  }
  const std::vector<Tensor> v = in_memory_order(out, {a});
  binary_scalar_stub(a.device())(op, v[0], v[1], s, scalar_first);
  return out;
}

void check_operands(const char* op, const Tensor& a, const Tensor& b) {
  MINIDL_CHECK(a.defined() && b.defined(), op, ": expected defined tensors, got an undefined ",
               a.defined() ? "second" : "first", " argument");
  MINIDL_CHECK(a.dtype() == b.dtype(), op, ": expected both tensors to have the same dtype, got ",
               dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  MINIDL_CHECK(a.device() == b.device(), op,
               ": Expected all tensors to be on the same device, but found at least two devices, ",
               a.device(), " and ", b.device(), "!");
}

// The forward of every binary op: checks, broadcasts, runs the kernel.
Tensor binary_forward(BinaryOp op, const Tensor& a, const Tensor& b, double alpha = 1.0) {
  const char* name = binary_op_name(op);
  check_operands(name, a, b);
  check_scalar_fits(a.dtype(), alpha, name);
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = empty(shape, a.options(), result_format(shape, {a, b}));  // channels-last stays so
  if (out.is_contiguous()) {  // the common case, without in_memory_order's copies of the handles
    binary_stub(a.device())(op, alpha, out, broadcast_view(a, shape), broadcast_view(b, shape));
    return out;
  }
  const std::vector<Tensor> v = in_memory_order(out, {broadcast_view(a, shape), broadcast_view(b, shape)});
  binary_stub(a.device())(op, alpha, v[0], v[1], v[2]);
  return out;
}

// PyTorch's result type for a tensor and a scalar (ops/type_promotion.h).
Tensor promoted(const Tensor& a, Scalar s) { return s.is_floating_point() ? float32_if_integer(a) : a; }

Shape saved_shape(AutogradContext* ctx, const char* key) { return ctx->saved_data[key].to_int_list(); }

void save_shapes(AutogradContext* ctx, const Tensor& a, const Tensor& b) {
  ctx->saved_data["a_shape"] = a.shape();
  ctx->saved_data["b_shape"] = b.shape();
}

// ---- autograd functions --------------------------------------------------------

// a + alpha * b and a - alpha * b: db = +-alpha * dy (summed to b's shape).
template <BinaryOp Op>
struct AddSub : autograd::Function<AddSub<Op>> {
  static constexpr const char* kName = Op == BinaryOp::Add ? "Add" : "Sub";
  static Tensor forward(AutogradContext* ctx, const Tensor& a, const Tensor& b, double alpha) {
    Tensor out = binary_forward(Op, a, b, alpha);
    save_shapes(ctx, a, b);
    ctx->saved_data["alpha"] = alpha;
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Tensor& g = grads[0];
    const double alpha = ctx->saved_data["alpha"].to_double();
    const double scale = Op == BinaryOp::Add ? alpha : -alpha;
    Tensor da, db;
    if (ctx->needs_input_grad(0)) da = sum_to_shape(g, saved_shape(ctx, "a_shape"));
    if (ctx->needs_input_grad(1)) {
      db = sum_to_shape(g, saved_shape(ctx, "b_shape"));
      if (scale != 1.0) db = mul(db, scale);
    }
    return {da, db, Tensor()};
  }
};
using Add = AddSub<BinaryOp::Add>;
using Sub = AddSub<BinaryOp::Sub>;

struct Mul : autograd::Function<Mul> {
  static Tensor forward(AutogradContext* ctx, const Tensor& a, const Tensor& b) {
    Tensor out = binary_forward(BinaryOp::Mul, a, b);
    save_shapes(ctx, a, b);
    // da needs b and db needs a: keep only what a requested grad needs.
    ctx->save_for_backward({ctx->needs_input_grad(1) ? a : Tensor(), ctx->needs_input_grad(0) ? b : Tensor()});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Tensor& g = grads[0];
    const variable_list saved = ctx->get_saved_variables();
    Tensor da, db;
    if (ctx->needs_input_grad(0)) da = sum_to_shape(mul(g, saved[1]), saved_shape(ctx, "a_shape"));
    if (ctx->needs_input_grad(1)) db = sum_to_shape(mul(g, saved[0]), saved_shape(ctx, "b_shape"));
    return {da, db};
  }
};

struct Div : autograd::Function<Div> {
  static Tensor forward(AutogradContext* ctx, const Tensor& a, const Tensor& b) {
    Tensor out = binary_forward(BinaryOp::Div, a, b);
    save_shapes(ctx, a, b);
    ctx->save_for_backward({ctx->needs_input_grad(1) ? a : Tensor(), b});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Tensor& a = saved[0];
    const Tensor& b = saved[1];
    const Tensor g_over_b = div(grads[0], b);
    Tensor da, db;
    if (ctx->needs_input_grad(0)) da = sum_to_shape(g_over_b, saved_shape(ctx, "a_shape"));
    // PyTorch's -g ((a / b) / b): g / b first overflowed float16 for a small b
    // (g 100, b 1e-3: -inf where PyTorch gives -9992).
    if (ctx->needs_input_grad(1))
      db = sum_to_shape(neg(mul(grads[0], div(div(a, b), b))), saved_shape(ctx, "b_shape"));
    return {da, db};
  }
};

Tensor compare(BinaryOp op, const Tensor& a, const Tensor& b) { return binary_forward(op, a, b); }

// a op s, or s op a when scalar_first (rsub, rdiv); see the header comment.
struct ScalarOp : autograd::Function<ScalarOp> {
  static constexpr const char* kName = "ScalarOp";
  static Tensor forward(AutogradContext* ctx, const Tensor& a, BinaryOp op, double s, bool scalar_first) {
    Tensor out = binary_scalar_forward(op, a, s, scalar_first, binary_op_name(op));
    ctx->saved_data["op"] = static_cast<int64_t>(op);
    ctx->saved_data["scalar"] = s;
    ctx->saved_data["scalar_first"] = scalar_first;
    if (op == BinaryOp::Div && scalar_first) ctx->save_for_backward({a});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Tensor& g = grads[0];
    const auto op = static_cast<BinaryOp>(ctx->saved_data["op"].to_int());
    const double s = ctx->saved_data["scalar"].to_double();
    const bool scalar_first = ctx->saved_data["scalar_first"].to_bool();
    Tensor da;
    switch (op) {
      case BinaryOp::Add: da = g; break;
      case BinaryOp::Sub: da = scalar_first ? neg(g) : g; break;
      case BinaryOp::Mul: da = mul(g, s); break;
      case BinaryOp::Div:
        if (!scalar_first) {
          da = div(g, s);
        } else {
          const Tensor a = ctx->get_saved_variables()[0];
          da = neg(div(mul(div(g, a), s), a));
        }
        break;
      default: MINIDL_ASSERT(false, "ScalarOp: ", binary_op_name(op), " is not differentiable");
    }
    return {da, Tensor(), Tensor(), Tensor()};
  }
};

// maximum (wins = Gt) and minimum (wins = Lt): the winner's weight is 1, a
// tie's 0.5, and both get the whole gradient when a NaN makes every
// comparison false, as PyTorch (only b got it).
template <class Self, BinaryOp kOp, BinaryOp kWins, BinaryOp kLoses>
struct Extremum : autograd::Function<Self> {
  static Tensor forward(AutogradContext* ctx, const Tensor& a, const Tensor& b) {
    Tensor out = binary_forward(kOp, a, b);
    ctx->save_for_backward({a, b});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Tensor& a = saved[0];
    const Tensor& b = saved[1];
    const Tensor tie = compare(BinaryOp::Eq, a, b) * 0.5;
    Tensor da, db;
    if (ctx->needs_input_grad(0)) da = sum_to_shape(mul(grads[0], 1.0 - compare(kLoses, a, b) - tie), a.shape());
    if (ctx->needs_input_grad(1)) db = sum_to_shape(mul(grads[0], 1.0 - compare(kWins, a, b) - tie), b.shape());
    return {da, db};
  }
};
struct Maximum : Extremum<Maximum, BinaryOp::Maximum, BinaryOp::Gt, BinaryOp::Lt> {};
struct Minimum : Extremum<Minimum, BinaryOp::Minimum, BinaryOp::Lt, BinaryOp::Gt> {};

struct SumToShape : autograd::Function<SumToShape> {
  static Tensor forward(AutogradContext* ctx, const Tensor& grad, const Shape& shape) {
    ctx->saved_data["grad_shape"] = grad.shape();
    Tensor out = zeros(shape, grad.options());
    sum_to_stub(grad.device())(broadcast_view(out, grad.shape()), grad);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {broadcast_view(grads[0], saved_shape(ctx, "grad_shape")), Tensor()};
  }
};

// ---- in-place ----------------------------------------------------------------------

void check_writable(const Tensor& self, const char* op) {
  if (autograd::GradMode::is_enabled() && self.requires_grad()) {
    MINIDL_CHECK(!self.is_leaf(), "a leaf Variable that requires grad is being used in an in-place operation.");
    MINIDL_FAIL(op, ": in-place operations on tensors that require grad are not supported by minidl's "
                "autograd; use the out-of-place op instead (e.g. y = x + z)");
  }
  for (int64_t d = 0; d < self.dim(); ++d)
    MINIDL_CHECK(self.strides()[d] != 0 || self.shape()[d] <= 1, op,
                 ": unsupported operation: more than one element of the written-to tensor refers to a "
                 "single memory location. Please clone() the tensor before performing the operation.");
}

// self = op(self, other); other broadcasts to self's shape, never the reverse.
Tensor& binary_inplace(Tensor& self, BinaryOp op, const Tensor& other, double alpha, const char* name) {
  check_writable(self, name);
  check_operands(name, self, other);
  MINIDL_CHECK(!(autograd::GradMode::is_enabled() && other.requires_grad()), name,
               ": the operand requires grad, but minidl's autograd cannot record in-place operations; "
               "use the out-of-place op, or run under NoGradGuard if no gradient should flow");
  check_scalar_fits(self.dtype(), alpha, name);
  const Shape shape = broadcast_shapes(self.shape(), other.shape(), name);
  MINIDL_CHECK(shape == self.shape(), name, ": output with shape ", shape_str(self.shape()),
               " doesn't match the broadcast shape ", shape_str(shape));
  Tensor src = broadcast_view(other, shape);
  // Reading other while writing self is only safe when both walk the same
  // elements in the same order; any other overlap reads from a copy.
  const bool same_storage = other.impl()->storage == self.impl()->storage;
  const bool same_view = src.storage_offset() == self.storage_offset() && src.strides() == self.strides();
  if (same_storage && !same_view) src = broadcast_view(other.detach().clone(), shape);
  if (!self.is_contiguous() && dense_dim_order(self)) {
    // A dense self (channels-last) is walked in its memory order: the kernels'
    // contiguous paths, and on a GPU neighbouring threads on neighbouring elements.
    const std::vector<Tensor> v = in_memory_order(self, {src});
    binary_stub(self.device())(op, alpha, v[0], v[0], v[1]);
  } else {
    binary_stub(self.device())(op, alpha, self, self, src);
  }
  self.bump_version();
  return self;
}

// self = op(self, s).
Tensor& scalar_inplace(Tensor& self, BinaryOp op, Scalar scalar, const char* name) {
  if (is_integer_tensor(self) && (scalar.is_floating_point() || op == BinaryOp::Div))
    MINIDL_FAIL(name, ": result type Float can't be cast to the desired output type ",
                scalar_type_name(self.dtype()));
  if (needs_exact_operand(self, scalar)) return binary_inplace(self, op, exact_operand(self, scalar), 1.0, name);
  const double s = scalar_operand(self, scalar.to_double(), name);
  check_writable(self, name);
  binary_scalar_stub(self.device())(op, self, self, s, false);
  self.bump_version();
  return self;
}

}  // namespace

// ---- public API ------------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  const auto t = amp::cast_args(amp::AmpOp::add, a, b);
  return Add::apply(t[0], t[1], alpha);
}
Tensor sub(const Tensor& a, const Tensor& b, double alpha) {
  const auto t = amp::cast_args(amp::AmpOp::sub, a, b);
  return Sub::apply(t[0], t[1], alpha);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  const auto t = amp::cast_args(amp::AmpOp::mul, a, b);
  return Mul::apply(t[0], t[1]);
}
Tensor div(const Tensor& a, const Tensor& b) {
  // True division (PyTorch's `/`): integer tensors divide in float32.
  if (is_integer_tensor(a) && is_integer_tensor(b)) return div(a.to(kFloat32), b.to(kFloat32));
  const auto t = amp::cast_args(amp::AmpOp::div, a, b);
  return Div::apply(t[0], t[1]);
}
Tensor maximum(const Tensor& a, const Tensor& b) { return Maximum::apply(a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return Minimum::apply(a, b); }

Tensor add(const Tensor& a, Scalar b) {
  if (needs_exact_operand(a, b)) return add(a, exact_operand(a, b));
  return ScalarOp::apply(promoted(a, b), BinaryOp::Add, b.to_double(), false);
}
Tensor sub(const Tensor& a, Scalar b) {
  if (needs_exact_operand(a, b)) return sub(a, exact_operand(a, b));
  return ScalarOp::apply(promoted(a, b), BinaryOp::Sub, b.to_double(), false);
}
Tensor rsub(const Tensor& a, Scalar b) {
  if (needs_exact_operand(a, b)) return sub(exact_operand(a, b), a);
  return ScalarOp::apply(promoted(a, b), BinaryOp::Sub, b.to_double(), true);
}
Tensor mul(const Tensor& a, Scalar b) {
  if (needs_exact_operand(a, b)) return mul(a, exact_operand(a, b));
  return ScalarOp::apply(promoted(a, b), BinaryOp::Mul, b.to_double(), false);
}
Tensor div(const Tensor& a, Scalar b) {
  return ScalarOp::apply(float32_if_integer(a), BinaryOp::Div, b.to_double(), false);
}
Tensor rdiv(const Tensor& a, Scalar b) {
  return ScalarOp::apply(float32_if_integer(a), BinaryOp::Div, b.to_double(), true);
}

Tensor eq(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Eq, a, b); }
Tensor gt(const Tensor& a, Scalar b) {
  if (needs_exact_operand(a, b)) return compare(BinaryOp::Gt, a, exact_operand(a, b));
  return binary_scalar_forward(BinaryOp::Gt, promoted(a, b), b.to_double(), false, "gt");
}
Tensor lt(const Tensor& a, Scalar b) {
  if (needs_exact_operand(a, b)) return compare(BinaryOp::Lt, a, exact_operand(a, b));
  return binary_scalar_forward(BinaryOp::Lt, promoted(a, b), b.to_double(), false, "lt");
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
Tensor operator/(const Tensor& a, Scalar b) { return div(a, b); }
Tensor operator+(Scalar a, const Tensor& b) { return add(b, a); }
Tensor operator-(Scalar a, const Tensor& b) { return rsub(b, a); }
Tensor operator*(Scalar a, const Tensor& b) { return mul(b, a); }
Tensor operator/(Scalar a, const Tensor& b) { return rdiv(b, a); }
Tensor operator-(const Tensor& a) { return neg(a); }

void check_scalar_fits(DType dtype, double value, const char* op) {
  MINIDL_CHECK(!scalar_overflows(dtype, value), op, ": value cannot be converted to type ",
               c10_type_name(dtype), " without overflow");
  if (is_floating(dtype)) return;
  MINIDL_CHECK(std::isfinite(value) && value == std::trunc(value) && in_integer_range(dtype, value), op,
               ": the scalar ", value, " cannot be represented exactly by a ", dtype_name(dtype),
               " tensor; convert the tensor to a floating dtype first");
}

Tensor sum_to_shape(const Tensor& grad, const Shape& shape) {
  MINIDL_CHECK(grad.defined(), "sum_to_shape: the gradient is undefined");
  if (grad.shape() == shape) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  bool expandable = lead >= 0;
  for (int64_t i = 0; expandable && i < static_cast<int64_t>(shape.size()); ++i)
    expandable = shape[i] == 1 || shape[i] == grad.shape()[lead + i];
  MINIDL_CHECK(expandable, "sum_to_shape: size ", shape_str(shape), " is not expandable to size ",
               shape_str(grad.shape()));
  return SumToShape::apply(grad, shape);
}

// ---- in-place Tensor methods -------------------------------------------------------------

Tensor Tensor::add(const Tensor& other, double alpha) const { return minidl::add(*this, other, alpha); }

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  return binary_inplace(*this, BinaryOp::Add, other, alpha, "add_");
}
Tensor& Tensor::add_(Scalar other) { return scalar_inplace(*this, BinaryOp::Add, other, "add_"); }
Tensor& Tensor::sub_(const Tensor& other) { return binary_inplace(*this, BinaryOp::Sub, other, 1.0, "sub_"); }
Tensor& Tensor::mul_(const Tensor& other) { return binary_inplace(*this, BinaryOp::Mul, other, 1.0, "mul_"); }
Tensor& Tensor::mul_(Scalar other) { return scalar_inplace(*this, BinaryOp::Mul, other, "mul_"); }
Tensor& Tensor::div_(Scalar other) { return scalar_inplace(*this, BinaryOp::Div, other, "div_"); }

Tensor& Tensor::fill_(Scalar value) {
  check_writable(*this, "fill_");
  const double v = checked_scalar_value(dtype(), value, "fill_");
  // The fill kernels take a double: int64 values past 2^53 are copied from an exact one-element tensor.
  if (needs_exact_operand(*this, value)) return copy_(exact_operand(*this, value));
  fill_stub(device())(*this, v);
  bump_version();
  return *this;
}

Tensor& Tensor::zero_() { return fill_(0); }

}  // namespace minidl
