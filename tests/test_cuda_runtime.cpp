// The CUDA runtime (core/cuda/, core/cuda.h) and the CUDA copy/fill kernels.
// With a device: the caching allocator's statistics, copies of every dtype
// pair in every direction with strided views, fill_, item(), streams,
// events, record_stream, library handles. Without one: the answers a
// program gets instead (checked below, then the test reports itself
// skipped, exit 77). In a build without CUDA: the "built without CUDA" answers.
//
// Its own main (tests/CMakeLists.txt): the checks without a device make
// tensors, so they must run after static initialization (the kernel tables
// are globals of other translation units), never from a static object.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include <string>

#include "minidl/core/allocator.h"
#include "minidl/core/cuda.h"
#include "minidl/core/tensor.h"
#include "tests/test_util.h"

using namespace minidl;

namespace {

// What every build without a usable device must say, device or not.
void checks_without_device() {
  auto expect = [](bool ok, const std::string& what) {
    if (!ok) throw std::runtime_error(what);
  };
  const std::string reason = cuda::unavailable_reason();
  expect(!cuda::is_available() && cuda::device_count() == 0, "is_available() false, device_count() 0");
  expect(!reason.empty(), "unavailable_reason() says why");
  expect(cuda::memory_allocated() == 0 && cuda::memory_reserved() == 0, "statistics are 0");
  cuda::empty_cache();  // does nothing, never throws
  for (auto f : {+[] { cuda::set_device(0); }, +[] { (void)zeros({2}, Device("cuda")); }}) {
    try {
      f();
      expect(false, "set_device(0) / zeros on cuda should throw");
    } catch (const Error& e) {
      expect(std::string(e.what()).find(reason) != std::string::npos,
             std::string("the error names the reason: ") + e.what());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (cuda::is_built() && !cuda::is_available()) {  // a CUDA build on a machine without a GPU
    try {
      checks_without_device();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "FAILED before skipping (checks without a CUDA device): %s\n", e.what());
      return 1;
    }
    std::printf("skipped: no CUDA device (%s)\n", cuda::unavailable_reason().c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}

#ifndef MINIDL_WITH_CUDA

TEST_CASE("a build without CUDA says so") {
  CHECK_FALSE(cuda::is_built());
  CHECK_FALSE(cuda::is_available());
  CHECK(cuda::unavailable_reason() == "minidl was built without CUDA: configure with -DMINIDL_CUDA=ON");
  CHECK(cuda::device_count() == 0);
  CHECK_THROWS_CONTAINS(cuda::set_device(0), "configure with -DMINIDL_CUDA=ON");
  CHECK_THROWS_CONTAINS(cuda::synchronize(), "configure with -DMINIDL_CUDA=ON");
  CHECK_THROWS_CONTAINS(zeros({2}, Device("cuda")), "no allocator for device type CUDA: minidl was built without CUDA");
  CHECK(cuda::memory_allocated() == 0);
  CHECK_NOTHROW(cuda::empty_cache());
  checks_without_device();
}

#else  // a CUDA build with a device (else the requirement above exited 77)

#include "minidl/core/cuda/handles.h"
#include "minidl/core/cuda/library_handles.h"
#include "minidl/core/cuda/runtime.h"

#include <atomic>
#include <cstdlib>
#include <thread>

using minidl::testing::max_abs_diff;

namespace {

const Device kCuda("cuda");
constexpr DType kAll[] = {kFloat32, kFloat64, kInt64, kUInt8, kFloat16, kBFloat16};

bool caching_enabled() {
  const char* env = std::getenv("PYTORCH_NO_CUDA_MEMORY_CACHING");
  return env == nullptr || std::string(env) == "0";
}

// Small whole numbers 0..n-1 (exact in every dtype, uint8 included) as a [rows, cols] float64 tensor.
Tensor iota(int64_t rows, int64_t cols) {
  Tensor t = empty({rows, cols}, TensorOptions(kFloat64));
  double* p = t.data_ptr<double>();
  for (int64_t i = 0; i < rows * cols; ++i) p[i] = static_cast<double>(i % 200);
  return t;
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

}  // namespace

TEST_CASE("devices: count, current device, guard, errors") {
  CHECK(cuda::is_built());
  CHECK(cuda::is_available());
  CHECK(cuda::unavailable_reason().empty());
  REQUIRE(cuda::device_count() >= 1);
  cuda::set_device(0);
  CHECK(cuda::current_device() == 0);
  {
    cuda::DeviceGuard guard{kCPU};  // not a CUDA device: no change
    CHECK(cuda::current_device() == 0);
  }
  CHECK_THROWS_CONTAINS(cuda::set_device(cuda::device_count()), "invalid device ordinal");
  CHECK_THROWS_CONTAINS(cuda::DeviceGuard(cuda::device_count()), "invalid device ordinal");
  CHECK_NOTHROW(cuda::synchronize());
  CHECK_THROWS_CONTAINS([] { MINIDL_CUDA_CHECK_OP(cudaSetDevice(-1), "my_op"); }(), "while running my_op");
}

TEST_CASE("caching allocator: statistics, reuse, empty_cache") {
  cuda::synchronize();
  const size_t before = cuda::memory_allocated();
  cuda::reset_peak_memory_stats();
  CHECK(cuda::max_memory_allocated() == before);
  void* first = nullptr;
  {
    Tensor a = empty({1000}, TensorOptions(kFloat32).device(kCuda));  // 4000 bytes (4096 rounded, when caching)
    first = a.raw_data();
    CHECK(cuda::memory_allocated() >= before + 4000);
    CHECK(cuda::memory_allocated() <= before + 4096);
    CHECK(cuda::memory_reserved() >= cuda::memory_allocated());
  }
  CHECK(cuda::memory_allocated() == before);
  CHECK(cuda::max_memory_allocated() >= before + 4000);
  if (caching_enabled()) {
    Tensor b = empty({1000}, TensorOptions(kFloat32).device(kCuda));
    CHECK(b.raw_data() == first);  // same stream, same size: the cached block
  }
  const size_t reserved = cuda::memory_reserved();
  cuda::empty_cache();
  CHECK(cuda::memory_reserved() <= reserved);
  CHECK(cuda::memory_allocated() == before);
  cuda::reset_peak_memory_stats();
  CHECK(cuda::max_memory_allocated() == cuda::memory_allocated());
  CHECK(empty({0}, TensorOptions(kFloat32).device(kCuda)).numel() == 0);  // no block, no error
}

TEST_CASE("copies: every dtype pair, both directions, strided views") {
  const Tensor base = iota(5, 7);
  for (DType s : kAll) {
    const Tensor host = base.to(s);
    // host -> device -> host, contiguous and transposed (strided both ways).
    const Tensor dev = host.to(kCuda);
    CHECK(dev.device() == kCuda);
    CHECK(values(dev.to(kCPU)) == values(host));
    const Tensor dev_t = host.t().to(kCuda);                    // strided host source
    CHECK(values(dev_t) == values(host.t()));
    CHECK(values(dev.t().to(kCPU)) == values(host.t()));         // strided device source
    CHECK(values(dev.narrow(1, 2, 3)) == values(host.narrow(1, 2, 3)));
    for (DType d : kAll) {
      CAPTURE(dtype_name(s));
      CAPTURE(dtype_name(d));
      // device -> device conversion, and into strided destinations on each side.
      CHECK(values(dev.to(d)) == values(host.to(d)));
      CHECK(values(dev.t().to(d)) == values(host.t().to(d)));
      Tensor dst_dev = zeros({7, 5}, TensorOptions(d).device(kCuda)).t();
      dst_dev.copy_(host);  // host -> strided device, converting
      CHECK(values(dst_dev) == values(host.to(d)));
      Tensor dst_host = zeros({7, 5}, TensorOptions(d)).t();
      dst_host.copy_(dev);  // device -> strided host, converting
      CHECK(values(dst_host) == values(host.to(d)));
      Tensor dst_dev2 = zeros({7, 5}, TensorOptions(d).device(kCuda)).t();
      dst_dev2.copy_(dev);  // device -> strided device
      CHECK(values(dst_dev2) == values(host.to(d)));
    }
  }
  // Rounding to float16/bfloat16 on the GPU gives the CPU's bits.
  const Tensor r = randn({257}, TensorOptions(kFloat64)) * 1000.0;
  for (DType d : {kFloat16, kBFloat16, kFloat32, kInt64}) {
    CHECK(max_abs_diff(r.to(kCuda).to(d), r.to(d)) == 0.0);
  }
  // Broadcast source (stride 0) and a 0-d tensor.
  const Tensor row = iota(1, 7).to(kCuda);
  Tensor grid = zeros({4, 7}, TensorOptions(kFloat64).device(kCuda));
  grid.copy_(row);
  CHECK(values(grid) == values(iota(1, 7).expand({4, 7}).contiguous()));
  CHECK(full({}, 2.5).to(kCuda).item<double>() == 2.5);
}

TEST_CASE("non_blocking copies from pinned memory") {
  const Tensor host = iota(64, 64).to(kFloat32);
  const Tensor pinned = host.pin_memory();
  CHECK(pinned.is_pinned());
  const Tensor dev = pinned.to(kCuda, /*non_blocking=*/true);
  cuda::synchronize();
  CHECK(values(dev) == values(host));
  CHECK(values(dev.to(kCPU, true)) == values(host));  // pageable destination: synchronous anyway
  // The pinned source dies at once: its block waits for the copy before cudaFreeHost.
  const Tensor dev2 = host.pin_memory().to(kCuda, /*non_blocking=*/true);
  CHECK(values(dev2) == values(host));
}

TEST_CASE("fill_, zeros, full, item") {
  for (DType d : kAll) {
    CAPTURE(dtype_name(d));
    Tensor t = zeros({6, 5}, TensorOptions(d).device(kCuda));
    CHECK(max_abs_diff(t, zeros({6, 5}, TensorOptions(d))) == 0.0);
    t.t().narrow(0, 1, 2).fill_(3.0);  // a strided view
    Tensor expect = zeros({6, 5}, TensorOptions(d));
    expect.t().narrow(0, 1, 2).fill_(3.0);
    CHECK(values(t) == values(expect));
    CHECK(full({}, 7.0, TensorOptions(d).device(kCuda)).item<double>() == 7.0);
  }
  CHECK(full({3}, 0.1, TensorOptions(kFloat16).device(kCuda)).to(kCPU).to_vector<float>() ==
        full({3}, 0.1, TensorOptions(kFloat16)).to_vector<float>());
  CHECK_THROWS_CONTAINS(zeros({2}, TensorOptions(kFloat16).device(kCuda)).fill_(1e5), "overflow");
}

TEST_CASE("streams: default, pool, guard, per thread") {
  const cudaStream_t def = cuda::current_stream();
  CHECK(def != nullptr);  // never the legacy stream 0
  CHECK(cuda::current_stream(0) == def);
  std::vector<cudaStream_t> pool;
  for (int i = 0; i < 33; ++i) pool.push_back(cuda::stream_from_pool());
  CHECK(pool[32] == pool[0]);  // round robin over 32
  for (int i = 1; i < 32; ++i) CHECK(pool[i] != pool[0]);
  {
    cuda::StreamGuard guard(0, pool[3]);
    CHECK(cuda::current_stream() == pool[3]);
    cudaStream_t other_thread = nullptr;
    std::thread([&] { other_thread = cuda::current_stream(0); }).join();
    CHECK(other_thread == def);  // current streams are per thread
  }
  CHECK(cuda::current_stream() == def);
  CHECK_THROWS_CONTAINS(cuda::set_current_stream(0, nullptr), "legacy default stream");
  cuda::CudaStream owned = cuda::CudaStream::create();
  cuda::CudaStream moved = std::move(owned);
  CHECK_FALSE(static_cast<bool>(owned));
  CHECK(moved.query());
}

TEST_CASE("events: record, wait on another stream, elapsed time") {
  const cudaStream_t a = cuda::stream_from_pool(), b = cuda::stream_from_pool();
  Tensor x = empty({1 << 20}, TensorOptions(kFloat32).device(kCuda));
  cuda::CudaEvent start = cuda::CudaEvent::create(/*enable_timing=*/true);
  cuda::CudaEvent stop = cuda::CudaEvent::create(true);
  {
    cuda::StreamGuard on_a(0, a);
    start.record(a);
    x.fill_(2.0);
    stop.record(a);
  }
  stop.block(b);  // b's later work waits for the fill
  Tensor y = empty({1 << 20}, TensorOptions(kFloat32).device(kCuda));
  {
    cuda::StreamGuard on_b(0, b);
    cuda::record_stream(x, b);
    y.copy_(x);
  }
  stop.synchronize();
  CHECK(stop.query());
  CHECK(start.elapsed_time(stop) >= 0.0f);
  cuda::synchronize();
  CHECK(y.to_vector<float>() == std::vector<float>(1 << 20, 2.0f));
}

TEST_CASE("record_stream: a block used on a busy stream is reused only after that stream's work") {
  if (!caching_enabled()) return;  // nothing is reused without caching
  const cudaStream_t side = cuda::stream_from_pool();
  // Blocks are per stream: a block freed on `side` is not handed to the default stream.
  void* side_ptr = nullptr;
  {
    cuda::StreamGuard guard(0, side);
    side_ptr = empty({3000}, TensorOptions(kFloat32).device(kCuda)).raw_data();
  }
  {
    Tensor d = empty({3000}, TensorOptions(kFloat32).device(kCuda));
    CHECK(d.raw_data() != side_ptr);
  }
  // Keep `side` busy with a host function that waits for us. 12 MiB blocks:
  // larger than anything earlier cases left cached except whole 20 MiB
  // segments, and u stays alive, so t's block (with whatever it merges with)
  // is the only cached block v can get: the addresses below are deterministic.
  static std::atomic<bool> release{false};
  release = false;
  MINIDL_CUDA_CHECK(cudaLaunchHostFunc(side, [](void*) { while (!release.load()) std::this_thread::yield(); }, nullptr));
  const Shape twelve_mib{3 << 20};
  void* used = nullptr;
  {
    Tensor t = empty(twelve_mib, TensorOptions(kFloat32).device(kCuda));
    used = t.raw_data();
    cuda::record_stream(t, side);
  }  // freed while `side` has not run: not reusable yet
  Tensor u = empty(twelve_mib, TensorOptions(kFloat32).device(kCuda));  // kept: the only other candidate
  CHECK(u.raw_data() != used);
  release = true;
  MINIDL_CUDA_CHECK(cudaStreamSynchronize(side));
  Tensor v = empty(twelve_mib, TensorOptions(kFloat32).device(kCuda));
  CHECK(v.raw_data() == used);  // the event completed: the block is back
}

TEST_CASE("library handles follow the current stream") {
  cublasHandle_t h = cuda::cublas_handle();
  cudaStream_t s = nullptr;
  MINIDL_CUBLAS_CHECK(cublasGetStream(h, &s));
  CHECK(s == cuda::current_stream());
  const cudaStream_t side = cuda::stream_from_pool();
  {
    cuda::StreamGuard guard(0, side);
    CHECK(cuda::cublas_handle() == h);  // one per thread and device
    MINIDL_CUBLAS_CHECK(cublasGetStream(h, &s));
    CHECK(s == side);
    cudaStream_t ds = nullptr;
    MINIDL_CUDNN_CHECK(cudnnGetStream(cuda::cudnn_handle(), &ds));
    CHECK(ds == side);
  }
  CHECK(cuda::cublaslt_handle() != nullptr);
  CHECK(cuda::cublas_workspace_size() >= (size_t{8} << 20));
}

#endif  // MINIDL_WITH_CUDA
