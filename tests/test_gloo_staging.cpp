// ProcessGroupGloo's staging seam (dist/gloo_staging.h), on the CPU: the
// order of calls the CUDA staging relies on (its copy in finishes only when
// wait_ready() returns; its copy back must be called once the result is in
// the host buffer). A deferred staging registered for the test device fills
// each input's host buffer only in wait_ready() (the buffers start at -777),
// so a collective that let Gloo read a buffer before wait_ready() gives wrong
// values here; and it counts the calls. Two ranks over Gloo, every collective
// that stages a tensor. The real CUDA staging runs in
// tests/test_cuda_dist_oracles (passed on an H100, 2026-11-27).
#include <atomic>

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/gloo_staging.h"
#include "tests/dist_test_util.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::dist;
using namespace minidl::testing;

namespace {

std::atomic<int> g_staged{0}, g_ready{0}, g_back{0};

class Deferred final : public StagedTensor {
 public:
  Deferred(const Tensor& t, bool value) : target_(t), value_(value) {
    host_ = full(t.shape(), -777.0, t.dtype());
    ++g_staged;
  }
  void wait_ready() override {
    if (value_) host_.copy_(target_.detach());
    ready_ = true;
    ++g_ready;
  }
  void copy_back() override {
    DIST_REQUIRE(!value_ || ready_, << "copy_back of a staged input that was never made ready");
    NoGradGuard no_grad;
    Tensor(target_).copy_(host_);
    ++g_back;
  }

 private:
  Tensor target_;
  bool value_;
  bool ready_ = false;
};

std::shared_ptr<StagedTensor> stage_deferred(const Tensor& t, bool value) { return std::make_shared<Deferred>(t, value); }

}  // namespace

TEST_CASE("Gloo staging: inputs are read after wait_ready, results come back through copy_back") {
  const std::string failures = run_ranks(2, [](int rank, int world) {
    register_gloo_staging(DeviceType::Test, &stage_deferred);
    const Device dev = kTestDevice;
    const double r = rank + 1.0;

    Tensor a = full({5}, r, kFloat32).to(dev);
    all_reduce(a);  // 1 + 2
    DIST_REQUIRE(a.device() == dev);
    DIST_REQUIRE_CLOSE(a, full({5}, 3.0), 0, 0);

    Tensor b = full({3}, r * 10, kInt64).to(dev);
    broadcast(b, 1);
    DIST_REQUIRE_CLOSE(b.to(kFloat64), full({3}, 20.0, kFloat64), 0, 0);

    std::vector<Tensor> outs{zeros({2}, TensorOptions().device(dev)), zeros({4}, TensorOptions().device(dev))};
    all_gather(outs, full({rank == 0 ? 2 : 4}, r, kFloat32).to(dev));
    DIST_REQUIRE_CLOSE(outs[0], full({2}, 1.0), 0, 0);
    DIST_REQUIRE_CLOSE(outs[1], full({4}, 2.0), 0, 0);

    Tensor gathered = zeros({4}, TensorOptions(kFloat64).device(dev));
    default_group()->all_gather_into_tensor(gathered, full({2}, r, kFloat64).to(dev))->wait();
    DIST_REQUIRE_CLOSE(gathered, tensor({1.0, 1.0, 2.0, 2.0}, {4}, kFloat64), 0, 0);

    Tensor mine = zeros({2}, TensorOptions().device(dev));
    default_group()
        ->reduce_scatter(mine, {full({2}, r, kFloat32).to(dev), full({2}, 10 * r, kFloat32).to(dev)})
        ->wait();
    DIST_REQUIRE_CLOSE(mine, full({2}, rank == 0 ? 3.0 : 30.0), 0, 0);

    // Staged: a, b, the gather's input + 2 outputs, into_tensor's 2, reduce_scatter's output + 2 inputs.
    DIST_REQUIRE(g_staged == 1 + 1 + 3 + 2 + 3, << "staged " << g_staged.load());
    // Ready: the inputs (a, the gather's, into_tensor's, reduce_scatter's 2) and b, which
    // broadcast reads on the root and fills elsewhere (a no-op there).
    DIST_REQUIRE(g_ready == 1 + 1 + 1 + 1 + 2, << "ready " << g_ready.load());
    // Back (results): a, b off the root, 2 gathered, 1 into_tensor, reduce_scatter's output.
    DIST_REQUIRE(g_back == 1 + (rank == 1 ? 0 : 1) + 2 + 1 + 1, << "back " << g_back.load());
    (void)world;
  });
  CHECK_MESSAGE(failures.empty(), failures);
}
