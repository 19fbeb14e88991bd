// interpolate (torch.nn.functional.interpolate): per N*C plane, each output
// coordinate o along a dim maps to a source coordinate (PyTorch's formulas):
//   nearest:        src = min(floor(o * scale), in - 1)            scale = 1/scale_factor or in/out
//   nearest-exact:  src = min(floor((o + 0.5) * scale), in - 1)
//   linear:         align_corners: src = o * (in - 1)/(out - 1)
//                   else:          src = max(0, (o + 0.5) * scale - 0.5)
//                   y = (1 - l) x[i0] + l x[i0 + 1], i0 = floor(src), l = src - i0,
//                   per dim (bilinear, trilinear: the product of the per-dim weights).
// Backward scatters dy with the same weights (gradients add where taps coincide).
// Saves only the geometry. CPU kernels: ops/cpu/interpolate.cpp.
#include "minidl/ops/interpolate.h"

#include <cmath>
#include <sstream>

#include "minidl/core/autograd/function.h"

namespace minidl {

DispatchStub<UpsampleForwardFn> upsample_forward_stub("upsample");
DispatchStub<UpsampleBackwardFn> upsample_backward_stub("upsample_backward");

namespace {

std::vector<int64_t> to_list(const UpsampleGeometry& g) {
  return {g.planes, g.in[0], g.in[1], g.in[2], g.out[0], g.out[1], g.out[2], static_cast<int64_t>(g.mode),
          g.align_corners};
}

UpsampleGeometry from_saved(AutogradContext* ctx) {
  const std::vector<int64_t>& v = ctx->saved_data["geometry"].to_int_list();
  const std::vector<double>& s = ctx->saved_data["scales"].to_double_list();
  UpsampleGeometry g;
  g.planes = v[0];
  g.in = {v[1], v[2], v[3]};
  g.out = {v[4], v[5], v[6]};
  g.mode = static_cast<UpsampleMode>(v[7]);
  g.align_corners = v[8] != 0;
  g.scales = {s[0], s[1], s[2]};
  return g;
}

struct UpsampleFunction : autograd::Function<UpsampleFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const UpsampleGeometry& g) {
    Shape shape{x.size(0), x.size(1)};
    for (int i = 5 - static_cast<int>(x.dim()); i < 3; ++i) shape.push_back(g.out[i]);
    Tensor y = empty(shape, x.options());
    if (y.numel() > 0) upsample_forward_stub(x.device())(x.contiguous(), y, g);
    ctx->saved_data["geometry"] = to_list(g);
    ctx->saved_data["scales"] = std::vector<double>(g.scales.begin(), g.scales.end());
    ctx->saved_data["input_shape"] = x.shape();
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const UpsampleGeometry g = from_saved(ctx);
    const Tensor gy = grads[0].contiguous();
    const Shape shape = ctx->saved_data["input_shape"].to_int_list();
    Tensor gx = gy.numel() > 0 ? empty(shape, gy.options()) : zeros(shape, gy.options());
    if (gy.numel() > 0) upsample_backward_stub(gy.device())(gy, gx, g);
    return {gx, Tensor()};
  }
};

template <class T>
std::string tuple_str(const std::vector<T>& v) {
  std::ostringstream s;
  s << "(";
  for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
  s << (v.size() == 1 ? ",)" : ")");
  return s.str();
}

// "(D: 4, H: 5, W: 5)" for the last nd of a.
std::string sizes_str(const std::array<int64_t, 3>& a, int nd) {
  static const char* names[] = {"D: ", "H: ", "W: "};
  std::string s = "(";
  for (int i = 3 - nd; i < 3; ++i) {
    if (i > 3 - nd) s.append(", ");
    s.append(names[i]).append(std::to_string(a[i]));
  }
  return s.append(")");
}

// The mode each input rank needs for linear interpolation.
const char* linear_mode_for(int64_t dim) { return dim == 3 ? "linear" : dim == 4 ? "bilinear" : "trilinear"; }

}  // namespace

Tensor interpolate(const Tensor& x, const InterpolateOptions& o) {
  MINIDL_CHECK(x.defined(), "interpolate: expected a defined input tensor");
  const std::string& mode = o.mode;
  const bool nearest = mode == "nearest" || mode == "nearest-exact";
  const bool linear = mode == "linear" || mode == "bilinear" || mode == "trilinear";
  if (nearest || mode == "area")
    MINIDL_CHECK(!o.align_corners.has_value(),
                 "align_corners option can only be set with the interpolating modes: linear | bilinear | bicubic | "
                 "trilinear");
  const int64_t nd = x.dim() - 2;
  std::vector<int64_t> spatial;
  for (int64_t d = 2; d < x.dim(); ++d) spatial.push_back(x.size(d));
  MINIDL_CHECK(o.size.empty() || o.scale_factor.empty(), "only one of size or scale_factor should be defined");
  MINIDL_CHECK(!o.size.empty() || !o.scale_factor.empty(), "either size or scale_factor should be defined");
  MINIDL_CHECK(o.size.size() <= 1 || static_cast<int64_t>(o.size.size()) == nd,
               "Input and output must have the same number of spatial dimensions, but got input with spatial "
               "dimensions of ",
               shape_str(spatial), " and output size of ", tuple_str(o.size),
               ". Please provide input tensor in (N, C, d1, d2, ...,dK) format and output size in (o1, o2, ...,oK) "
               "format.");
  MINIDL_CHECK(o.scale_factor.size() <= 1 || static_cast<int64_t>(o.scale_factor.size()) == nd,
               "Input and scale_factor must have the same number of spatial dimensions, but got input with spatial "
               "dimensions of ",
               shape_str(spatial), " and scale_factor of shape ", tuple_str(o.scale_factor),
               ". Please provide input tensor in (N, C, d1, d2, ...,dK) format and scale_factor in (s1, s2, ...,sK) "
               "format.");
  const bool recompute = o.recompute_scale_factor.value_or(false);
  MINIDL_CHECK(!(recompute && !o.size.empty()), "recompute_scale_factor is not meaningful with an explicit size.");
  MINIDL_CHECK(nearest || linear || mode == "bicubic" || mode == "area" || mode == "lanczos",
               "Input Error: Only 3D, 4D and 5D input Tensors supported (got ", x.dim(),
               "D) for the modes: nearest | linear | bilinear | bicubic | trilinear | lanczos | area | nearest-exact "
               "(got ",
               mode, ")");
  MINIDL_CHECK(nearest || linear, "interpolate: mode '", mode,
               "' is not implemented in minidl (it has nearest | nearest-exact | linear | bilinear | trilinear)");
  MINIDL_CHECK(nd >= 1 && nd <= 3, "Input Error: Only 3D, 4D and 5D input Tensors supported (got ", x.dim(),
               "D) for the modes: nearest | linear | bilinear | bicubic | trilinear | lanczos | area | nearest-exact "
               "(got ",
               mode, ")");
  if (linear)
    MINIDL_CHECK(mode == linear_mode_for(x.dim()), "Got ", x.dim(), "D input, but ", mode, " mode needs ",
                 mode == "linear" ? 3 : mode == "bilinear" ? 4 : 5, "D input");
  MINIDL_CHECK(is_floating(x.dtype()), "interpolate (", mode, "): expected a floating point input, got ",
               dtype_name(x.dtype()));

  UpsampleGeometry g;
  g.mode = linear ? UpsampleMode::Linear : mode == "nearest" ? UpsampleMode::Nearest : UpsampleMode::NearestExact;
  g.align_corners = o.align_corners.value_or(false);
  for (int64_t i = 0; i < nd; ++i) {
    const int dim = static_cast<int>(3 - nd + i);
    g.in[dim] = spatial[i];
    if (!o.size.empty()) {
      g.out[dim] = o.size[o.size.size() == 1 ? 0 : i];
    } else {
      const double s = o.scale_factor[o.scale_factor.size() == 1 ? 0 : i];
      // Python floors in_size * scale (recompute); ATen truncates: the same for valid sizes.
      const double product = static_cast<double>(spatial[i]) * s;
      const double out = recompute ? std::floor(product) : product;
      // A nan, infinite or huge scale_factor: converting it was undefined behaviour (PyTorch's message).
      MINIDL_CHECK(out > -0x1p63 && out < 0x1p63, "interpolate: scale_factor ", s, " times input size ", spatial[i],
                   ": value cannot be converted to type int64_t without overflow");
      g.out[dim] = static_cast<int64_t>(out);
      if (!recompute) g.scales[dim] = s;
    }
  }
  bool sizes_ok = true;
  for (int i = 0; i < 3; ++i) sizes_ok = sizes_ok && g.in[i] > 0 && g.out[i] > 0;
  MINIDL_CHECK(sizes_ok, "Input and output sizes should be greater than 0, but got input ",
               sizes_str(g.in, static_cast<int>(nd)), nd == 1 ? " and output " : " output ",
               sizes_str(g.out, static_cast<int>(nd)));
  // As PyTorch's upsample_*_common_check: an empty batch is fine, no channels are not.
  MINIDL_CHECK(x.size(1) != 0, "Non-empty ", x.dim(),
               "D data tensor expected but got a tensor with sizes ", shape_str(x.shape()));
  g.planes = x.size(0) * x.size(1);
  return UpsampleFunction::apply(x, g);
}

}  // namespace minidl
