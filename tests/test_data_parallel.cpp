// nn::DataParallel over several test devices (test:0, test:1, test:2: CPU
// kernels on separately allocated host memory, core/test_device.h). A kernel
// handed tensors from two devices fails its dispatch check, so these runs
// also check that each replica computes on its own device.
//
// Oracles: without BatchNorm, DataParallel's output, loss and gradients on the
// original parameters equal the module on the whole batch (float rounding:
// the per-chunk sums are added in another order). With BatchNorm in training
// mode they differ (each replica normalizes with its own chunk's statistics),
// and equal the module run on each chunk separately; running statistics come
// from chunk 0 only (PyTorch's behaviour: why SyncBatchNorm exists).
#include <mutex>
#include <string>
#include <vector>

#include "minidl/minidl.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::max_abs_diff;

namespace {

const Device D0("test:0"), D1("test:1"), D2("test:2");

struct MlpImpl : nn::Module {
  MlpImpl() : Module("Mlp") {
    fc1 = register_module("fc1", nn::Linear(6, 8));
    fc2 = register_module("fc2", nn::Linear(8, 3));
  }
  Tensor forward(const Tensor& x) override { return fc2(relu(fc1(x))); }
  nn::Linear fc1{nullptr}, fc2{nullptr};
};
MINIDL_MODULE(Mlp);

struct ConvNetImpl : nn::Module {
  explicit ConvNetImpl(bool bn = false) : Module("ConvNet"), with_bn(bn) {
    conv = register_module("conv", nn::Conv2d(nn::Conv2dOptions(2, 4, 3).padding(1)));
    if (with_bn) norm = register_module("norm", nn::BatchNorm2d(4));
    fc = register_module("fc", nn::Linear(4 * 5 * 5, 3));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = conv(x);
    if (with_bn) h = norm(h);
    return fc(relu(h).reshape({x.size(0), 4 * 5 * 5}));
  }
  bool with_bn;
  nn::Conv2d conv{nullptr};
  nn::BatchNorm2d norm{nullptr};
  nn::Linear fc{nullptr};
};
MINIDL_MODULE(ConvNet);

std::vector<Tensor> grads_of(nn::Module& m) {
  std::vector<Tensor> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.grad().to(kCPU).clone());
  return out;
}

double max_grad_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0.0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, max_abs_diff(a[i], b[i]));
  return d;
}

// Loss, gradients and output of model on x (whole batch), then of DataParallel.
struct Compared {
  double loss_diff, output_diff, grad_diff;
};
template <class Holder>
Compared compare_whole_batch(Holder model, std::vector<Device> devices, const Tensor& x, const Tensor& y) {
  model->zero_grad();
  const Tensor ref_out = model(x.to(D0));
  const Tensor ref_loss = cross_entropy(ref_out, y.to(D0));
  ref_loss.backward();
  const auto ref_grads = grads_of(*model);

  model->zero_grad();
  nn::DataParallel dp(model, devices);
  const Tensor out = dp(x);
  CHECK(out.device() == devices[0]);
  CHECK(out.shape() == ref_out.shape());
  const Tensor loss = cross_entropy(out, y.to(devices[0]));
  loss.backward();
  return {std::abs(loss.item<double>() - ref_loss.item<double>()), max_abs_diff(out, ref_out),
          max_grad_diff(grads_of(*model), ref_grads)};
}

}  // namespace

TEST_CASE("DataParallel without BatchNorm: the whole batch's loss and gradients, 2 and 3 devices, uneven") {
  manual_seed(0);
  auto mlp = Mlp();
  mlp->to(D0);
  for (int64_t rows : {8, 5, 7}) {
    const Tensor x = randn({rows, 6});
    const Tensor y = randint(0, 3, {rows});
    for (const auto& devices : {std::vector<Device>{D0, D1}, std::vector<Device>{D0, D1, D2}}) {
      CAPTURE(rows);
      CAPTURE(devices.size());
      const Compared c = compare_whole_batch(mlp, devices, x, y);
      CHECK(c.loss_diff < 1e-6);
      CHECK(c.output_diff < 1e-6);
      CHECK(c.grad_diff < 1e-6);
    }
  }

  // A conv net in float64: the sums differ only by order (1e-12).
  auto net = ConvNet(false);
  net->to(kFloat64);
  net->to(D0);
  const Tensor x = randn({5, 2, 5, 5}, kFloat64);
  const Tensor y = randint(0, 3, {5});
  const Compared c = compare_whole_batch(net, {D0, D1}, x, y);
  CHECK(c.loss_diff < 1e-12);
  CHECK(c.grad_diff < 1e-12);
}

TEST_CASE("DataParallel: each replica runs its chunk on its device (chunk sizes as Tensor::chunk)") {
  struct Probe {
    std::mutex mu;
    std::vector<std::pair<std::string, int64_t>> seen;  // (device, rows)
  };
  static Probe probe;
  struct ProbeNetImpl : nn::Module {
    ProbeNetImpl() : Module("ProbeNet") { fc = register_module("fc", nn::Linear(2, 2)); }
    Tensor forward(const Tensor& x) override {
      CHECK(fc->weight.device() == x.device());
      std::lock_guard<std::mutex> lock(probe.mu);
      probe.seen.push_back({x.device().str(), x.size(0)});
      return fc(x);
    }
    nn::Linear fc{nullptr};
  };
  auto net = std::make_shared<ProbeNetImpl>();
  net->to(D0);
  nn::DataParallel dp(net, {D0, D1, D2}, kCPU, [] { return std::make_shared<ProbeNetImpl>(); });
  auto rows_on = [&](int64_t rows) {
    probe.seen.clear();
    const Tensor out = dp(randn({rows, 2}));
    CHECK(out.device() == kCPU);  // gathered to output_device
    CHECK(out.size(0) == rows);
    std::sort(probe.seen.begin(), probe.seen.end());
    return probe.seen;
  };
  using Seen = std::vector<std::pair<std::string, int64_t>>;
  CHECK(rows_on(5) == Seen{{"test:0", 2}, {"test:1", 2}, {"test:2", 1}});
  CHECK(rows_on(4) == Seen{{"test:0", 2}, {"test:1", 2}});  // chunk: 2 + 2, so only two devices
  CHECK(rows_on(1) == Seen{{"test:0", 1}});                 // smaller than the device count
  CHECK(dp->replicas_built() == 2);
  CHECK(rows_on(0) == Seen{{"test:0", 0}, {"test:1", 0}, {"test:2", 0}});  // empty: an empty chunk each
}

TEST_CASE("DataParallel: gradients reach a scattered input; no_grad leaves no history; state_dict prefix") {
  manual_seed(1);
  auto mlp = Mlp();
  mlp->to(D0);
  Tensor x = randn({5, 6}).to(D0).detach().requires_grad_(true);
  mlp(x).sum().backward();
  const Tensor ref = x.grad().clone();
  x.set_grad(Tensor());
  nn::DataParallel dp(mlp, {D0, D1});
  dp(x).sum().backward();
  CHECK(max_abs_diff(x.grad(), ref) < 1e-6);

  {
    NoGradGuard no_grad;
    CHECK_FALSE(dp(x).requires_grad());
  }
  const auto state = dp->state_dict();
  CHECK(state.front().first == "module.fc1.weight");  // as PyTorch's DataParallel
}

TEST_CASE("DataParallel with BatchNorm in training: per-chunk statistics, running stats from chunk 0") {
  manual_seed(2);
  auto net = ConvNet(true);
  net->to(kFloat64);
  net->to(D0);
  auto twin = ConvNet(true);  // same weights, to run the chunks by hand
  twin->to(kFloat64);
  twin->to(D0);
  twin->load_state_dict(net->state_dict());
  const auto initial = net->state_dict();
  const Tensor x = randn({5, 2, 5, 5}, kFloat64).to(D0);
  const Tensor y = randint(0, 3, {5}).to(D0);

  // ConvNet() would build the BN-free variant: the derived factory does not fit, so pass one.
  nn::DataParallel dp(net, {D0, D1}, std::nullopt, [] { return ConvNet(true).ptr(); });
  net->zero_grad();
  const Tensor out = dp(x);
  cross_entropy(out, y).backward();

  // Not the whole batch: BN saw 3 and 2 rows, not 5.
  auto whole = ConvNet(true);
  whole->to(kFloat64);
  whole->to(D0);
  whole->load_state_dict(initial);
  CHECK(max_abs_diff(whole(x), out) > 1e-3);

  // The module on each chunk, concatenated: the same output and gradients.
  twin->zero_grad();
  const Tensor out0 = twin(x.narrow(0, 0, 3));
  const Tensor twin_mean_after_chunk0 = twin->norm->running_mean.clone();
  const Tensor twin_out = cat({out0, twin(x.narrow(0, 3, 2))}, 0);
  cross_entropy(twin_out, y).backward();
  CHECK(max_abs_diff(twin_out, out) < 1e-12);
  CHECK(max_grad_diff(grads_of(*net), grads_of(*twin)) < 1e-12);

  // Running statistics: replica 0's update only (replica 1's copy is dropped).
  CHECK(max_abs_diff(net->norm->running_mean, twin_mean_after_chunk0) == 0.0);
  CHECK(net->norm->num_batches_tracked.item<int64_t>() == 1);

  // In eval mode BN uses the running statistics: DataParallel == the whole batch.
  dp->eval();
  whole->load_state_dict(net->state_dict());
  whole->eval();
  CHECK(max_abs_diff(dp(x), whole(x)) < 1e-12);
}

TEST_CASE("DataParallel: one device is a thin wrapper; no device_ids without CUDA calls the module") {
  manual_seed(3);
  auto mlp = Mlp();
  mlp->to(D0);
  const Tensor x = randn({4, 6});
  nn::DataParallel one(mlp, {D0}, kCPU);
  const Tensor out = one(x);
  CHECK(out.device() == D0);  // PyTorch returns module(inputs[0]) here, without the gather
  CHECK(max_abs_diff(out, mlp(x.to(D0))) == 0.0);
  CHECK(one->replicas_built() == 0);
  if (!cuda::is_available()) {
    auto cpu_mlp = Mlp();
    nn::DataParallel none(cpu_mlp);
    CHECK(none->device_ids().empty());
    CHECK(max_abs_diff(none(x), cpu_mlp(x)) == 0.0);
  }
}

TEST_CASE("DataParallel: replicas do not move the random stream; Dropout runs the replicas in turn") {
  manual_seed(4);
  auto mlp = Mlp();
  mlp->to(D0);
  nn::DataParallel dp(mlp, {D0, D1, D2});
  const Tensor x = randn({6, 6});
  const std::string before = default_generator().state();
  (void)dp(x);  // builds two replicas, whose Linear layers initialize themselves
  CHECK(dp->replicas_built() == 2);
  CHECK(default_generator().state() == before);

  auto seq = nn::Sequential(nn::Linear(6, 6), nn::Dropout(0.5));
  seq->to(D0);
  nn::DataParallel dropped(seq, {D0, D1}, std::nullopt,
                           [] { return nn::Sequential(nn::Linear(6, 6), nn::Dropout(0.5)).ptr(); });
  const Tensor out = dropped(x);
  CHECK(out.shape() == Shape{6, 6});
  CHECK(default_generator().state() != before);  // Dropout drew
}

TEST_CASE("DataParallel errors") {
  manual_seed(5);
  auto mlp = Mlp();
  mlp->to(D1);
  nn::DataParallel dp(mlp, {D0, D1});
  CHECK_THROWS_CONTAINS(dp(randn({4, 6})),
                        "module must have its parameters and buffers on device test:0 (device_ids[0]) but found one "
                        "of them on device: test:1");
  mlp->to(D0);
  CHECK_THROWS_CONTAINS(dp(randn({})), "chunk expects at least a 1-dimensional tensor");
  CHECK_THROWS_CONTAINS(dp(randn({4, 5})), "Caught an error in replica");
  CHECK_THROWS_CONTAINS(nn::DataParallel(mlp, {D0, kCPU}), "device_ids must all be of one device type");
  CHECK_THROWS_CONTAINS(nn::DataParallel(mlp, {D0, D0}), "device_ids must be distinct, got test:0 twice");

  auto seq = nn::Sequential(nn::Linear(6, 3));
  seq->to(D0);
  CHECK_THROWS_CONTAINS(nn::DataParallel(seq.ptr(), {D0, D1}), "pass make_replica");
  // Sequential is default-constructible, so a factory is derived: an empty Sequential, which the check refuses.
  nn::DataParallel wrong(seq, {D0, D1});
  CHECK_THROWS_CONTAINS(wrong(randn({4, 6})), "make_replica built a module whose parameters [] differ");
}
