// ProcessGroupNCCL on a real GPU at world size 1 (what one device allows):
// init_process_group("nccl") over a file:// store, every collective in every
// supported dtype against its expected values (at world size 1 a reduction
// leaves the tensor as it was, a gather copies it), Work::wait ordering the
// current stream after the collective, a barrier, new_group, the device
// check, and one DDP step over NCCL equal to the same step without DDP.
// The multi-rank and timeout paths are covered on the CPU with a fake
// communicator (tests/test_nccl_logic.cpp).
//
// Needs a CUDA device: without one (or in a build without -DMINIDL_CUDA=ON)
// it prints "skipped: no CUDA device (<reason>)" and exits 77, which CTest
// reports as skipped. Run on an H100 at world size 1 (tests/test_cuda_nccl, 2026-11-26).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

#include "minidl/core/cuda.h"
#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/nn/nn.h"
#include "minidl/optim/sgd.h"
#include "tests/cuda_test.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::dist;

MINIDL_CUDA_TEST_REQUIRES_DEVICE();

namespace {

const Device kGpu(DeviceType::CUDA, 0);

// A world of one on cuda:0 for the scope of a test case.
struct NcclWorld {
  NcclWorld() {
    unsetenv("LOCAL_RANK");
    path = "/tmp/minidl-test-nccl-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
    std::remove(path.c_str());
    init_process_group("nccl", "file://" + path, 1, 0, std::chrono::seconds(60));
  }
  ~NcclWorld() { destroy_process_group(); }
  std::string path;
  static inline int counter = 0;
};

std::vector<double> host(const Tensor& t) { return t.to(kCPU).to(kFloat64).to_vector<double>(); }

// Small integers: exact in every dtype, bfloat16 included.
Tensor pattern(int64_t n, DType dtype, double offset = 0) {
  return (arange(static_cast<double>(n), kFloat64) + offset).to(dtype).to(kGpu);
}

}  // namespace

TEST_CASE("nccl world 1: every collective and dtype") {
  NcclWorld world;
  auto pg = default_group();
  REQUIRE(pg->backend_name() == "nccl");
  for (DType d : {kFloat32, kFloat64, DType::Float16, DType::BFloat16, kInt64}) {
    CAPTURE(dtype_name(d));
    for (ReduceOp op : {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::MIN, ReduceOp::MAX, ReduceOp::PRODUCT}) {
      if (op == ReduceOp::AVG && d == kInt64) {
        Tensor t = pattern(5, d);
        CHECK_THROWS_WITH_AS(pg->all_reduce(t, op), doctest::Contains("AVG needs a floating-point"), Error);
        continue;
      }
      CAPTURE(reduce_op_name(op));
      Tensor t = pattern(7, d, 1);
      pg->all_reduce(t, op)->wait();
      CHECK(host(t) == host(pattern(7, d, 1)));
    }
    Tensor b = pattern(6, d, 2);
    pg->broadcast(b, 0)->wait();
    CHECK(host(b) == host(pattern(6, d, 2)));
    std::vector<Tensor> outs = {zeros({4}, TensorOptions(d).device(kGpu))};
    pg->all_gather(outs, pattern(4, d, 3))->wait();
    CHECK(host(outs[0]) == host(pattern(4, d, 3)));
    Tensor flat = zeros({5}, TensorOptions(d).device(kGpu));
    pg->all_gather_into_tensor(flat, pattern(5, d, 4))->wait();
    CHECK(host(flat) == host(pattern(5, d, 4)));
    Tensor out = zeros({3}, TensorOptions(d).device(kGpu));
    pg->reduce_scatter(out, {pattern(3, d, 5)})->wait();
    CHECK(host(out) == host(pattern(3, d, 5)));
  }
  auto w = pg->barrier();
  w->synchronize();
  CHECK(w->is_completed());
}

TEST_CASE("nccl world 1: wait() orders the current stream after the collective; checks") {
  NcclWorld world;
  auto pg = default_group();
  // A large in-place all-reduce, then at once a kernel on the current stream
  // that reads and writes the same memory: wait() must order it after.
  Tensor t = ones({1 << 22}, TensorOptions(kFloat32).device(kGpu));
  for (int i = 0; i < 4; ++i) {
    auto w = pg->all_reduce(t);
    w->wait();
    t.mul_(2.0);
  }
  CHECK(t.sum().item<double>() == 16.0 * (1 << 22));
  // Tensors of another device, unsupported dtypes.
  Tensor cpu = ones({2});
  CHECK_THROWS_WITH_AS(pg->all_reduce(cpu), doctest::Contains("is on cpu"), Error);
  Tensor u8 = ones({2}, TensorOptions(DType::UInt8).device(kGpu));
  CHECK_THROWS_WITH_AS(pg->all_reduce(u8), doctest::Contains("got uint8"), Error);
  // new_group: a second communicator, of its own.
  auto sub = new_group({0});
  REQUIRE(sub != nullptr);
  Tensor s = full({3}, 2.0, TensorOptions(kFloat64).device(kGpu));
  sub->all_reduce(s, ReduceOp::PRODUCT)->synchronize();
  CHECK(host(s) == std::vector<double>(3, 2.0));
}

TEST_CASE("nccl world 1: a DDP step equals the same step without DDP") {
  NcclWorld world;
  auto make = [] {
    manual_seed(5);
    nn::Sequential net(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 2));
    net->to(kFloat64);
    net->to(kGpu);
    return net.ptr();
  };
  manual_seed(9);
  const Tensor x = randn({6, 4}, kFloat64).to(kGpu), y = randn({6, 2}, kFloat64).to(kGpu);
  std::shared_ptr<nn::Module> plain = make(), wrapped = make();
  optim::SGD plain_opt(plain->parameters(), 0.1), ddp_opt(wrapped->parameters(), 0.1);
  DistributedDataParallel ddp(wrapped);
  for (int step = 0; step < 2; ++step) {
    plain_opt.zero_grad();
    (plain->forward(x) - y).pow(2.0).mean().backward();
    plain_opt.step();
    ddp_opt.zero_grad();
    (ddp(x) - y).pow(2.0).mean().backward();
    ddp_opt.step();
  }
  const auto a = plain->parameters(), b = wrapped->parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(b[i].device() == kGpu);
    CHECK(minidl::testing::max_abs_diff(a[i].to(kCPU), b[i].to(kCPU)) <= 1e-12);
  }
}
