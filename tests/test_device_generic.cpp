// The device seams outside the op kernels: allocator lookup and accounting,
// pinned host memory and the DataLoader's pin_memory, to(device, non_blocking),
// Module::to and state dicts across devices, device strings. The test device
// (core/test_device.h) stands in for a GPU; see tests/test_device_ops.cpp for
// the op kernels.
#include <atomic>
#include <cstdlib>

#include "minidl/core/allocator.h"
#include "minidl/core/cuda.h"
#include "minidl/core/storage.h"
#include "minidl/core/test_device.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::max_abs_diff;

namespace {

// Host memory that says it is pinned, as the CUDA backend's cudaHostAlloc
// allocator will; counts what it hands out.
class FakePinnedAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device) override {
    CHECK(device.is_cpu());
    ++allocations;
    return std::aligned_alloc(64, (nbytes + 63) / 64 * 64 + 64);
  }
  void deallocate(void* ptr) noexcept override { std::free(ptr); }
  std::atomic<int> allocations{0};  // the DataLoader's workers allocate at once (an int lost counts under ASan)
};

struct PinnedAllocatorScope {
  explicit PinnedAllocatorScope(Allocator* a) { set_pinned_host_allocator(a); }
  ~PinnedAllocatorScope() { set_pinned_host_allocator(nullptr); }
};

}  // namespace

TEST_CASE("device strings") {
  CHECK(Device("test").is_test());
  CHECK(Device("test:0") == kTestDevice);
  CHECK(Device("cuda:1") == Device(kCUDA, 1));
  CHECK(Device("cpu").str() == "cpu");
  CHECK_THROWS_CONTAINS(Device("tpu"), "expected a device string like 'cpu', 'cuda' or 'cuda:1', got 'tpu'");
  CHECK_THROWS_CONTAINS(Device("test:x"), "non-negative device index");
  CHECK_THROWS_CONTAINS(Device("cuda1"), "expected 'cuda:<index>'");
}

TEST_CASE("allocators: looked up after the backends register; the test device's memory is accounted") {
  // The first non-CPU lookup registers the backends (the test device among them).
  CHECK(allocator_for(DeviceType::Test) != nullptr);
  if (!cuda::is_built()) CHECK_THROWS_CONTAINS(zeros({2}, Device("cuda")), "configure with -DMINIDL_CUDA=ON");
  const TestDeviceMemory before = test_device_memory();
  {
    Tensor a = zeros({1000}, TensorOptions(kFloat32).device(kTestDevice));
    Tensor b = a.to(kFloat64);
    const TestDeviceMemory during = test_device_memory();
    CHECK(during.live_blocks == before.live_blocks + 2);
    CHECK(during.live_bytes == before.live_bytes + 4000 + 8000);
    CHECK(b.device() == kTestDevice);
  }
  CHECK(test_device_memory().live_bytes == before.live_bytes);
  CHECK(zeros({2}, Device("test:1")).device() == Device("test:1"));  // test:0..7 exist (DataParallel tests)
  CHECK_THROWS_CONTAINS(zeros({2}, Device("test:8")), "there are test:0 to test:7, got test:8");
  CHECK_THROWS_CONTAINS(set_allocator(DeviceType::CPU, nullptr), "cannot be replaced");
}

TEST_CASE("to(device, non_blocking) and pinned memory") {
  const Tensor x = randn({3, 4});
  const Tensor d = x.to(kTestDevice, /*non_blocking=*/true);
  CHECK(d.device() == kTestDevice);
  CHECK(max_abs_diff(d, x) == 0.0);
  CHECK(d.to(kCPU).device() == kCPU);
  CHECK_FALSE(x.is_pinned());
  CHECK(x.pin_memory().is_same(x));  // no backend pins: the tensor itself
  CHECK_THROWS_CONTAINS(d.pin_memory(), "only dense CPU tensors can be pinned");

  FakePinnedAllocator pinned;
  PinnedAllocatorScope scope(&pinned);
  const Tensor p = x.pin_memory();
  CHECK(p.is_pinned());
  CHECK(pinned.allocations == 1);
  CHECK(max_abs_diff(p, x) == 0.0);
  CHECK(p.pin_memory().is_same(p));
  CHECK(empty({4}, TensorOptions(kFloat32).pinned_memory()).is_pinned());
  CHECK_THROWS_CONTAINS(empty({4}, TensorOptions(kFloat32).device(kTestDevice).pinned_memory()),
                        "only CPU tensors can be pinned");
}

TEST_CASE("DataLoader pin_memory collates into pinned memory") {
  auto ds = std::make_shared<data::TensorDataset>(randn({10, 3}), randint(0, 4, {10}));
  {
    data::DataLoader plain(ds, {.batch_size = 4, .pin_memory = true});  // warns: nothing pins here
    for (auto& batch : plain) CHECK_FALSE(batch.data.is_pinned());
  }
  FakePinnedAllocator pinned;
  PinnedAllocatorScope scope(&pinned);
  data::DataLoader loader(ds, {.batch_size = 4, .num_workers = 2, .pin_memory = true});
  int batches = 0;
  for (auto& batch : loader) {
    CHECK(batch.data.is_pinned());
    CHECK(batch.targets.is_pinned());
    const Tensor on_device = batch.data.to(kTestDevice, /*non_blocking=*/true);
    CHECK(on_device.device() == kTestDevice);
    ++batches;
  }
  CHECK(batches == 3);
  CHECK(pinned.allocations == 6);
}

TEST_CASE("Module::to(device), state dicts across devices, and training on the test device") {
  manual_seed(3);
  auto model = models::create_model("smallnet", models::ModelOptions().width(0.125));
  auto twin = models::create_model("smallnet", models::ModelOptions().width(0.125));
  twin->load_state_dict(model->state_dict());
  model->to(kTestDevice);
  for (const auto& [name, t] : model->named_parameters()) CHECK_MESSAGE(t.device() == kTestDevice, name);
  for (const auto& [name, t] : model->named_buffers()) CHECK_MESSAGE(t.device() == kTestDevice, name);

  // A checkpoint written from the device loads on the CPU and the other way round.
  const std::string path = "test_device_generic_state.safetensors";
  nn::save_state_dict(*model, path);
  auto on_cpu = models::create_model("smallnet", models::ModelOptions().width(0.125));
  nn::load_state_dict_file(*on_cpu, path);
  for (const auto& [name, t] : on_cpu->named_parameters()) CHECK(t.device() == kCPU);
  nn::load_state_dict_file(*model, path);
  for (const auto& [name, t] : model->named_parameters()) CHECK_MESSAGE(t.device() == kTestDevice, name);
  std::remove(path.c_str());

  // Two training steps: same losses and weights as the CPU twin, bit for bit.
  const Tensor x = randn({4, 3, 32, 32}), y = randint(0, 10, {4});
  optim::SGD opt_dev(model->parameters(), 0.1, 0.9);
  optim::SGD opt_cpu(twin->parameters(), 0.1, 0.9);
  model->train();
  twin->train();
  for (int step = 0; step < 2; ++step) {
    opt_dev.zero_grad();
    Tensor loss_dev = cross_entropy(model->forward(x.to(kTestDevice)), y.to(kTestDevice));
    loss_dev.backward();
    opt_dev.step();
    opt_cpu.zero_grad();
    Tensor loss_cpu = cross_entropy(twin->forward(x), y);
    loss_cpu.backward();
    opt_cpu.step();
    CHECK(loss_dev.device() == kTestDevice);
    CHECK(loss_dev.item<double>() == loss_cpu.item<double>());
  }
  const auto dev_state = model->state_dict(), cpu_state = twin->state_dict();
  REQUIRE(dev_state.size() == cpu_state.size());
  for (size_t i = 0; i < dev_state.size(); ++i) {
    CAPTURE(dev_state[i].first);
    CHECK(dev_state[i].second.device() == kTestDevice);
    CHECK(max_abs_diff(dev_state[i].second, cpu_state[i].second) == 0.0);
  }
}
