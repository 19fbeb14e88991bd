// Tensor handle, factories, dtypes, devices, the generator and dispatch.
#include <cmath>
#include <numeric>

#include "minidl/core/dispatch.h"
#include "tests/test_util.h"

using namespace minidl;

TEST_CASE("factories give the right shapes, dtypes and values") {
  CHECK(zeros({2, 3}).to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(ones({4}, kFloat64).to_vector<double>() == std::vector<double>(4, 1.0));
  CHECK(full({2}, 2.5).to_vector<float>() == std::vector<float>{2.5f, 2.5f});
  CHECK(arange(5.0, kInt64).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(arange(1.0, 2.0, 0.25).to_vector<float>() == std::vector<float>{1.0f, 1.25f, 1.5f, 1.75f});
  Tensor e = empty({0, 3});
  CHECK(e.numel() == 0);
  CHECK(e.shape() == Shape{0, 3});
  Tensor s = scalar_tensor(3.5);
  CHECK(s.dim() == 0);
  CHECK(s.item<float>() == 3.5f);
  Tensor t = tensor(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(t.dtype() == kInt64);
  CHECK(t.strides() == Shape{3, 1});
  CHECK(tensor({1.0, 2.0}).dtype() == kFloat32);  // torch.tensor default
  const double raw[3] = {1.0, 2.0, 3.0};
  CHECK(from_buffer(raw, {3}, kFloat64).to_vector<double>() == std::vector<double>{1.0, 2.0, 3.0});
  CHECK(ones({2}, TensorOptions(kFloat64).requires_grad()).requires_grad());
}

TEST_CASE("factory errors") {
  CHECK_THROWS_CONTAINS(zeros({2, -1}), "negative dimension");
  CHECK_THROWS_CONTAINS(tensor({1.0, 2.0, 3.0}, {2, 2}), "needs 4 values, got 3");
  CHECK_THROWS_CONTAINS(arange(0.0, 1.0, 0.0), "step must be nonzero");
  CHECK_THROWS_CONTAINS(randint(3, 3, {2}), "expected low < high");
  CHECK_THROWS_CONTAINS(ones({2}).item(), "a Tensor with 2 elements cannot be converted to Scalar");
  CHECK_THROWS_CONTAINS(ones({2}).data_ptr<double>(), "expected a tensor of dtype float64, got float32");
  CHECK_THROWS_CONTAINS(Tensor().shape(), "undefined tensor");
}

TEST_CASE("manual_seed reproduces random tensors; distributions look right") {
  manual_seed(7);
  Tensor a = randn({1000});
  manual_seed(7);
  Tensor b = randn({1000});
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  manual_seed(1);
  std::vector<double> n = randn({20000}, kFloat64).to_vector<double>();
  const double mean = std::accumulate(n.begin(), n.end(), 0.0) / n.size();
  double var = 0;
  for (double v : n) var += (v - mean) * (v - mean);
  var /= n.size();
  CHECK(std::abs(mean) < 0.03);
  CHECK(std::abs(var - 1.0) < 0.05);
  for (float u : rand({1000}).to_vector<float>()) CHECK((u >= 0.0f && u < 1.0f));
  for (int64_t r : randint(-2, 3, {1000}).to_vector<int64_t>()) CHECK((r >= -2 && r < 3));
  std::vector<int64_t> p = randperm(50).to_vector<int64_t>();
  std::sort(p.begin(), p.end());
  for (int64_t i = 0; i < 50; ++i) CHECK(p[i] == i);
}

TEST_CASE("generator state round-trips") {
  Generator g(42);
  g.normal();  // leaves a spare normal in the state
  const std::string st = g.state();
  const double x = g.normal(), y = g.uniform();
  Generator h;
  h.set_state(st);
  CHECK(h.normal() == x);
  CHECK(h.uniform() == y);
  CHECK_THROWS_CONTAINS(h.set_state("garbage"), "not one written by state()");
}

TEST_CASE("copies alias, clone copies, to(dtype) converts") {
  Tensor a = tensor({1.5, -2.5, 3.0});
  Tensor alias = a;
  Tensor copy = a.clone();
  {
    NoGradGuard g;
    alias.fill_(0.0);
  }
  CHECK(a.to_vector<float>() == std::vector<float>(3, 0.0f));
  CHECK(copy.to_vector<float>() == std::vector<float>{1.5f, -2.5f, 3.0f});
  CHECK(copy.to(kInt64).to_vector<int64_t>() == std::vector<int64_t>{1, -2, 3});  // truncation, as torch
  CHECK(copy.to(kFloat64).dtype() == kFloat64);
  Tensor u8 = tensor(std::vector<uint8_t>{0, 128, 255});
  CHECK(u8.to(kFloat32).to_vector<float>() == std::vector<float>{0.0f, 128.0f, 255.0f});
}

TEST_CASE("to(dtype) is differentiable") {
  Tensor x = randn({3}, kFloat64).requires_grad_();
  x.to(kFloat32).sum().backward();
  CHECK(x.grad().dtype() == kFloat64);
  CHECK(x.grad().to_vector<double>() == std::vector<double>(3, 1.0));
}

TEST_CASE("devices") {
  CHECK(Device("cpu") == kCPU);
  CHECK(Device("cuda:1").index == 1);
  CHECK(Device("cuda").str() == "cuda:0");
  CHECK_THROWS_CONTAINS(Device("tpu"), "expected a device string");
  CHECK_THROWS_CONTAINS(Device("cuda:x"), "non-negative device index");
}

TEST_CASE("a missing kernel names the op and the device") {
  using Fn = void();
  DispatchStub<Fn> stub("my_op");
  CHECK_THROWS_CONTAINS(stub(Device(kCUDA)), "my_op has no CUDA kernel");
  stub.set(DeviceType::CPU, +[] {});
  CHECK_NOTHROW(stub(kCPU));
}

TEST_CASE("dtype names follow PyTorch") {
  CHECK(std::string(dtype_name(kFloat32)) == "float32");
  CHECK(std::string(dtype_name(kBFloat16)) == "bfloat16");
  CHECK(element_size(kFloat16) == 2);
  CHECK_THROWS_CONTAINS(MINIDL_DISPATCH_FLOATING(kInt64, "softmax", [] {}), "softmax: expected a float32 or float64");
}

// A huge thread count used to crash libgomp (SIGSEGV in GOMP_parallel: it
// starts a team with a stack allocation per thread).
TEST_CASE("set_num_threads refuses 0 and more than kMaxThreads") {
  const int saved = get_num_threads();
  CHECK_THROWS_CONTAINS(set_num_threads(0), "set_num_threads: expected 1 to 1024 threads, got 0");
  CHECK_THROWS_CONTAINS(set_num_threads(100000), "set_num_threads: expected 1 to 1024 threads, got 100000");
  CHECK(get_num_threads() == saved);
  set_num_threads(kMaxThreads);
  CHECK(get_num_threads() == kMaxThreads);
  set_num_threads(saved);
}
