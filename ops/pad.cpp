// pad: checks with PyTorch's messages, the index map of each padded
// dimension (PadGeometry), and autograd: the backward sums dy into the input
// elements each output copied (reflect, replicate and circular read some
// inputs several times; constant padding drops the padded outputs).
#include "minidl/ops/pad.h"

#include <algorithm>

#include "minidl/core/autocast.h"
#include "minidl/core/autograd/function.h"
#include "minidl/ops/cuda/pad_math.h"

namespace minidl {

DispatchStub<PadForwardFn> pad_forward_stub("pad");
DispatchStub<PadBackwardFn> pad_backward_stub("pad_backward");

PadMode pad_mode_from_string(const std::string& mode) {
  if (mode == "constant") return PadMode::kConstant;
  if (mode == "reflect") return PadMode::kReflect;
  if (mode == "replicate") return PadMode::kReplicate;
  if (mode == "circular") return PadMode::kCircular;
  MINIDL_CHECK(false, "Unrecognised padding mode ", mode);
  return PadMode::kConstant;
}

const char* pad_mode_name(PadMode mode) {
  switch (mode) {
    case PadMode::kReflect: return "reflect";
    case PadMode::kReplicate: return "replicate";
    case PadMode::kCircular: return "circular";
    default: return "constant";
  }
}

namespace {

// The CUDA kernels take the mode as pad_math.h's int.
static_assert(static_cast<int>(PadMode::kConstant) == cuda_math::kPadConstant &&
              static_cast<int>(PadMode::kReflect) == cuda_math::kPadReflect &&
              static_cast<int>(PadMode::kReplicate) == cuda_math::kPadReplicate &&
              static_cast<int>(PadMode::kCircular) == cuda_math::kPadCircular);

// Where output index i (of out = in + left + right) reads from, or -1: one
// rule for the CPU tables and the CUDA kernels.
int64_t source_index(int64_t i, int64_t left, int64_t in, int64_t out, PadMode mode) {
  return cuda_math::pad_source_index(i, left, in, out, static_cast<int>(mode));
}

// Checks x and pads (PyTorch's messages) and builds the geometry; `item` is
// the element size in bytes (the output's byte count must fit int64).
PadGeometry make_geometry(const Shape& shape, const std::vector<int64_t>& pads, PadMode mode, double value,
                          size_t item) {
  const int64_t dim = static_cast<int64_t>(shape.size());
  const int64_t n = static_cast<int64_t>(pads.size());
  MINIDL_CHECK(n % 2 == 0, "Padding length must be divisible by 2");
  MINIDL_CHECK(n / 2 <= dim, "Padding length should be less than or equal to two times the input dimension but got "
                             "padding length ", n, " and input of dimension ", dim);
  const int64_t m = n / 2;
  if (mode != PadMode::kConstant)
    MINIDL_CHECK(m >= 1 && m <= 3 && (dim == m + 1 || dim == m + 2), "Padding size ", n,
                 " is not supported for ", dim, "D input tensor.\nSupported combinations for non-constant padding:\n"
                 "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
                 "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
                 "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)");
  PadGeometry g;
  g.mode = mode;
  g.value = value;
  for (int64_t d = 0; d < dim - m; ++d) g.outer *= shape[static_cast<size_t>(d)];
  Shape out_shape = shape;
  for (int64_t k = 0; k < m; ++k) {
    const int64_t d = dim - m + k;                        // the dimension
    const int64_t p = 2 * (dim - 1 - d);                  // its pads: last dimension first
    const int64_t in = shape[static_cast<size_t>(d)], left = pads[static_cast<size_t>(p)],
                  right = pads[static_cast<size_t>(p + 1)];
    // Huge pads: in + left + right may not fit int64. Adding the smaller pad
    // first (in >= 0), a sum that does not fit has the larger pad's sign.
    const int64_t lo = std::min(left, right), hi = std::max(left, right);
    int64_t out = 0;
    const bool wraps = __builtin_add_overflow(in, lo, &out) || __builtin_add_overflow(out, hi, &out);
    MINIDL_CHECK(wraps ? hi >= 0 : out >= 0, "The input size ", in, ", plus negative padding ", left, " and ", right,
                 " resulted in a negative output size, which is invalid. Check dimension ", d, " of your input.");
    if (mode == PadMode::kReflect)
      MINIDL_CHECK(left < in && right < in, "Argument #", 4 + 2 * (dim - 1 - d), ": Padding size should be less than the "
                   "corresponding input dimension, but got: padding (", left, ", ", right, ") at dimension ", d, " of input ",
                   shape_str(shape));
    if (mode == PadMode::kCircular) {
      MINIDL_CHECK(left <= in && right <= in, "Padding value causes wrapping around more than once.");
      // A positive pad copies from what the negative one left (PyTorch fails
      // on the overlapping copy, or returns uninitialized memory when nothing is left).
      const int64_t kept = in - std::max<int64_t>(-left, 0) - std::max<int64_t>(-right, 0);
      MINIDL_CHECK(left <= kept && right <= kept, "Padding value causes wrapping around more than once: the "
                   "negative pad of circular padding (", left, ", ", right, ") at dimension ", d, " of input ",
                   shape_str(shape), " leaves ", kept, " elements, fewer than the positive pad");
    }
    MINIDL_CHECK(!wraps, "pad: Storage size calculation overflowed: the input size ", in, " plus padding ", left,
                 " and ", right, " does not fit int64 at dimension ", d, " of input ", shape_str(shape));
    if (mode == PadMode::kReplicate && out > 0)
      MINIDL_CHECK(in > 0, "pad: replicate padding expects a non-empty dimension ", d, " of input ",
                   shape_str(shape));
    out_shape[static_cast<size_t>(d)] = out;
    g.in_sizes.push_back(in);
    g.out_sizes.push_back(out);
    g.left.push_back(left);
  }
  // Before the index tables (as long as the padded dimensions) are built.
  MINIDL_CHECK(checked_nbytes(out_shape, item).has_value(), "pad: Storage size calculation overflowed with sizes=",
               shape_str(out_shape));
  for (int64_t k = 0; k < m; ++k) {
    const auto j = static_cast<size_t>(k);
    const int64_t out = g.out_sizes[j];
    std::vector<int64_t> src(static_cast<size_t>(out));
    for (int64_t i = 0; i < out; ++i)
      src[static_cast<size_t>(i)] = source_index(i, g.left[j], g.in_sizes[j], out, mode);
    g.source.push_back(std::move(src));
  }
  return g;
}

Shape padded_shape(const Shape& shape, const PadGeometry& g) {
  Shape out = shape;
  const size_t m = g.out_sizes.size();
  for (size_t k = 0; k < m; ++k) out[shape.size() - m + k] = g.out_sizes[k];
  return out;
}

struct Pad : autograd::Function<Pad> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x_in, const std::vector<int64_t>& pads, PadMode mode,
                        double value) {
    const Tensor x = x_in.contiguous();
    const PadGeometry g = make_geometry(x.shape(), pads, mode, value, element_size(x.dtype()));
    Tensor y = empty(padded_shape(x.shape(), g), x.options());
    pad_forward_stub(x.device())(g, x, y);
    ctx->saved_data["shape"] = std::vector<int64_t>(x.shape().begin(), x.shape().end());
    ctx->saved_data["pads"] = pads;
    ctx->saved_data["mode"] = static_cast<int64_t>(mode);
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const std::vector<int64_t> shape_list = ctx->saved_data["shape"].to_int_list();
    const Shape shape(shape_list.begin(), shape_list.end());
    const auto mode = static_cast<PadMode>(ctx->saved_data["mode"].to_int());
    const Tensor dy = grads[0].contiguous();
    const PadGeometry g = make_geometry(shape, ctx->saved_data["pads"].to_int_list(), mode, 0.0,
                                        element_size(dy.dtype()));
    Tensor dx = empty(shape, dy.options());
    pad_backward_stub(dy.device())(g, dy, dx);
    return {dx, Tensor(), Tensor(), Tensor()};
  }
};

}  // namespace

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode, double value) {
  MINIDL_CHECK(x.defined(), "pad: the input tensor is undefined");
  MINIDL_CHECK(is_floating(x.dtype()), "pad: expected a float32 or float64 input, got ", dtype_name(x.dtype()));
  make_geometry(x.shape(), pads, mode, value, element_size(x.dtype()));  // checks before anything runs
  if (mode == PadMode::kConstant) checked_scalar_value(x.dtype(), value, "pad");  // 1e39 into float32
  // No padded dimension (an empty list, constant mode): PyTorch returns a copy;
  // the kernels index the last padded dimension.
  if (pads.empty()) return x.clone();
  // PyTorch's CPU autocast runs reflection_pad1d/2d and replication_pad1d/2d/3d in float32.
  const size_t dims = pads.size() / 2;
  static constexpr amp::AmpOp kReflect[] = {amp::AmpOp::reflection_pad1d, amp::AmpOp::reflection_pad2d};
  static constexpr amp::AmpOp kReplicate[] = {amp::AmpOp::replication_pad1d, amp::AmpOp::replication_pad2d,
                                              amp::AmpOp::replication_pad3d};
  if (mode == PadMode::kReflect && dims <= 2)
    return Pad::apply(amp::cast_args(kReflect[dims - 1], x)[0], pads, mode, value);
  if (mode == PadMode::kReplicate && dims <= 3)
    return Pad::apply(amp::cast_args(kReplicate[dims - 1], x)[0], pads, mode, value);
  return Pad::apply(x, pads, mode, value);
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, const std::string& mode, double value) {
  return pad(x, pads, pad_mode_from_string(mode), value);
}

}  // namespace minidl
