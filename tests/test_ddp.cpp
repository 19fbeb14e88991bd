// DistributedDataParallel over real processes (Gloo on loopback, run_ranks):
// the equivalence oracle (W ranks x batch B == one process x batch W*B, after
// several SGD-with-momentum steps), the rank-0 broadcast at construction,
// no_sync accumulation, buffer broadcast, unused parameters with and without
// find_unused_parameters, construction errors, reduce_tensor, bucket layout,
// the overlap of bucket all-reduces with backward, and the engine's
// queue_callback that DDP relies on.
//
// Everything, the single-process cases included, runs inside forked ranks:
// the parent runs no tensor kernels (see tests/dist_test_util.h).
#include <functional>
#include <string>
#include <vector>

#include "minidl/dist/ddp.h"
#include "tests/ddp_feature_checks.h"
#include "tests/dist_oracles.h"
#include "tests/dist_test_util.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::run_ranks;
using namespace minidl::testing;  // the oracle and its helpers (tests/dist_oracles.h)

namespace {

constexpr double kTol = 1e-12;  // float64: DDP vs the single-process reference

// Runs fn in `world` forked ranks (joined to a gloo group unless !init).
void check_ranks(int world, const std::function<void(int rank, int world)>& fn, bool init = true) {
  const std::string failures = run_ranks(world, fn, std::chrono::seconds(120), init);
  CHECK_MESSAGE(failures.empty(), failures, "(each rank's error is on stderr above)");
}

// The message of the minidl::Error that fn throws ("" when it throws none).
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// fc2(relu(fc1(x))) [+ branch(...)], and a buffer (tests/ddp_feature_checks.h).
testing::TwoHeads branch_net(uint64_t seed) { return testing::two_heads(seed, kCPU); }

}  // namespace

// The oracle (tests/dist_oracles.h) with CPU tensors; on the test device in
// tests/test_dist_oracles_device.cpp, on CUDA in tests/test_cuda_dist_oracles.cpp.
TEST_CASE("DDP oracle: 4 ranks x 2 == 1 process x 8, several buckets") {
  check_ranks(4, [](int rank, int world) {
    ddp_oracle(rank, world, {.per_rank = 2, .options = dist::DDPOptions().bucket_cap_mb(0.001),
                             .expect_several_buckets = true});
  });
}

TEST_CASE("DDP oracle: 4 ranks x 2 == 1 process x 8, default buckets") {
  check_ranks(4, [](int rank, int world) { ddp_oracle(rank, world, {.per_rank = 2}); });
}

TEST_CASE("DDP oracle: 2 ranks x 3 == 1 process x 6") {
  check_ranks(2, [](int rank, int world) {
    ddp_oracle(rank, world, {.per_rank = 3, .options = dist::DDPOptions().bucket_cap_mb(0.001),
                             .expect_several_buckets = true});
  });
}

TEST_CASE("DDP oracle with a channels-last conv weight and input: gradients copied and as bucket views") {
  for (bool as_view : {false, true})
    check_ranks(2, [as_view](int rank, int world) {
      ddp_oracle(rank, world, {.per_rank = 2, .options = dist::DDPOptions().gradient_as_bucket_view(as_view),
                               .channels_last = true});
    });
}

TEST_CASE("DDP no_sync: two local micro-batches and one synced == the large batch") {
  check_ranks(2, [](int rank, int world) {
    auto ref = conv_net(7);
    auto model = conv_net(7 + rank);
    dist::DistributedDataParallel ddp(model, dist::DDPOptions().bucket_cap_mb(0.001));
    const int64_t micro = 2, steps = 3;
    manual_seed(2000);
    Tensor x = randn({world * micro * steps, 2, 5, 5}, kFloat64), y = randn({world * micro * steps, 3}, kFloat64);
    auto start = [&](int64_t k) { return (k * world + rank) * micro; };  // every sample used once
    auto micro_loss = [&](const Tensor& out, int64_t k) {
      return mse_loss(out, rows(y, start(k), micro)) * (1.0 / static_cast<double>(steps));
    };
    {
      auto guard = ddp.no_sync();
      DIST_REQUIRE(!ddp.require_backward_grad_sync());
      micro_loss(ddp(rows(x, start(0), micro)), 0).backward();
      // Nothing was reduced: the gradient is this rank's own.
      micro_loss(ref->forward(rows(x, start(0), micro)), 0).backward();
      require_grads_close(*model, *ref, kTol, "local gradient under no_sync");
      ref->zero_grad();
      micro_loss(ddp(rows(x, start(1), micro)), 1).backward();
      DIST_REQUIRE(ddp.reducer().launch_log().empty(), << "no bucket may be launched under no_sync");
    }
    DIST_REQUIRE(ddp.require_backward_grad_sync());
    micro_loss(ddp(rows(x, start(2), micro)), 2).backward();
    DIST_REQUIRE(ddp.reducer().launch_log().size() == ddp.reducer().num_buckets());
    mse_loss(ref->forward(x), y).backward();
    require_grads_close(*model, *ref, kTol, "accumulated then reduced");
  });
}

TEST_CASE("DDP broadcast_buffers: a training forward takes rank 0's buffers") {
  check_ranks(2, [](int rank, int) {
    manual_seed(5);
    Tensor x = randn({3, 4}, kFloat64);
    {
      auto net = branch_net(11 + rank);
      net->use_branch = true;  // every parameter gets a gradient
      net->stat.fill_(1.0 + rank);
      dist::DistributedDataParallel ddp(net);
      DIST_REQUIRE(net->stat.to_vector<double>() == std::vector<double>({1.0, 1.0}), << "construction broadcast");
      net->stat.fill_(10.0 + rank);
      ddp(x).sum().backward();
      DIST_REQUIRE(net->stat.to_vector<double>() == std::vector<double>({10.0, 10.0}), << "training forward");
      // eval and no_grad forwards never broadcast.
      net->stat.fill_(20.0 + rank);
      ddp.eval();
      ddp(x);
      {
        NoGradGuard no_grad;
        ddp.train();
        ddp(x);
      }
      DIST_REQUIRE(net->stat.to_vector<double>() == std::vector<double>(2, 20.0 + rank),
                   << "eval / no_grad forward must not sync");
      ddp.train();
    }
    auto net = branch_net(11 + rank);
    net->use_branch = true;
    auto ddp = dist::DistributedDataParallel(net, dist::DDPOptions().broadcast_buffers(false));
    dist::DistributedDataParallel moved = std::move(ddp);  // the reducer and its hooks move along
    DIST_REQUIRE(contains(error_of([&] { ddp(x); }), "moved-from"));
    net->stat.fill_(30.0 + rank);
    moved(x).sum().backward();
    DIST_REQUIRE(moved.reducer().launch_log().size() == moved.reducer().num_buckets());
    DIST_REQUIRE(net->stat.to_vector<double>() == std::vector<double>(2, 30.0 + rank), << "broadcast_buffers(false)");
  });
}

TEST_CASE("DDP unused parameter without find_unused_parameters: the next forward throws, naming it") {
  check_ranks(2, [](int rank, int) {
    auto net = branch_net(3);
    dist::DistributedDataParallel ddp(net);
    manual_seed(6);
    Tensor x = randn({3, 4}, kFloat64);
    ddp(x).sum().backward();  // the branch gets no gradient: its bucket never completes
    const std::string msg = error_of([&] { ddp(x); });
    DIST_REQUIRE(contains(msg, "Expected to have finished reduction in the prior iteration"), << msg);
    DIST_REQUIRE(contains(msg, "find_unused_parameters=True"), << msg);
    DIST_REQUIRE(contains(msg, "Parameter indices which did not receive grad for rank " + std::to_string(rank) +
                                   ": 4 5"), << msg);
    DIST_REQUIRE(contains(msg, "branch.weight, branch.bias"), << msg);
    // A no_grad forward (evaluation) is still allowed.
    NoGradGuard no_grad;
    ddp(x);
  });
}

TEST_CASE("DDP: a forward without backward (a dropped loss, evaluation with grad on) leaves the next step intact") {
  check_ranks(2, [](int, int) {
    auto net = branch_net(3), fresh = branch_net(3);
    net->use_branch = fresh->use_branch = true;  // every parameter used
    dist::DistributedDataParallel ddp(net), ref(fresh);
    manual_seed(6);
    Tensor x = randn({3, 4}, kFloat64);
    for (int i = 0; i < 2; ++i) ddp(x).sum();  // e.g. a NaN loss skipped with `continue`
    net->eval();
    ddp(x);  // validation without no_grad
    net->train();
    for (int step = 0; step < 2; ++step) {
      ddp(x).sum().backward();  // threw "Expected to have finished reduction in the prior iteration"
      ref(x).sum().backward();
    }
    DIST_REQUIRE(max_abs_diff(net->fc1->weight.grad(), fresh->fc1->weight.grad()) == 0.0);
  });
}

TEST_CASE("DDP: two forwards and one backward of their summed loss (siamese models) average the gradient") {
  check_ranks(2, [](int rank, int) {
    auto net = branch_net(3), local = branch_net(3);
    net->use_branch = local->use_branch = true;
    dist::DistributedDataParallel ddp(net);
    manual_seed(6 + rank);
    Tensor x = randn({3, 4}, kFloat64);
    for (int step = 0; step < 2; ++step) {
      net->zero_grad();
      local->zero_grad();
      (ddp(x).sum() + ddp(x * 2.0).sum()).backward();
      (local(x).sum() + local(x * 2.0).sum()).backward();
      const Tensor average = dist::reduce_tensor(local->fc1->weight.grad());
      DIST_REQUIRE(max_abs_diff(net->fc1->weight.grad(), average) < kTol, << "step " << step);
    }
  });
}

TEST_CASE("DDP find_unused_parameters: training matches one process; unused grads stay undefined") {
  check_ranks(4, [](int rank, int world) {
    auto ref = branch_net(7);
    auto net = branch_net(7 + rank);
    dist::DistributedDataParallel ddp(net, dist::DDPOptions().find_unused_parameters(true).bucket_cap_mb(0.0001));
    DIST_REQUIRE(ddp.reducer().num_buckets() > 1);
    optim::SGD opt(net->parameters(), 0.1, 0.9), ref_opt(ref->parameters(), 0.1, 0.9);
    for (int step = 0; step < 3; ++step) {
      manual_seed(300 + step);
      Tensor x = randn({2 * world, 4}, kFloat64), y = randn({2 * world, 2}, kFloat64);
      opt.zero_grad();
      mse_loss(ddp(rows(x, 2 * rank, 2)), rows(y, 2 * rank, 2)).backward();
      DIST_REQUIRE(ddp.reducer().unused_parameters() == std::vector<size_t>({4, 5}));
      DIST_REQUIRE(!net->branch->weight.grad().defined() && !net->branch->bias.grad().defined(),
                   << "no rank used the branch: its grads stay undefined, as in PyTorch");
      ref_opt.zero_grad();
      mse_loss(ref->forward(x), y).backward();
      require_grads_close(*net, *ref, kTol, "find_unused");
      opt.step();
      ref_opt.step();
    }
    require_params_close(*net, *ref, kTol, "find_unused after 3 steps");
  });
}

TEST_CASE("DDP find_unused_parameters: a branch used on rank 0 only gets the average over all ranks") {
  check_ranks(2, [](int rank, int world) {
    auto ref = branch_net(7);
    auto net = branch_net(7 + rank);
    net->use_branch = (rank == 0);
    dist::DistributedDataParallel ddp(net, dist::DDPOptions().find_unused_parameters(true));
    optim::SGD opt(net->parameters(), 0.1, 0.9), ref_opt(ref->parameters(), 0.1, 0.9);
    for (int step = 0; step < 2; ++step) {
      manual_seed(400 + step);
      Tensor x = randn({2 * world, 4}, kFloat64), y = randn({2 * world, 2}, kFloat64);
      opt.zero_grad();
      mse_loss(ddp(rows(x, 2 * rank, 2)), rows(y, 2 * rank, 2)).backward();
      // Reference: the mean over ranks of each rank's loss, with rank 0's branch.
      ref_opt.zero_grad();
      Tensor total;
      for (int r = 0; r < world; ++r) {
        ref->use_branch = (r == 0);
        Tensor loss = mse_loss(ref->forward(rows(x, 2 * r, 2)), rows(y, 2 * r, 2)) * (1.0 / world);
        total = total.defined() ? total + loss : loss;
      }
      total.backward();
      require_grads_close(*net, *ref, kTol, "branch used on rank 0 only");
      opt.step();
      ref_opt.step();
    }
    require_params_close(*net, *ref, kTol, "after 2 steps");
  });
}

TEST_CASE("DDP find_unused_parameters: a parameter also used outside forward is marked ready twice") {
  check_ranks(2, [](int, int) {
    auto net = branch_net(3);
    dist::DistributedDataParallel ddp(net, dist::DDPOptions().find_unused_parameters(true));
    manual_seed(8);
    Tensor x = randn({3, 4}, kFloat64);
    const std::string msg = error_of([&] { (ddp(x).sum() + net->branch->weight.sum()).backward(); });
    DIST_REQUIRE(contains(msg, "Expected to mark a variable ready only once"), << msg);
    DIST_REQUIRE(contains(msg, "branch.weight"), << msg);
  });
}

TEST_CASE("DDP construction: models that differ across ranks give a clear error on every rank") {
  check_ranks(2, [](int rank, int) {  // a shape mismatch
    nn::Sequential net(nn::Linear(4, 6), nn::ReLU(), nn::Linear(6, rank == 0 ? 2 : 3));
    const std::string msg = error_of([&] { dist::DistributedDataParallel ddp(net); });
    DIST_REQUIRE(contains(msg, "params[2] (\"2.weight\" on rank 0, \"2.weight\" on rank 1)"), << msg);
    DIST_REQUIRE(contains(msg, "[2, 6] (float32, requires_grad) on rank 0 and [3, 6]"), << msg);
    DIST_REQUIRE(contains(msg, "appears not to match sizes of the same param in process 0"), << msg);
  });
  check_ranks(2, [](int rank, int) {  // a different number of parameters
    nn::Sequential net(nn::Linear(4, 6));
    if (rank == 1) net->push_back(nn::Linear(6, 6));
    const std::string msg = error_of([&] { dist::DistributedDataParallel ddp(net); });
    DIST_REQUIRE(contains(msg, "DDP expects same model across all ranks, but Rank 0 has 2 params, while rank 1 "
                               "has inconsistent 4 params."), << msg);
  });
  check_ranks(2, [](int, int) {  // nothing to train
    nn::Linear net(3, 2);
    net->weight.requires_grad_(false);
    net->bias.requires_grad_(false);
    const std::string msg = error_of([&] { dist::DistributedDataParallel ddp(net); });
    DIST_REQUIRE(contains(msg, "DistributedDataParallel is not needed when a module doesn't have any parameter "
                               "that requires a gradient."), << msg);
  });
}

TEST_CASE("DDP without init_process_group") {
  check_ranks(
      1,
      [](int, int) {
        nn::Linear net(3, 2);
        const std::string msg = error_of([&] { dist::DistributedDataParallel ddp(net); });
        DIST_REQUIRE(contains(msg, "Default process group has not been initialized"), << msg);
        DIST_REQUIRE(contains(error_of([] { dist::reduce_tensor(ones({2})); }), "has not been initialized"));
      },
      /*init=*/false);
}

TEST_CASE("dist::reduce_tensor averages over ranks and leaves its argument alone") {
  check_ranks(4, [](int rank, int) {
    Tensor t = tensor({1.0 * rank, 2.0 * rank + 1}, {}, kFloat64);
    Tensor avg = dist::reduce_tensor(t);
    DIST_REQUIRE(avg.to_vector<double>() == std::vector<double>({1.5, 4.0}));
    DIST_REQUIRE(t.to_vector<double>() == std::vector<double>({1.0 * rank, 2.0 * rank + 1}), << "argument changed");
    Tensor count = tensor(std::vector<int64_t>{rank});
    Tensor mean = dist::reduce_tensor(count);
    DIST_REQUIRE(mean.dtype() == kFloat64 && mean.item<double>() == 1.5);
    DIST_REQUIRE(dist::reduce_tensor(scalar_tensor(rank, kFloat32)).dtype() == kFloat32);
  });
}

TEST_CASE("DDP overlap: the first bucket's all-reduce starts while backward is still running") {
  check_ranks(2, [](int rank, int) {
    auto model = conv_net(7);
    dist::DistributedDataParallel ddp(model, dist::DDPOptions().bucket_cap_mb(0.001));
    const dist::Reducer& reducer = ddp.reducer();
    DIST_REQUIRE(reducer.num_buckets() == 2, << reducer.num_buckets());
    // The conv weight (parameter 0) is the last gradient backward produces;
    // DDP's hook on it was registered first, so it runs before this one.
    size_t launched_before_last_grad = 0;
    Tensor first_param = model->parameters()[0];
    first_param.register_post_accumulate_grad_hook(
        [&](Tensor&) { launched_before_last_grad = reducer.launch_log().size(); });
    manual_seed(9);
    Tensor x = randn({2, 2, 5, 5}, kFloat64);
    ddp(x).sum().backward();
    DIST_REQUIRE(launched_before_last_grad >= 1, << launched_before_last_grad);
    const auto& log = reducer.launch_log();
    DIST_REQUIRE(log.size() == 2 && log[0].bucket == 0 && log[1].bucket == 1, << "buckets launch in order");
    DIST_REQUIRE(log[0].grads_ready < reducer.num_params(), << log[0].grads_ready);
  });
}

TEST_CASE("DDP buckets: reverse registration order, 1 MiB first bucket only with the default cap") {
  check_ranks(2, [](int, int) {
    // Three Linear(512, 512) float32: each weight is exactly 1 MiB.
    nn::Sequential net(nn::Linear(512, 512), nn::Linear(512, 512), nn::Linear(512, 512));
    {
      dist::DistributedDataParallel ddp(net);
      DIST_REQUIRE(ddp.reducer().num_buckets() == 2);
      DIST_REQUIRE(ddp.reducer().bucket_params(0) == std::vector<size_t>({5, 4}));  // last layer first
      DIST_REQUIRE(ddp.reducer().bucket_params(1) == std::vector<size_t>({3, 2, 1, 0}));
    }
    {
      dist::DistributedDataParallel ddp(net, dist::DDPOptions().bucket_cap_mb(25));
      DIST_REQUIRE(ddp.reducer().num_buckets() == 1);
    }
    {
      dist::DistributedDataParallel ddp(net, dist::DDPOptions().bucket_cap_mb(1));
      DIST_REQUIRE(ddp.reducer().num_buckets() == 3);
      DIST_REQUIRE(ddp.reducer().bucket_bytes(2) == (512 * 512 + 512) * 4);
    }
  });
}

TEST_CASE("compute_bucket_assignment_by_size: limits in order, one bucket list per dtype") {
  check_ranks(
      1,
      [](int, int) {
        const int64_t mib = 1024 * 1024;
        auto f32 = [](int64_t bytes) { return empty({bytes / 4}, kFloat32); };
        std::vector<Tensor> ts{f32(mib / 2), f32(mib / 2), f32(10 * mib), empty({1}, kFloat64), f32(10 * mib),
                               f32(10 * mib), f32(mib)};
        auto buckets = dist::compute_bucket_assignment_by_size(ts, {mib, 25 * mib});
        // float32: [0, 1] reach 1 MiB; [2, 4, 5] reach 25 MiB; [6] is left over. float64: [3].
        const std::vector<std::vector<size_t>> expected{{0, 1}, {2, 4, 5}, {3}, {6}};
        DIST_REQUIRE(buckets == expected);
      },
      /*init=*/false);
}

TEST_CASE("autograd::queue_callback runs after every node, before backward returns") {
  check_ranks(
      1,
      [](int, int) {
        Tensor a = tensor({1.0, 2.0}, {}, kFloat64).requires_grad_();
        Tensor b = tensor({3.0, 4.0}, {}, kFloat64).requires_grad_();
        std::vector<std::string> events;
        auto queue_once = [&](Tensor&) {
          events.push_back("accumulate");
          if (events.size() > 1) return;
          autograd::queue_callback([&] {
            DIST_REQUIRE(a.grad().defined() && b.grad().defined(), << "a callback runs after every node");
            events.push_back("final");
            autograd::queue_callback([&] { events.push_back("queued by a callback"); });
          });
        };
        a.register_post_accumulate_grad_hook(queue_once);
        b.register_post_accumulate_grad_hook(queue_once);
        ((a * b).sum() * 2.0).backward();
        const std::vector<std::string> expected{"accumulate", "accumulate", "final", "queued by a callback"};
        DIST_REQUIRE(events == expected);
        DIST_REQUIRE(contains(error_of([] { autograd::queue_callback([] {}); }), "during the backward pass"));
      },
      /*init=*/false);
}
