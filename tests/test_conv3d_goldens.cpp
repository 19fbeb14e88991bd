// Forward and backward of conv3d, conv_transpose2d/3d, pad and the
// Conv2d/Conv3d modules (padding="same", padding modes) against PyTorch:
// tests/goldens/{conv3d,conv_transpose,pad,conv_modules}.safetensors, written
// by scripts/make_conv3d_goldens.py. Every case runs in float64 (to ~1e-10)
// and in float32 on the same inputs converted (to ~1e-4 of the tensor's scale).
#include <nlohmann/json.hpp>

#include "minidl/nn/nn.h"
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

template <size_t N>
std::array<int64_t, N> arr(const json& j) {
  std::array<int64_t, N> a{};
  for (size_t i = 0; i < N; ++i) a[i] = j.at(i).get<int64_t>();
  return a;
}

// y = f(leaves), y.backward(gy), then y and every leaf's grad against the golden.
// f returns y and the tensors whose grads stand for the leaves (a module's parameters).
template <class F>
void run_case(const Golden& g, size_t i, const std::vector<std::string>& names, F f) {
  for (const Precision& p : kPrecisions) {
    std::vector<Tensor> leaves;
    for (const std::string& n : names) leaves.push_back(g.has(i, n) ? leaf(g.get(i, n), p.dtype) : Tensor());
    Tensor y;
    std::vector<Tensor> grads_of = leaves;
    try {
      y = f(leaves, grads_of);
      y.backward(g.get(i, "gy").to(p.dtype));
    } catch (const std::exception& e) {
      FAIL_CHECK(label(g, i, p, "threw: "), e.what());
      continue;
    }
    check_close(label(g, i, p, "y"), y, g.get(i, "y"), p);
    for (size_t k = 0; k < names.size(); ++k)
      if (leaves[k].defined())
        check_close(label(g, i, p, "g" + names[k]), grads_of[k].grad(), g.get(i, "g" + names[k]), p);
  }
}

}  // namespace

TEST_CASE("goldens: conv3d matches PyTorch") {
  const Golden g = load_golden("conv3d.safetensors");
  CHECK(g.cases.size() == 5);
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const json& c = g.cases[i];
    const Conv3dParams params{.stride = arr<3>(c.at("stride")), .padding = arr<3>(c.at("padding")),
                              .dilation = arr<3>(c.at("dilation")), .groups = c.at("groups").get<int64_t>()};
    CHECK(g.has(i, "b") == c.at("has_bias").get<bool>());
    run_case(g, i, {"x", "w", "b"}, [&](const std::vector<Tensor>& t, auto&) { return conv3d(t[0], t[1], t[2], params); });
  }
}

TEST_CASE("goldens: conv_transpose2d and conv_transpose3d match PyTorch") {
  const Golden g = load_golden("conv_transpose.safetensors");
  CHECK(g.cases.size() == 7);
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const json& c = g.cases[i];
    const int64_t groups = c.at("groups").get<int64_t>();
    CHECK(g.has(i, "b") == c.at("has_bias").get<bool>());
    run_case(g, i, {"x", "w", "b"}, [&](const std::vector<Tensor>& t, auto&) {
      if (c.at("dims").get<int>() == 2)
        return conv_transpose2d(t[0], t[1], t[2],
                                {.stride = arr<2>(c.at("stride")), .padding = arr<2>(c.at("padding")),
                                 .output_padding = arr<2>(c.at("output_padding")), .groups = groups,
                                 .dilation = arr<2>(c.at("dilation"))});
      return conv_transpose3d(t[0], t[1], t[2],
                              {.stride = arr<3>(c.at("stride")), .padding = arr<3>(c.at("padding")),
                               .output_padding = arr<3>(c.at("output_padding")), .groups = groups,
                               .dilation = arr<3>(c.at("dilation"))});
    });
  }
}

TEST_CASE("goldens: pad matches PyTorch in every mode") {
  const Golden g = load_golden("pad.safetensors");
  CHECK(g.cases.size() == 11);
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const json& c = g.cases[i];
    const auto pads = c.at("pads").get<std::vector<int64_t>>();
    run_case(g, i, {"x"}, [&](const std::vector<Tensor>& t, auto&) {
      return pad(t[0], pads, c.at("mode").get<std::string>(), c.at("value").get<double>());
    });
  }
}

TEST_CASE("goldens: Conv2d / Conv3d modules with padding='same' and padding modes match PyTorch") {
  const Golden g = load_golden("conv_modules.safetensors");
  CHECK(g.cases.size() == 11);
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const json& c = g.cases[i];
    const int dims = c.at("dims").get<int>();
    const int64_t cin = c.at("in_channels").get<int64_t>(), cout = c.at("out_channels").get<int64_t>();
    const json& pj = c.at("padding");
    // The module, built with the case's options; its parameters take the golden's values.
    run_case(g, i, {"x", "w", "b"}, [&](const std::vector<Tensor>& t, std::vector<Tensor>& grads_of) {
      std::shared_ptr<nn::Module> holder;
      Tensor y;
      auto load = [&](Tensor& w, Tensor& b) {
        NoGradGuard no_grad;
        w.copy_(t[1]);
        if (b.defined()) b.copy_(t[2]);
        grads_of = {t[0], w, b};
      };
      if (dims == 2) {
        nn::Conv2dOptions o(cin, cout, arr<2>(c.at("kernel_size")));
        o.stride(arr<2>(c.at("stride"))).dilation(arr<2>(c.at("dilation"))).groups(c.at("groups").get<int64_t>());
        o.bias(c.at("bias").get<bool>()).padding_mode(c.at("padding_mode").get<std::string>());
        if (pj.is_string()) o.padding(pj.get<std::string>()); else o.padding(nn::Int2(arr<2>(pj)));
        nn::Conv2d m(o);
        m->to(t[0].dtype());
        load(m->weight, m->bias);
        y = m(t[0]);
        holder = m.ptr();
      } else {
        nn::Conv3dOptions o(cin, cout, arr<3>(c.at("kernel_size")));
        o.stride(arr<3>(c.at("stride"))).dilation(arr<3>(c.at("dilation"))).groups(c.at("groups").get<int64_t>());
        o.bias(c.at("bias").get<bool>()).padding_mode(c.at("padding_mode").get<std::string>());
        if (pj.is_string()) o.padding(pj.get<std::string>()); else o.padding(nn::Int3(arr<3>(pj)));
        nn::Conv3d m(o);
        m->to(t[0].dtype());
        load(m->weight, m->bias);
        y = m(t[0]);
        holder = m.ptr();
      }
      return y;
    });
  }
}
