// The DDP and SyncBatchNorm oracles (tests/dist_oracles.h) with the model and
// data on the test device (core/test_device.h) over Gloo, which stages device
// tensors through host memory as it stages CUDA tensors: the CPU build's
// stand-in for "Gloo with CUDA tensors" (tests/test_cuda_dist_oracles.cpp runs
// the same oracles on a GPU). Same tolerances as on the CPU: the test device
// runs the CPU kernels. The DDP + SyncBatchNorm oracle (a converted
// BatchNorm2d inside DDP) runs here on the CPU too.
#include <functional>
#include <string>

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

}  // namespace

TEST_CASE("DDP oracle on the test device: 4 ranks x 2 == 1 process x 8 (several buckets, default buckets)") {
  check_ranks(4, [](int rank, int world) {
    set_num_threads(1);
    ddp_oracle(rank, world,
               {.per_rank = 2, .options = dist::DDPOptions().bucket_cap_mb(0.001), .expect_several_buckets = true,
                .device = kTestDevice});
    ddp_oracle(rank, world, {.per_rank = 2, .device = kTestDevice});
  });
}

TEST_CASE("SyncBatchNorm oracle on the test device: 4 x 2 and uneven 3, 2, 1, 0 == BatchNorm over the batch") {
  check_ranks(4, [](int rank, int world) {
    set_num_threads(1);
    for (const SyncBnCase& c : sync_bn_four_rank_cases()) sync_bn_oracle(rank, world, c, kTestDevice);
  });
}

TEST_CASE("DDP + SyncBatchNorm oracle, 4 ranks x 2 == BatchNorm over 8, on the CPU and the test device") {
  check_ranks(4, [](int rank, int world) {
    set_num_threads(1);
    for (Device dev : {kCPU, kTestDevice})
      ddp_oracle(rank, world,
                 {.per_rank = 2, .options = dist::DDPOptions().bucket_cap_mb(0.001), .expect_several_buckets = true,
                  .device = dev, .sync_bn = true});
  });
}
