// amp::initialize (optim/amp_initialize.h): Apex's opt levels. Each level's
// dtypes (BatchNorm float32 in O2, half in O3), O2's float32 masters and the
// half parameters equal to them rounded after a step, O1/O2 carrying a
// GradScaler and O0/O3 none, O3 training a few steps, Apex's error for an
// unknown level, refusals, and the test device creating no CPU storage except
// the GradScaler's one host read per step; state_dict/load_state_dict round trips.
#include <cmath>
#include <limits>
#include <string>

#include "minidl/core/test_device.h"
#include "tests/device_test_util.h"
#include "tests/test_util.h"

using namespace minidl;

namespace {

struct Setup {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::SGD> opt;
  Tensor x, y;
};

Setup make(Device device = kCPU, uint64_t seed = 3) {
  manual_seed(seed);
  Setup s;
  s.model = models::create_model("smallnet", models::ModelOptions().width(0.125));
  s.model->to(device);
  s.opt = std::make_unique<optim::SGD>(s.model->parameters(), 0.05, 0.9);
  s.x = randn({4, 3, 32, 32}).to(device);
  s.y = tensor(std::vector<int64_t>{1, 7, 3, 0}).to(device);
  return s;
}

bool in_batchnorm(const std::string& name) { return name.find("bn") != std::string::npos; }

double train_step(amp::Amp& amp, const Setup& s) {
  Tensor loss = cross_entropy(amp.forward(s.x), s.y);
  amp.zero_grad();
  amp.backward(loss);
  amp.step();
  return loss.item();
}

}  // namespace

TEST_CASE("amp::initialize: O0 and O1 keep a float32 model; O1 autocasts and has a GradScaler") {
  for (const char* level : {"O0", "O1"}) {
    INFO(std::string(level));
    Setup s = make();
    amp::Amp amp = amp::initialize(s.model, *s.opt, level);
    for (const auto& [name, p] : s.model->named_parameters()) CHECK(p.dtype() == kFloat32);
    CHECK(amp.half_dtype() == kBFloat16);
    CHECK(amp.master_params().empty());
    const bool o1 = std::string(level) == "O1";
    CHECK(amp.use_autocast() == o1);
    CHECK((amp.scaler() != nullptr) == o1);
    {
      auto region = amp.autocast();  // for a custom forward: on only in O1
      CHECK(amp::is_autocast_enabled(DeviceType::CPU) == o1);
      CHECK(amp::get_autocast_dtype(DeviceType::CPU) == kBFloat16);
    }
    CHECK_FALSE(amp::is_autocast_enabled(DeviceType::CPU));
    const Tensor out = amp.forward(s.x);
    CHECK(out.dtype() == kFloat32);
    train_step(amp, s);
    for (const Tensor& p : s.model->parameters()) CHECK(p.grad().dtype() == kFloat32);
    if (o1) CHECK(amp.scaler()->get_scale() == 65536.0);  // one clean step: no backoff, no growth yet
  }
}

TEST_CASE("amp::initialize: O2 casts all but BatchNorm to bfloat16 and keeps float32 masters") {
  Setup s = make();
  const nn::NamedTensors before = [&] {
    nn::NamedTensors c;
    for (const auto& [name, p] : s.model->named_parameters()) c.emplace_back(name, p.detach().clone());
    return c;
  }();
  amp::Amp amp = amp::initialize(s.model, *s.opt, "O2");
  REQUIRE(amp.scaler() != nullptr);
  CHECK_FALSE(amp.use_autocast());
  int64_t n_bn = 0, n_half = 0;
  for (const auto& [name, p] : s.model->named_parameters()) {
    INFO(name);
    CHECK(p.dtype() == (in_batchnorm(name) ? kFloat32 : kBFloat16));
    (in_batchnorm(name) ? n_bn : n_half) += 1;
  }
  CHECK(n_bn == 8);  // SmallNet's four BN layers, weight and bias
  for (const auto& [name, b] : s.model->named_buffers()) {
    INFO(name);
    if (is_floating(b.dtype())) CHECK(b.dtype() == kFloat32);  // running_mean / running_var
  }
  // The masters hold the exact float32 values from before the cast; the
  // optimizer updates the masters (and the float32 BN parameters) only.
  REQUIRE(amp.master_params().size() == static_cast<size_t>(n_half));
  for (const auto& [p, master] : amp.master_params()) {
    CHECK(master.dtype() == kFloat32);
    CHECK(p.dtype() == kBFloat16);
  }
  size_t i = 0;
  for (const auto& [name, p0] : before)
    if (!in_batchnorm(name)) CHECK(testing::allclose(amp.master_params()[i++].second, p0, 0, 0));
  for (const Tensor& p : s.opt->param_groups()[0].params) CHECK(p.dtype() == kFloat32);

  for (int step = 0; step < 2; ++step) {
    const Tensor out = amp.forward(s.x);
    CHECK(out.dtype() == kFloat32);
    Tensor loss = cross_entropy(out, s.y);
    amp.zero_grad();
    amp.backward(loss);
    REQUIRE(amp.step());
  }
  for (const auto& [p, master] : amp.master_params()) {
    CHECK(master.dtype() == kFloat32);
    CHECK(master.grad().dtype() == kFloat32);
    // The half parameter is its master rounded (bit for bit).
    CHECK(testing::allclose(p.to(kFloat32), master.to(kBFloat16).to(kFloat32), 0, 0));
  }
  // The masters moved, and by amounts the bfloat16 copy alone could not hold
  // for every element (updates below half resolution survive in the master).
  double moved = 0, lost = 0;
  i = 0;
  for (const auto& [name, p0] : before) {
    if (in_batchnorm(name)) continue;
    const auto& [p, master] = amp.master_params()[i++];
    moved += (master - p0).abs().sum().item();
    lost += (master - p.to(kFloat32)).abs().sum().item();
  }
  CHECK(moved > 0);
  CHECK(lost > 0);
  for (const auto& [name, b] : s.model->named_buffers())
    if (is_floating(b.dtype())) CHECK(b.dtype() == kFloat32);
}

TEST_CASE("amp::initialize: O2 skips a step with an inf gradient and leaves the masters alone") {
  Setup s = make();
  amp::Amp amp = amp::initialize(s.model, *s.opt, "O2");
  Tensor loss = cross_entropy(amp.forward(s.x), s.y);
  amp.zero_grad();
  amp.backward(loss * std::numeric_limits<double>::infinity());
  std::vector<Tensor> masters;
  for (const auto& [p, m] : amp.master_params()) masters.push_back(m.detach().clone());
  CHECK_FALSE(amp.step());
  CHECK(amp.scaler()->get_scale() == 32768.0);
  for (size_t i = 0; i < masters.size(); ++i) CHECK(testing::allclose(amp.master_params()[i].second, masters[i], 0, 0));
}

TEST_CASE("amp::initialize: state_dict / load_state_dict carry the loss scaler through a checkpoint (Apex's keys)") {
  Setup s = make();
  amp::Amp amp = amp::initialize(s.model, *s.opt, "O2");
  Tensor loss = cross_entropy(amp.forward(s.x), s.y);
  amp.zero_grad();
  amp.backward(loss * std::numeric_limits<double>::infinity());
  CHECK_FALSE(amp.step());  // backoff: 65536 -> 32768
  train_step(amp, s);
  train_step(amp, s);
  const nlohmann::json saved = nlohmann::json::parse(amp.state_dict().dump());  // as through a file
  CHECK(saved == nlohmann::json{{"loss_scaler0", {{"loss_scale", 32768.0}, {"unskipped", 2}}}});

  Setup r = make();
  amp::Amp resumed = amp::initialize(r.model, *r.opt, "O2");
  CHECK(resumed.scaler()->get_scale() == 65536.0);  // before loading: initialize's defaults
  resumed.load_state_dict(saved);
  CHECK(resumed.scaler()->get_scale() == 32768.0);
  CHECK(resumed.scaler()->get_growth_tracker() == 2);
  CHECK(resumed.state_dict() == saved);
  train_step(amp, s);
  train_step(resumed, r);
  CHECK(resumed.state_dict() == amp.state_dict());  // both count on from 2
  CHECK(resumed.scaler()->get_growth_tracker() == 3);

  // Apex's handling of other contents.
  Setup o = make();
  amp::Amp other = amp::initialize(o.model, *o.opt, "O1");
  other.load_state_dict({{"loss_scaler0", {{"loss_scale", 8.0}, {"unskipped", 5}}},
                         {"loss_scaler1", {{"loss_scale", 4.0}, {"unskipped", 1}}}});  // the second is skipped
  CHECK(other.scaler()->get_scale() == 8.0);
  CHECK(other.scaler()->get_growth_tracker() == 5);
  CHECK_THROWS_CONTAINS(other.load_state_dict({{"loss_scaler0", {{"loss_scale", 8.0}, {"unskipped", 5}}}, {"epoch", 3}}),
                        "Error(s) in loading state_dict. Unexpected key(s) in state_dict: \"epoch\".");
  CHECK_THROWS_CONTAINS(other.load_state_dict({{"loss_scaler0", {{"loss_scale", 8.0}}}}),
                        "to hold \"loss_scale\" and \"unskipped\"");
  CHECK_THROWS_CONTAINS(other.load_state_dict({{"loss_scaler0", {{"loss_scale", "big"}, {"unskipped", 1}}}}),
                        "\"loss_scale\" to be a number");
  CHECK_THROWS(other.load_state_dict(nlohmann::json::array()));

  // O3 has no scaler: Apex's static scale 1.0, and nothing else to take.
  Setup t = make();
  amp::Amp pure = amp::initialize(t.model, *t.opt, "O3");
  CHECK(pure.state_dict() == nlohmann::json{{"loss_scaler0", {{"loss_scale", 1.0}, {"unskipped", 0}}}});
  pure.load_state_dict(pure.state_dict());
  CHECK_THROWS_CONTAINS(pure.load_state_dict(saved), "opt_level O3 has no loss scaler");
}

TEST_CASE("amp::initialize: O3 is a pure bfloat16 model without a scaler and trains") {
  Setup s = make();
  amp::Amp amp = amp::initialize(s.model, *s.opt, "O3");
  CHECK(amp.scaler() == nullptr);
  CHECK(amp.master_params().empty());
  for (const auto& [name, p] : s.model->named_parameters()) CHECK(p.dtype() == kBFloat16);
  for (const auto& [name, b] : s.model->named_buffers())
    if (is_floating(b.dtype())) CHECK(b.dtype() == kBFloat16);
  const double first = train_step(amp, s);
  double last = first;
  for (int i = 0; i < 8; ++i) last = train_step(amp, s);
  CHECK(std::isfinite(last));
  CHECK(last < 0.5 * first);  // a fixed batch of 4 is learned
  for (const Tensor& p : s.model->parameters()) CHECK(p.grad().dtype() == kBFloat16);
}

TEST_CASE("amp::initialize: Apex's error for an unknown level; refusals") {
  for (const char* bad : {"O4", "o2", "02", ""}) {
    Setup s = make();
    CHECK_THROWS_CONTAINS(amp::initialize(s.model, *s.opt, bad),
                          std::string("Unexpected optimization level ") + bad +
                              ". Options are 'O0', 'O1', 'O2', 'O3'.  Note that in `O0`, `O1`, etc., the prefix O "
                              "is the letter O, not the number zero.");
  }
  {
    Setup s = make();
    amp::Amp plain = amp::initialize(s.model, *s.opt, "O0");
    train_step(plain, s);
    CHECK_THROWS_CONTAINS(amp::initialize(s.model, *s.opt, "O2"), "call amp.initialize before the first optimizer step");
  }
  {
    Setup s = make();
    s.model->to(kBFloat16);
    CHECK_THROWS_CONTAINS(amp::initialize(s.model, *s.opt, "O1"), "expected the model's parameters in float32");
  }
  {
    Setup s = make();
    optim::SGD other({randn({3}).requires_grad_()}, 0.1);
    CHECK_THROWS_CONTAINS(amp::initialize(s.model, other, "O1"), "a parameter that is not the model's");
  }
}

TEST_CASE("amp::initialize: every level trains on the test device without a CPU storage") {
  for (const char* level : {"O0", "O1", "O2", "O3"}) {
    INFO(std::string(level));
    Setup s = make(kTestDevice);
    const int64_t made = testing::cpu_storages_made([&] {
      amp::Amp amp = amp::initialize(s.model, *s.opt, level);
      for (int i = 0; i < 2; ++i) {
        Tensor loss = cross_entropy(amp.forward(s.x), s.y);
        amp.zero_grad();
        amp.backward(loss);
        amp.step();
      }
      for (const auto& [p, master] : amp.master_params()) CHECK(master.device() == kTestDevice);
    });
    // The only host read: GradScaler::step's item() of the summed found_inf
    // flags (one per step, as PyTorch's .item()); nothing else leaves the device.
    const bool scaled = std::string(level) == "O1" || std::string(level) == "O2";
    CHECK(made == (scaled ? 2 : 0));
    for (const Tensor& p : s.model->parameters()) CHECK(p.device() == kTestDevice);
  }
}
