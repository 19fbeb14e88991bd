// DDP's features beyond the plain oracle, on any device and over any group, so
// they run on the CPU and the test device (tests/test_ddp_bucket_view.cpp) and
// on CUDA over Gloo and NCCL (tests/test_cuda_dist_oracles.cpp):
//   find_unused_oracle      a branch used on rank 0 only: every rank gets the
//                           average over ranks (reference on the CPU); with
//                           gradient_as_bucket_view the grads are bucket views
//   no_sync_oracle          two micro-batches, the first under no_sync ==
//                           the whole batch in one process
//   unused_parameter_error  a parameter with no gradient, without
//                           find_unused_parameters: the next forward throws
//                           PyTorch's error, naming it
//   broadcast_buffers_check a training forward takes rank 0's buffers
// Call inside forked ranks (tests/dist_test_util.h); throws RankFailure.
#pragma once

#include <string>
#include <vector>

#include "tests/dist_oracles.h"

namespace minidl::testing {

// fc2(relu(fc1(x))) [+ branch(relu(fc1(x))) when use_branch], and a buffer.
class TwoHeadsImpl : public nn::Module {
 public:
  TwoHeadsImpl() : Module("TwoHeads") {
    fc1 = register_module("fc1", nn::Linear(4, 6));
    fc2 = register_module("fc2", nn::Linear(6, 2));
    branch = register_module("branch", nn::Linear(6, 2));
    stat = register_buffer("stat", zeros({2}));
    to(kFloat64);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = fc1(x).relu();
    Tensor out = fc2(h);
    if (use_branch) out = out + branch(h);
    return out;
  }
  nn::Linear fc1{nullptr}, fc2{nullptr}, branch{nullptr};
  Tensor stat;
  bool use_branch = false;
};
MINIDL_MODULE(TwoHeads);

inline TwoHeads two_heads(uint64_t seed, Device device) {
  manual_seed(seed);
  TwoHeads net;
  if (!device.is_cpu()) net->to(device);
  return net;
}

inline bool is_view_into_bucket(const Tensor& grad, const dist::DistributedDataParallel& ddp) {
  for (size_t b = 0; b < ddp.reducer().num_buckets(); ++b)
    if (grad.defined() && grad.impl()->storage == ddp.reducer().bucket_tensor(b).impl()->storage) return true;
  return false;
}

inline void find_unused_oracle(int rank, int world, Device dev, bool as_view, const dist::ProcessGroupPtr& group,
                               double tol) {
  const std::string what = dev.str() + (as_view ? ", bucket views" : ", copies");
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
    require_grads_close(*net, *ref, tol, "branch on rank 0 only, " + what);
    // Rank 1 never used the branch; the average still reaches it, as a bucket view when asked.
    DIST_REQUIRE(is_view_into_bucket(net->branch->weight.grad(), ddp) == as_view, << what);
    DIST_REQUIRE(net->branch->weight.grad().device() == dev, << what);
    opt.step();
    ref_opt.step();
  }
  require_params_close(*net, *ref, tol, "branch on rank 0 only, after 2 steps, " + what);
}

inline void no_sync_oracle(int rank, int world, Device dev, bool as_view, double tol) {
  const std::string on = " on " + dev.str() + (as_view ? ", bucket views" : "");
  auto ref = conv_net(7);
  auto model = conv_net(7 + rank, dev);
  dist::DistributedDataParallel ddp(model, dist::DDPOptions().bucket_cap_mb(0.001).gradient_as_bucket_view(as_view));
  const int64_t micro = 2;
  manual_seed(2000);
  Tensor x = randn({world * micro * 2, 2, 5, 5}, kFloat64), y = randn({world * micro * 2, 3}, kFloat64);
  auto start = [&](int64_t k) { return (k * world + rank) * micro; };  // every sample used once
  {
    auto guard = ddp.no_sync();
    (mse_loss(ddp(rows(x, start(0), micro).to(dev)), rows(y, start(0), micro).to(dev)) * 0.5).backward();
    DIST_REQUIRE(ddp.reducer().launch_log().empty(), << "no bucket may be launched under no_sync" << on);
  }
  (mse_loss(ddp(rows(x, start(1), micro).to(dev)), rows(y, start(1), micro).to(dev)) * 0.5).backward();
  DIST_REQUIRE(ddp.reducer().launch_log().size() == ddp.reducer().num_buckets(), << on);
  mse_loss(ref->forward(x), y).backward();
  require_grads_close(*model, *ref, tol, "no_sync then synced" + on);
}

inline void unused_parameter_error(int rank, Device dev) {
  TwoHeads net = two_heads(3, dev);
  dist::DistributedDataParallel ddp(net);
  manual_seed(6);
  const Tensor x = randn({3, 4}, kFloat64).to(dev);
  ddp(x).sum().backward();  // the branch gets no gradient: its bucket never completes
  DIST_REQUIRE_THROWS_CONTAINS(ddp(x), "Expected to have finished reduction in the prior iteration");
  DIST_REQUIRE_THROWS_CONTAINS(ddp(x), "Parameters which did not receive grad for rank " + std::to_string(rank) +
                                           ": branch.weight, branch.bias");
}

inline void broadcast_buffers_check(int rank, Device dev) {
  TwoHeads net = two_heads(11 + rank, dev);
  net->use_branch = true;  // every parameter gets a gradient
  dist::DistributedDataParallel ddp(net);
  manual_seed(5);
  const Tensor x = randn({3, 4}, kFloat64).to(dev);
  net->stat.fill_(10.0 + rank);
  ddp(x).sum().backward();
  DIST_REQUIRE(net->stat.device() == dev && net->stat.to_vector<double>() == std::vector<double>({10.0, 10.0}),
               << "a training forward takes rank 0's buffers on " << dev);
}

}  // namespace minidl::testing
