// SyncBatchNorm over Gloo on loopback: real processes (tests/dist_test_util.h).
//
// The oracle: every rank generates the SAME full batch from a fixed seed and
// takes its slice (uneven and empty slices included). SyncBatchNorm over W
// ranks must equal BatchNorm over the whole batch in one process, which every
// rank computes locally (BatchNorm has its own float64 gradcheck and PyTorch
// goldens): the rank's slice of the output and of the input gradient (loss =
// sum(y * g) for a fixed random g), the local weight/bias gradients (this
// rank's share, computed independently), their sum over ranks (= the global
// gradient), and the running statistics and num_batches_tracked after every
// step. Tolerances: float64 rtol = atol = 1e-10; float32 rtol 1e-4, atol 1e-5.
//
// All tensor work happens inside the ranks (the parent must not start OpenMP
// before forking), one OpenMP thread per rank.
//
// convert_sync_batch_norm and batch_norm_report_across_ranks:
// tests/test_sync_batch_norm_convert.cpp.
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "minidl/dist/sync_batch_norm.h"
#include "tests/dist_oracles.h"
#include "tests/dist_test_util.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::dist_require_close;
using minidl::testing::RankFailure;
using minidl::testing::run_ranks;
using minidl::testing::SyncBnCase;
using minidl::testing::sync_bn_oracle;

namespace {

// Runs f and requires a minidl::Error whose message contains `needle`.
template <class F>
void require_throws(F&& f, const std::string& needle) {
  try {
    f();
  } catch (const std::exception& e) {
    DIST_REQUIRE(std::string(e.what()).find(needle) != std::string::npos,
                 << "expected '" << needle << "' in: " << e.what());
    return;
  }
  throw RankFailure("expected an error containing '" + needle + "', got none");
}

int64_t sum_of(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

void run_cases(int world, const std::vector<SyncBnCase>& cases) {
  for (const SyncBnCase& c : cases) REQUIRE(static_cast<int>(c.split.size()) == world);
  const std::string failures = run_ranks(world, [&](int rank, int w) {
    set_num_threads(1);
    for (const SyncBnCase& c : cases) sync_bn_oracle(rank, w, c);
  });
  CHECK_MESSAGE(failures.empty(), failures);
}

}  // namespace

// The oracle (tests/dist_oracles.h) with CPU tensors; on the test device in
// tests/test_dist_oracles_device.cpp, on CUDA in tests/test_cuda_dist_oracles.cpp.
TEST_CASE("SyncBatchNorm over 4 ranks equals BatchNorm over the whole batch") {
  std::vector<SyncBnCase> cases = minidl::testing::sync_bn_four_rank_cases();  // 4 x 2, uneven 3, 2, 1, 0
  cases.push_back({"5-D input, 0, 2, 1, 2", {0, 2, 1, 2}, {2, 3, 2, 3}});
  cases.push_back({"3-D input (N, C, L), one sample each", {1, 1, 1, 1}, {4, 3}});
  run_cases(4, cases);
}

TEST_CASE("SyncBatchNorm over 2 ranks: uneven, one value per channel, affine=false, no running stats") {
  run_cases(2, {
                   {"2 ranks 3, 5", {3, 5}, {3, 5, 4}},
                   // rank 0 holds a single value per channel: allowed with 2 ranks
                   {"2-D input, 1 and 3 rows", {1, 3}, {5}},
                   {"affine=false", {4, 2}, {3, 4, 3}, kFloat64, 0.1, false},
                   {"track_running_stats=false", {2, 3}, {3, 4, 3}, kFloat64, 0.1, true, false},
               });
}

TEST_CASE("SyncBatchNorm over 3 ranks: uneven, momentum=None (cumulative average)") {
  run_cases(3, {
                   {"3 ranks 1, 4, 2", {1, 4, 2}, {3, 5, 4}},
                   {"momentum=None", {2, 3, 1}, {3, 5, 4}, kFloat64, std::nullopt, true, true, 4},
                   {"momentum=None, an empty rank", {3, 0, 2}, {2, 3, 3}, kFloat64, std::nullopt, true, true, 3},
                   {"momentum=None, float32", {2, 2, 2}, {4, 3, 3}, kFloat32, std::nullopt, true, true, 3},
               });
}

TEST_CASE("SyncBatchNorm: one value per channel over all ranks is an error on every rank") {
  const std::string failures = run_ranks(2, [](int rank, int) {
    set_num_threads(1);
    auto sync = nn::SyncBatchNorm(3);
    // Global batch (1, 3): rank 0 has the row, rank 1 nothing.
    const Tensor x = rank == 0 ? randn({1, 3}) : zeros({0, 3});
    require_throws([&] { sync(x); }, "Expected more than 1 value per channel when training");
    // Running stats untouched; the group is still usable afterwards.
    DIST_REQUIRE(sync->running_mean.abs().max().item<double>() == 0.0);
    manual_seed(5);
    const Tensor full = randn({4, 3});
    const Tensor y = sync(full.narrow(0, 2 * rank, 2));
    auto ref = nn::BatchNorm1d(3);
    dist_require_close(y, ref(full).narrow(0, 2 * rank, 2), 1e-4, 1e-5, "after the error");
  });
  CHECK_MESSAGE(failures.empty(), failures);
}

TEST_CASE("SyncBatchNorm with a bfloat16 input (autocast): float32 statistics, output and grad in bfloat16") {
  // As BatchNorm on the whole bf16 batch: float32 weight, bias and running
  // stats; the sums that cross ranks are float32 (Gloo has no bfloat16).
  const std::string failures = run_ranks(2, [](int rank, int) {
    set_num_threads(1);
    manual_seed(7);
    const Tensor full = (randn({6, 4, 3, 3}) * 3.0 + 1.0).to(kBFloat16);
    const Tensor g = randn({6, 4, 3, 3}).to(kBFloat16);
    auto sync = nn::SyncBatchNorm(4);
    auto ref = nn::BatchNorm2d(4);
    const Tensor xs = full.narrow(0, 3 * rank, 3).clone().requires_grad_();
    const Tensor xr = full.clone().requires_grad_();
    const Tensor ys = sync(xs), yr = ref(xr);
    DIST_REQUIRE(ys.dtype() == kBFloat16 && sync->running_var.dtype() == kFloat32);
    (ys * g.narrow(0, 3 * rank, 3)).sum().backward();
    (yr * g).sum().backward();
    DIST_REQUIRE(xs.grad().dtype() == kBFloat16 && sync->weight.grad().dtype() == kFloat32);
    // Both round the same float32 results to bf16: equal up to one bf16 step.
    dist_require_close(ys.to(kFloat32), yr.narrow(0, 3 * rank, 3).to(kFloat32), 1e-2, 1e-2, "output");
    dist_require_close(xs.grad().to(kFloat32), xr.grad().narrow(0, 3 * rank, 3).to(kFloat32), 1e-2, 2e-2, "grad");
    dist_require_close(sync->running_mean, ref->running_mean, 1e-5, 1e-6, "running_mean");
    dist_require_close(sync->running_var, ref->running_var, 1e-5, 1e-6, "running_var");
  });
  CHECK_MESSAGE(failures.empty(), failures);
}

TEST_CASE("SyncBatchNorm cast to bfloat16/float16 whole: 16-bit weight, bias and running stats, as BatchNorm's") {
  // PyTorch takes this (batch_norm_elemt without mixed type; the gather
  // dispatches on running_mean's dtype). The sums that cross ranks stay float32.
  const std::string failures = run_ranks(2, [](int rank, int) {
    set_num_threads(1);
    for (DType dtype : {kBFloat16, kFloat16}) {
      manual_seed(8);
      const Tensor full = (randn({6, 4, 3, 3}) * 3.0 + 1.0).to(dtype);
      const Tensor g = randn({6, 4, 3, 3}).to(dtype);
      auto sync = nn::SyncBatchNorm(4);
      auto ref = nn::BatchNorm2d(4);
      sync->to(dtype);
      ref->to(dtype);
      const Tensor xs = full.narrow(0, 3 * rank, 3).clone().requires_grad_();
      const Tensor xr = full.clone().requires_grad_();
      const Tensor ys = sync(xs), yr = ref(xr);
      DIST_REQUIRE(ys.dtype() == dtype && sync->running_var.dtype() == dtype);
      (ys * g.narrow(0, 3 * rank, 3)).sum().backward();
      (yr * g).sum().backward();
      DIST_REQUIRE(xs.grad().dtype() == dtype && sync->weight.grad().dtype() == dtype &&
                   sync->bias.grad().dtype() == dtype);
      // Both round float32 results to 16 bits: equal up to a 16-bit step or two.
      dist_require_close(ys.to(kFloat32), yr.narrow(0, 3 * rank, 3).to(kFloat32), 1e-2, 1e-2, "output");
      dist_require_close(xs.grad().to(kFloat32), xr.grad().narrow(0, 3 * rank, 3).to(kFloat32), 1e-2, 2e-2, "grad");
      dist_require_close(sync->running_mean.to(kFloat32), ref->running_mean.to(kFloat32), 1e-2, 1e-3, "running_mean");
      dist_require_close(sync->running_var.to(kFloat32), ref->running_var.to(kFloat32), 1e-2, 1e-3, "running_var");
    }
  });
  CHECK_MESSAGE(failures.empty(), failures);
}

TEST_CASE("SyncBatchNorm falls back to BatchNorm in eval: no collectives") {
  // A collective with a missing rank would fail after this timeout.
  const std::string failures = run_ranks(
      3,
      [](int rank, int) {
        set_num_threads(1);
        const int64_t C = 4;
        auto sync = nn::SyncBatchNorm(C);
        auto ref = nn::BatchNorm2d(C);
        sync->to(kFloat64);
        ref->to(kFloat64);
        auto slice = [&](const Tensor& t) { return t.narrow(0, 2 * rank, 2); };
        manual_seed(11);
        const Tensor x1 = randn({6, C, 3, 3}, kFloat64) + 0.5;
        dist_require_close(sync(slice(x1)), slice(ref(x1)), 1e-10, 1e-10, "training step");
        {
          // Training mode under no_grad still synchronizes (inference needs eval(), as in PyTorch).
          NoGradGuard no_grad;
          const Tensor x2 = randn({6, C, 3, 3}, kFloat64) * 2.0;
          dist_require_close(sync(slice(x2)), slice(ref(x2)), 1e-10, 1e-10, "training mode under no_grad");
        }
        dist_require_close(sync->running_mean, ref->running_mean, 1e-10, 1e-10, "running_mean");
        dist_require_close(sync->running_var, ref->running_var, 1e-10, 1e-10, "running_var");

        sync->eval();
        ref->eval();
        const Tensor mean_before = sync->running_mean.clone(), var_before = sync->running_var.clone();
        if (rank != 2) {  // rank 2 sits this out: any collective here would never complete
          for (int i = 0; i < 3; ++i) {
            const Tensor xe = randn({3 + rank, C, 2, 5}, kFloat64);
            dist_require_close(sync(xe), ref(xe), 1e-12, 1e-12, "eval = BatchNorm eval");
          }
          // A single value per channel is fine in eval.
          const Tensor one = randn({1, C, 1, 1}, kFloat64);
          dist_require_close(sync(one), ref(one), 1e-12, 1e-12, "eval, one value per channel");
        }
        dist_require_close(sync->running_mean, mean_before, 0, 0, "eval leaves running_mean");
        dist_require_close(sync->running_var, var_before, 0, 0, "eval leaves running_var");
        DIST_REQUIRE(sync->num_batches_tracked.item<int64_t>() == 2);

        // Back to training: every rank synchronizes again, in step.
        sync->train();
        ref->train();
        manual_seed(12);
        const Tensor x3 = randn({6, C, 3, 3}, kFloat64);
        dist_require_close(sync(slice(x3)), slice(ref(x3)), 1e-10, 1e-10, "training after eval");
        dist_require_close(sync->running_var, ref->running_var, 1e-10, 1e-10, "running_var after eval");
      },
      std::chrono::seconds(60), true, dist::Milliseconds(10000));
  CHECK_MESSAGE(failures.empty(), failures);
}

TEST_CASE("SyncBatchNorm with world size 1 or no process group is BatchNorm") {
  for (bool init : {true, false}) {
    CAPTURE(init);
    const std::string failures = run_ranks(
        1,
        [init](int, int) {
          set_num_threads(1);
          DIST_REQUIRE(dist::is_initialized() == init);
          for (std::optional<double> momentum : {std::optional<double>(0.1), std::optional<double>()}) {
            auto sync = nn::SyncBatchNorm(nn::BatchNormOptions(3).momentum(momentum));
            auto ref = nn::BatchNorm2d(nn::BatchNormOptions(3).momentum(momentum));
            manual_seed(21);
            for (int step = 0; step < 2; ++step) {
              Tensor x = randn({2, 3, 4, 5}) * 3.0 + 1.0, xr = x.clone();
              x.requires_grad_();
              xr.requires_grad_();
              const Tensor g = randn({2, 3, 4, 5});
              Tensor y = sync(x), yr = ref(xr);
              (y * g).sum().backward();
              (yr * g).sum().backward();
              // The same code path: identical bits.
              dist_require_close(y, yr, 0, 0, "output");
              dist_require_close(x.grad(), xr.grad(), 0, 0, "input gradient");
              dist_require_close(sync->weight.grad(), ref->weight.grad(), 0, 0, "weight gradient");
              dist_require_close(sync->running_var, ref->running_var, 0, 0, "running_var");
              DIST_REQUIRE(y.grad_fn()->name() == yr.grad_fn()->name(), << y.grad_fn()->name());
            }
            DIST_REQUIRE(sync->num_batches_tracked.item<int64_t>() == 2);
          }
          // BatchNorm's error for a single value per channel in training...
          auto sync = nn::SyncBatchNorm(3);
          require_throws([&] { sync(randn({1, 3})); },
                         "Expected more than 1 value per channel when training, got input size [1, 3]");
          require_throws([&] { sync(randn({1, 3, 1, 1})); }, "Expected more than 1 value per channel");
          // ...but not in eval.
          sync->eval();
          DIST_REQUIRE(sync(randn({1, 3})).shape() == Shape({1, 3}));
        },
        std::chrono::seconds(60), init);
    CHECK_MESSAGE(failures.empty(), failures);
  }
}

TEST_CASE("SyncBatchNorm autograd node and saved tensors") {
  const std::string failures = run_ranks(2, [](int rank, int) {
    set_num_threads(1);
    auto sync = nn::SyncBatchNorm(2);
    sync->to(kFloat64);
    Tensor x = randn({3, 2, 2}, kFloat64);
    x.requires_grad_();
    Tensor y = sync(x);
    DIST_REQUIRE(y.grad_fn() != nullptr && y.grad_fn()->name() == "SyncBatchNormBackward", << y.grad_fn()->name());
    {
      NoGradGuard no_grad;  // still synchronizes (training mode), but records no graph
      DIST_REQUIRE(sync(x).grad_fn() == nullptr);
    }
    // Modifying the saved input in place is caught (saved with its version).
    Tensor z = x * 1.0;
    Tensor y3 = sync(z);
    {
      NoGradGuard no_grad;
      z.add_(1.0);
    }
    require_throws([&] { y3.sum().backward(); }, "modified by an inplace operation");
    // The first graph still runs; every rank all-reduces once in it.
    y.sum().backward();
    DIST_REQUIRE(x.grad().defined());
    // grad of sum(y) w.r.t. x is 0 for a normalized output (up to rounding)
    DIST_REQUIRE(x.grad().abs().max().item<double>() < 1e-12, << x.grad().abs().max().item<double>());
    (void)rank;
  });
  CHECK_MESSAGE(failures.empty(), failures);
}

TEST_CASE("SyncBatchNorm argument errors") {
  const std::string failures = run_ranks(
      1,
      [](int, int) {
        set_num_threads(1);
        auto sync = nn::SyncBatchNorm(3);
        require_throws([&] { sync(randn({3})); }, "expected at least 2D input (got 1D input)");
        require_throws([&] { sync(Tensor()); }, "undefined");
        auto empty_channels = nn::SyncBatchNorm(0);
        require_throws([&] { empty_channels(zeros({2, 0, 3})); },
                       "SyncBatchNorm number of input channels should be non-zero");
        require_throws([&] { sync(randn({4, 5})); }, "running_mean");  // 5 channels for a 3-channel layer
        require_throws(
            [&] {
              dist::SyncBatchNormFunction::apply(randn({4, 3}), Tensor(), Tensor(), Tensor(), Tensor(), 1e-5, 0.1,
                                                 dist::ProcessGroupPtr());
            },
            "process group is null");
        require_throws(
            [&] {
              dist::SyncBatchNormFunction::apply(randn({4}), Tensor(), Tensor(), Tensor(), Tensor(), 1e-5, 0.1,
                                                 dist::ProcessGroupPtr());
            },
            "expected at least 2D input (got 1D input)");
        std::ostringstream os;
        os << *sync;
        DIST_REQUIRE(os.str() ==
                         "SyncBatchNorm(3, eps=1e-05, momentum=0.1, affine=True,"
                         " bias=True, track_running_stats=True)",
                     << os.str());
        std::ostringstream os2;
        os2 << *nn::SyncBatchNorm(64, 1e-3, std::nullopt, false, false);
        DIST_REQUIRE(os2.str() ==
                         "SyncBatchNorm(64, eps=0.001, momentum=None, affine=False,"
                         " bias=False, track_running_stats=False)",
                     << os2.str());
        // Same parameters and buffers as BatchNorm.
        const auto keys = [](const nn::Module& m) {
          std::vector<std::string> k;
          for (const auto& [name, t] : m.state_dict()) k.push_back(name);
          return k;
        };
        DIST_REQUIRE(keys(*sync) == keys(*nn::BatchNorm2d(3)));
        DIST_REQUIRE(nn::is_batch_norm(*sync));
      },
      std::chrono::seconds(60), false);
  CHECK_MESSAGE(failures.empty(), failures);
}
