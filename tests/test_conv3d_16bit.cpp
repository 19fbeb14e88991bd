// conv3d on bfloat16 and float16 tensors (ops/cpu/conv3d.cpp reads and
// writes them as they are: widened into the stacked slices, rounded once on
// the way out): forward, grad input, grad weight and bias must give the bits
// of float32 computation on the widened tensors, rounded once, through the
// op (autograd) and through the raw 16-bit kernels; stride, padding,
// dilation, groups, a depth stride larger than the kernel (input depths no
// tap reaches), inf and NaN. Without bfloat16's dot products
// (MINIDL_CPU_BF16_DOT=0, as on a CPU without AVX512-BF16): where they run,
// tests/test_bf16_ops.cpp checks conv3d against float64.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "minidl/ops/conv3d.h"
#include "minidl/ops/cpu/conv3d_kernels.h"
#include "tests/tensor_bits.h"
#include "tests/test_util.h"

using namespace minidl;
using testing::count_different_bits;

namespace {

struct Case {
  const char* name;
  Shape x, w;
  Conv3dParams p;
  bool bias;
};

const Case kCases[] = {
    {"3x3x3 pad 1, bias", {2, 4, 5, 6, 7}, {6, 4, 3, 3, 3}, Conv3dParams{.padding = {1, 1, 1}}, true},
    {"stride 2, pad (1, 0, 2)", {1, 3, 7, 6, 9}, {5, 3, 3, 2, 3}, Conv3dParams{.stride = {2, 2, 2}, .padding = {1, 0, 2}},
     false},
    {"groups 2, dilation 2", {2, 4, 6, 7, 7}, {4, 2, 2, 3, 3},
     Conv3dParams{.padding = {1, 2, 2}, .dilation = {2, 2, 2}, .groups = 2}, true},
    {"depth stride 3 > kernel depth 1 (depths no tap reaches)", {2, 3, 7, 4, 4}, {2, 3, 1, 3, 3},
     Conv3dParams{.stride = {3, 1, 1}, .padding = {0, 1, 1}}, false},
    // 32 channels on 16x16 planes: conv2d underneath takes Winograd and the threads.
    {"32 -> 32 at 4x16x16", {2, 32, 4, 16, 16}, {32, 32, 3, 3, 3}, Conv3dParams{.padding = {1, 1, 1}}, false},
};

Tensor input_values(const Shape& shape, bool special_values) {
  std::vector<double> v = randn(shape).to(kFloat64).to_vector<double>();
  if (special_values) {
    v[11] = std::numeric_limits<double>::infinity();
    v[v.size() - 3] = std::numeric_limits<double>::quiet_NaN();
  }
  return tensor(v, shape);
}

void check_op(const Case& c, DType dtype, bool special_values) {
  INFO(c.name << " in " << std::string(dtype_name(dtype)) << (special_values ? " with inf and NaN" : ""));
  manual_seed(31);
  const Tensor x = input_values(c.x, special_values).to(dtype).requires_grad_();
  const Tensor w = (randn(c.w) * 0.2).to(dtype).requires_grad_();
  const Tensor b = c.bias ? randn({c.w[0]}).to(dtype).requires_grad_() : Tensor();
  const Tensor xw = x.detach().to(kFloat32).requires_grad_(), ww = w.detach().to(kFloat32).requires_grad_();
  const Tensor bw = c.bias ? b.detach().to(kFloat32).requires_grad_() : Tensor();
  const Tensor y = conv3d(x, w, b, c.p), y_wide = conv3d(xw, ww, bw, c.p);
  REQUIRE(y.dtype() == dtype);
  CHECK(count_different_bits(y, y_wide.to(dtype)) == 0);
  const Tensor dy = randn(y.shape()).to(dtype);
  y.backward(dy);
  y_wide.backward(dy.to(kFloat32));
  CHECK(count_different_bits(x.grad(), xw.grad().to(dtype)) == 0);
  CHECK(count_different_bits(w.grad(), ww.grad().to(dtype)) == 0);
  if (c.bias) CHECK(count_different_bits(b.grad(), bw.grad().to(dtype)) == 0);
}

Conv3dGeometry geometry(const Case& c) {
  Conv3dGeometry g;
  g.hw.batch = c.x[0], g.hw.in_channels = c.x[1], g.in_d = c.x[2], g.hw.in_h = c.x[3], g.hw.in_w = c.x[4];
  g.hw.out_channels = c.w[0], g.kernel_d = c.w[2], g.hw.kernel_h = c.w[3], g.hw.kernel_w = c.w[4];
  g.stride_d = c.p.stride[0], g.hw.stride_h = c.p.stride[1], g.hw.stride_w = c.p.stride[2];
  g.pad_d = c.p.padding[0], g.hw.pad_h = c.p.padding[1], g.hw.pad_w = c.p.padding[2];
  g.dilation_d = c.p.dilation[0], g.hw.dilation_h = c.p.dilation[1], g.hw.dilation_w = c.p.dilation[2];
  g.hw.groups = c.p.groups;
  conv3d_set_output_size(g);
  return g;
}

// The raw kernels on T (BFloat16 or Half) against the float ones on the widened values, rounded.
template <class T>
void check_kernels(const Case& c) {
  INFO(c.name);
  manual_seed(32);
  const Conv3dGeometry g = geometry(c);
  const DType dtype = dtype_v<T>;
  const Tensor x = randn(c.x).to(dtype), w = (randn(c.w) * 0.2).to(dtype), b = randn({c.w[0]}).to(dtype);
  const Tensor y_shape_probe = conv3d(x.to(kFloat32), w.to(kFloat32), Tensor(), c.p);
  const Tensor dy = randn(y_shape_probe.shape()).to(dtype);
  const Tensor xf = x.to(kFloat32), wf = w.to(kFloat32), bf = b.to(kFloat32), dyf = dy.to(kFloat32);

  Tensor y = empty(y_shape_probe.shape(), dtype), yf = empty(y_shape_probe.shape(), kFloat32);
  conv3d_forward_kernel(g, x.data_ptr<T>(), w.data_ptr<T>(), b.data_ptr<T>(), y.data_ptr<T>());
  conv3d_forward_kernel(g, xf.data_ptr<float>(), wf.data_ptr<float>(), bf.data_ptr<float>(), yf.data_ptr<float>());
  CHECK(count_different_bits(y, yf.to(dtype)) == 0);

  Tensor dx = empty(c.x, dtype), dxf = empty(c.x, kFloat32);
  conv3d_backward_input_kernel(g, dy.data_ptr<T>(), w.data_ptr<T>(), dx.data_ptr<T>());
  conv3d_backward_input_kernel(g, dyf.data_ptr<float>(), wf.data_ptr<float>(), dxf.data_ptr<float>());
  CHECK(count_different_bits(dx, dxf.to(dtype)) == 0);

  Tensor dw = empty(c.w, dtype), dwf = empty(c.w, kFloat32), db = empty({c.w[0]}, dtype), dbf = empty({c.w[0]}, kFloat32);
  conv3d_backward_weight_kernel(g, dy.data_ptr<T>(), x.data_ptr<T>(), dw.data_ptr<T>(), db.data_ptr<T>());
  conv3d_backward_weight_kernel(g, dyf.data_ptr<float>(), xf.data_ptr<float>(), dwf.data_ptr<float>(),
                                dbf.data_ptr<float>());
  CHECK(count_different_bits(dw, dwf.to(dtype)) == 0);
  CHECK(count_different_bits(db, dbf.to(dtype)) == 0);
}

}  // namespace

TEST_CASE("conv3d in bfloat16 and float16: float32's bits rounded once, forward and every gradient") {
  const testing::NoBf16Dot off;
  for (DType dtype : {kBFloat16, kFloat16})
    for (const Case& c : kCases) check_op(c, dtype, false);
  for (DType dtype : {kBFloat16, kFloat16}) check_op(kCases[0], dtype, true);
}

TEST_CASE("conv3d's 16-bit kernels against its float32 kernels, rounded") {
  const testing::NoBf16Dot off;
  for (const Case& c : kCases) {
    check_kernels<BFloat16>(c);
    check_kernels<Half>(c);
  }
}
