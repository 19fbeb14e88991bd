// Forward and backward of conv2d, linear, pooling, softmax and cross_entropy
// against PyTorch: tests/goldens/*.safetensors hold float64 inputs, outputs, an
// upstream gradient gy and PyTorch's gradients of sum(y * gy), written by
// scripts/make_goldens.py. Every case runs in float64 (to ~1e-10) and again
// in float32 on the same inputs converted (to ~1e-4 of the tensor's scale).
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
using minidl::testing::leaf;
using minidl::testing::label;

std::array<int64_t, 2> pair_of(const json& j) { return {j.at(0).get<int64_t>(), j.at(1).get<int64_t>()}; }

// Runs y = f(leaves), y.backward(gy) and compares y and every leaf's grad with the golden.
// `names` are the floating inputs ("x", "w", "b"), in the order f takes them.
template <class F>
void run_case(const Golden& g, size_t i, const std::vector<std::string>& names, F f) {
  for (const Precision& p : kPrecisions) {
    std::vector<Tensor> leaves;
    for (const std::string& n : names) leaves.push_back(g.has(i, n) ? leaf(g.get(i, n), p.dtype) : Tensor());
    Tensor y;
    try {
      y = f(leaves);
      y.backward(g.get(i, "gy").to(p.dtype));
    } catch (const std::exception& e) {
      FAIL_CHECK(label(g, i, p, "threw: "), e.what());
      continue;
    }
    check_close(label(g, i, p, "y"), y, g.get(i, "y"), p);
    for (size_t k = 0; k < names.size(); ++k)
      if (leaves[k].defined()) check_close(label(g, i, p, "g" + names[k]), leaves[k].grad(), g.get(i, "g" + names[k]), p);
  }
}

}  // namespace

TEST_CASE("goldens: conv2d matches PyTorch") {
  const Golden g = load_golden("conv2d.safetensors");
  CHECK(g.cases.size() == 9);
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const json& c = g.cases[i];
    Conv2dParams params;
    params.stride = pair_of(c.at("stride"));
    params.padding = pair_of(c.at("padding"));
    params.dilation = pair_of(c.at("dilation"));
    params.groups = c.at("groups").get<int64_t>();
    CHECK(g.has(i, "b") == c.at("has_bias").get<bool>());
    run_case(g, i, {"x", "w", "b"}, [&](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2], params); });
  }
}

TEST_CASE("goldens: linear matches PyTorch") {
  const Golden g = load_golden("linear.safetensors");
  CHECK(g.cases.size() == 5);
  for (size_t i = 0; i < g.cases.size(); ++i) {
    CHECK(g.has(i, "b") == g.cases[i].at("has_bias").get<bool>());
    run_case(g, i, {"x", "w", "b"}, [&](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2]); });
  }
}

TEST_CASE("goldens: pooling matches PyTorch") {
  const Golden g = load_golden("pooling.safetensors");
  CHECK(g.cases.size() == 14);
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const json& c = g.cases[i];
    const std::string op = c.at("op");
    run_case(g, i, {"x"}, [&](const std::vector<Tensor>& t) {
      if (op == "max_pool2d")
        return max_pool2d(t[0], pair_of(c.at("kernel_size")), pair_of(c.at("stride")), pair_of(c.at("padding")));
      if (op == "avg_pool2d")
        return avg_pool2d(t[0], pair_of(c.at("kernel_size")), pair_of(c.at("stride")), pair_of(c.at("padding")), false,
                          c.at("count_include_pad").get<bool>());
      if (op == "adaptive_avg_pool2d") return adaptive_avg_pool2d(t[0], pair_of(c.at("output_size")));
      REQUIRE(op == "adaptive_max_pool2d");
      return adaptive_max_pool2d(t[0], pair_of(c.at("output_size")));
    });
  }
}

TEST_CASE("goldens: softmax and log_softmax match PyTorch") {
  const Golden g = load_golden("softmax.safetensors");
  CHECK(g.cases.size() == 7);
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const std::string op = g.cases[i].at("op");
    const int64_t dim = g.cases[i].at("dim");
    run_case(g, i, {"x"}, [&](const std::vector<Tensor>& t) {
      return op == "softmax" ? softmax(t[0], dim) : log_softmax(t[0], dim);
    });
  }
}

TEST_CASE("goldens: cross_entropy matches PyTorch") {
  const Golden g = load_golden("cross_entropy.safetensors");
  CHECK(g.cases.size() == 11);
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const json& c = g.cases[i];
    const std::string r = c.at("reduction");
    const Reduction reduction = r == "mean" ? Reduction::Mean : r == "sum" ? Reduction::Sum : Reduction::None;
    const int64_t ignore_index = c.at("ignore_index");
    const double smoothing = c.at("label_smoothing");
    const Tensor& target = g.get(i, "target");
    REQUIRE(target.dtype() == kInt64);
    run_case(g, i, {"x"}, [&](const std::vector<Tensor>& t) {
      return cross_entropy(t[0], target, reduction, ignore_index, smoothing);
    });
  }
}
