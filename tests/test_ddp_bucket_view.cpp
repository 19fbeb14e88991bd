// DDP's gradient_as_bucket_view, and the ordering of the reducer's work
// against its all-reduces, on the CPU and on the test device (forked ranks
// over Gloo, tests/dist_test_util.h).
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

// fc2(relu(fc1(x))) [+ branch(relu(fc1(x))) when use_branch].
class TwoHeadsImpl : public nn::Module {
 public:
  TwoHeadsImpl() : Module("TwoHeads") {
    fc1 = register_module("fc1", nn::Linear(4, 6));
    fc2 = register_module("fc2", nn::Linear(6, 2));
    branch = register_module("branch", nn::Linear(6, 2));
    to(kFloat64);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = fc1(x).relu();
    Tensor out = fc2(h);
    if (use_branch) out = out + branch(h);
    return out;
  }
  nn::Linear fc1{nullptr}, fc2{nullptr}, branch{nullptr};
  bool use_branch = false;
};
MINIDL_MODULE(TwoHeads);

TwoHeads two_heads(uint64_t seed, Device device) {
  manual_seed(seed);
  TwoHeads net;
  if (!device.is_cpu()) net->to(device);
  return net;
}

bool is_view_into_bucket(const Tensor& grad, const dist::DistributedDataParallel& ddp) {
  for (size_t b = 0; b < ddp.reducer().num_buckets(); ++b)
    if (grad.defined() && grad.impl()->storage == ddp.reducer().bucket_tensor(b).impl()->storage) return true;
  return false;
}

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
        const std::string what = dev.str() + (as_view ? ", bucket views" : ", copies");
        auto group = std::make_shared<LateGroup>(dist::default_group());
        TwoHeads ref = two_heads(7, kCPU), net = two_heads(7 + rank, dev);
        net->use_branch = (rank == 0);
        dist::DistributedDataParallel ddp(
            net, dist::DDPOptions().find_unused_parameters(true).gradient_as_bucket_view(as_view).bucket_cap_mb(0.0001),
            group);
        optim::SGD opt(net->parameters(), 0.1, 0.9), ref_opt(ref->parameters(), 0.1, 0.9);
        for (int step = 0; step < 2; ++step) {
          manual_seed(400 + step);
          Tensor x = randn({2 * world, 4}, kFloat64), y = randn({2 * world, 2}, kFloat64);
          opt.zero_grad();
          mse_loss(ddp(rows(x, 2 * rank, 2).to(dev)), rows(y, 2 * rank, 2).to(dev)).backward();
          ref_opt.zero_grad();
          Tensor total;
          for (int r = 0; r < world; ++r) {  // the mean over ranks of each rank's loss
            ref->use_branch = (r == 0);
            Tensor loss = mse_loss(ref->forward(rows(x, 2 * r, 2)), rows(y, 2 * r, 2)) * (1.0 / world);
            total = total.defined() ? total + loss : loss;
          }
          total.backward();
          require_grads_close(*net, *ref, 1e-12, "branch on rank 0 only, " + what);
          // Rank 1 never used the branch; the average still reaches it, as a bucket view when asked.
          DIST_REQUIRE(is_view_into_bucket(net->branch->weight.grad(), ddp) == as_view, << what);
          opt.step();
          ref_opt.step();
        }
        DIST_REQUIRE(group->synchronizes == 0, << what);
      }
    }
  });
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
