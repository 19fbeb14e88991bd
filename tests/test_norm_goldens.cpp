// Normalization against PyTorch, step by step: tests/goldens/{batch,instance,
// layer,group}_norm.safetensors were written by scripts/make_goldens.py running
// real torch.nn modules (BatchNorm1d/2d/3d, InstanceNorm1d/2d, LayerNorm,
// GroupNorm) through several training steps on fresh inputs, then one eval
// step. Each step stores x, gy, y, PyTorch's gradients of sum(y * gy) (gx,
// gweight, gbias) and the running stats and num_batches_tracked AFTER the step.
//
// The same fixtures drive minidl's functional ops (the test plays the module:
// it keeps the running stats and the num_batches_tracked counter, and turns
// momentum=None into the factor 1 / num_batches_tracked), and then the nn
// modules themselves (nn::BatchNorm1d/2d/3d, InstanceNorm1d/2d, LayerNorm,
// GroupNorm), whose num_batches_tracked buffer is compared too. Every step is
// checked in float64 (to 1e-10) and float32 (to 1e-4), relative to
// max(1, max |want|).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>

#include "minidl/ops/batch_norm.h"
#include "minidl/ops/group_norm.h"
#include "minidl/ops/instance_norm.h"
#include "minidl/ops/layer_norm.h"
#include "minidl/nn/modules/batch_norm.h"
#include "minidl/nn/modules/group_norm.h"
#include "minidl/nn/modules/instance_norm.h"
#include "minidl/nn/modules/layer_norm.h"
#include "tests/golden_util.h"

using namespace minidl;
using json = nlohmann::json;

namespace {

using minidl::testing::Golden;
using minidl::testing::kPrecisions;
using minidl::testing::load_golden;
using minidl::testing::Precision;

// Largest relative difference seen per precision, printed at the end of each test case.
struct MaxDiff {
  double by_dtype[2] = {0.0, 0.0};
  void print(const char* what) const {
    std::printf("%s: max |minidl - PyTorch| / max(1, |PyTorch|): float64 %.3g, float32 %.3g\n", what,
                by_dtype[0], by_dtype[1]);
  }
};

void check_close(const std::string& what, const Tensor& got, const Tensor& want, const Precision& p,
                 MaxDiff& seen) {
  double& worst = seen.by_dtype[p.dtype == kFloat64 ? 0 : 1];
  worst = std::max(worst, minidl::testing::check_close(what, got, want, p));
}

// What a test case drives: a fresh normalization layer in one dtype, holding
// its affine parameters (leaves, or undefined) and, if it tracks them, its
// running stats. forward(x, training) is one call of the layer.
struct Layer {
  Tensor weight, bias;
  std::function<Tensor(const Tensor& x, bool training)> forward;
  std::function<Tensor()> running_mean, running_var;  // empty when the layer has none
  std::function<int64_t()> num_batches_tracked;       // empty when it is not checked
};

std::optional<double> momentum_of(const json& c) {
  if (c.at("momentum").is_null()) return std::nullopt;
  return c.at("momentum").get<double>();
}

Tensor param_leaf(const Golden& g, size_t i, const std::string& name, DType dtype) {
  if (!g.has(i, name)) return Tensor();
  return g.get(i, name).to(dtype).clone().detach().requires_grad_(true);
}

// Runs case i of g through `make(dtype)` in both precisions: every training
// step (forward, backward, running stats, counter), then eval.
void drive(const Golden& g, size_t i, const std::function<Layer(DType)>& make, MaxDiff& seen) {
  const json& c = g.cases[i];
  const int steps = c.at("steps").get<int>();
  const std::string base = g.file.substr(g.file.rfind('/') + 1) + " case" + std::to_string(i) + " " + c.dump();
  for (const Precision& p : kPrecisions) {
    Layer layer = make(p.dtype);
    CHECK_MESSAGE(layer.weight.defined() == g.has(i, "weight"), base, ": weight defined?");
    CHECK_MESSAGE(layer.bias.defined() == g.has(i, "bias"), base, ": bias defined?");
    const bool tracks = g.has(i, "step0.running_mean");
    CHECK_MESSAGE(static_cast<bool>(layer.running_mean) == tracks, base, ": running stats expected? ", tracks);

    auto run_step = [&](const std::string& step, bool training) {
      const std::string at = base + " " + dtype_name(p.dtype) + " " + step + " ";
      for (Tensor* t : {&layer.weight, &layer.bias})
        if (t->defined()) t->set_grad(Tensor());
      Tensor x = g.get(i, step + ".x").to(p.dtype).clone().detach().requires_grad_(true);
      Tensor y;
      try {
        y = layer.forward(x, training);
        y.backward(g.get(i, step + ".gy").to(p.dtype));
      } catch (const std::exception& e) {
        FAIL_CHECK(at, "threw: ", e.what());
        return false;
      }
      check_close(at + "y", y, g.get(i, step + ".y"), p, seen);
      check_close(at + "gx", x.grad(), g.get(i, step + ".gx"), p, seen);
      if (layer.weight.defined()) check_close(at + "gweight", layer.weight.grad(), g.get(i, step + ".gweight"), p, seen);
      if (layer.bias.defined()) check_close(at + "gbias", layer.bias.grad(), g.get(i, step + ".gbias"), p, seen);
      return true;
    };

    std::string last_step;
    for (int s = 0; s < steps; ++s) {
      const std::string step = "step" + std::to_string(s);
      if (!run_step(step, true)) break;
      last_step = step;
      if (!tracks || !layer.running_mean) continue;
      const std::string at = base + " " + dtype_name(p.dtype) + " " + step + " ";
      check_close(at + "running_mean", layer.running_mean(), g.get(i, step + ".running_mean"), p, seen);
      check_close(at + "running_var", layer.running_var(), g.get(i, step + ".running_var"), p, seen);
      if (layer.num_batches_tracked)
        CHECK_MESSAGE(layer.num_batches_tracked() == g.get(i, step + ".num_batches_tracked").item<int64_t>(),
                      at, "num_batches_tracked ", layer.num_batches_tracked());
    }
    if (last_step.empty()) continue;
    if (!run_step("eval", false)) continue;
    if (tracks && layer.running_mean) {  // eval must leave the running stats alone
      const std::string at = base + " " + dtype_name(p.dtype) + " after eval ";
      check_close(at + "running_mean", layer.running_mean(), g.get(i, last_step + ".running_mean"), p, seen);
      check_close(at + "running_var", layer.running_var(), g.get(i, last_step + ".running_var"), p, seen);
      if (layer.num_batches_tracked)
        CHECK(layer.num_batches_tracked() == g.get(i, last_step + ".num_batches_tracked").item<int64_t>());
    }
  }
}

// The running stats a freshly constructed module holds (or none), in `dtype`.
struct RunningStats {
  Tensor mean, var;
  int64_t num_batches_tracked = 0;
};
std::shared_ptr<RunningStats> fresh_running_stats(bool track, int64_t channels, DType dtype) {
  auto st = std::make_shared<RunningStats>();
  if (track) {
    st->mean = zeros({channels}, dtype);
    st->var = ones({channels}, dtype);
  }
  return st;
}

void expose_running_stats(Layer& layer, const std::shared_ptr<RunningStats>& st) {
  if (!st->mean.defined()) return;
  layer.running_mean = [st] { return st->mean; };
  layer.running_var = [st] { return st->var; };
  layer.num_batches_tracked = [st] { return st->num_batches_tracked; };
}

}  // namespace

TEST_CASE("norm goldens: fixtures are what the test expects") {
  // Guards against a regenerated fixture silently losing cases.
  CHECK(load_golden("batch_norm.safetensors").cases.size() == 19);
  CHECK(load_golden("instance_norm.safetensors").cases.size() == 8);
  CHECK(load_golden("layer_norm.safetensors").cases.size() == 9);
  CHECK(load_golden("group_norm.safetensors").cases.size() == 9);
}

TEST_CASE("norm goldens: functional batch_norm matches torch.nn.BatchNorm1d/2d/3d step by step") {
  const Golden g = load_golden("batch_norm.safetensors");
  MaxDiff seen;
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const json& c = g.cases[i];
    const std::optional<double> momentum = momentum_of(c);
    const bool track = c.at("track_running_stats").get<bool>();
    const double eps = c.at("eps").get<double>();
    const int64_t channels = c.at("shape").at(1).get<int64_t>();
    drive(g, i, [&](DType dtype) {
      Layer layer;
      layer.weight = param_leaf(g, i, "weight", dtype);
      layer.bias = param_leaf(g, i, "bias", dtype);
      auto st = fresh_running_stats(track, channels, dtype);
      expose_running_stats(layer, st);
      layer.forward = [=, w = layer.weight, b = layer.bias](const Tensor& x, bool training) {
        // What _BatchNorm.forward does: count the batch, pick the factor, and use
        // batch statistics in eval too when there are no running stats.
        double factor = 0.0;
        if (training && track) {
          st->num_batches_tracked += 1;
          factor = momentum ? *momentum : 1.0 / static_cast<double>(st->num_batches_tracked);
        }
        const bool bn_training = training || !track;
        return batch_norm(x, st->mean, st->var, w, b, bn_training, factor, eps);
      };
      return layer;
    }, seen);
  }
  seen.print("batch_norm (functional)");
}

TEST_CASE("norm goldens: functional instance_norm matches torch.nn.InstanceNorm1d/2d step by step") {
  const Golden g = load_golden("instance_norm.safetensors");
  MaxDiff seen;
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const json& c = g.cases[i];
    // InstanceNorm passes momentum=None on as 0.0: its running stats never move.
    const double momentum = momentum_of(c).value_or(0.0);
    const bool track = c.at("track_running_stats").get<bool>();
    const double eps = c.at("eps").get<double>();
    const int64_t channels = c.at("shape").at(1).get<int64_t>();
    drive(g, i, [&](DType dtype) {
      Layer layer;
      layer.weight = param_leaf(g, i, "weight", dtype);
      layer.bias = param_leaf(g, i, "bias", dtype);
      auto st = fresh_running_stats(track, channels, dtype);
      expose_running_stats(layer, st);
      layer.num_batches_tracked = nullptr;  // _InstanceNorm never counts batches (the fixture's stays 0)
      layer.forward = [=, w = layer.weight, b = layer.bias](const Tensor& x, bool training) {
        return instance_norm(x, st->mean, st->var, w, b, training || !track, momentum, eps);
      };
      return layer;
    }, seen);
    if (momentum_of(c) == std::nullopt) {  // the pitfall the fixture pins down: nothing moved
      CHECK(g.get(i, "step2.running_mean").to_vector<double>() == std::vector<double>(channels, 0.0));
      CHECK(g.get(i, "step2.num_batches_tracked").item<int64_t>() == 0);
    }
  }
  seen.print("instance_norm (functional)");
}

TEST_CASE("norm goldens: functional layer_norm matches torch.nn.LayerNorm") {
  const Golden g = load_golden("layer_norm.safetensors");
  MaxDiff seen;
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const json& c = g.cases[i];
    const Shape normalized_shape = c.at("normalized_shape").get<Shape>();
    const double eps = c.at("eps").get<double>();
    CHECK(g.has(i, "weight") == c.at("elementwise_affine").get<bool>());
    CHECK(g.has(i, "bias") == (c.at("elementwise_affine").get<bool>() && c.at("bias").get<bool>()));
    drive(g, i, [&](DType dtype) {
      Layer layer;
      layer.weight = param_leaf(g, i, "weight", dtype);
      layer.bias = param_leaf(g, i, "bias", dtype);
      layer.forward = [=, w = layer.weight, b = layer.bias](const Tensor& x, bool) {
        return layer_norm(x, normalized_shape, w, b, eps);
      };
      return layer;
    }, seen);
  }
  seen.print("layer_norm (functional)");
}

TEST_CASE("norm goldens: functional group_norm matches torch.nn.GroupNorm") {
  const Golden g = load_golden("group_norm.safetensors");
  MaxDiff seen;
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const json& c = g.cases[i];
    const int64_t groups = c.at("num_groups").get<int64_t>();
    const double eps = c.at("eps").get<double>();
    CHECK(g.has(i, "weight") == c.at("affine").get<bool>());
    drive(g, i, [&](DType dtype) {
      Layer layer;
      layer.weight = param_leaf(g, i, "weight", dtype);
      layer.bias = param_leaf(g, i, "bias", dtype);
      layer.forward = [=, w = layer.weight, b = layer.bias](const Tensor& x, bool) {
        return group_norm(x, groups, w, b, eps);
      };
      return layer;
    }, seen);
  }
  seen.print("group_norm (functional)");
}

// ---- the same fixtures through the nn modules ---------------------------------

namespace {

// A module of the fixture's configuration, converted to `dtype`, with the
// fixture's weight and bias copied into its own parameters (which start as
// ones and zeros) and its own buffers exposed. train()/eval() per step.
template <class Holder>
Layer module_layer(Holder m, const Golden& g, size_t i, DType dtype) {
  auto* impl = m.get();
  for (Tensor* p : {&impl->weight, &impl->bias}) {
    if (!p->defined()) continue;
    const bool is_weight = p == &impl->weight;
    CHECK_MESSAGE(p->to_vector<double>() == std::vector<double>(p->numel(), is_weight ? 1.0 : 0.0),
                  "a fresh module's ", is_weight ? "weight is not ones" : "bias is not zeros");
  }
  impl->to(dtype);
  Layer layer;
  {
    NoGradGuard no_grad;
    if (impl->weight.defined() && g.has(i, "weight")) impl->weight.copy_(g.get(i, "weight"));
    if (impl->bias.defined() && g.has(i, "bias")) impl->bias.copy_(g.get(i, "bias"));
  }
  layer.weight = impl->weight;
  layer.bias = impl->bias;
  layer.forward = [m](const Tensor& x, bool training) {
    m->train(training);
    return m->forward(x);
  };
  if constexpr (requires { impl->running_mean; }) {
    if (impl->running_mean.defined()) {
      CHECK(impl->num_batches_tracked.dtype() == kInt64);  // to(dtype) leaves the counter alone
      layer.running_mean = [m] { return m->running_mean; };
      layer.running_var = [m] { return m->running_var; };
      layer.num_batches_tracked = [m] { return m->num_batches_tracked.template item<int64_t>(); };
    }
  }
  return layer;
}

template <class Holder>
Layer batch_or_instance_norm(const json& c, const Golden& g, size_t i, DType dtype) {
  const auto opts = nn::BatchNormOptions(c.at("shape").at(1).get<int64_t>())
                        .eps(c.at("eps").get<double>())
                        .momentum(momentum_of(c))
                        .affine(c.at("affine").get<bool>())
                        .track_running_stats(c.at("track_running_stats").get<bool>());
  return module_layer(Holder(opts), g, i, dtype);
}

}  // namespace

TEST_CASE("norm goldens: nn::BatchNorm1d/2d/3d modules match torch.nn step by step") {
  const Golden g = load_golden("batch_norm.safetensors");
  MaxDiff seen;
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const json& c = g.cases[i];
    const std::string name = c.at("module");
    drive(g, i, [&](DType dtype) {
      if (name == "BatchNorm1d") return batch_or_instance_norm<nn::BatchNorm1d>(c, g, i, dtype);
      if (name == "BatchNorm2d") return batch_or_instance_norm<nn::BatchNorm2d>(c, g, i, dtype);
      REQUIRE(name == "BatchNorm3d");
      return batch_or_instance_norm<nn::BatchNorm3d>(c, g, i, dtype);
    }, seen);
  }
  seen.print("BatchNorm1d/2d/3d (modules)");
}

TEST_CASE("norm goldens: nn::InstanceNorm1d/2d modules match torch.nn step by step") {
  const Golden g = load_golden("instance_norm.safetensors");
  MaxDiff seen;
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const json& c = g.cases[i];
    const std::string name = c.at("module");
    // num_batches_tracked is checked too: PyTorch's InstanceNorm registers it but never counts.
    drive(g, i, [&](DType dtype) {
      if (name == "InstanceNorm1d") return batch_or_instance_norm<nn::InstanceNorm1d>(c, g, i, dtype);
      REQUIRE(name == "InstanceNorm2d");
      return batch_or_instance_norm<nn::InstanceNorm2d>(c, g, i, dtype);
    }, seen);
  }
  seen.print("InstanceNorm1d/2d (modules)");
}

TEST_CASE("norm goldens: nn::LayerNorm matches torch.nn.LayerNorm") {
  const Golden g = load_golden("layer_norm.safetensors");
  MaxDiff seen;
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const json& c = g.cases[i];
    drive(g, i, [&](DType dtype) {
      const auto opts = nn::LayerNormOptions(c.at("normalized_shape").get<Shape>())
                            .eps(c.at("eps").get<double>())
                            .elementwise_affine(c.at("elementwise_affine").get<bool>())
                            .bias(c.at("bias").get<bool>());
      return module_layer(nn::LayerNorm(opts), g, i, dtype);
    }, seen);
  }
  seen.print("LayerNorm (module)");
}

TEST_CASE("norm goldens: nn::GroupNorm matches torch.nn.GroupNorm") {
  const Golden g = load_golden("group_norm.safetensors");
  MaxDiff seen;
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const json& c = g.cases[i];
    drive(g, i, [&](DType dtype) {
      const auto opts = nn::GroupNormOptions(c.at("num_groups").get<int64_t>(), c.at("num_channels").get<int64_t>())
                            .eps(c.at("eps").get<double>())
                            .affine(c.at("affine").get<bool>());
      return module_layer(nn::GroupNorm(opts), g, i, dtype);
    }, seen);
  }
  seen.print("GroupNorm (module)");
}
