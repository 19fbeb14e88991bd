// DDP's gradient_as_bucket_view, the ordering of the reducer's work against
// its all-reduces, and DDP's features (no_sync, find_unused_parameters,
// broadcast_buffers, the unused-parameter error; tests/ddp_feature_checks.h)
// on the CPU and on the test device (forked ranks over Gloo,
// tests/dist_test_util.h).
//
// Ordering: LateGroup wraps Gloo so that an all-reduce's (or broadcast's)
// result lands in the tensor only when wait() is called on its Work; until
// then the tensor holds NaN (a collective still writing it on a comm stream),
// and whatever was written into it meanwhile is overwritten when the result
// lands. So a reducer that read a bucket before waiting (copied it into .grad,
// divided it), or wrote into a bucket whose all-reduce was in flight, gives
// wrong gradients and the oracle fails; and it counts synchronize() calls,
// which the reducer must never make (NCCL's wait() only orders the stream).
// The test device cannot see streams (core/test_device.h): this is the CPU
// stand-in; the CUDA runs are tests/test_cuda_dist_oracles.cpp.
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "tests/ddp_feature_checks.h"
#include "tests/dist_oracles.h"
#include "tests/dist_test_util.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::testing;

namespace {


void check_ranks(int world, const std::function<void(int rank, int world)>& fn) {
  const std::string failures = run_ranks(world, fn, std::chrono::seconds(120));
  CHECK_MESSAGE(failures.empty(), failures, "(each rank's error is on stderr above)");
}

class LateGroup;

// Lands the result in the target at the first wait().
class LateWork final : public dist::Work {
 public:
  LateWork(Tensor target, Tensor result, int* synchronizes)
      : target_(std::move(target)), result_(std::move(result)), synchronizes_(synchronizes) {}
  bool is_completed() const override { return landed_; }
  void wait() override {
    if (landed_) return;
    NoGradGuard no_grad;
    target_.copy_(result_);
    landed_ = true;
  }
  void synchronize() override {
    ++*synchronizes_;
    wait();
  }

 private:
  Tensor target_, result_;
  int* synchronizes_;
  bool landed_ = false;
};

class LateGroup final : public dist::ProcessGroup {
 public:
  explicit LateGroup(dist::ProcessGroupPtr inner) : ProcessGroup(inner->rank(), inner->size()), inner_(std::move(inner)) {}
  std::string backend_name() const override { return inner_->backend_name(); }
  dist::WorkPtr all_reduce(Tensor& t, dist::ReduceOp op) override {
    return late(t, [&](Tensor& copy) { inner_->all_reduce(copy, op)->wait(); });
  }
  dist::WorkPtr broadcast(Tensor& t, int root) override {
    return late(t, [&](Tensor& copy) { inner_->broadcast(copy, root)->wait(); });
  }
  dist::WorkPtr all_gather(std::vector<Tensor>& outputs, const Tensor& input) override {
    return inner_->all_gather(outputs, input);
  }
  dist::WorkPtr all_gather_into_tensor(Tensor& output, const Tensor& input) override {
    return inner_->all_gather_into_tensor(output, input);
  }
  dist::WorkPtr reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, dist::ReduceOp op) override {
    return inner_->reduce_scatter(output, inputs, op);
  }
  dist::WorkPtr barrier() override { return inner_->barrier(); }
  dist::Milliseconds timeout() const override { return inner_->timeout(); }
  DType wire_dtype(DType dtype) const override { return inner_->wire_dtype(dtype); }

  int synchronizes = 0;
  int late_results = 0;

 private:
  dist::WorkPtr late(Tensor& t, const std::function<void(Tensor&)>& run) {
    NoGradGuard no_grad;
    Tensor copy = t.clone();
    run(copy);
    // In flight: the tensor's contents are garbage until wait().
    t.fill_(is_floating(t.dtype()) ? std::numeric_limits<double>::quiet_NaN() : -7.0);
    ++late_results;
    return std::make_shared<LateWork>(t, copy, &synchronizes);
  }
  dist::ProcessGroupPtr inner_;
};

}  // namespace

TEST_CASE("DDP ordering: results that land only at wait() still give the oracle's gradients; no synchronize()") {
  check_ranks(2, [](int rank, int world) {
    for (Device dev : {kCPU, kTestDevice}) {
      for (bool as_view : {false, true}) {
        auto group = std::make_shared<LateGroup>(dist::default_group());
        ddp_oracle(rank, world,
                   {.per_rank = 3,
                    .options = dist::DDPOptions().bucket_cap_mb(0.001).gradient_as_bucket_view(as_view),
                    .expect_several_buckets = true,
                    .device = dev,
                    .group = group});
        DIST_REQUIRE(group->late_results > 3, << group->late_results);
        DIST_REQUIRE(group->synchronizes == 0, << "the reducer blocked the host " << group->synchronizes << " times");
      }
    }
  });
}

TEST_CASE("DDP ordering with find_unused_parameters: a branch used on rank 0 only, results landing at wait()") {
  check_ranks(2, [](int rank, int world) {
    for (Device dev : {kCPU, kTestDevice}) {
      for (bool as_view : {false, true}) {
        auto group = std::make_shared<LateGroup>(dist::default_group());
        find_unused_oracle(rank, world, dev, as_view, group, 1e-12);
        DIST_REQUIRE(group->synchronizes == 0, << dev);
      }
    }
  });
}

// On the CPU these are tests/test_ddp.cpp's; on CUDA, tests/test_cuda_dist_oracles.cpp.
TEST_CASE("DDP on the test device: no_sync, broadcast_buffers, the unused-parameter error (copies and bucket views)") {
  check_ranks(2, [](int rank, int world) {
    for (bool as_view : {false, true}) no_sync_oracle(rank, world, kTestDevice, as_view, 1e-12);
    broadcast_buffers_check(rank, kTestDevice);
    unused_parameter_error(rank, kTestDevice);
  });
}

// PyTorch's message, from torch 2.15 (a[:2].detach_()).
constexpr const char* kDetachViewMessage =
    "Can't detach views in-place. Use detach() instead. If you are using DistributedDataParallel (DDP) for "
    "training, and gradient_as_bucket_view is set as True, gradients are views of DDP buckets, and hence "
    "detach_() cannot be called on these gradients. To fix this error, please refer to the "
    "Optimizer.zero_grad() function in torch/optim/optimizer.py as the solution.";

// What is a view (PyTorch's _is_view()) and what detach_() does with it, on plain tensors.
TEST_CASE("detach_() refuses views with PyTorch's message; detach(), clone and reshape's copy are not views") {
  const Tensor a = zeros({4, 6}), leaf = zeros({4, 6}).requires_grad_();
  CHECK_FALSE(a.is_view());
  for (const Tensor& v : {a.view({6, 4}), a.narrow(0, 1, 2), a.select(1, 3), a[0], a.expand({2, 4, 6}),
                          a.transpose(0, 1), a.reshape({24}), leaf.view({24}), a.view({6, 4}).view({24})}) {
    CHECK(v.is_view());
    CHECK_THROWS_CONTAINS(Tensor(v).detach_(), kDetachViewMessage);
  }
  for (const Tensor& t : {a.detach(), a.view({24}).detach(), a.clone(), a.transpose(0, 1).reshape({24}), a * 2.0}) {
    CHECK_FALSE(t.is_view());
    CHECK_NOTHROW(Tensor(t).detach_());
  }
  // detach_() on a non-view still cuts the history.
  Tensor y = leaf * 2.0;
  REQUIRE(y.grad_fn());
  y.detach_();
  CHECK(!y.grad_fn());
  CHECK(!y.requires_grad());
}

TEST_CASE("gradient_as_bucket_view: .grad is the bucket, in place across zero_grad(false), no_sync and steps") {
  check_ranks(2, [](int rank, int world) {
    for (Device dev : {kCPU, kTestDevice}) {
      const std::string on = " on " + dev.str();
      auto ref = conv_net(7);
      auto model = conv_net(7 + rank, dev);
      // A gradient that exists before DDP moves into its slot, value kept.
      for (const Tensor& p : model->parameters()) Tensor(p).set_grad(full(p.shape(), 0.5, p.options()));
      dist::DistributedDataParallel ddp(model, dist::DDPOptions().bucket_cap_mb(0.001).gradient_as_bucket_view(true));
      DIST_REQUIRE(ddp.reducer().gradient_as_bucket_view() && ddp.reducer().num_buckets() > 1);
      std::vector<const void*> storages;
      for (const Tensor& p : model->parameters()) {
        DIST_REQUIRE(is_view_into_bucket(p.grad(), ddp), << "construction" << on);
        DIST_REQUIRE(p.grad().to_vector<double>() == std::vector<double>(p.numel(), 0.5), << on);
        storages.push_back(p.grad().impl()->storage.get());
        // PyTorch refuses detach_() on these views; zero_grad(false) below takes its other branch.
        DIST_REQUIRE(p.grad().is_view(), << on);
        DIST_REQUIRE_THROWS_CONTAINS(Tensor(p.grad()).detach_(), kDetachViewMessage);
      }
      optim::SGD opt(model->parameters(), 0.05, 0.9), ref_opt(ref->parameters(), 0.05, 0.9);
      const int64_t micro = 2;
      for (int step = 0; step < 2; ++step) {
        manual_seed(2000 + step);
        Tensor x = randn({world * micro * 2, 2, 5, 5}, kFloat64), y = randn({world * micro * 2, 3}, kFloat64);
        auto start = [&](int64_t k) { return (k * world + rank) * micro; };
        opt.zero_grad(/*set_to_none=*/false);  // zeroes the views in place
        {
          auto guard = ddp.no_sync();  // accumulates into the bucket views, no communication
          (mse_loss(ddp(rows(x, start(0), micro).to(dev)), rows(y, start(0), micro).to(dev)) * 0.5).backward();
          DIST_REQUIRE(step > 0 || ddp.reducer().launch_log().empty());  // (the log is the last synced backward's)
        }
        (mse_loss(ddp(rows(x, start(1), micro).to(dev)), rows(y, start(1), micro).to(dev)) * 0.5).backward();
        ref_opt.zero_grad();
        mse_loss(ref->forward(x), y).backward();
        require_grads_close(*model, *ref, 1e-12, "no_sync + synced with bucket views" + on);
        const auto params = model->parameters();
        for (size_t i = 0; i < params.size(); ++i)
          DIST_REQUIRE(params[i].grad().impl()->storage.get() == storages[i], << "the same bucket, step " << step << on);
        opt.step();
        ref_opt.step();
      }
      require_params_close(*model, *ref, 1e-12, "after 2 steps" + on);
      // zero_grad(set_to_none) drops the views; the next backward makes them views again.
      opt.zero_grad();
      manual_seed(3000);
      Tensor x = randn({micro, 2, 5, 5}, kFloat64), y = randn({micro, 3}, kFloat64);
      mse_loss(ddp(x.to(dev)), y.to(dev)).backward();
      for (const Tensor& p : model->parameters()) DIST_REQUIRE(is_view_into_bucket(p.grad(), ddp), << on);
    }
  });
}

TEST_CASE("gradient_as_bucket_view: the DDP oracle, 4 ranks x 2, on the CPU and the test device") {
  check_ranks(4, [](int rank, int world) {
    for (Device dev : {kCPU, kTestDevice})
      ddp_oracle(rank, world,
                 {.per_rank = 2,
                  .options = dist::DDPOptions().bucket_cap_mb(0.001).gradient_as_bucket_view(true),
                  .expect_several_buckets = true,
                  .device = dev});
  });
}
