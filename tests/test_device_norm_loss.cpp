// Running statistics and loss reductions on the test device (core/test_device.h):
// the running-statistics update, eval statistics and the losses' target count
// run as device kernels, so a step makes no CPU tensor and gives the CPU's
// values bit for bit. Complements test_device_ops.cpp (one call per op) with
// the cases those kernels add: strided and float32 running stats,
// InstanceNorm's N rows, BatchNorm momentum=None over several steps and after
// load_state_dict, every reduction with ignore_index and label smoothing.
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tests/device_test_util.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::cpu_storages_made;
using minidl::testing::leaves_on;
using minidl::testing::max_abs_diff;

namespace {

const Device kDev = kTestDevice;

// CPU storages created while f runs.
bool same_values(const Tensor& dev, const Tensor& cpu) {
  return dev.device() == kDev && dev.shape() == cpu.shape() && dev.dtype() == cpu.dtype() &&
         max_abs_diff(dev, cpu) == 0.0;
}

// Runs a loss forward and backward on the CPU and on the test device; the
// device run must create no CPU tensor and match bit for bit (NaN where the
// CPU has NaN).
void check_loss(const std::string& name, const std::vector<Tensor>& inputs,
                const std::function<Tensor(const std::vector<Tensor>&)>& f) {
  CAPTURE(name);
  std::vector<Tensor> cpu = leaves_on(inputs, kCPU), dev = leaves_on(inputs, kDev);
  Tensor y_cpu = f(cpu);
  const Tensor probe = randn(y_cpu.shape(), y_cpu.dtype());
  y_cpu.backward(probe);
  const Tensor probe_dev = probe.to(kDev);
  Tensor y_dev;
  CHECK(cpu_storages_made([&] {
          y_dev = f(dev);
          y_dev.backward(probe_dev);
        }) == 0);
  REQUIRE(y_dev.device() == kDev);
  REQUIRE(y_dev.shape() == y_cpu.shape());
  const std::vector<double> a = y_dev.to_vector<double>(), b = y_cpu.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i)
    CHECK_MESSAGE((a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))), name, " output ", i, ": ", a[i],
                  " vs ", b[i]);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].requires_grad()) CHECK_MESSAGE(same_values(dev[i].grad(), cpu[i].grad()), name, " grad ", i);
}

}  // namespace

TEST_CASE("batch_norm running statistics update on their device, as on the CPU") {
  manual_seed(11);
  for (DType dtype : {kFloat32, kFloat64}) {
    CAPTURE(dtype_name(dtype));
    const Tensor x = randn({5, 3, 4, 2}, dtype) * 2.0 + 1.0;
    const Tensor rm = randn({3}, dtype), rv = rand({3}, dtype) + 0.5;
    Tensor rm_cpu = rm.clone(), rv_cpu = rv.clone();
    Tensor rm_dev = rm.to(kDev), rv_dev = rv.to(kDev), x_dev = x.to(kDev);
    const uint64_t version = rm_dev.version();
    for (int step = 0; step < 3; ++step) {
      (void)batch_norm(x * static_cast<double>(step + 1), rm_cpu, rv_cpu, Tensor(), Tensor(), true, 0.3);
      const Tensor xs = (x * static_cast<double>(step + 1)).to(kDev);
      CHECK(cpu_storages_made([&] { (void)batch_norm(xs, rm_dev, rv_dev, Tensor(), Tensor(), true, 0.3); }) == 0);
    }
    CHECK(rm_dev.version() > version);  // updated in place
    CHECK(same_values(rm_dev, rm_cpu));
    CHECK(same_values(rv_dev, rv_cpu));

    // eval normalizes with them on the device
    Tensor y_dev;
    CHECK(cpu_storages_made([&] { y_dev = batch_norm(x_dev, rm_dev, rv_dev, Tensor(), Tensor(), false); }) == 0);
    CHECK(same_values(y_dev, batch_norm(x, rm_cpu, rv_cpu, Tensor(), Tensor(), false)));
  }
}

TEST_CASE("batch_norm updates strided running statistics through a contiguous copy") {
  manual_seed(12);
  const Tensor x = randn({6, 4}, kFloat64);
  const Tensor rm = randn({4}, kFloat64), rv = rand({4}, kFloat64) + 0.5;
  Tensor rm_ref = rm.clone(), rv_ref = rv.clone();
  (void)batch_norm(x, rm_ref, rv_ref, Tensor(), Tensor(), true, 0.1);
  for (Device device : {kCPU, kDev}) {
    CAPTURE(device.str());
    // every other element of an (8) buffer
    Tensor rm_buf = zeros({8}, TensorOptions(kFloat64).device(device));
    Tensor rv_buf = zeros({8}, TensorOptions(kFloat64).device(device));
    Tensor rm_view = rm_buf.view({4, 2}).select(1, 0), rv_view = rv_buf.view({4, 2}).select(1, 1);
    rm_view.copy_(rm.to(device));
    rv_view.copy_(rv.to(device));
    REQUIRE_FALSE(rm_view.is_contiguous());
    (void)batch_norm(x.to(device), rm_view, rv_view, Tensor(), Tensor(), true, 0.1);
    CHECK(max_abs_diff(rm_view, rm_ref) == 0.0);
    CHECK(max_abs_diff(rv_view, rv_ref) == 0.0);
    CHECK(rm_buf.view({4, 2}).select(1, 1).to_vector<double>() == std::vector<double>(4, 0.0));  // untouched
  }
}

TEST_CASE("instance_norm running statistics: the mean over N instances, on their device") {
  manual_seed(13);
  for (DType dtype : {kFloat32, kFloat64}) {
    CAPTURE(dtype_name(dtype));
    const Tensor x = randn({3, 4, 5}, dtype) + 0.5;
    const Tensor w = randn({4}, dtype), b = randn({4}, dtype);
    Tensor rm_cpu = zeros({4}, dtype), rv_cpu = ones({4}, dtype);
    Tensor rm_dev = rm_cpu.to(kDev), rv_dev = rv_cpu.to(kDev);
    const Tensor x_dev = x.to(kDev), w_dev = w.to(kDev), b_dev = b.to(kDev);
    const Tensor y_cpu = instance_norm(x, rm_cpu, rv_cpu, w, b, true, 0.2);
    Tensor y_dev;
    CHECK(cpu_storages_made([&] { y_dev = instance_norm(x_dev, rm_dev, rv_dev, w_dev, b_dev, true, 0.2); }) == 0);
    CHECK(same_values(y_dev, y_cpu));
    CHECK(same_values(rm_dev, rm_cpu));
    CHECK(same_values(rv_dev, rv_cpu));
    // running_mean = 0.8 * 0 + 0.2 * mean over n of the instance means
    const Tensor expected = x.to(kFloat64).mean({2}).mean({0}) * 0.2;
    CHECK(testing::allclose(rm_cpu.to(kFloat64), expected, 1e-5, 1e-6));

    // use_input_stats=false normalizes each instance with the running stats
    CHECK(cpu_storages_made([&] { y_dev = instance_norm(x_dev, rm_dev, rv_dev, w_dev, b_dev, false); }) == 0);
    CHECK(same_values(y_dev, instance_norm(x, rm_cpu, rv_cpu, w, b, false)));
  }
}

TEST_CASE("BatchNorm momentum=None on the test device: the cumulative average without reading the counter back") {
  manual_seed(14);
  auto make = [] {
    nn::BatchNorm2d bn(nn::BatchNormOptions(3).momentum(std::nullopt));
    bn->to(kFloat64);
    return bn;
  };
  nn::BatchNorm2d cpu = make(), dev = make();
  dev->to(kDev);
  std::vector<Tensor> batches;
  for (int k = 0; k < 4; ++k) batches.push_back(randn({2 + k, 3, 3, 2}, kFloat64) * (1.0 + k) + static_cast<double>(k));

  auto step = [&](int k) {
    (void)cpu(batches[k]);
    const Tensor x = batches[k].to(kDev);
    return cpu_storages_made([&] { (void)dev(x); });
  };
  // The first step after to() reads the counter once (the mirror is stale);
  // later steps read nothing.
  CHECK(step(0) == 1);  // item(): one host copy
  CHECK(step(1) == 0);
  CHECK(step(2) == 0);
  CHECK(dev->num_batches_tracked.item<int64_t>() == 3);
  CHECK(same_values(dev->running_mean, cpu->running_mean));
  CHECK(same_values(dev->running_var, cpu->running_var));

  // A checkpoint with a different count: the next factor is 1 / (count + 1).
  nn::BatchNorm2d loaded = make();
  for (int k = 0; k < 3; ++k) (void)loaded(batches[k] * 0.5);
  loaded->num_batches_tracked.fill_(9.0);
  cpu->load_state_dict(loaded->state_dict());
  dev->load_state_dict(loaded->state_dict());
  (void)step(3);
  CHECK(cpu->num_batches_tracked.item<int64_t>() == 10);
  CHECK(dev->num_batches_tracked.item<int64_t>() == 10);
  CHECK(same_values(dev->running_mean, cpu->running_mean));
  CHECK(same_values(dev->running_var, cpu->running_var));
  // 0.9 of the loaded statistics and 0.1 of the batch's
  Tensor rm = loaded->running_mean.clone(), rv = loaded->running_var.clone();
  (void)batch_norm(batches[3], rm, rv, Tensor(), Tensor(), true, 0.1);
  CHECK(max_abs_diff(cpu->running_mean, rm) == 0.0);

  // reset_running_stats and a write by hand are seen too
  dev->reset_running_stats();
  cpu->reset_running_stats();
  (void)step(0);
  dev->num_batches_tracked.fill_(1.0);
  cpu->num_batches_tracked.fill_(1.0);
  (void)step(1);
  CHECK(dev->num_batches_tracked.item<int64_t>() == 2);
  CHECK(same_values(dev->running_mean, cpu->running_mean));
  CHECK(same_values(dev->running_var, cpu->running_var));
}

TEST_CASE("class losses on the test device: every reduction, ignore_index, label smoothing, no CPU tensor") {
  manual_seed(15);
  const Tensor logits = randn({6, 5}, kFloat64).requires_grad_(true);
  const Tensor target = tensor<int64_t>({1, -100, 4, 0, 2, -100});
  const Tensor target7 = tensor<int64_t>({1, 7, 4, 0, 7, 3});  // ignore_index 7
  const Tensor spatial = randn({2, 4, 3, 2}).requires_grad_(true);
  const Tensor spatial_target = tensor<int64_t>({0, 3, -100, 1, 2, 2, 3, -100, 0, 1, 1, 3}, {2, 3, 2});
  const Tensor all_ignored = tensor<int64_t>({-100, -100, -100, -100, -100, -100});
  for (Reduction r : {Reduction::None, Reduction::Sum, Reduction::Mean}) {
    const std::string tag = r == Reduction::None ? " none" : r == Reduction::Sum ? " sum" : " mean";
    check_loss("cross_entropy" + tag, {logits, target}, [r](auto& t) { return cross_entropy(t[0], t[1], r); });
    check_loss("cross_entropy smoothing" + tag, {logits, target},
               [r](auto& t) { return cross_entropy(t[0], t[1], r, -100, 0.2); });
    check_loss("cross_entropy ignore_index 7" + tag, {logits, target7},
               [r](auto& t) { return cross_entropy(t[0], t[1], r, 7, 0.1); });
    check_loss("cross_entropy (N, C, d1, d2)" + tag, {spatial, spatial_target},
               [r](auto& t) { return cross_entropy(t[0], t[1], r, -100, 0.05); });
    check_loss("cross_entropy all ignored" + tag, {logits, all_ignored},
               [r](auto& t) { return cross_entropy(t[0], t[1], r); });
    check_loss("nll_loss" + tag, {logits, target}, [r](auto& t) { return nll_loss(t[0], t[1], r); });
    check_loss("nll_loss ignore_index 7" + tag, {logits, target7}, [r](auto& t) { return nll_loss(t[0], t[1], r, 7); });
    check_loss("nll_loss (N, C, d1, d2)" + tag, {spatial, spatial_target},
               [r](auto& t) { return nll_loss(t[0], t[1], r); });
    check_loss("mse_loss" + tag, {logits, randn({6, 5}, kFloat64)}, [r](auto& t) { return mse_loss(t[0], t[1], r); });
  }
}

TEST_CASE("class losses: mean divides by the non-ignored count the kernel wrote") {
  const Tensor x = tensor<double>({0.0, 0.0, 0.0, 0.0, 0.0, 0.0}, {3, 2});  // loss log 2 at every position
  for (Device device : {kCPU, kDev}) {
    CAPTURE(device.str());
    const Tensor xd = x.to(device).clone().detach().requires_grad_(true);
    Tensor loss = nll_loss(xd, tensor<int64_t>({1, -100, 0}).to(device));
    CHECK(loss.item<double>() == 0.0);
    loss = cross_entropy(xd, tensor<int64_t>({1, -100, 0}).to(device));
    CHECK(loss.item<double>() == doctest::Approx(std::log(2.0)).epsilon(1e-15));  // sum / 2, not / 3
    loss.backward();
    // d/dx of the mean over 2 positions: (softmax - onehot) / 2; the ignored row gets 0
    const std::vector<double> g = xd.grad().to_vector<double>(), expected{0.25, -0.25, 0.0, 0.0, -0.25, 0.25};
    for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(expected[i]).epsilon(1e-12));
    CHECK(std::isnan(cross_entropy(xd, tensor<int64_t>({-100, -100, -100}).to(device)).item<double>()));
  }
}

TEST_CASE("class losses check target values for CPU targets") {
  const Tensor x = randn({3, 4});
  CHECK_THROWS_CONTAINS(cross_entropy(x, tensor<int64_t>({0, 4, 1})),
                        "cross_entropy: Target 4 is out of bounds. (expected a class index in [0, 4) or "
                        "ignore_index -100)");
  CHECK_THROWS_CONTAINS(nll_loss(x, tensor<int64_t>({0, -1, 1}), Reduction::Sum),
                        "nll_loss: Target -1 is out of bounds");
  CHECK_NOTHROW(nll_loss(x, tensor<int64_t>({0, -1, 1}), Reduction::Sum, -1));
}
