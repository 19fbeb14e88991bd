// Autocast (core/autocast.h): each op's output dtype under CPU bfloat16 and
// float16 autocast against PyTorch's (tests/goldens/autocast_dtypes.json,
// written by scripts/make_autocast_goldens.py), the CUDA policy table against
// PyTorch's documented lists, the cast cache, nesting, enabled=false, and the
// errors. tests/test_autocast_model.cpp covers values and gradients.
#include <nlohmann/json.hpp>

#include <fstream>
#include <functional>
#include <map>
#include <string>

#include "minidl/core/autograd/node.h"
#include "minidl/core/cuda.h"
#include "tests/test_util.h"

using namespace minidl;

namespace {

// One op as the fixture script builds it: its inputs ('x': follows the
// variant, 'p': float32 parameter, 'l': int64 labels) and the call.
struct OpCase {
  std::vector<std::pair<Shape, char>> inputs;
  std::function<Tensor(const std::vector<Tensor>&)> run;
};

Tensor pos(const Tensor& t) { return add(abs(t), 0.5); }

const std::map<std::string, OpCase>& op_cases() {
  using V = const std::vector<Tensor>&;
  static const std::map<std::string, OpCase> cases = {
      {"conv2d", {{{{2, 3, 6, 6}, 'x'}, {{4, 3, 3, 3}, 'x'}, {{4}, 'x'}}, [](V a) { return conv2d(a[0], a[1], a[2]); }}},
      {"conv3d",
       {{{{1, 2, 3, 4, 4}, 'x'}, {{3, 2, 2, 2, 2}, 'x'}, {{3}, 'x'}}, [](V a) { return conv3d(a[0], a[1], a[2]); }}},
      {"conv_transpose2d",
       {{{{1, 3, 4, 4}, 'x'}, {{3, 2, 3, 3}, 'x'}, {{2}, 'x'}}, [](V a) { return conv_transpose2d(a[0], a[1], a[2]); }}},
      {"conv_transpose3d",
       {{{{1, 2, 3, 3, 3}, 'x'}, {{2, 2, 2, 2, 2}, 'x'}, {{2}, 'x'}},
        [](V a) { return conv_transpose3d(a[0], a[1], a[2]); }}},
      {"matmul", {{{{3, 4}, 'x'}, {{4, 5}, 'x'}}, [](V a) { return matmul(a[0], a[1]); }}},
      {"bmm", {{{{2, 3, 4}, 'x'}, {{2, 4, 5}, 'x'}}, [](V a) { return bmm(a[0], a[1]); }}},
      {"linear", {{{{3, 4}, 'x'}, {{5, 4}, 'x'}, {{5}, 'x'}}, [](V a) { return linear(a[0], a[1], a[2]); }}},
      {"softmax", {{{{3, 5}, 'x'}}, [](V a) { return softmax(a[0], 1); }}},
      {"log_softmax", {{{{3, 5}, 'x'}}, [](V a) { return log_softmax(a[0], 1); }}},
      {"layer_norm",
       {{{{2, 3, 4}, 'x'}, {{4}, 'x'}, {{4}, 'x'}}, [](V a) { return layer_norm(a[0], {4}, a[1], a[2]); }}},
      {"group_norm", {{{{2, 4, 3}, 'x'}, {{4}, 'x'}, {{4}, 'x'}}, [](V a) { return group_norm(a[0], 2, a[1], a[2]); }}},
      {"sum", {{{{3, 4}, 'x'}}, [](V a) { return sum(a[0]); }}},
      {"exp", {{{{3, 4}, 'x'}}, [](V a) { return exp(a[0]); }}},
      {"log", {{{{3, 4}, 'x'}}, [](V a) { return log(pos(a[0])); }}},
      {"pow", {{{{3, 4}, 'x'}}, [](V a) { return pow(a[0], 2.0); }}},
      {"max_pool3d", {{{{1, 2, 4, 4, 4}, 'x'}}, [](V a) { return max_pool3d(a[0], {2, 2, 2}); }}},
      {"avg_pool3d", {{{{1, 2, 4, 4, 4}, 'x'}}, [](V a) { return avg_pool3d(a[0], {2, 2, 2}); }}},
      {"adaptive_max_pool3d", {{{{1, 2, 4, 4, 4}, 'x'}}, [](V a) { return adaptive_max_pool3d(a[0], {1, 1, 1}); }}},
      {"adaptive_avg_pool3d", {{{{1, 2, 4, 4, 4}, 'x'}}, [](V a) { return adaptive_avg_pool3d(a[0], {1, 1, 1}); }}},
      {"adaptive_max_pool3d_with_indices",
       {{{{1, 2, 4, 4, 4}, 'x'}}, [](V a) { return std::get<0>(adaptive_max_pool3d_with_indices(a[0], {1, 1, 1})); }}},
      {"reflection_pad1d", {{{{2, 3, 5}, 'x'}}, [](V a) { return pad(a[0], {1, 2}, "reflect"); }}},
      {"reflection_pad2d", {{{{1, 2, 4, 4}, 'x'}}, [](V a) { return pad(a[0], {1, 1, 2, 0}, "reflect"); }}},
      {"reflection_pad3d", {{{{1, 2, 3, 4, 4}, 'x'}}, [](V a) { return pad(a[0], {1, 1, 1, 1, 1, 1}, "reflect"); }}},
      {"replication_pad1d", {{{{2, 3, 5}, 'x'}}, [](V a) { return pad(a[0], {1, 2}, "replicate"); }}},
      {"replication_pad2d", {{{{1, 2, 4, 4}, 'x'}}, [](V a) { return pad(a[0], {1, 1, 2, 0}, "replicate"); }}},
      {"replication_pad3d",
       {{{{1, 2, 3, 4, 4}, 'x'}}, [](V a) { return pad(a[0], {1, 1, 1, 1, 1, 1}, "replicate"); }}},
      {"circular_pad2d", {{{{1, 2, 4, 4}, 'x'}}, [](V a) { return pad(a[0], {1, 1, 1, 1}, "circular"); }}},
      {"constant_pad2d", {{{{1, 2, 4, 4}, 'x'}}, [](V a) { return pad(a[0], {1, 1, 1, 1}, "constant"); }}},
      {"cross_entropy", {{{{3, 5}, 'x'}, {{3}, 'l'}}, [](V a) { return cross_entropy(a[0], a[1]); }}},
      {"nll_loss", {{{{3, 5}, 'x'}, {{3}, 'l'}}, [](V a) { return nll_loss(a[0], a[1]); }}},
      {"mse_loss", {{{{3, 4}, 'x'}, {{3, 4}, 'x'}}, [](V a) { return mse_loss(a[0], a[1]); }}},
      {"binary_cross_entropy",
       {{{{3, 4}, 'x'}, {{3, 4}, 'x'}}, [](V a) { return binary_cross_entropy(sigmoid(a[0]), sigmoid(a[1])); }}},
      {"binary_cross_entropy_with_logits",
       {{{{3, 4}, 'x'}, {{3, 4}, 'x'}}, [](V a) { return binary_cross_entropy_with_logits(a[0], sigmoid(a[1])); }}},
      {"add", {{{{3, 4}, 'x'}, {{3, 4}, 'x'}}, [](V a) { return add(a[0], a[1]); }}},
      {"sub", {{{{3, 4}, 'x'}, {{3, 4}, 'x'}}, [](V a) { return sub(a[0], a[1]); }}},
      {"mul", {{{{3, 4}, 'x'}, {{3, 4}, 'x'}}, [](V a) { return mul(a[0], a[1]); }}},
      {"div", {{{{3, 4}, 'x'}, {{3, 4}, 'x'}}, [](V a) { return div(a[0], pos(a[1])); }}},
      {"cat", {{{{3, 4}, 'x'}, {{3, 4}, 'x'}}, [](V a) { return cat({a[0], a[1]}); }}},
      {"stack", {{{{3, 4}, 'x'}, {{3, 4}, 'x'}}, [](V a) { return stack({a[0], a[1]}); }}},
      {"relu", {{{{3, 4}, 'x'}}, [](V a) { return relu(a[0]); }}},
      {"mean", {{{{3, 4}, 'x'}}, [](V a) { return mean(a[0]); }}},
      {"max_pool2d", {{{{1, 2, 4, 4}, 'x'}}, [](V a) { return max_pool2d(a[0], {2, 2}); }}},
      {"avg_pool2d", {{{{1, 2, 4, 4}, 'x'}}, [](V a) { return avg_pool2d(a[0], {2, 2}); }}},
      {"adaptive_avg_pool2d", {{{{1, 2, 4, 4}, 'x'}}, [](V a) { return adaptive_avg_pool2d(a[0], {1, 1}); }}},
      {"batch_norm",
       {{{{2, 3, 4, 4}, 'x'}, {{3}, 'p'}, {{3}, 'p'}, {{3}, 'p'}, {{3}, 'p'}},
        [](V a) { return batch_norm(a[0], a[1], add(abs(a[2]), 1.0), a[3], a[4], /*training=*/true); }}},
      {"dropout", {{{{3, 4}, 'x'}}, [](V a) { return dropout(a[0], 0.5, true); }}},
      {"flatten", {{{{2, 3, 4}, 'x'}}, [](V a) { return flatten(a[0], 1); }}},
  };
  return cases;
}

std::vector<Tensor> make_inputs(const OpCase& c, const std::string& variant, DType low) {
  manual_seed(0);
  std::vector<Tensor> out;
  bool first = true;
  for (const auto& [shape, kind] : c.inputs) {
    if (kind == 'l') {
      out.push_back(randint(0, 5, shape));
      continue;
    }
    Tensor t = randn(shape);
    if (kind == 'x') {
      if (variant == "low" || (variant == "mixed" && first)) t = t.to(low);
      first = false;
    }
    out.push_back(t);
  }
  return out;
}

nlohmann::json load_fixture() {
  std::ifstream in(std::string(MINIDL_GOLDENS_DIR) + "/autocast_dtypes.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

DType dtype_from_name(const std::string& s) { return s == "float16" ? kFloat16 : kBFloat16; }

}  // namespace

TEST_CASE("autocast: every op's output dtype under CPU bfloat16 and float16 autocast is PyTorch's") {
  const nlohmann::json fixture = load_fixture();
  int checked = 0, skipped = 0;
  for (const auto& c : fixture["cases"]) {
    const std::string op = c["op"], variant = c["variant"], want = c["out"];
    const DType low = dtype_from_name(c["dtype"]);
    INFO(op, " ", variant, " under CPU ", dtype_name(low), " autocast");
    const auto it = op_cases().find(op);
    REQUIRE_MESSAGE(it != op_cases().end(), "no minidl case for ", op);
    if (want.rfind("error", 0) == 0) {  // PyTorch raises here; nothing to compare with
      MESSAGE("skipped (PyTorch: ", want, ")");
      ++skipped;
      continue;
    }
    const std::vector<Tensor> inputs = make_inputs(it->second, variant, low);
    amp::autocast guard(DeviceType::CPU, low);
    const Tensor y = it->second.run(inputs);
    CHECK(std::string(dtype_name(y.dtype())) == want);
    ++checked;
  }
  CHECK(checked >= 150);
  CHECK(skipped == 0);
}

TEST_CASE("autocast: the CUDA policy table is PyTorch's documented one") {
  const nlohmann::json fixture = load_fixture();
  std::map<std::string, amp::AmpOp> by_name;
  for (int i = 0; i < amp::kNumAmpOps; ++i) by_name[amp::amp_op_name(static_cast<amp::AmpOp>(i))] = static_cast<amp::AmpOp>(i);
  int listed = 0;
  for (const auto& c : fixture["cuda"]) {
    const std::string op = c["op"], want = c["cuda_policy"];
    INFO(op);
    const auto it = by_name.find(op);
    if (it == by_name.end()) {  // an op minidl does not hook falls through, as PyTorch's unlisted ops
      CHECK(want == "fallthrough");
      continue;
    }
    CHECK(std::string(amp::cast_policy_name(amp::cast_policy(DeviceType::CUDA, it->second))) == want);
    ++listed;
  }
  CHECK(listed == amp::kNumAmpOps);
  // The test device runs the CPU kernels, so it uses the CPU lists.
  for (int i = 0; i < amp::kNumAmpOps; ++i)
    CHECK(amp::cast_policy(DeviceType::Test, static_cast<amp::AmpOp>(i)) ==
          amp::cast_policy(DeviceType::CPU, static_cast<amp::AmpOp>(i)));
}

TEST_CASE("autocast: a parameter is cast once per outermost region, through the cache") {
  manual_seed(1);
  Tensor w = randn({5, 4}).requires_grad_();
  Tensor b = randn({5}).requires_grad_();
  const Tensor x1 = randn({3, 4}), x2 = randn({2, 4});
  std::shared_ptr<autograd::Node> first_cast;
  Tensor loss;
  {
    amp::autocast guard(DeviceType::CPU, kBFloat16);
    const Tensor y1 = linear(x1, w, b), y2 = linear(x2, w, b);
    CHECK(y1.dtype() == kBFloat16);
    CHECK(amp::cache_size() == 2);  // w and b, once each
    // Both linears read the same cast of w: one ToCopy node feeds both.
    const auto& e1 = y1.grad_fn()->next_edges();
    const auto& e2 = y2.grad_fn()->next_edges();
    REQUIRE(e1.size() >= 2);
    CHECK(e1[1].function == e2[1].function);
    CHECK(e1[2].function == e2[2].function);
    CHECK(e1[0].function == nullptr);  // x1 needs no grad: cast without history
    first_cast = e1[1].function;
    CHECK(std::string(first_cast->name()).find("ToCopy") != std::string::npos);
    // Not cached: tensors that need no grad, non-leaves, views.
    (void)linear(x1, w.detach(), Tensor());
    (void)linear(x1, mul(w, 1.0), Tensor());
    (void)linear(x1, narrow(w.detach(), 0, 0, 2).requires_grad_(), Tensor());  // a leaf view
    CHECK(amp::cache_size() == 2);
    loss = add(sum(y1.to(kFloat32)), sum(y2.to(kFloat32)));
  }
  CHECK(amp::cache_size() == 0);  // cleared when the region exits
  loss.backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == kFloat32);  // float32 parameter, float32 gradient
  CHECK(b.grad().dtype() == kFloat32);
  // Both uses add up: d/dw sum(x W^T) = column sums of x1 and x2, per output row.
  const Tensor want = sum(cat({x1, x2}), {0}).to(kBFloat16).to(kFloat32);
  for (int64_t r = 0; r < 5; ++r) CHECK(testing::allclose(select(w.grad(), 0, r), want, 1.6e-2, 1e-2));
  CHECK(testing::allclose(b.grad(), full({5}, 5.0)));
  {
    amp::autocast guard(DeviceType::CPU, kBFloat16);
    const Tensor y = linear(x1, w, b);
    CHECK(y.grad_fn()->next_edges()[1].function != first_cast);  // a new region casts again
    CHECK(amp::cache_size() == 2);
  }
  {
    amp::autocast guard(DeviceType::CPU, kBFloat16, true, /*cache_enabled=*/false);
    (void)linear(x1, w, b);
    CHECK(amp::cache_size() == 0);
  }
}

TEST_CASE("autocast: nesting, enabled=false, other dtypes, and state restored") {
  const Tensor a = randn({3, 4}), b = randn({4, 2});
  Tensor w = randn({2, 4}).requires_grad_();
  CHECK_FALSE(amp::is_autocast_enabled(DeviceType::CPU));
  CHECK(amp::get_autocast_dtype(DeviceType::CPU) == kBFloat16);
  CHECK(amp::get_autocast_dtype(DeviceType::CUDA) == kFloat16);
  CHECK(matmul(a, b).dtype() == kFloat32);
  {
    amp::autocast outer(kCPU);  // the device type's default dtype, bfloat16
    CHECK(amp::is_autocast_enabled(DeviceType::CPU));
    CHECK(matmul(a, b).dtype() == kBFloat16);
    (void)linear(a, w);
    CHECK(amp::cache_size() == 1);
    {
      amp::autocast off(DeviceType::CPU, /*enabled=*/false);
      CHECK_FALSE(amp::is_autocast_enabled(DeviceType::CPU));
      CHECK(matmul(a, b).dtype() == kFloat32);
      CHECK(add(a, a).dtype() == kFloat32);
      {
        amp::autocast half(DeviceType::CPU, kFloat16);
        CHECK(matmul(a, b).dtype() == kFloat16);
      }
      CHECK(matmul(a, b).dtype() == kFloat32);
    }
    CHECK(amp::cache_size() == 1);  // only the outermost exit clears it
    CHECK(matmul(a, b).dtype() == kBFloat16);
    CHECK(amp::get_autocast_dtype(DeviceType::CPU) == kBFloat16);
    // float64 is never cast; CUDA autocast does not touch CPU tensors.
    CHECK(matmul(a.to(kFloat64), b.to(kFloat64)).dtype() == kFloat64);
    CHECK(add(a.to(kBFloat16), a.to(kFloat64)).dtype() == kFloat64);
  }
  {
    amp::autocast cuda_only(DeviceType::CUDA, kFloat16);
    CHECK(matmul(a, b).dtype() == kFloat32);
    // Without a usable GPU it warns and stays off, as torch.autocast("cuda").
    CHECK(amp::is_autocast_enabled(DeviceType::CUDA) == cuda::is_available());
  }
  CHECK_FALSE(amp::is_autocast_enabled(DeviceType::CPU));
  CHECK(amp::cache_size() == 0);
}

TEST_CASE("autocast: errors, and strict mixed dtypes outside autocast") {
  CHECK_THROWS_CONTAINS(amp::autocast(DeviceType::CPU, kFloat32),
                        "In CPU autocast, but the target dtype is not supported");
  CHECK_THROWS_CONTAINS(amp::autocast(DeviceType::CPU, kFloat64), "only supports dtypes of bfloat16, float16");
  CHECK_FALSE(amp::is_autocast_enabled(DeviceType::CPU));  // a refused guard left nothing behind
  { amp::autocast off(DeviceType::CPU, kFloat64, /*enabled=*/false); }  // disabled: any dtype
  const Tensor x = randn({1, 2, 5, 5}), w = randn({3, 2, 3, 3});
  CHECK_THROWS_CONTAINS(conv2d(x.to(kBFloat16), w), "Input type (bfloat16) and weight type (float32) should be the same");
  CHECK_THROWS_CONTAINS(add(x.to(kBFloat16), x), "expected both tensors to have the same dtype");
  CHECK_THROWS_CONTAINS(matmul(randn({2, 3}).to(kBFloat16), randn({3, 2})), "expected m1 and m2 to have the same dtype");
  amp::autocast guard(DeviceType::CPU, kBFloat16);
  CHECK(conv2d(x.to(kBFloat16), w).dtype() == kBFloat16);
  CHECK(add(x.to(kBFloat16), x).dtype() == kFloat32);
}

TEST_CASE("autocast: backward inside a region runs each op in its forward dtype") {
  Tensor w = randn({4, 3}).requires_grad_();
  const Tensor x = randn({2, 3});
  amp::autocast guard(DeviceType::CPU, kBFloat16);
  const Tensor y = linear(x, w);
  CHECK(y.dtype() == kBFloat16);
  sum(y).backward();  // sum is no CPU autocast op: runs in bfloat16; backward has autocast off
  CHECK(w.grad().dtype() == kFloat32);
}

TEST_CASE("autocast: a weight used under no_grad first, then with grad, in one region gets its gradient") {
  // PyTorch 2.15 (CPU, bfloat16): the cast cached by the no_grad use leads
  // back to the weight (the grad use reuses it, stale values included).
  // The cache held a copy without history: the weight got no gradient.
  Tensor w = ones({1, 1, 1, 1}).requires_grad_();
  const Tensor x = ones({1, 1, 1, 1});
  Tensor y2, y3;
  {
    amp::autocast guard(DeviceType::CPU, kBFloat16);
    {
      NoGradGuard no_grad;
      CHECK_FALSE(conv2d(x, w).requires_grad());
      w.fill_(2.0);
    }
    y2 = conv2d(x, w);
    {
      NoGradGuard no_grad;
      w.fill_(3.0);
    }
    y3 = conv2d(x, w);
  }
  CHECK(y2.item<double>() == 1.0);  // PyTorch: 1.0 and 1.0 (the region's first cast)
  CHECK(y3.item<double>() == 1.0);
  REQUIRE(y2.requires_grad());
  add(y2.to(kFloat32), y3.to(kFloat32)).sum().backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == kFloat32);
  CHECK(w.grad().item<double>() == 2.0);
}

TEST_CASE("autocast: a channels-last weight is cast once per region, as a contiguous one") {
  Tensor w = randn({2, 2, 3, 3}).contiguous(MemoryFormat::ChannelsLast).detach().requires_grad_();
  const Tensor x = randn({1, 2, 5, 5});
  amp::autocast guard(DeviceType::CPU, kBFloat16);
  const Tensor y1 = conv2d(x, w), y2 = conv2d(x, w);
  CHECK(amp::cache_size() == 1);  // it was re-cast on every use (0 entries)
  CHECK(y1.grad_fn()->next_edges()[1].function == y2.grad_fn()->next_edges()[1].function);
}

TEST_CASE("autocast: add/sub/mul/div promote as PyTorch: 0-d tensors decide only among 0-d tensors") {
  amp::autocast guard(DeviceType::CPU, kBFloat16);
  const Tensor act = randn({3}).to(kBFloat16);
  for (DType zero_d : {kFloat32, kFloat64}) {
    const Tensor temperature = full({}, 0.5, zero_d);
    CHECK(mul(act, temperature).dtype() == kBFloat16);  // PyTorch: bfloat16 (was float32 / float64)
    CHECK(div(temperature, act).dtype() == kBFloat16);
    CHECK(add(act, temperature).dtype() == kBFloat16);
    CHECK(sub(temperature, act).dtype() == kBFloat16);
  }
  CHECK(mul(act, randn({3})).dtype() == kFloat32);  // both with dimensions: the widest
  CHECK(add(full({}, 1.0, kBFloat16), full({}, 1.0, kFloat32)).dtype() == kFloat32);  // all 0-d: the widest
  CHECK(add(full({}, 1.0, kFloat32), full({}, 1.0, kFloat64)).dtype() == kFloat64);
}
