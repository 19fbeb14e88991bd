// 3-D pooling, the 2-D pooling options (dilation, ceil_mode, divisor_override)
// and interpolate against PyTorch: tests/goldens/pooling3d.safetensors and
// interpolate.safetensors (scripts/make_pool3d_goldens.py) hold float64 inputs,
// outputs, an upstream gradient gy, PyTorch's gradients of sum(y * gy), and the
// max pools' return_indices. Every case runs in float64 (to ~1e-10) and in
// float32 on the converted inputs (to ~1e-4 of the tensor's scale).
#include <nlohmann/json.hpp>

#include "tests/golden_util.h"

using namespace minidl;
using json = nlohmann::json;

namespace {

using minidl::testing::check_close;
using minidl::testing::Golden;
using minidl::testing::kPrecisions;
using minidl::testing::load_golden;
using minidl::testing::Precision;
using minidl::testing::label;

// json list -> array of N, or `fallback` when the key is absent.
template <size_t N>
std::array<int64_t, N> sizes(const json& c, const char* key, int64_t fallback) {
  std::array<int64_t, N> a;
  a.fill(fallback);
  if (c.contains(key))
    for (size_t i = 0; i < N; ++i) a[i] = c.at(key).at(i).get<int64_t>();
  return a;
}

std::optional<int64_t> divisor(const json& c) {
  if (!c.contains("divisor_override")) return std::nullopt;
  return c.at("divisor_override").get<int64_t>();
}

bool flag(const json& c, const char* key, bool fallback) { return c.contains(key) ? c.at(key).get<bool>() : fallback; }

// (output, indices or undefined) of the pooling op a case names.
std::tuple<Tensor, Tensor> run_pool(const json& c, const Tensor& x) {
  const std::string op = c.at("op");
  const bool ceil = flag(c, "ceil_mode", false), cip = flag(c, "count_include_pad", true);
  if (op == "max_pool2d")
    return max_pool2d_with_indices(x, sizes<2>(c, "kernel_size", 0), sizes<2>(c, "stride", 0),
                                   sizes<2>(c, "padding", 0), sizes<2>(c, "dilation", 1), ceil);
  if (op == "avg_pool2d")
    return {avg_pool2d(x, sizes<2>(c, "kernel_size", 0), sizes<2>(c, "stride", 0), sizes<2>(c, "padding", 0), ceil,
                       cip, divisor(c)),
            Tensor()};
  if (op == "max_pool3d")
    return max_pool3d_with_indices(x, sizes<3>(c, "kernel_size", 0), sizes<3>(c, "stride", 0),
                                   sizes<3>(c, "padding", 0), sizes<3>(c, "dilation", 1), ceil);
  if (op == "avg_pool3d")
    return {avg_pool3d(x, sizes<3>(c, "kernel_size", 0), sizes<3>(c, "stride", 0), sizes<3>(c, "padding", 0), ceil,
                       cip, divisor(c)),
            Tensor()};
  if (op == "adaptive_avg_pool3d") return {adaptive_avg_pool3d(x, sizes<3>(c, "output_size", 0)), Tensor()};
  if (op == "adaptive_max_pool3d") return adaptive_max_pool3d_with_indices(x, sizes<3>(c, "output_size", 0));
  REQUIRE(op == "adaptive_max_pool2d");
  return adaptive_max_pool2d_with_indices(x, sizes<2>(c, "output_size", 0));
}

InterpolateOptions interpolate_options(const json& c) {
  InterpolateOptions o;
  o.mode = c.at("mode").get<std::string>();
  if (c.contains("size")) o.size = c.at("size").get<std::vector<int64_t>>();
  if (c.contains("scale_factor")) {
    const json& s = c.at("scale_factor");
    o.scale_factor = s.is_array() ? s.get<std::vector<double>>() : std::vector<double>{s.get<double>()};
  }
  if (c.contains("align_corners")) o.align_corners = c.at("align_corners").get<bool>();
  if (c.contains("recompute_scale_factor")) o.recompute_scale_factor = c.at("recompute_scale_factor").get<bool>();
  return o;
}

// y = f(x); y.backward(gy); compares y, x.grad and (when f gives them) the indices.
template <class F>
void run_case(const Golden& g, size_t i, F f) {
  for (const Precision& p : kPrecisions) {
    Tensor x = g.get(i, "x").to(p.dtype).clone().detach().requires_grad_(true);
    Tensor y, indices;
    try {
      std::tie(y, indices) = f(x);
      y.backward(g.get(i, "gy").to(p.dtype));
    } catch (const std::exception& e) {
      FAIL_CHECK(label(g, i, p, "threw: "), e.what());
      continue;
    }
    check_close(label(g, i, p, "y"), y, g.get(i, "y"), p);
    check_close(label(g, i, p, "gx"), x.grad(), g.get(i, "gx"), p);
    CHECK(indices.defined() == g.has(i, "indices"));
    if (indices.defined() && p.dtype == kFloat64) {  // float32 may pick another of two near-equal values
      CHECK(indices.dtype() == kInt64);
      CHECK(!indices.requires_grad());
      CHECK_MESSAGE(indices.to_vector<int64_t>() == g.get(i, "indices").to_vector<int64_t>(),
                    label(g, i, p, "indices"));
    }
  }
}

}  // namespace

TEST_CASE("goldens: 3-D pooling and the 2-D pooling options match PyTorch") {
  const Golden g = load_golden("pooling3d.safetensors");
  CHECK(g.cases.size() == 25);
  for (size_t i = 0; i < g.cases.size(); ++i) run_case(g, i, [&](const Tensor& x) { return run_pool(g.cases[i], x); });
}

TEST_CASE("goldens: interpolate matches PyTorch") {
  const Golden g = load_golden("interpolate.safetensors");
  CHECK(g.cases.size() == 28);
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const InterpolateOptions o = interpolate_options(g.cases[i]);
    run_case(g, i, [&](const Tensor& x) { return std::make_tuple(interpolate(x, o), Tensor()); });
  }
}
