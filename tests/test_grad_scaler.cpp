// amp::GradScaler (optim/grad_scaler.h) and its kernels (ops/amp.h):
//   - replays tests/goldens/grad_scaler.json (scripts/make_grad_scaler_goldens.py:
//     torch.amp.GradScaler("cpu") + SGD over scripted steps with inf/NaN
//     gradients) and checks every step's skip decision, scale, growth tracker,
//     unscaled gradients and parameters exactly, on the CPU and on the test
//     device, where a step may create one CPU storage: the one host read;
//   - PyTorch's misuse errors, unscale_ then clipping, disabled pass-through,
//     gradient accumulation, state_dict round trips;
//   - the kernels' math (ops/amp_math.h) element by element.
// The CUDA kernels against these: tests/test_cuda_grad_scaler.cpp.
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "minidl/core/cuda.h"
#include "minidl/ops/amp.h"
#include "minidl/ops/amp_math.h"
#include "tests/device_test_util.h"
#include "tests/grad_scaler_replay.h"
#include "tests/test_util.h"

using namespace minidl;
using nlohmann::json;
using namespace minidl::testing;

namespace {

// One float32 parameter p = [1, 2, 3] with SGD(lr 0.5) and a scaler at 2^10.
struct Setup {
  Tensor p = tensor({1.0, 2.0, 3.0}).requires_grad_();
  optim::SGD opt{{p}, 0.5};
  amp::GradScaler scaler{"cpu", 1024.0, 2.0, 0.5, 3};
  // Backward of scale(sum(p * x)): p.grad += 1024 * x.
  void backward(const std::vector<double>& x) { scaler.scale((p * tensor(x).to(kFloat32)).sum()).backward(); }
};

}  // namespace

TEST_CASE("GradScaler matches torch.amp.GradScaler step by step (golden, exact), on the CPU and the test device") {
  const json& cases = goldens().at("cases");
  REQUIRE(cases.size() == 3);
  for (const json& c : cases) {
    replay(c, kCPU);
    replay(c, kTestDevice);
  }
}

TEST_CASE("GradScaler: unscale_ once per step; step does not unscale again; clipping sees real gradients") {
  Setup s;
  s.backward({3.0, 4.0, 0.0});
  CHECK(s.p.grad().to_vector<double>() == std::vector<double>{3072.0, 4096.0, 0.0});
  s.scaler.unscale_(s.opt);
  CHECK(s.p.grad().to_vector<double>() == std::vector<double>{3.0, 4.0, 0.0});
  CHECK_THROWS_CONTAINS(s.scaler.unscale_(s.opt),
                        "unscale_() has already been called on this optimizer since the last update().");
  // clip_grad_norm_ sees the unscaled norm 5 and halves the gradients.
  CHECK(optim::clip_grad_norm_({s.p}, 2.5) == doctest::Approx(5.0).epsilon(1e-12));
  CHECK(testing::allclose(s.p.grad(), tensor({1.5, 2.0, 0.0}), 1e-6, 0.0));
  CHECK(s.scaler.step(s.opt));
  // step used the clipped gradients as they were: not divided by the scale again.
  CHECK(testing::allclose(s.p.grad(), tensor({1.5, 2.0, 0.0}), 1e-6, 0.0));
  CHECK(testing::allclose(s.p, tensor({1.0 - 0.75, 2.0 - 1.0, 3.0}), 1e-6, 0.0));
  CHECK_THROWS_CONTAINS(s.scaler.unscale_(s.opt), "unscale_() is being called after step().");
  CHECK_THROWS_CONTAINS(s.scaler.step(s.opt), "step() has already been called since the last update().");
  s.scaler.update();
  CHECK(s.scaler.get_growth_tracker() == 1);
  // After update() the cycle starts again.
  s.opt.zero_grad();
  s.backward({1.0, 1.0, 1.0});
  CHECK_NOTHROW(s.scaler.unscale_(s.opt));
}

TEST_CASE("GradScaler: step() without unscale_ unscales, and skips on inf/NaN") {
  Setup s;
  s.backward({0.5, -0.25, 2.0});
  CHECK(s.scaler.step(s.opt));
  CHECK(s.p.to_vector<double>() == std::vector<double>{0.75, 2.125, 2.0});
  REQUIRE(s.scaler.found_inf_per_device(s.opt).size() == 1);
  CHECK(s.scaler.found_inf_per_device(s.opt)[0].item<double>() == 0.0);
  s.scaler.update();
  s.opt.zero_grad();
  s.backward({1.0, std::numeric_limits<double>::quiet_NaN(), 1.0});
  CHECK_FALSE(s.scaler.step(s.opt));
  CHECK(s.p.to_vector<double>() == std::vector<double>{0.75, 2.125, 2.0});
  CHECK(s.scaler.found_inf_per_device(s.opt)[0].item<double>() == 1.0);
  s.scaler.update();
  CHECK(s.scaler.get_scale() == 512.0);
  CHECK(s.scaler.get_growth_tracker() == 0);
  CHECK(s.scaler.found_inf_per_device(s.opt).empty());  // update() forgets them
}

TEST_CASE("GradScaler: several optimizers, gradients on two devices") {
  amp::GradScaler scaler("cpu", 1024.0, 2.0, 0.5, 3);
  Tensor a = tensor({1.0}).requires_grad_(), b = tensor({1.0}).to(kTestDevice).requires_grad_();
  Tensor c = tensor({1.0}).requires_grad_();
  optim::SGD both({a, b}, 0.5), other({c}, 0.5);
  for (const Tensor& l : scaler.scale(std::vector<Tensor>{(a * 2.0).sum(), (b * 2.0).sum(), (c * 2.0).sum()}))
    l.backward();
  CHECK(b.grad().item<double>() == 2048.0);  // the scale was copied to the test device
  b.set_grad(full({1}, std::numeric_limits<double>::infinity(), TensorOptions(kFloat32).device(kTestDevice)));
  CHECK_FALSE(scaler.step(both));  // an inf on one device skips the whole optimizer
  CHECK(scaler.found_inf_per_device(both).size() == 2);
  CHECK(a.grad().item<double>() == 2.0);  // unscaled all the same
  CHECK(a.item<double>() == 1.0);
  CHECK(scaler.step(other));  // another optimizer's gradients are its own business
  CHECK(c.item<double>() == 0.0);
  scaler.update();  // but every optimizer's inf counts for the scale
  CHECK(scaler.get_scale() == 512.0);
  CHECK(scaler.get_growth_tracker() == 0);
}

TEST_CASE("GradScaler: PyTorch's misuse errors and argument checks") {
  Setup s;
  CHECK_THROWS_CONTAINS(s.scaler.step(s.opt), "Attempted step but _scale is None.  This may indicate your script");
  CHECK_THROWS_CONTAINS(s.scaler.unscale_(s.opt), "Attempted unscale_ but _scale is None.");
  CHECK_THROWS_CONTAINS(s.scaler.update(), "Attempted update but _scale is None.");
  (void)s.scaler.scale(tensor({1.0}));
  CHECK_THROWS_CONTAINS(s.scaler.update(), "No inf checks were recorded prior to update.");
  CHECK_THROWS_CONTAINS(s.scaler.step(s.opt), "No inf checks were recorded for this optimizer.");  // no gradient

  CHECK_THROWS_CONTAINS(amp::GradScaler("cpu", 1.0, 1.0), "The growth factor must be > 1.0.");
  CHECK_THROWS_CONTAINS(amp::GradScaler("cpu", 1.0, 2.0, 1.0), "The backoff factor must be < 1.0.");
  CHECK_THROWS_CONTAINS(amp::GradScaler("cpu", 0.0), "expected a finite init_scale > 0, got 0");
  CHECK_THROWS_CONTAINS(amp::GradScaler("cpu", 2.0, 2.0, 0.5, 0), "expected growth_interval >= 1, got 0");
  CHECK_THROWS_CONTAINS(amp::GradScaler("tpu"), "tpu");
  CHECK_NOTHROW(amp::GradScaler("cpu", 1.0, 1.0, 2.0, 0, /*enabled=*/false));  // unchecked when disabled, as PyTorch
  CHECK_THROWS_CONTAINS(s.scaler.set_growth_factor(0.5), "The growth factor must be > 1.0.");
  CHECK_THROWS_CONTAINS(s.scaler.set_backoff_factor(1.5), "The backoff factor must be < 1.0.");
  CHECK_THROWS_CONTAINS(s.scaler.set_growth_interval(-1), "expected growth_interval >= 1, got -1");
  CHECK_THROWS_CONTAINS(s.scaler.scale(tensor(std::vector<int64_t>{1, 2})), "expected floating-point outputs, got int64");

  // float16 gradients cannot be unscaled (bfloat16 ones can).
  Tensor h = zeros({2}, kFloat16).requires_grad_();
  Tensor b = zeros({2}, kBFloat16).requires_grad_();
  optim::SGD half_opt({h}, 0.1), bf16_opt({b}, 0.1);
  h.set_grad(full({2}, 1024.0, kFloat16));
  b.set_grad(full({2}, 1024.0, kBFloat16));
  CHECK_THROWS_CONTAINS(s.scaler.unscale_(half_opt), "Attempting to unscale FP16 gradients.");
  s.scaler.unscale_(bf16_opt);
  CHECK(b.grad().to_vector<double>() == std::vector<double>{1.0, 1.0});

  Tensor one = tensor({300.0});
  CHECK_THROWS_CONTAINS(s.scaler.update(one.requires_grad_()), "new_scale should be a float or a 1-element");
  CHECK_THROWS_CONTAINS(s.scaler.update(tensor({1.0, 2.0})), "new_scale should be a float or a 1-element");
  CHECK_THROWS_CONTAINS(s.scaler.update(tensor({1.0}).to(kTestDevice)), "new_scale should be a float");
  s.scaler.update(tensor({300.0}));
  CHECK(s.scaler.get_scale() == 300.0);
  CHECK(s.scaler.get_growth_tracker() == 0);
}

TEST_CASE("GradScaler: scale() keeps PyTorch's result dtypes, for one output and a list") {
  amp::GradScaler scaler("cpu");
  CHECK(scaler.get_scale() == 65536.0);  // init_scale before the first scale()
  CHECK_FALSE(scaler.get_scale_async().defined());
  const Tensor x64 = scaler.scale(tensor({0.5}, {}, kFloat64));
  CHECK(x64.dtype() == kFloat64);
  CHECK(x64.item<double>() == 32768.0);
  const Tensor h0 = scaler.scale(full({}, 0.5, kFloat16));  // 0-d half * 0-d float32: float32
  CHECK(h0.dtype() == kFloat32);
  CHECK(h0.item<double>() == 32768.0);
  // 16-bit with dimensions: on the CPU the float32 scale multiplies unrounded
  // and the product is rounded once (PyTorch 2.15, CPU: [32768, 16384, inf]);
  // it was rounded to float16 first, 65536 -> inf, which only PyTorch's CUDA
  // kernels do (the test device stands in for them below).
  const Tensor h1 = scaler.scale(tensor({0.5, 0.25, 2.0}, {3}, kFloat16));
  CHECK(h1.dtype() == kFloat16);
  const std::vector<double> h1v = h1.to_vector<double>();
  CHECK((h1v[0] == 32768.0 && h1v[1] == 16384.0 && std::isinf(h1v[2])));
  const Tensor b1 = scaler.scale(full({2}, 0.5, kBFloat16));
  CHECK(b1.dtype() == kBFloat16);
  CHECK(b1.to_vector<double>() == std::vector<double>{32768.0, 32768.0});
  // Where the scale's rounding shows (PyTorch 2.15, CPU: 260 772 and 2052 6148).
  amp::GradScaler s257("cpu", 257.0), s2049("cpu", 2049.0);
  CHECK(s257.scale(tensor({1.0078125, 3.0}, {2}, kBFloat16)).to_vector<double>() == std::vector<double>{260, 772});
  CHECK(s2049.scale(tensor({1.0009765625, 3.0}, {2}, kFloat16)).to_vector<double>() == std::vector<double>{2052, 6148});
  const Tensor on_device = s2049.scale(tensor({1.0009765625, 3.0}, {2}, kFloat16).to(kTestDevice));
  CHECK(on_device.to_vector<double>() == std::vector<double>{2050, 6144});  // the scale rounded to 2048 first
  amp::GradScaler device_scaler("cpu");
  CHECK(std::isinf(device_scaler.scale(full({2}, 0.5, kFloat16).to(kTestDevice)).to_vector<double>()[0]));
  const std::vector<Tensor> many = scaler.scale(std::vector<Tensor>{tensor({1.0}), tensor({2.0}).to(kTestDevice)});
  CHECK(many[0].item<double>() == 65536.0);
  CHECK(many[1].device() == kTestDevice);
  CHECK(many[1].item<double>() == 131072.0);
  CHECK(scaler.get_scale_async().device() == kCPU);  // created on the first output's device
  const Tensor w = tensor({2.0}).requires_grad_();
  scaler.scale(w * 3.0).sum().backward();
  CHECK(w.grad().item<double>() == 3.0 * 65536.0);
}

TEST_CASE("GradScaler disabled: a pass-through") {
  amp::GradScaler scaler("cpu", 1024.0, 2.0, 0.5, 3, /*enabled=*/false);
  CHECK_FALSE(scaler.is_enabled());
  Tensor p = tensor({1.0}).requires_grad_();
  optim::SGD opt({p}, 1.0);
  const Tensor loss = (p * 2.0).sum();
  CHECK(scaler.scale(loss).is_same(loss));
  loss.backward();
  p.set_grad(tensor({std::numeric_limits<double>::infinity()}));
  scaler.unscale_(opt);
  CHECK(std::isinf(p.grad().item<double>()));
  CHECK(scaler.step(opt));  // steps whatever the gradients hold
  CHECK(std::isinf(p.item<double>()));
  CHECK_NOTHROW(scaler.update());
  CHECK(scaler.get_scale() == 1.0);
  CHECK(scaler.state_dict() == json::object());
  CHECK_NOTHROW(scaler.load_state_dict(json::object()));
  if (!cuda::is_available())
    CHECK_FALSE(amp::GradScaler().is_enabled());  // "cuda", the default, without a GPU: warns and disables
}

TEST_CASE("GradScaler: gradient accumulation (scaled gradients add up; one step and update per batch)") {
  Setup s;
  const std::vector<std::vector<double>> micro = {{1.0, 2.0, 3.0}, {0.5, -1.0, 0.25}, {-2.0, 0.0, 1.0}};
  for (const auto& x : micro) s.backward(x);
  CHECK(s.p.grad().to_vector<double>() == std::vector<double>{-512.0, 1024.0, 4352.0});
  CHECK(s.scaler.step(s.opt));
  CHECK(s.p.grad().to_vector<double>() == std::vector<double>{-0.5, 1.0, 4.25});
  CHECK(s.p.to_vector<double>() == std::vector<double>{1.25, 1.5, 0.875});
  s.scaler.update();
  CHECK(s.scaler.get_growth_tracker() == 1);
  CHECK(s.scaler.get_scale() == 1024.0);
  // One overflowing micro-batch spoils the whole effective batch.
  s.opt.zero_grad();
  s.backward({1.0, 1.0, 1.0});
  s.backward({std::numeric_limits<double>::infinity(), 1.0, 1.0});
  CHECK_FALSE(s.scaler.step(s.opt));
  CHECK(s.p.to_vector<double>() == std::vector<double>{1.25, 1.5, 0.875});
  s.scaler.update();
  CHECK(s.scaler.get_scale() == 512.0);
}

TEST_CASE("GradScaler: state_dict round trip (PyTorch's keys and JSON types)") {
  Setup s;
  for (int i = 0; i < 4; ++i) {  // 3 clean steps (grow to 2048), then 1 clean: tracker 1
    s.opt.zero_grad();
    s.backward({1.0, 2.0, 3.0});
    s.scaler.step(s.opt);
    s.scaler.update();
  }
  const json sd = s.scaler.state_dict();
  CHECK(sd == json::parse(R"({"scale": 2048.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                              "growth_interval": 3, "_growth_tracker": 1})"));
  CHECK(sd.at("scale").is_number_float());
  CHECK(sd.at("growth_interval").is_number_integer());
  CHECK(sd.at("_growth_tracker").is_number_integer());

  // Into a fresh scaler (used at its first scale()) and into a used one.
  amp::GradScaler fresh("cpu"), used("cpu", 8.0, 4.0, 0.25, 100);
  (void)used.scale(tensor({1.0}));
  for (amp::GradScaler* other : {&fresh, &used}) {
    other->load_state_dict(json::parse(sd.dump()));
    CHECK(other->state_dict() == sd);
    Tensor q = tensor({1.0, 2.0, 3.0}).requires_grad_();
    optim::SGD opt({q}, 0.5);
    for (int i = 0; i < 2; ++i) {  // two more clean steps: the tracker reaches 3 and the scale grows
      opt.zero_grad();
      other->scale((q * tensor({1.0, 1.0, 1.0})).sum()).backward();
      other->step(opt);
      other->update();
    }
    CHECK(other->get_scale() == 4096.0);
    CHECK(other->get_growth_tracker() == 0);
  }
  CHECK_THROWS_CONTAINS(fresh.load_state_dict(json::object()),
                        "The source state dict is empty, possibly because it was saved from a disabled instance");
  json missing = sd;
  missing.erase("_growth_tracker");
  CHECK_THROWS_CONTAINS(fresh.load_state_dict(missing), "missing key \"_growth_tracker\"");
  json wrong = sd;
  wrong["growth_interval"] = 2.5;
  CHECK_THROWS_CONTAINS(fresh.load_state_dict(wrong), "expected \"growth_interval\" to be an integer, got 2.5");
  CHECK(fresh.get_scale() == 4096.0);  // a refused dict changes nothing
  json negative = sd;
  negative["scale"] = -1.0;
  CHECK_THROWS_CONTAINS(fresh.load_state_dict(negative), "expected a finite \"scale\" >= 0, got -1");
}

TEST_CASE("GradScaler: a scale backed off to 0 (non-finite gradients every step) saves and loads") {
  Tensor p = tensor({1.0}).requires_grad_();
  optim::SGD opt({p}, 0.1);
  amp::GradScaler scaler("cpu");
  int steps = 0;
  while (scaler.get_scale() > 0.0 && steps < 1000) {  // PyTorch 2.15: 0.0 after 166 steps
    p.set_grad(full({1}, std::numeric_limits<double>::quiet_NaN()));
    (void)scaler.scale(tensor({1.0}));
    scaler.step(opt);
    scaler.update();
    ++steps;
  }
  CHECK(steps == 166);
  amp::GradScaler resumed("cpu");
  resumed.load_state_dict(scaler.state_dict());  // was refused: "expected a finite init_scale > 0, got 0"
  CHECK(resumed.get_scale() == 0.0);
}

TEST_CASE("amp kernel math: unscale_element and update_scale") {
  float found = 0.0f;
  CHECK(amp_math::unscale_element(3.0f, 0.25f, &found) == 0.75f);
  CHECK(amp_math::unscale_element(3.0, 0.1f, &found) == 3.0 * static_cast<double>(0.1f));  // widened, not rounded
  CHECK(found == 0.0f);
  const float neg_zero = amp_math::unscale_element(-0.0f, 1.0f, &found);
  CHECK(std::signbit(neg_zero));
  CHECK(static_cast<float>(amp_math::unscale_element(Half(6.0f), 0.5f, &found)) == 3.0f);
  CHECK(static_cast<float>(amp_math::unscale_element(BFloat16(6.0f), 0.5f, &found)) == 3.0f);
  CHECK(found == 0.0f);
  CHECK(std::isinf(amp_math::unscale_element(std::numeric_limits<float>::infinity(), 0.5f, &found)));
  CHECK(found == 1.0f);
  for (float v : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    found = 0.0f;
    (void)amp_math::unscale_element(Half(v), 0.5f, &found);
    CHECK(found == 1.0f);
    found = 0.0f;
    (void)amp_math::unscale_element(static_cast<double>(v), 1.0f, &found);  // checked even when inv_scale is 1
    CHECK(found == 1.0f);
  }

  float scale = 1000.0f;
  int64_t tracker = 0;
  amp_math::update_scale(&scale, &tracker, 0.0f, 3.0, 0.3, 2);
  CHECK((scale == 1000.0f && tracker == 1));
  amp_math::update_scale(&scale, &tracker, 0.0f, 3.0, 0.3, 2);
  CHECK((scale == 3000.0f && tracker == 0));
  amp_math::update_scale(&scale, &tracker, 2.0f, 3.0, 0.3, 2);  // any non-zero found_inf (a sum) backs off
  CHECK((scale == 900.0f && tracker == 0));  // 3000 * 0.3 in double, then float: float(0.3) would give 900.00006
  scale = std::ldexp(1.0f, 127);
  amp_math::update_scale(&scale, &tracker, 0.0f, 2.0, 0.5, 1);
  CHECK((scale == std::ldexp(1.0f, 127) && tracker == 0));  // growth to inf refused
  tracker = 5;  // past the interval (a smaller interval set later): never grows, as PyTorch
  amp_math::update_scale(&scale, &tracker, 0.0f, 2.0, 0.5, 3);
  CHECK(tracker == 6);
}

TEST_CASE("amp kernels through ops/amp.h: many tensors, OpenMP sizes, non-contiguous gradients, checks") {
  for (Device device : {kCPU, kTestDevice}) {
    CAPTURE(device.str());
    const TensorOptions f32 = TensorOptions(kFloat32).device(device);
    Tensor big = full({70000}, 8.0, f32), strided = full({3, 4}, 8.0, f32).t();
    Tensor found = zeros({}, f32), inv = full({}, 0.125, f32);
    amp_foreach_non_finite_check_and_unscale_({big, strided}, found, inv);
    CHECK(found.item<double>() == 0.0);
    CHECK(big.sum().item<double>() == 70000.0);
    CHECK(strided.sum().item<double>() == 12.0);  // written back into the transposed view
    std::vector<double> v(70000, 1.0);
    v.back() = std::numeric_limits<double>::quiet_NaN();
    Tensor poisoned = values_on(v, kFloat32, device);
    amp_foreach_non_finite_check_and_unscale_({poisoned}, found, inv);
    CHECK(found.item<double>() == 1.0);
    amp_foreach_non_finite_check_and_unscale_({full({2}, 1.0, f32)}, found, inv);
    CHECK(found.item<double>() == 1.0);  // never reset by the kernel

    Tensor scale = full({}, 4.0, f32), tracker = zeros({}, TensorOptions(kInt64).device(device));
    amp_update_scale_(scale, tracker, found, 2.0, 0.5, 2);
    CHECK(scale.item<double>() == 2.0);
    CHECK_THROWS_CONTAINS(amp_update_scale_(scale, tracker.to(kFloat32), found, 2.0, 0.5, 2),
                          "growth_tracker must be an int64 tensor.");
    CHECK_THROWS_CONTAINS(amp_update_scale_(scale.to(kFloat64), tracker, found, 2.0, 0.5, 2),
                          "current_scale must be a float tensor.");
  }
  const Tensor found = zeros({}), inv = ones({});
  CHECK_THROWS_CONTAINS(amp_foreach_non_finite_check_and_unscale_({zeros({2}), zeros({2}, kFloat64)}, found, inv),
                        "All tensors in the tensor list must have the same dtype.");
  CHECK_THROWS_CONTAINS(amp_foreach_non_finite_check_and_unscale_({zeros({2})}, zeros({2}), inv),
                        "found_inf must be a 1-element tensor.");
  CHECK_THROWS_CONTAINS(amp_foreach_non_finite_check_and_unscale_({zeros({2})}, found, ones({}, kFloat64)),
                        "inv_scale must be a float tensor.");
  CHECK_THROWS_CONTAINS(amp_foreach_non_finite_check_and_unscale_({zeros({2}).to(kTestDevice)}, found, inv),
                        "expected every scaled gradient on cpu, got test");
  CHECK_THROWS_CONTAINS(
      amp_foreach_non_finite_check_and_unscale_({zeros({2}, kInt64)}, zeros({}), ones({})),
      "expected floating-point gradients, got int64");
}
