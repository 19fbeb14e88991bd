// The CUDA pooling kernels' per-thread functors (ops/cuda/pool_kernels.h),
// run here on the CPU over every index as the GPU's threads would, against
// minidl's CPU pooling: max forward (values and argmax), its gather and
// scatter backward, avg forward and backward, window and adaptive pools, on
// NCHW and channels-last memory (the addressing with elements C apart) and a
// 3-D pool. float32 and float64 run the same operations in the same order
// as the CPU kernels, so the results must agree bit for bit. This checks the
// kernels' indexing without a GPU; tests/test_cuda_channels_last.cpp runs
// the real kernels on one.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "minidl/minidl.h"
#include "minidl/ops/cuda/pool2d_kernels.h"
#include "minidl/ops/cuda/pool_kernels.h"

using namespace minidl;
using namespace minidl::cuda_kernels::pool;
namespace pool2d = minidl::cuda_kernels::pool2d;

namespace {

// A 2-D (or 3-D: kernel[0] > 1 or depth > 1) pool: the geometry the op would
// build, and the op itself for the reference.
struct Case {
  std::string name;
  Shape input;  // (N, C, H, W) or (N, C, D, H, W)
  Size3 kernel{1, 1, 1}, stride{1, 1, 1}, padding{0, 0, 0}, dilation{1, 1, 1};
  bool adaptive = false, ceil_mode = false, count_include_pad = true, is_max = true;
  int64_t divisor_override = 0;
  Size3 adaptive_out{1, 1, 1};

  bool is3d() const { return input.size() == 5; }

  // (output, indices) of minidl's CPU op.
  std::tuple<Tensor, Tensor> reference(const Tensor& x) const {
    const Size2 k{kernel[1], kernel[2]}, s{stride[1], stride[2]}, p{padding[1], padding[2]};
    const Size2 d{dilation[1], dilation[2]}, out2{adaptive_out[1], adaptive_out[2]};
    if (is3d()) return max_pool3d_with_indices(x, kernel, stride, padding, dilation, ceil_mode);
    if (adaptive) return is_max ? adaptive_max_pool2d_with_indices(x, out2)
                                : std::make_tuple(adaptive_avg_pool2d(x, out2), Tensor());
    if (is_max) return max_pool2d_with_indices(x, k, s, p, d, ceil_mode);
    const std::optional<int64_t> div = divisor_override ? std::optional<int64_t>(divisor_override) : std::nullopt;
    return {avg_pool2d(x, k, s, p, ceil_mode, count_include_pad, div), Tensor()};
  }

  PoolGeometry geometry(const Tensor& y, bool channels_last) const {
    PoolGeometry g;
    const int nd = is3d() ? 3 : 2;
    for (int i = 3 - nd; i < 3; ++i) {
      g.in[i] = input[input.size() - 3 + i];
      g.out[i] = y.size(y.dim() - 3 + i);
    }
    g.planes = input[0] * input[1];
    g.kernel = kernel, g.stride = stride, g.padding = padding, g.dilation = dilation;
    g.adaptive = adaptive;
    g.count_include_pad = count_include_pad;
    g.divisor_override = divisor_override;
    g.channels_last = channels_last ? input[1] : 0;
    return g;
  }
};

std::vector<Case> cases() {
  std::vector<Case> v;
  auto add = [&](Case c) { v.push_back(std::move(c)); };
  add({.name = "max 2x2", .input = {2, 5, 8, 6}, .kernel = {1, 2, 2}, .stride = {1, 2, 2}});
  add({.name = "max 3x3 s2 p1", .input = {2, 5, 9, 7}, .kernel = {1, 3, 3}, .stride = {1, 2, 2}, .padding = {0, 1, 1}});
  add({.name = "max 3x2 dilation 2 ceil", .input = {2, 3, 9, 8}, .kernel = {1, 3, 2}, .stride = {1, 1, 2},
       .padding = {0, 1, 1}, .dilation = {1, 2, 2}, .ceil_mode = true});
  add({.name = "max 3x3 s1 p1 (each input in up to 9 windows)", .input = {2, 3, 7, 9}, .kernel = {1, 3, 3},
       .padding = {0, 1, 1}});
  add({.name = "max 2x2 s3 (inputs in no window)", .input = {1, 4, 8, 10}, .kernel = {1, 2, 2}, .stride = {1, 3, 3}});
  add({.name = "max 2x2 dilation 2 on 1x1 planes (windows with no tap: -inf, an index past the plane)",
       .input = {2, 3, 1, 1}, .kernel = {1, 2, 2}, .stride = {1, 3, 3}, .padding = {0, 1, 1}, .dilation = {1, 2, 2}});
  // Windows with no tap whose index names a real element (of the next row):
  // gathered (stride 1 along W) and scattered (stride 3: disjoint).
  add({.name = "max 2x2 dilation (1, 2) on 1-wide planes (no tap; the index names a row of the window's range)",
       .input = {2, 3, 3, 1}, .kernel = {1, 2, 2}, .padding = {0, 1, 1}, .dilation = {1, 1, 2}});
  add({.name = "max 1x2 dilation 2 on 1-wide planes, stride 3 (disjoint: the scatter)", .input = {2, 3, 3, 1},
       .kernel = {1, 1, 2}, .stride = {1, 1, 3}, .padding = {0, 0, 1}, .dilation = {1, 1, 2}});
  add({.name = "max 3-D 1x1x2 dilation 2 on 1-wide planes (no tap)", .input = {1, 2, 2, 3, 1}, .kernel = {1, 1, 2},
       .padding = {0, 0, 1}, .dilation = {1, 1, 2}});
  add({.name = "adaptive max 3x2", .input = {2, 4, 7, 5}, .adaptive = true, .adaptive_out = {1, 3, 2}});
  add({.name = "adaptive max 2x2 (disjoint)", .input = {2, 4, 6, 4}, .adaptive = true, .adaptive_out = {1, 2, 2}});
  add({.name = "avg 3x3 s1 p1", .input = {2, 5, 7, 6}, .kernel = {1, 3, 3}, .padding = {0, 1, 1}, .is_max = false});
  add({.name = "avg 3x3 s2 p1 exclude pad ceil", .input = {2, 3, 8, 7}, .kernel = {1, 3, 3}, .stride = {1, 2, 2},
       .padding = {0, 1, 1}, .ceil_mode = true, .count_include_pad = false, .is_max = false});
  add({.name = "avg 2x2 divisor 3", .input = {2, 4, 6, 6}, .kernel = {1, 2, 2}, .stride = {1, 2, 2}, .is_max = false,
       .divisor_override = 3});
  add({.name = "adaptive avg 3x2", .input = {2, 4, 7, 5}, .adaptive = true, .is_max = false, .adaptive_out = {1, 3, 2}});
  add({.name = "global avg", .input = {3, 6, 4, 4}, .adaptive = true, .is_max = false, .adaptive_out = {1, 1, 1}});
  add({.name = "max 3-D 2x2x2", .input = {2, 3, 4, 6, 6}, .kernel = {2, 2, 2}, .stride = {2, 2, 2}});
  return v;
}

// A tensor's elements in memory order (the buffer the kernels see).
template <class T>
std::vector<T> memory(const Tensor& t, MemoryFormat fmt) {
  const Tensor c = t.contiguous(fmt);
  std::vector<T> v(static_cast<size_t>(c.numel()));
  std::memcpy(v.data(), c.raw_data(), v.size() * sizeof(T));
  return v;
}

// Runs f(index) for every index in [0, n), as a launch of n threads would.
template <class F>
void launch(int64_t n, const F& f) {
  for (int64_t i = 0; i < n; ++i) f(Offsets<1>{{i}});
}

int fast_cases = 0;  // cases the 32-bit 2-D kernels (ops/cuda/pool2d_kernels.h) took

// Small integers (ties in most windows) with NaN and -inf here and there: the
// max pools' scan order, NaN propagation and the index they save.
Tensor ties_nan_inf(const Shape& shape) {
  std::vector<double> v = (randn(shape) * 2.0).to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = i % 7 == 3 ? std::nan("") : i % 11 == 5 ? -INFINITY : std::round(v[i]);
  return tensor(v, shape);
}

// Equal bit for bit (NaN == NaN where the bits agree).
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <class T>
void check_case(const Case& c, bool channels_last, bool special = false) {
  const MemoryFormat fmt = channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  INFO(c.name, channels_last ? ", channels-last" : ", planar", ", ", std::string(dtype_name(dtype_v<T>)),
       special ? ", ties, NaN and -inf" : "");
  manual_seed(5);
  const Tensor x = (special ? ties_nan_inf(c.input) : randn(c.input) * 2.0).to(dtype_v<T>).requires_grad_(true);
  auto [y, indices] = c.reference(x);
  const Tensor dy = randn(y.shape()).to(dtype_v<T>);
  y.backward(dy);
  const PoolGeometry geometry = c.geometry(y, channels_last);
  const Pool3 g = device_geometry(geometry);

  const std::vector<T> xm = memory<T>(x.detach(), fmt), dym = memory<T>(dy, fmt);
  const std::vector<T> y_ref = memory<T>(y.detach(), fmt), gx_ref = memory<T>(x.grad(), fmt);
  std::vector<T> yk(y_ref.size()), gx(gx_ref.size());
  if (c.is_max) {
    std::vector<int64_t> idx(y_ref.size());
    launch(static_cast<int64_t>(yk.size()), MaxPoolForward<T>{xm.data(), yk.data(), idx.data(), g});
    CHECK(same_bits(yk, y_ref));
    CHECK(idx == memory<int64_t>(indices, fmt));
    launch(static_cast<int64_t>(gx.size()), MaxPoolBackward<T>{dym.data(), idx.data(), gx.data(), g});
    CHECK(gx == gx_ref);
    if (const auto p = pool2d::fast_geometry(geometry)) {  // the 32-bit 2-D kernels the GPU takes here
      std::vector<T> y2(y_ref.size()), gx2(gx_ref.size());
      std::vector<int64_t> idx2(y_ref.size());
      launch(static_cast<int64_t>(y2.size()), pool2d::MaxPool2dForward<T>{xm.data(), y2.data(), idx2.data(), *p});
      CHECK(same_bits(y2, y_ref));
      CHECK(idx2 == idx);
      launch(static_cast<int64_t>(gx2.size()), pool2d::MaxPool2dBackward<T>{dym.data(), idx2.data(), gx2.data(), *p});
      CHECK(gx2 == gx_ref);
      ++fast_cases;
    }
    if (windows_disjoint(g)) {  // the scatter the kernel takes then
      std::fill(gx.begin(), gx.end(), T(0));
      launch(static_cast<int64_t>(yk.size()), MaxPoolScatter<T>{dym.data(), idx.data(), gx.data(), g});
      CHECK(gx == gx_ref);
    }
  } else {
    launch(static_cast<int64_t>(yk.size()), AvgPoolForward<T>{xm.data(), yk.data(), g});
    if (c.name == "global avg" && !channels_last) {
      // The planar CPU kernel sums a plane in vector lanes (another order).
      for (size_t i = 0; i < yk.size(); ++i) CHECK(yk[i] == doctest::Approx(y_ref[i]).epsilon(1e-6));
    } else {
      CHECK(yk == y_ref);
    }
    launch(static_cast<int64_t>(gx.size()), AvgPoolBackward<T>{dym.data(), gx.data(), g});
    CHECK(gx == gx_ref);
  }
}

}  // namespace

TEST_CASE("CUDA pooling functors over every index equal the CPU pooling, planar and channels-last") {
  for (const Case& c : cases())
    for (bool channels_last : {false, true}) {
      if (channels_last && c.is3d()) continue;  // channels-last is a 4-D layout
      check_case<float>(c, channels_last);
      check_case<double>(c, channels_last);
      if (c.is_max) check_case<float>(c, channels_last, /*special=*/true);
    }
  CHECK(fast_cases >= 24);  // the 2-D window max pools, both layouts, both dtypes, and the special inputs
}

TEST_CASE("the kernels' geometry: 32-bit dividers when indices fit, the channel step") {
  PoolGeometry geometry;
  geometry.planes = 8 * 64;
  geometry.in = {1, 32, 32};
  geometry.out = {1, 16, 16};
  geometry.kernel = {1, 2, 2};
  geometry.stride = {1, 2, 2};
  geometry.channels_last = 64;
  const Pool3 g = device_geometry(geometry);
  CHECK(g.step == 64);
  CHECK(g.fast);
  CHECK(windows_disjoint(g));
  geometry.channels_last = 0;
  CHECK(device_geometry(geometry).step == 1);
  geometry.planes = int64_t{1} << 22;  // 2^22 planes of 1024 values: past 31 bits
  CHECK_FALSE(device_geometry(geometry).fast);
}

TEST_CASE("the kernels' geometry knows when a max-pool window has no tap inside the input") {
  PoolGeometry geometry;
  geometry.planes = 6;
  geometry.in = {1, 3, 1};
  geometry.out = {1, 3, 1};
  geometry.kernel = {1, 1, 2};
  geometry.padding = {0, 0, 1};
  geometry.dilation = {1, 1, 2};  // taps -1 and 1 of a 1-wide plane
  CHECK(device_geometry(geometry).some_window_empty);
  geometry.dilation = {1, 1, 1};  // taps -1 and 0
  CHECK_FALSE(device_geometry(geometry).some_window_empty);
  geometry.in = {1, 3, 5};  // stride 2, dilation 2: taps -1, 1 | 1, 3 | 3, 5
  geometry.out = {1, 3, 3};
  geometry.stride = {1, 1, 2};
  geometry.dilation = {1, 1, 2};
  CHECK_FALSE(device_geometry(geometry).some_window_empty);
  geometry.out = {1, 3, 4};  // a last window starting at 5, past the input: no tap
  CHECK(device_geometry(geometry).some_window_empty);
}

TEST_CASE("the 32-bit 2-D max-pool kernels refuse strides and dilations past 31 bits") {
  PoolGeometry g;
  g.planes = 1;
  g.in = {1, 4, 4};
  g.out = {1, 1, 1};
  g.kernel = {1, 2, 2};
  g.stride = {1, 2, 2};
  CHECK(pool2d::fast_geometry(g).has_value());
  g.stride = {1, int64_t{1} << 32, 2};  // was truncated to a 0 divisor
  CHECK_FALSE(pool2d::fast_geometry(g).has_value());
  g.stride = {1, 1, 1};
  g.kernel = {1, 1, 1};  // a kernel of 1 never moves by its dilation, which still is the loop's step
  g.out = {1, 4, 4};
  g.dilation = {1, int64_t{1} << 32, 1};  // was a 0 step: an endless loop
  CHECK_FALSE(pool2d::fast_geometry(g).has_value());
  g.dilation = {1, (int64_t{1} << 31) - 2, 1};  // was h += dilation past INT32_MAX
  CHECK_FALSE(pool2d::fast_geometry(g).has_value());
}
