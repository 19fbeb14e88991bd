// DistributedDataParallel and SyncBatchNorm with the model on the test device
// (core/test_device.h) over Gloo, which stages device tensors through host
// copies: two forked ranks (uneven batches) train the same model for 3 steps
// on the CPU and on the test device, and the results must agree to 1e-12
// (float64). The device run must keep everything on the device: parameters,
// gradients, DDP's buckets, optimizer state and the SyncBN running
// statistics, and every collective DDP and SyncBN issue (metadata, buffers,
// buckets, statistics) must carry device tensors, as NCCL will require: the
// group they get refuses any other (DeviceOnlyGroup below). A tensor that
// dropped to the CPU fails that check, a kernel's device check, or one of the
// device assertions. And a device training step after the first must create
// no CPU storage outside the collectives, so no host read anywhere in the
// step (SyncBN's merge, its backward's counts and sums included, and the
// scalar operands, which are kernel arguments); the last test case checks
// SyncBN's own steps alone, strictly. Gloo stages device
// tensors through host tensors by design: DeviceOnlyGroup counts the CPU
// storages created inside each collective call and the checks subtract them
// (a device-native backend such as NCCL stages nothing).
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tests/device_test_util.h"
#include "minidl/dist/batch_norm_report.h"
#include "minidl/dist/ddp.h"
#include "minidl/dist/sync_batch_norm.h"
#include "tests/dist_test_util.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::run_ranks;

namespace {

constexpr double kTol = 1e-12;

using minidl::testing::cpu_storages;

// Gloo with NCCL's rule: every tensor of a collective must be on `device`.
class DeviceOnlyGroup final : public dist::ProcessGroup {
 public:
  DeviceOnlyGroup(dist::ProcessGroupPtr inner, Device device)
      : ProcessGroup(inner->rank(), inner->size()), inner_(std::move(inner)), device_(device) {}
  std::string backend_name() const override { return inner_->backend_name(); }
  dist::WorkPtr all_reduce(Tensor& t, dist::ReduceOp op) override {
    check("all_reduce", {t});
    return staged([&] { return inner_->all_reduce(t, op); });
  }
  dist::WorkPtr broadcast(Tensor& t, int root) override {
    check("broadcast", {t});
    return staged([&] { return inner_->broadcast(t, root); });
  }
  dist::WorkPtr all_gather(std::vector<Tensor>& outputs, const Tensor& input) override {
    std::vector<Tensor> all = outputs;
    all.push_back(input);
    check("all_gather", all);
    return staged([&] { return inner_->all_gather(outputs, input); });
  }
  dist::WorkPtr all_gather_into_tensor(Tensor& output, const Tensor& input) override {
    check("all_gather_into_tensor", {output, input});
    return staged([&] { return inner_->all_gather_into_tensor(output, input); });
  }
  dist::WorkPtr reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, dist::ReduceOp op) override {
    std::vector<Tensor> all = inputs;
    all.push_back(output);
    check("reduce_scatter", all);
    return staged([&] { return inner_->reduce_scatter(output, inputs, op); });
  }
  dist::WorkPtr barrier() override { return inner_->barrier(); }
  dist::Milliseconds timeout() const override { return inner_->timeout(); }
  DType wire_dtype(DType dtype) const override { return inner_->wire_dtype(dtype); }
  int collectives = 0;
  // CPU storages created inside the collective calls: Gloo's host staging.
  int64_t staged_cpu_storages = 0;

 private:
  dist::WorkPtr staged(const std::function<dist::WorkPtr()>& issue) {
    const int64_t before = cpu_storages();
    dist::WorkPtr work = issue();
    staged_cpu_storages += cpu_storages() - before;
    return work;
  }
  void check(const char* op, const std::vector<Tensor>& tensors) {
    ++collectives;
    for (const Tensor& t : tensors)
      DIST_REQUIRE(t.device() == device_, << op << ": a tensor on " << t.device() << ", expected " << device_);
  }
  dist::ProcessGroupPtr inner_;
  Device device_;
};

// Conv2d + BatchNorm2d + ReLU + Flatten + Linear + BatchNorm1d + ReLU +
// Linear in float64, every BN made a SyncBatchNorm, on `device`.
std::shared_ptr<nn::Module> sync_bn_net(Device device, const dist::ProcessGroupPtr& group = nullptr) {
  manual_seed(21);
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(2, 4, 3).padding(1)), nn::BatchNorm2d(4), nn::ReLU(),
                     nn::Flatten(), nn::Linear(4 * 5 * 5, 6), nn::BatchNorm1d(6), nn::ReLU(), nn::Linear(6, 3));
  net->to(kFloat64);
  std::shared_ptr<nn::Module> model = nn::convert_sync_batch_norm(net.ptr(), group);
  model->to(device);
  return model;
}

struct Trained {
  nn::NamedTensors params, buffers;  // host copies
};

// Three DDP steps (SGD with momentum and weight decay, gradients clipped by
// the sync-free Tensor form) on this rank's share of a fixed batch: rank r
// holds 5 - 2r samples, so the SyncBN counts differ between ranks.
Trained train(Device device, int rank, bool as_view = false) {
  auto group = std::make_shared<DeviceOnlyGroup>(dist::default_group(), device);
  std::shared_ptr<nn::Module> model = sync_bn_net(device, group);
  dist::DistributedDataParallel ddp(model, dist::DDPOptions().gradient_as_bucket_view(as_view), group);
  for (size_t b = 0; b < ddp.reducer().num_buckets(); ++b)
    DIST_REQUIRE(ddp.reducer().bucket_device(b) == device, << "bucket " << b);
  optim::SGD opt(model->parameters(), 0.05, 0.9, 0.0, 1e-3);
  const int64_t n = 5 - 2 * rank;
  for (int step = 0; step < 3; ++step) {
    manual_seed(100 + 10 * step + rank);
    const Tensor x = randn({n, 2, 5, 5}, kFloat64).to(device);
    const Tensor y = randn({n, 3}, kFloat64).to(device);
    const int64_t cpu_before = cpu_storages(), staged_before = group->staged_cpu_storages;
    opt.zero_grad();
    Tensor loss = (ddp(x) - y).pow(2.0).mean();
    loss.backward();
    std::vector<Tensor> grads;
    for (const Tensor& p : model->parameters()) {
      DIST_REQUIRE(p.grad().defined() && p.grad().device() == device);
      grads.push_back(p.grad());
    }
    const Tensor total = optim::get_total_norm(grads);
    DIST_REQUIRE(total.device() == device);
    optim::clip_grads_with_norm_(model->parameters(), 1.0, total);
    opt.step();
    // After the first step (lazy state), nothing but Gloo's staging may make a CPU tensor.
    const int64_t outside = cpu_storages() - cpu_before - (group->staged_cpu_storages - staged_before);
    if (!device.is_cpu() && step > 0) {
      DIST_REQUIRE(outside == 0, << "step " << step << ": " << outside
                                  << " CPU storages outside the collectives, expected none");
    }
    for (const Tensor& p : model->parameters())
      DIST_REQUIRE(opt.state(p).at("momentum_buffer").device() == device);
  }
  Trained out;
  for (const auto& [name, p] : model->named_parameters()) {
    DIST_REQUIRE(p.device() == device, << name);
    out.params.emplace_back(name, p.detach().to(kCPU));
  }
  for (const auto& [name, b] : model->named_buffers()) {
    DIST_REQUIRE(b.device() == device, << name);
    out.buffers.emplace_back(name, b.to(kCPU));
  }
  // The cross-rank report gathers the running statistics on their device;
  // SyncBN keeps them equal on every rank.
  const dist::CrossRankBatchNormReport report = dist::batch_norm_report_across_ranks(*model, group);
  DIST_REQUIRE(report.layers.size() == 2);
  // Construction (3), per step: buffer broadcast (up to one per dtype, 2),
  // 2 SyncBN gathers + 2 all-reduces, 1 bucket; the report (2).
  DIST_REQUIRE(group->collectives >= 3 + 3 * 5 + 2, << group->collectives);
  DIST_REQUIRE(report.max_running_mean_diff() == 0.0 && report.max_running_var_diff() == 0.0, << report);
  return out;
}

void require_same(const nn::NamedTensors& a, const nn::NamedTensors& b) {
  DIST_REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    DIST_REQUIRE(a[i].first == b[i].first);
    DIST_REQUIRE(a[i].second.dtype() == b[i].second.dtype(), << a[i].first);
    ::minidl::testing::dist_require_close(a[i].second, b[i].second, 0.0, kTol, a[i].first.c_str());
  }
}

}  // namespace

TEST_CASE("DDP + SyncBatchNorm on the test device over Gloo equal the same run on the CPU (copies and bucket views)") {
  const std::string failures = run_ranks(2, [](int rank, int world) {
    const Trained cpu = train(kCPU, rank);
    const Trained dev = train(kTestDevice, rank);
    require_same(cpu.params, dev.params);
    require_same(cpu.buffers, dev.buffers);
    // gradient_as_bucket_view: the same bits, and as device-clean.
    const Trained view = train(kTestDevice, rank, /*as_view=*/true);
    require_same(cpu.params, view.params);
    require_same(cpu.buffers, view.buffers);
    // Training moved the parameters and the running statistics.
    const Trained fresh{sync_bn_net(kCPU)->named_parameters(), sync_bn_net(kCPU)->named_buffers()};
    DIST_REQUIRE(::minidl::testing::max_abs_diff(fresh.params[0].second, dev.params[0].second) > 1e-6);
    for (const auto& [name, b] : dev.buffers)
      if (name.find("running_mean") != std::string::npos)
        DIST_REQUIRE(b.abs().max().item<double>() > 0.0, << name);
  });
  CHECK_MESSAGE(failures.empty(), failures, "(each rank's error is on stderr above)");
}

TEST_CASE("Gloo collectives on test-device tensors: staged through the host, results on the device") {
  const std::string failures = run_ranks(2, [](int rank, int world) {
    auto group = dist::default_group();
    Tensor t = full({5}, rank + 1.0, kFloat64).to(kTestDevice);
    group->all_reduce(t, dist::ReduceOp::SUM)->wait();
    DIST_REQUIRE(t.device() == kTestDevice);
    DIST_REQUIRE(t.to_vector<double>() == std::vector<double>(5, 3.0));

    Tensor b = full({3}, rank == 1 ? 7.0 : 0.0, kInt64).to(kTestDevice);
    group->broadcast(b, 1)->wait();
    DIST_REQUIRE(b.to_vector<int64_t>() == std::vector<int64_t>(3, 7));

    Tensor in = full({rank + 1}, rank + 1.0, kFloat32).to(kTestDevice);
    std::vector<Tensor> outs{empty({1}, TensorOptions(kFloat32).device(kTestDevice)),
                             empty({2}, TensorOptions(kFloat32).device(kTestDevice))};
    group->all_gather(outs, in)->wait();
    DIST_REQUIRE(outs[0].to_vector<float>() == std::vector<float>{1.0f});
    DIST_REQUIRE(outs[1].to_vector<float>() == std::vector<float>(2, 2.0f));

    Tensor gathered = empty({4}, TensorOptions(kFloat64).device(kTestDevice));
    group->all_gather_into_tensor(gathered, full({2}, rank * 10.0, kFloat64).to(kTestDevice))->wait();
    DIST_REQUIRE(gathered.to_vector<double>() == (std::vector<double>{0, 0, 10, 10}));

    Tensor out = empty({2}, TensorOptions(kFloat64).device(kTestDevice));
    std::vector<Tensor> ins{full({2}, rank + 1.0, kFloat64).to(kTestDevice),
                            full({2}, 10.0 * (rank + 1), kFloat64).to(kTestDevice)};
    group->reduce_scatter(out, ins, dist::ReduceOp::SUM)->wait();
    DIST_REQUIRE(out.to_vector<double>() == std::vector<double>(2, rank == 0 ? 3.0 : 30.0));
    DIST_REQUIRE(group->wire_dtype(DType::UInt8) == kInt64 && group->wire_dtype(DType::Float16) == kFloat32 &&
                 group->wire_dtype(kFloat64) == kFloat64);
  });
  CHECK_MESSAGE(failures.empty(), failures, "(each rank's error is on stderr above)");
}

TEST_CASE("SyncBatchNorm steps on the test device: the CPU's bits, no CPU storage outside the collectives") {
  // The functional SyncBN (forward with its all-gather, merge and running
  // update; backward with its all-reduce) over 3 ranks holding 3, 0 and 2
  // samples, 3 steps with a cumulative momentum. Every device step, the first
  // included (SyncBN keeps no lazy state), must create no CPU storage but
  // Gloo's staging, and give the CPU run's results bit for bit.
  const std::string failures = run_ranks(3, [](int rank, int world) {
    const int64_t n = rank == 0 ? 3 : rank == 1 ? 0 : 2;
    auto same_bits = [](const Tensor& a, const Tensor& b) {
      const Tensor ha = a.to(kCPU).contiguous(), hb = b.to(kCPU).contiguous();
      return ha.dtype() == hb.dtype() && ha.shape() == hb.shape() &&
             std::memcmp(ha.raw_data(), hb.raw_data(), ha.nbytes()) == 0;
    };
    std::vector<std::vector<Tensor>> results[2];  // per device, per step
    for (Device device : {kCPU, kTestDevice}) {
      auto group = std::make_shared<DeviceOnlyGroup>(dist::default_group(), device);
      manual_seed(7);
      Tensor w = (randn({3}, kFloat64) + 1.0).to(device).requires_grad_();
      Tensor b = randn({3}, kFloat64).to(device).requires_grad_();
      Tensor rm = zeros({3}, kFloat64).to(device), rv = ones({3}, kFloat64).to(device);
      for (int step = 0; step < 3; ++step) {
        manual_seed(200 + 10 * step + rank);
        Tensor x = (randn({n, 3, 2, 2}, kFloat64) * 1.5 + 0.3).to(device).requires_grad_();
        const Tensor dy = randn({n, 3, 2, 2}, kFloat64).to(device);
        const int64_t cpu_before = cpu_storages(), staged_before = group->staged_cpu_storages;
        const Tensor y = dist::SyncBatchNormFunction::apply(x, w, b, rm, rv, 1e-5, 1.0 / (step + 1), group);
        y.backward(dy);
        const int64_t outside = cpu_storages() - cpu_before - (group->staged_cpu_storages - staged_before);
        if (!device.is_cpu())
          DIST_REQUIRE(outside == 0, << "step " << step << ": " << outside << " CPU storages outside the collectives");
        DIST_REQUIRE(group->staged_cpu_storages > staged_before || device.is_cpu());
        results[device.is_cpu() ? 0 : 1].push_back({y, x.grad(), w.grad(), b.grad(), rm.clone(), rv.clone()});
      }
    }
    for (size_t step = 0; step < results[0].size(); ++step)
      for (size_t i = 0; i < results[0][step].size(); ++i) {
        DIST_REQUIRE(results[1][step][i].device() == kTestDevice, << "step " << step << " tensor " << i);
        DIST_REQUIRE(same_bits(results[0][step][i], results[1][step][i]), << "step " << step << " tensor " << i);
      }
  });
  CHECK_MESSAGE(failures.empty(), failures, "(each rank's error is on stderr above)");
}
