// Optimizers, LR schedulers and gradient clipping: against PyTorch goldens
// (tests/goldens/optim.safetensors, written by scripts/make_goldens.py),
// error paths, state_dict round trips, and clip_grad_norm_ against norms
// computed by hand.
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <unistd.h>

#include "minidl/core/safetensors.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::optim;
using json = nlohmann::json;

namespace {

struct OptimGoldens {
  SafetensorsFile data;
  json cases;
  const Tensor& get(size_t i, const std::string& name) const {
    return data.at("case" + std::to_string(i) + "." + name);
  }
};

const OptimGoldens& goldens() {
  static const OptimGoldens g = [] {
    OptimGoldens out;
    out.data = load_safetensors(std::string(MINIDL_GOLDENS_DIR) + "/optim.safetensors");
    out.cases = json::parse(out.data.metadata.at("cases"));
    return out;
  }();
  return g;
}

std::unique_ptr<Optimizer> make_optimizer(const json& c, std::vector<Tensor> params) {
  const std::string name = c.at("optimizer");
  const double lr = c.at("lr");
  if (name == "SGD")
    return std::make_unique<SGD>(params, lr, c.value("momentum", 0.0), c.value("dampening", 0.0),
                                 c.value("weight_decay", 0.0), c.value("nesterov", false));
  std::pair<double, double> betas{0.9, 0.999};
  if (c.contains("betas")) betas = {c["betas"][0].get<double>(), c["betas"][1].get<double>()};
  if (name == "Adam")
    return std::make_unique<Adam>(params, lr, betas, c.value("eps", 1e-8), c.value("weight_decay", 0.0),
                                  c.value("amsgrad", false));
  if (name == "AdamW")
    return std::make_unique<AdamW>(params, lr, betas, c.value("eps", 1e-8), c.value("weight_decay", 1e-2),
                                   c.value("amsgrad", false));
  FAIL("unknown optimizer " << name);
  return nullptr;
}

std::unique_ptr<LRScheduler> make_scheduler(const json& c, Optimizer& opt) {
  const std::string name = c.at("scheduler");
  if (name == "StepLR") return std::make_unique<StepLR>(opt, c.at("step_size").get<int64_t>(), c.at("gamma"));
  if (name == "MultiStepLR")
    return std::make_unique<MultiStepLR>(opt, c.at("milestones").get<std::vector<int64_t>>(), c.at("gamma"));
  if (name == "CosineAnnealingLR")
    return std::make_unique<CosineAnnealingLR>(opt, c.at("T_max").get<int64_t>(), c.at("eta_min"));
  if (name == "LinearLR")
    return std::make_unique<LinearLR>(opt, c.at("start_factor"), c.at("end_factor"),
                                      c.at("total_iters").get<int64_t>());
  if (name == "OneCycleLR")
    return std::make_unique<OneCycleLR>(
        opt, c.at("max_lr").get<std::vector<double>>(), c.at("total_steps").get<int64_t>(), c.at("pct_start"),
        c.at("anneal_strategy") == "cos" ? OneCycleLR::Anneal::Cos : OneCycleLR::Anneal::Linear,
        c.at("div_factor"), c.at("final_div_factor"), c.at("three_phase").get<bool>(),
        OneCycleLR::Momentum{c.at("cycle_momentum"), c.at("base_momentum"), c.at("max_momentum")});
  if (name == "SequentialLR") {
    auto after = make_scheduler(c.at("after"), opt);
    return std::make_unique<LinearWarmup>(opt, std::move(after), c.at("warmup").get<int64_t>(),
                                          c.at("start_factor"));
  }
  FAIL("unknown scheduler " << name);
  return nullptr;
}

// An SGD over two one-parameter groups with the given lrs.
std::unique_ptr<SGD> two_group_sgd(double lr0, double lr1, DType dtype = kFloat64) {
  SGDOptions o0(lr0), o1(lr1);
  return std::make_unique<SGD>(
      std::vector<ParamGroup>{ParamGroup({zeros({2}, dtype).requires_grad_()}, o0),
                              ParamGroup({zeros({3}, dtype).requires_grad_()}, o1)},
      SGDOptions(lr0));
}

std::unique_ptr<Adam> two_group_adam(double lr0, double lr1) {
  AdamOptions o0(lr0), o1(lr1);
  return std::make_unique<Adam>(
      std::vector<ParamGroup>{ParamGroup({zeros({2}, kFloat64).requires_grad_()}, o0),
                              ParamGroup({zeros({3}, kFloat64).requires_grad_()}, o1)},
      AdamOptions(lr0));
}

// SGD's momentum or Adam's beta1.
double group_momentum(const ParamGroup& g) {
  if (auto* sgd = dynamic_cast<const SGDOptions*>(g.options.get())) return sgd->momentum;
  return g.options_as<AdamOptions>().beta1;
}

Tensor leaf(const Tensor& values, DType dtype = kFloat64) { return values.to(dtype).clone().requires_grad_(); }

double rel_err(const Tensor& got, const Tensor& want) {
  double scale = 1.0;
  for (double w : want.to_vector<double>()) scale = std::max(scale, std::abs(w));
  return testing::max_abs_diff(got.to(kFloat64), want) / scale;
}

std::string temp_path(const std::string& stem) {
  return "/tmp/minidl_test_optim_" + stem + "_" + std::to_string(getpid()) + ".safetensors";
}

}  // namespace

TEST_CASE("optimizers match PyTorch step by step (float64 to 1e-12, float32 to 1e-5)") {
  const OptimGoldens& g = goldens();
  int n_cases = 0;
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const json& c = g.cases[i];
    if (c.at("kind") != "optimizer") continue;
    ++n_cases;
    for (auto [dtype, tol] : {std::pair{kFloat64, 1e-12}, std::pair{kFloat32, 1e-5}}) {
      CAPTURE(c.dump());
      CAPTURE(dtype_name(dtype));
      std::vector<Tensor> params = {leaf(g.get(i, "p0"), dtype), leaf(g.get(i, "p1"), dtype)};
      auto opt = make_optimizer(c, params);
      for (int s = 0; s < c.at("steps").get<int>(); ++s) {
        const std::string step = "step" + std::to_string(s) + ".";
        for (int k = 0; k < 2; ++k) params[k].set_grad(g.get(i, step + "g" + std::to_string(k)).to(dtype).clone());
        opt->step();
        for (int k = 0; k < 2; ++k) {
          CAPTURE(s);
          CAPTURE(k);
          CHECK(rel_err(params[k], g.get(i, step + "p" + std::to_string(k))) <= tol);
        }
      }
    }
  }
  CHECK(n_cases == 12);
}

// Bit for bit: optim/lr_scheduler.cpp is compiled without FMA contraction, so
// it rounds every operation as PyTorch's Python does (155 values differed in
// the last bits with it).
TEST_CASE("LR schedulers match PyTorch's lr and momentum sequences exactly") {
  const OptimGoldens& g = goldens();
  int n_cases = 0;
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const json& c = g.cases[i];
    if (c.at("kind") != "scheduler") continue;
    ++n_cases;
    CAPTURE(c.dump());
    std::unique_ptr<Optimizer> opt;
    if (c.at("optimizer") == "SGD")
      opt = two_group_sgd(c["lrs"][0], c["lrs"][1]);
    else
      opt = two_group_adam(c["lrs"][0], c["lrs"][1]);
    auto sched = make_scheduler(c, *opt);
    const std::vector<double> want = g.get(i, "lr").to_vector<double>();
    const bool cycles = c.value("cycle_momentum", false);
    const std::vector<double> want_momentum = cycles ? g.get(i, "momentum").to_vector<double>() : std::vector<double>{};
    const int steps = c.at("steps");
    REQUIRE(want.size() == static_cast<size_t>(2 * (steps + 1)));
    for (int s = 0; s <= steps; ++s) {
      if (s > 0) {
        opt->step();
        sched->step();
      }
      CHECK(sched->last_epoch() == s);
      for (int k = 0; k < 2; ++k) {
        CAPTURE(s);
        CAPTURE(k);
        const double w = want[2 * s + k];
        CHECK(opt->param_groups()[k].lr() == w);
        CHECK(sched->get_last_lr()[k] == opt->param_groups()[k].lr());
        if (cycles)
          CHECK(group_momentum(opt->param_groups()[k]) == want_momentum[2 * s + k]);
        else
          CHECK(group_momentum(opt->param_groups()[k]) == (c.at("optimizer") == "SGD" ? 0.0 : 0.9));
      }
    }
  }
  CHECK(n_cases == 13);
}

TEST_CASE("SGD: per-group options, skipping parameters without a gradient, zero_grad") {
  Tensor a = tensor({1.0, 2.0}, {2}, kFloat64).requires_grad_();
  Tensor b = tensor({3.0}, {1}, kFloat64).requires_grad_();
  Tensor c = tensor({5.0}, {1}, kFloat64).requires_grad_();
  SGD opt({a}, 0.1);
  SGDOptions head = opt.defaults_as<SGDOptions>();
  head.lr = 0.5;
  opt.add_param_group({{b, c}, head});
  REQUIRE(opt.param_groups().size() == 2);
  CHECK(opt.param_groups()[1].lr() == 0.5);
  a.set_grad(tensor({1.0, -1.0}, {2}, kFloat64));
  b.set_grad(tensor({2.0}, {1}, kFloat64));
  opt.step();  // c has no gradient: untouched
  CHECK(a.to_vector<double>() == std::vector<double>{1.0 - 0.1, 2.0 + 0.1});
  CHECK(b.to_vector<double>() == std::vector<double>{3.0 - 0.5 * 2.0});
  CHECK(c.to_vector<double>() == std::vector<double>{5.0});

  Tensor ga = a.grad();
  opt.zero_grad(/*set_to_none=*/false);
  CHECK(a.grad().is_same(ga));
  CHECK(ga.to_vector<double>() == std::vector<double>{0.0, 0.0});
  opt.zero_grad();
  CHECK(!a.grad().defined());
  CHECK(!b.grad().defined());
}

TEST_CASE("Adam keeps no state for a parameter that never had a gradient") {
  Tensor a = ones({3}, kFloat64).requires_grad_(), b = ones({2}, kFloat64).requires_grad_();
  Adam opt({a, b}, 0.1);
  a.set_grad(ones({3}, kFloat64));
  opt.step();
  CHECK(opt.has_state(a));
  CHECK(!opt.has_state(b));
  CHECK(opt.state(a).at("step").item<double>() == 1.0);
  CHECK(b.to_vector<double>() == std::vector<double>{1.0, 1.0});
  // First Adam step moves every coordinate by lr (times g / (|g| + eps')).
  for (double v : a.to_vector<double>()) CHECK(std::abs(v - 0.9) < 1e-6);
}

TEST_CASE("optimizers train an nn::Linear") {
  manual_seed(3);
  nn::Linear fc(4, 1);
  Tensor x = randn({32, 4}), y = x.matmul(tensor({1.0, -2.0, 0.5, 3.0}, {4, 1}));
  SGD opt(fc->parameters(), 0.05, 0.9);
  double first = 0, last = 0;
  for (int it = 0; it < 60; ++it) {
    opt.zero_grad();
    Tensor loss = (fc(x) - y).pow(2.0).mean();
    loss.backward();
    opt.step();
    (it == 0 ? first : last) = loss.item<double>();
  }
  CHECK(last < 0.01 * first);
}

TEST_CASE("optimizer argument errors use PyTorch's messages") {
  Tensor p = zeros({2}, kFloat64).requires_grad_();
  CHECK_THROWS_CONTAINS(SGD(std::vector<Tensor>{}, 0.1), "optimizer got an empty parameter list");
  CHECK_THROWS_CONTAINS(SGD({p}, -0.1), "Invalid learning rate: -0.1");
  CHECK_THROWS_CONTAINS(SGD({p}, 0.1, -0.5), "Invalid momentum value: -0.5");
  CHECK_THROWS_CONTAINS(SGD({p}, 0.1, 0.9, 0.0, -1.0), "Invalid weight_decay value: -1");
  CHECK_THROWS_CONTAINS(SGD({p}, 0.1, 0.0, 0.0, 0.0, true), "Nesterov momentum requires a momentum and zero dampening");
  CHECK_THROWS_CONTAINS(SGD({p}, 0.1, 0.9, 0.1, 0.0, true), "Nesterov momentum requires a momentum and zero dampening");
  CHECK_THROWS_CONTAINS(Adam({p}, -0.1), "Invalid learning rate: -0.1");
  CHECK_THROWS_CONTAINS(Adam({p}, 0.1, {1.0, 0.999}), "Invalid beta parameter at index 0: 1");
  CHECK_THROWS_CONTAINS(Adam({p}, 0.1, {0.9, -0.1}), "Invalid beta parameter at index 1: -0.1");
  CHECK_THROWS_CONTAINS(Adam({p}, 0.1, {0.9, 0.999}, -1e-8), "Invalid epsilon value: -1e-08");
  CHECK_THROWS_CONTAINS(AdamW({p}, 0.1, {0.9, 0.999}, 1e-8, -0.01), "Invalid weight_decay value: -0.01");
  CHECK_THROWS_CONTAINS(SGD({p, p}, 0.1), "SGD: optimizer contains a parameter group with duplicate parameters");
  const Tensor columns = zeros({4, 4}).narrow(1, 0, 2).detach().requires_grad_();  // a non-dense leaf
  CHECK_THROWS_CONTAINS(SGD({columns}, 0.1), "SGD: expected a dense parameter (contiguous or channels-last), "
                                             "got strides [4, 1] for size [4, 2]");  // was at the first step()
  SGD opt({p}, 0.1);
  CHECK_THROWS_CONTAINS(opt.add_param_group({{p}}), "some parameters appear in more than one parameter group");
  CHECK_THROWS_CONTAINS(opt.add_param_group({std::vector<Tensor>{}}), "optimizer got an empty parameter list");
  CHECK_THROWS_CONTAINS(opt.add_param_group({{zeros({2}).requires_grad_()}, AdamOptions(0.1)}),
                        "belong to another optimizer");
  Tensor non_leaf = p * 2.0;
  CHECK_THROWS_CONTAINS(SGD({non_leaf}, 0.1), "can't optimize a non-leaf Tensor");
  CHECK_THROWS_CONTAINS(SGD({zeros({2}, kInt64)}, 0.1), "floating-point");
  CHECK_THROWS_CONTAINS(SGD({Tensor()}, 0.1), "undefined");
  // Options edited into an invalid state are caught at step().
  opt.param_groups()[0].set_lr(-1.0);
  p.set_grad(zeros({2}, kFloat64));
  CHECK_THROWS_CONTAINS(opt.step(), "Invalid learning rate: -1");
}

TEST_CASE("state_dict round trip: a fresh optimizer continues identically") {
  manual_seed(7);
  auto run = [](auto make_opt) {
    // Optimizer A over (w, b) in two groups; steps 3 times, saves; B loads A's state from the file.
    Tensor w = randn({4, 3}, kFloat64).requires_grad_(), b = randn({3}, kFloat64).requires_grad_();
    auto a = make_opt(w, b);
    std::vector<std::vector<Tensor>> grads;
    for (int s = 0; s < 6; ++s) grads.push_back({randn({4, 3}, kFloat64), randn({3}, kFloat64)});
    for (int s = 0; s < 3; ++s) {
      w.set_grad(grads[s][0].clone());
      b.set_grad(grads[s][1].clone());
      a->step();
    }
    a->param_groups()[1].set_lr(0.003);  // a changed option travels too
    const std::string path = temp_path(a->name());
    a->state_dict().save(path);
    Tensor w2 = w.detach().clone().requires_grad_(), b2 = b.detach().clone().requires_grad_();
    auto fresh = make_opt(w2, b2);
    fresh->load_state_dict(OptimizerStateDict::load(path));
    std::remove(path.c_str());
    CHECK(fresh->param_groups()[1].lr() == 0.003);
    for (int s = 3; s < 6; ++s) {
      w.set_grad(grads[s][0].clone());
      b.set_grad(grads[s][1].clone());
      w2.set_grad(grads[s][0].clone());
      b2.set_grad(grads[s][1].clone());
      a->step();
      fresh->step();
      CHECK(w.to_vector<double>() == w2.to_vector<double>());
      CHECK(b.to_vector<double>() == b2.to_vector<double>());
    }
    return a->state_dict();
  };
  auto two_groups = [](const Tensor& w, const Tensor& b, const auto& options) {
    auto second = options;
    second.lr = options.lr * 0.5;
    return std::vector<ParamGroup>{ParamGroup({w}), ParamGroup({b}, second)};
  };
  SUBCASE("SGD with Nesterov momentum") {
    SGDOptions o(0.05);
    o.momentum = 0.9;
    o.nesterov = true;
    OptimizerStateDict sd = run([&](const Tensor& w, const Tensor& b) {
      return std::make_unique<SGD>(two_groups(w, b, o), o);
    });
    CHECK(sd.metadata.at("optimizer") == "SGD");
    json groups = json::parse(sd.metadata.at("param_groups"));
    CHECK(groups[1]["params"] == json::array({1}));
    CHECK(groups[0]["momentum"] == 0.9);
    CHECK(groups[0]["nesterov"] == true);
    REQUIRE(sd.tensors.size() == 2);
    CHECK(sd.tensors[0].first == "state.0.momentum_buffer");
    CHECK(sd.tensors[1].first == "state.1.momentum_buffer");
  }
  SUBCASE("Adam with AMSGrad") {
    AdamOptions o(0.01);
    o.amsgrad = true;
    o.weight_decay = 0.1;
    OptimizerStateDict sd = run([&](const Tensor& w, const Tensor& b) {
      return std::make_unique<AdamW>(two_groups(w, b, o), o);
    });
    CHECK(sd.metadata.at("optimizer") == "AdamW");
    json groups = json::parse(sd.metadata.at("param_groups"));
    CHECK(groups[0]["betas"] == json::array({0.9, 0.999}));
    std::vector<std::string> names;
    for (const auto& [name, t] : sd.tensors) names.push_back(name);
    CHECK(names == std::vector<std::string>{"state.0.exp_avg", "state.0.exp_avg_sq", "state.0.max_exp_avg_sq",
                                            "state.0.step", "state.1.exp_avg", "state.1.exp_avg_sq",
                                            "state.1.max_exp_avg_sq", "state.1.step"});
    CHECK(sd.tensors[3].second.item<double>() == 6.0);
  }
}

TEST_CASE("load_state_dict refuses a state that does not fit") {
  Tensor p = zeros({2}, kFloat64).requires_grad_(), q = zeros({3}, kFloat64).requires_grad_();
  SGD one_group({p, q}, 0.1, 0.9);
  p.set_grad(ones({2}, kFloat64));
  q.set_grad(ones({3}, kFloat64));
  one_group.step();
  OptimizerStateDict sd = one_group.state_dict();

  auto two = two_group_sgd(0.1, 0.1);
  CHECK_THROWS_CONTAINS(two->load_state_dict(sd), "loaded state dict has a different number of parameter groups");
  SGD fewer({zeros({2}, kFloat64).requires_grad_()}, 0.1);
  CHECK_THROWS_CONTAINS(
      fewer.load_state_dict(sd),
      "loaded state dict contains a parameter group that doesn't match the size of optimizer's group");
  Adam adam({zeros({2}, kFloat64).requires_grad_(), zeros({3}, kFloat64).requires_grad_()});
  CHECK_THROWS_CONTAINS(adam.load_state_dict(sd), "the state dict is of a SGD optimizer");
  SGD swapped({zeros({3}, kFloat64).requires_grad_(), zeros({2}, kFloat64).requires_grad_()}, 0.1);
  CHECK_THROWS_CONTAINS(swapped.load_state_dict(sd), "has shape [2] but parameter 0 has shape [3]");
  OptimizerStateDict bad = sd;
  bad.tensors.emplace_back("state.x.momentum_buffer", zeros({2}));
  SGD same({zeros({2}, kFloat64).requires_grad_(), zeros({3}, kFloat64).requires_grad_()}, 0.1);
  CHECK_THROWS_CONTAINS(same.load_state_dict(bad), "unexpected key \"state.x.momentum_buffer\"");
  CHECK(!same.has_state(same.param_groups()[0].params[0]));  // nothing loaded from a bad state

  // Adam's step may come back in another floating dtype (a file written elsewhere): stored as float32.
  Tensor w = zeros({2}, kFloat64).requires_grad_();
  Adam adam_a({w}, 0.1);
  w.set_grad(ones({2}, kFloat64));
  adam_a.step();
  OptimizerStateDict adam_sd = adam_a.state_dict();
  for (auto& [name, t] : adam_sd.tensors)
    if (name == "state.0.step") t = t.to(kFloat64);
  Adam adam_b({w.detach().clone().requires_grad_()}, 0.1);
  adam_b.load_state_dict(adam_sd);
  CHECK(adam_b.state(adam_b.param_groups()[0].params[0]).at("step").dtype() == kFloat32);
  for (auto& [name, t] : adam_sd.tensors)
    if (name == "state.0.step") t = zeros({2});
  CHECK_THROWS_CONTAINS(adam_b.load_state_dict(adam_sd), "\"state.0.step\" must hold one floating-point value");
}

TEST_CASE("scheduler state round trip: a rebuilt warmup+cosine schedule continues identically") {
  auto opt_a = two_group_sgd(0.1, 0.05);
  LinearWarmup a(*opt_a, std::make_unique<CosineAnnealingLR>(*opt_a, 20, 1e-3), 4, 0.1);
  for (int s = 0; s < 7; ++s) a.step();
  const OptimizerStateDict opt_state = opt_a->state_dict();
  const json sched_state = json::parse(a.state_dict().dump());  // through text, as in a checkpoint

  auto opt_b = two_group_sgd(0.1, 0.05);
  LinearWarmup b(*opt_b, std::make_unique<CosineAnnealingLR>(*opt_b, 20, 1e-3), 4, 0.1);
  opt_b->load_state_dict(opt_state);
  b.load_state_dict(sched_state);
  CHECK(b.last_epoch() == 7);
  CHECK(b.get_last_lr() == a.get_last_lr());
  for (int s = 0; s < 10; ++s) {
    a.step();
    b.step();
    CHECK(b.get_last_lr() == a.get_last_lr());
    CHECK(opt_b->param_groups()[0].lr() == opt_a->param_groups()[0].lr());
  }
  CHECK_THROWS_CONTAINS(b.load_state_dict(json{{"last_epoch", 1}}), "expected \"warmup\" and \"after\"");
}

TEST_CASE("scheduler argument errors") {
  auto opt = two_group_sgd(0.1, 0.05);
  CHECK_THROWS_CONTAINS(OneCycleLR(*opt, 1.0, 0), "Expected positive integer total_steps, but got 0");
  CHECK_THROWS_CONTAINS(OneCycleLR(*opt, 1.0, 10, 1.5), "Expected float between 0 and 1 pct_start, but got 1.5");
  CHECK_THROWS_CONTAINS(OneCycleLR(*opt, std::vector<double>{1.0}, 10), "expected 2 values for max_lr, got 1");
  // A 0 divisor, or a phase without steps, is PyTorch's ZeroDivisionError (at
  // construction, or on reaching the phase); it gave inf or NaN lrs.
  using Anneal = OneCycleLR::Anneal;
  CHECK_THROWS_CONTAINS(OneCycleLR(*opt, 1.0, 10, 0.3, Anneal::Cos, 0.0), "division by zero (div_factor is 0)");
  CHECK_THROWS_CONTAINS(OneCycleLR(*opt, 1.0, 10, 0.3, Anneal::Cos, 25.0, 0.0),
                        "division by zero (final_div_factor is 0)");
  CHECK_THROWS_CONTAINS(OneCycleLR(*opt, 1.0, 10, 0.1), "float division by zero at step 0: phase 1");
  CHECK_THROWS_CONTAINS(OneCycleLR(*opt, 1.0, 4, 0.25, Anneal::Cos, 25.0, 1e4, true),
                        "float division by zero at step 0: phase 1");
  for (const auto& [pct, three] : {std::pair{1.0, false}, std::pair{0.55, true}}) {
    OneCycleLR last_phase_empty(*opt, 1.0, 10, pct, Anneal::Cos, 25.0, 1e4, three);
    for (int step = 1; step < 10; ++step) last_phase_empty.step();  // as PyTorch: fine up to step 9
    CHECK(std::isfinite(last_phase_empty.get_last_lr()[0]));
    CHECK_THROWS_CONTAINS(last_phase_empty.step(), "float division by zero at step 10");
  }
  CHECK_THROWS_CONTAINS(LinearLR(*opt, 0.0), "Starting multiplicative factor expected to be greater than 0");
  CHECK_THROWS_CONTAINS(LinearLR(*opt, 0.5, 1.5), "Ending multiplicative factor expected to be between 0 and 1.");
  CHECK_THROWS_CONTAINS(StepLR(*opt, 0), "expected a positive step_size, got 0");
  CHECK_THROWS_CONTAINS(CosineAnnealingLR(*opt, 0), "expected a positive T_max, got 0");
  auto other = two_group_sgd(0.1, 0.05);
  CHECK_THROWS_CONTAINS(LinearWarmup(*opt, std::make_unique<StepLR>(*other, 3), 2),
                        "expects all schedulers to belong to the same optimizer");
  CHECK_THROWS_CONTAINS(scaled_lr(0.1, 0), "expected positive batch sizes");
  {
    auto opt3 = two_group_sgd(0.1, 0.05);
    CosineAnnealingLR cosine(*opt3, 10);
    opt3->add_param_group({{zeros({1}, kFloat64).requires_grad_()}});
    CHECK_THROWS_CONTAINS(cosine.step(), "the optimizer has 3 parameter groups, the scheduler was built for 2");
  }

  auto opt2 = two_group_sgd(0.1, 0.05);
  OneCycleLR one_cycle(*opt2, 1.0, 4);
  for (int s = 0; s < 4; ++s) one_cycle.step();
  CHECK_THROWS_CONTAINS(one_cycle.step(), "Tried to step 5 times. The specified number of total steps is 4");
}

// A user-defined optimizer: plain gradient descent with its own options type.
struct SignSGDOptions : OptionsBase<SignSGDOptions> {};
struct SignSGD : Optimizer {
  SignSGD(std::vector<Tensor> params, double lr)
      : Optimizer("SignSGD", {ParamGroup(std::move(params))}, [&] {
          auto o = std::make_unique<SignSGDOptions>();
          o->lr = lr;
          return o;
        }()) {}
  void step_group(ParamGroup& group) override {
    for (Tensor& p : group.params)
      if (p.grad().defined()) {
        Tensor sign = p.grad() / (p.grad().abs() + 1e-30);
        p.add_(sign, -group.lr());
      }
  }
};

TEST_CASE("a user-defined optimizer works with the schedulers; OneCycleLR needs a momentum to cycle") {
  Tensor p = tensor({1.0, -1.0}, {2}, kFloat64).requires_grad_();
  SignSGD opt({p}, 0.5);
  StepLR sched(opt, 1, 0.5);
  p.set_grad(tensor({3.0, -0.1}, {2}, kFloat64));
  opt.step();
  sched.step();
  CHECK(p.to_vector<double>() == std::vector<double>{0.5, -0.5});
  CHECK(opt.param_groups()[0].lr() == 0.25);
  CHECK_THROWS_CONTAINS(OneCycleLR(opt, 1.0, 10),
                        "optimizer must support momentum or beta1 with `cycle_momentum` option enabled");
  CHECK(*opt.param_groups()[0].options->initial_lr == 0.5);  // refused before changing anything
  OneCycleLR no_cycle(opt, 1.0, 10, 0.3, OneCycleLR::Anneal::Cos, 25.0, 1e4, false, {.cycle = false});
  CHECK(opt.param_groups()[0].lr() == doctest::Approx(1.0 / 25).epsilon(1e-15));
}

TEST_CASE("scaled_lr: the linear scaling rule") {
  CHECK(scaled_lr(0.1, 1024) == doctest::Approx(0.4).epsilon(1e-15));
  CHECK(scaled_lr(0.1, 256) == 0.1);
  CHECK(scaled_lr(0.2, 64, 128) == doctest::Approx(0.1).epsilon(1e-15));
}

TEST_CASE("clip_grad_norm_") {
  auto params = [] {
    Tensor a = zeros({2}, kFloat64).requires_grad_(), b = zeros({1}, kFloat64).requires_grad_();
    Tensor none = zeros({4}, kFloat64).requires_grad_();  // no gradient: ignored
    a.set_grad(tensor({3.0, -4.0}, {2}, kFloat64));
    b.set_grad(tensor({12.0}, {1}, kFloat64));
    return std::vector<Tensor>{a, none, b};
  };
  SUBCASE("2-norm, clipped") {
    auto ps = params();
    const double total = clip_grad_norm_(ps, 6.5);
    CHECK(total == doctest::Approx(13.0).epsilon(1e-15));
    const double coef = 6.5 / (13.0 + 1e-6);
    auto ga = ps[0].grad().to_vector<double>();
    CHECK(std::abs(ga[0] - 3.0 * coef) < 1e-14);
    CHECK(std::abs(ga[1] + 4.0 * coef) < 1e-14);
    CHECK(std::abs(ps[2].grad().item<double>() - 12.0 * coef) < 1e-14);
    CHECK(!ps[1].grad().defined());
  }
  SUBCASE("below max_norm: unchanged") {
    auto ps = params();
    CHECK(clip_grad_norm_(ps, 100.0) == doctest::Approx(13.0).epsilon(1e-15));
    CHECK(ps[0].grad().to_vector<double>() == std::vector<double>{3.0, -4.0});
  }
  SUBCASE("1-norm and inf-norm") {
    auto ps = params();
    CHECK(clip_grad_norm_(ps, 100.0, 1.0) == doctest::Approx(19.0).epsilon(1e-15));
    CHECK(clip_grad_norm_(ps, 6.0, INFINITY) == 12.0);
    CHECK(std::abs(ps[2].grad().item<double>() - 12.0 * 6.0 / (12.0 + 1e-6)) < 1e-13);
    auto p3 = params();
    CHECK(clip_grad_norm_(p3, 100.0, 3.0) == doctest::Approx(std::cbrt(27.0 + 64.0 + 1728.0)).epsilon(1e-14));
  }
  SUBCASE("float32 gradients") {
    Tensor a = zeros({2}).requires_grad_();
    a.set_grad(tensor({3.0, 4.0}, {2}));
    CHECK(clip_grad_norm_({a}, 1.0) == doctest::Approx(5.0).epsilon(1e-7));
    CHECK(a.grad().to_vector<double>()[1] == doctest::Approx(0.8).epsilon(1e-6));
  }
  SUBCASE("no gradients: 0") {
    Tensor a = zeros({2}).requires_grad_();
    CHECK(clip_grad_norm_({a}, 1.0) == 0.0);
  }
  SUBCASE("non-finite total norm") {
    auto ps = params();
    ps[2].grad().fill_(NAN);
    CHECK_THROWS_CONTAINS(clip_grad_norm_(ps, 1.0, 2.0, true),
                          "The total norm of order 2 for gradients from `parameters` is non-finite");
    CHECK(ps[0].grad().to_vector<double>() == std::vector<double>{3.0, -4.0});  // refused before scaling
    CHECK(std::isnan(clip_grad_norm_(ps, 1.0)));
    CHECK(std::isnan(ps[0].grad().to_vector<double>()[0]));
    // The inf-norm keeps a NaN wherever it sits (a plain max drops one that comes after a larger value).
    auto pn = params();
    pn[2].grad().fill_(NAN);
    CHECK(std::isnan(clip_grad_norm_(pn, 1e9, INFINITY)));
    auto pl = params();
    pl[0].grad().fill_(NAN);
    CHECK(std::isnan(clip_grad_norm_(pl, 1e9, INFINITY)));
    CHECK_THROWS_CONTAINS(clip_grad_norm_(ps, 1.0, -1.0), "expected norm_type > 0");
  }
}
