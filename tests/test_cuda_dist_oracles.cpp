// The DDP and SyncBatchNorm oracles (tests/dist_oracles.h) on CUDA tensors,
// against the same single-process CPU reference as the CPU runs:
//   (b) Gloo with CUDA tensors: 4 processes sharing cuda:0 (Gloo stages them
//       through pinned host memory; NCCL refuses two ranks on one GPU):
//       DDP 4 x 2 (several buckets, default buckets, gradient_as_bucket_view),
//       SyncBN 4 x 2 and uneven 3, 2, 1, 0 (an empty rank), DDP + SyncBN 4 x 2;
//       with 2 processes, no_sync, find_unused_parameters, broadcast_buffers
//       and the unused-parameter error (tests/ddp_feature_checks.h).
//   (c) NCCL at world size 1 (one GPU): DDP 1 x 8, find_unused_parameters,
//       the unused-parameter error, SyncBatchNormFunction itself (its
//       all-gather and all-reduce over NCCL) == BatchNorm; and at
//       world N = min(GPUs, 4) when N >= 2 GPUs exist: the (b) checks with
//       one GPU per rank (uneven N-1, ..., 0), and the timeout: a rank that
//       never issues a collective fails the other within the timeout, naming
//       it. With one GPU the NCCL timeout path is covered by the fake
//       communicator (tests/test_nccl_logic.cpp) only.
// float64 tolerance 1e-10 (cuDNN and the CUDA reductions sum in other orders
// than the CPU), SyncBN's float32 cases as on the CPU (rtol 1e-4, atol 1e-5).
//
// Without a CUDA device (or in a build without CUDA) it prints "skipped: ..."
// and exits 77 (ctest: skipped). The device is probed in a forked child: the
// parent must not initialize CUDA, since the ranks are forked from it (a
// CUDA context does not survive fork). ctest label `cuda`; gpu-check.sh runs it.
// Ran on an H100 (2026-11-27, one GPU): (b) and NCCL at world size 1 passed;
// NCCL at world N and the NCCL timeout need 2 GPUs and were not run.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "minidl/core/cuda.h"
#include "tests/ddp_feature_checks.h"
#include "tests/dist_oracles.h"
#include "tests/dist_test_util.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::testing;
using namespace std::chrono_literals;

namespace {

constexpr double kGpuTol = 1e-10;

// The number of CUDA devices, asked in a child process (see the header); exits
// 77 when there is none.
struct ForkedDeviceProbe {
  int count = 0;
  ForkedDeviceProbe() {
    int fds[2];
    if (pipe(fds) != 0) std::exit(1);
    std::fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      const int n = cuda::is_available() ? cuda::device_count() : 0;
      const std::string reply = std::to_string(n) + " " + (n > 0 ? "" : cuda::unavailable_reason());
      if (write(fds[1], reply.data(), reply.size()) < 0) _exit(2);
      _exit(0);
    }
    close(fds[1]);
    std::string reply;
    char buf[512];
    for (ssize_t got; (got = read(fds[0], buf, sizeof buf)) > 0;) reply.append(buf, static_cast<size_t>(got));
    close(fds[0]);
    waitpid(pid, nullptr, 0);
    count = std::atoi(reply.c_str());
    if (count > 0) return;
    const size_t space = reply.find(' ');
    std::printf("skipped: no CUDA device (%s)\n", space == std::string::npos ? "probe failed" : reply.c_str() + space + 1);
    std::fflush(stdout);
    std::exit(77);
  }
};
const ForkedDeviceProbe g_devices;

void check_ranks(int world, const std::function<void(int rank, int world)>& fn, const std::string& backend,
                 dist::Milliseconds timeout = 60000ms) {
  const std::string failures = run_ranks(world, fn, 180s, true, timeout, backend);
  CHECK_MESSAGE(failures.empty(), failures, "(each rank's error is on stderr above)");
}

// The DDP oracles at `world` ranks x 2 on `device(rank)`.
void ddp_oracles(int rank, int world, Device dev) {
  const auto several = dist::DDPOptions().bucket_cap_mb(0.001);
  ddp_oracle(rank, world, {.per_rank = 2, .options = several, .expect_several_buckets = true, .device = dev, .tol = kGpuTol});
  ddp_oracle(rank, world, {.per_rank = 2, .device = dev, .tol = kGpuTol});
  ddp_oracle(rank, world,
             {.per_rank = 2, .options = dist::DDPOptions(several).gradient_as_bucket_view(true),
              .expect_several_buckets = true, .device = dev, .tol = kGpuTol});
  ddp_oracle(rank, world,
             {.per_rank = 2, .options = several, .expect_several_buckets = true, .device = dev, .tol = kGpuTol,
              .sync_bn = true});
}

// World N: N x 2 and uneven N-1, ..., 0 (one empty rank), float64 and float32.
std::vector<SyncBnCase> sync_bn_cases(int world) {
  if (world == 4) return sync_bn_four_rank_cases();
  std::vector<int64_t> even(world, 2), uneven;
  for (int r = 0; r < world; ++r) uneven.push_back(world - 1 - r);
  return {{"even, float64", even, {3, 5, 4}},
          {"even, float32", even, {3, 5, 4}, kFloat32},
          {"uneven, float64", uneven, {3, 5, 4}},
          {"uneven, float32", uneven, {3, 5, 4}, kFloat32}};
}

int nccl_world() { return std::min(g_devices.count, 4); }

}  // namespace

TEST_CASE("Gloo with CUDA tensors, 4 processes on cuda:0: the DDP oracles") {
  check_ranks(4, [](int rank, int world) { ddp_oracles(rank, world, Device(DeviceType::CUDA, 0)); }, "gloo");
}

TEST_CASE("Gloo with CUDA tensors, 4 processes on cuda:0: SyncBatchNorm 4 x 2 and uneven 3, 2, 1, 0") {
  check_ranks(4, [](int rank, int world) {
    for (const SyncBnCase& c : sync_bn_four_rank_cases()) sync_bn_oracle(rank, world, c, Device(DeviceType::CUDA, 0));
  }, "gloo");
}

TEST_CASE("NCCL at world size 1: DDP 1 x 8 and SyncBatchNormFunction == the CPU reference") {
  check_ranks(1, [](int rank, int world) {
    const Device gpu(DeviceType::CUDA, 0);
    DIST_REQUIRE(dist::default_group()->backend_name() == "nccl");
    ddp_oracle(rank, world, {.per_rank = 8, .device = gpu, .tol = kGpuTol});
    ddp_oracle(rank, world,
               {.per_rank = 8, .options = dist::DDPOptions().bucket_cap_mb(0.001).gradient_as_bucket_view(true),
                .expect_several_buckets = true, .device = gpu, .tol = kGpuTol});
    // find_unused_parameters' int64 flags and the bucket views over NCCL.
    find_unused_oracle(rank, world, gpu, /*as_view=*/true, nullptr, kGpuTol);
    unused_parameter_error(rank, gpu);
    // The SyncBN module skips synchronizing at world size 1 (PyTorch's
    // need_sync); the function itself runs its collectives over NCCL.
    manual_seed(11);
    const Tensor x = randn({6, 3, 4, 4}, kFloat64) * 2.0 + 0.5, g = randn({6, 3, 4, 4}, kFloat64);
    const Tensor w = randn({3}, kFloat64), b = randn({3}, kFloat64);
    Tensor rm = zeros({3}, kFloat64), rv = ones({3}, kFloat64);
    Tensor xr = x.clone().requires_grad_();
    (batch_norm(xr, rm, rv, w, b, true, 0.1, 1e-5) * g).sum().backward();
    Tensor xg = x.to(gpu).requires_grad_();
    Tensor rmg = zeros({3}, TensorOptions(kFloat64).device(gpu)), rvg = ones({3}, TensorOptions(kFloat64).device(gpu));
    const Tensor y = dist::SyncBatchNormFunction::apply(xg, w.to(gpu), b.to(gpu), rmg, rvg, 1e-5, 0.1,
                                                        dist::default_group());
    (y * g.to(gpu)).sum().backward();
    dist_require_close(y, batch_norm(x, Tensor(), Tensor(), w, b, true, 0.1, 1e-5), kGpuTol, kGpuTol, "output");
    dist_require_close(xg.grad(), xr.grad(), kGpuTol, kGpuTol, "input gradient");
    dist_require_close(rmg, rm, kGpuTol, kGpuTol, "running_mean");
    dist_require_close(rvg, rv, kGpuTol, kGpuTol, "running_var");
  }, "nccl");
}

TEST_CASE("NCCL at world size N (one GPU per rank, N = min(GPUs, 4) >= 2): DDP, SyncBN uneven and empty, DDP + SyncBN") {
  const int world = nccl_world();
  if (world < 2) {
    MESSAGE("NCCL world N: needs 2 GPUs, found " << g_devices.count << ": not run (world size 1 above)");
    return;
  }
  check_ranks(world, [](int rank, int w) {
    const Device gpu(DeviceType::CUDA, rank);
    ddp_oracles(rank, w, gpu);
    for (const SyncBnCase& c : sync_bn_cases(w)) sync_bn_oracle(rank, w, c, gpu);
    for (bool as_view : {false, true}) {
      no_sync_oracle(rank, w, gpu, as_view, kGpuTol);
      find_unused_oracle(rank, w, gpu, as_view, nullptr, kGpuTol);
    }
    broadcast_buffers_check(rank, gpu);
    unused_parameter_error(rank, gpu);
  }, "nccl");
}

TEST_CASE("NCCL timeout (>= 2 GPUs): a rank that never issues a collective fails the other within it, naming it") {
  if (nccl_world() < 2) {
    MESSAGE("NCCL timeout: needs 2 GPUs, found " << g_devices.count
                                                 << ": covered by the fake communicator (tests/test_nccl_logic.cpp)");
    return;
  }
  check_ranks(2, [](int rank, int) {
    Tensor t = ones({16}, TensorOptions(kFloat32).device(Device(DeviceType::CUDA, rank)));
    dist::default_group()->all_reduce(t)->synchronize();  // both: the communicator exists
    if (rank == 1) {
      std::this_thread::sleep_for(15s);  // never issues the second all-reduce
      std::fflush(stderr);
      _exit(0);  // nor tears down its communicator, whose peer has aborted
    }
    const auto start = std::chrono::steady_clock::now();
    auto work = dist::default_group()->all_reduce(t);
    DIST_REQUIRE_THROWS_CONTAINS(work->synchronize(), "ranks that never reached it: [1]");
    DIST_REQUIRE_THROWS_CONTAINS(work->wait(), "all_reduce(SUM)");
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    DIST_REQUIRE(took < 10.0, << "took " << took << " s for a 2 s timeout");
    DIST_REQUIRE_THROWS_CONTAINS(dist::default_group()->broadcast(t, 0), "unusable after an earlier collective failed");
  }, "nccl", 2000ms);
}

TEST_CASE("Gloo with CUDA tensors, 2 processes on cuda:0: no_sync, find_unused_parameters, broadcast_buffers, "
          "the unused-parameter error") {
  check_ranks(2, [](int rank, int world) {
    const Device gpu(DeviceType::CUDA, 0);
    for (bool as_view : {false, true}) {
      no_sync_oracle(rank, world, gpu, as_view, kGpuTol);
      find_unused_oracle(rank, world, gpu, as_view, nullptr, kGpuTol);
    }
    broadcast_buffers_check(rank, gpu);
    unused_parameter_error(rank, gpu);
  }, "gloo");
}
