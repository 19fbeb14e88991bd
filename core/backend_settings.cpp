// The switches of core/backend_settings.h: relaxed atomics (each is an
// independent flag read once per op; no ordering with other memory needed).
#include "minidl/core/backend_settings.h"

#include <atomic>

namespace minidl::backends {

namespace {
constexpr BackendSettings kDefaults{};
std::atomic<bool> g_matmul_tf32{kDefaults.matmul_allow_tf32};
std::atomic<bool> g_cudnn_tf32{kDefaults.cudnn_allow_tf32};
std::atomic<bool> g_cudnn_benchmark{kDefaults.cudnn_benchmark};
std::atomic<bool> g_cudnn_deterministic{kDefaults.cudnn_deterministic};
std::atomic<bool> g_cpu_winograd4{kDefaults.cpu_conv_allow_winograd4};
}  // namespace

namespace cuda::matmul {
bool allow_tf32() { return g_matmul_tf32.load(std::memory_order_relaxed); }
void set_allow_tf32(bool allow) { g_matmul_tf32.store(allow, std::memory_order_relaxed); }
}  // namespace cuda::matmul

namespace cudnn {
bool allow_tf32() { return g_cudnn_tf32.load(std::memory_order_relaxed); }
void set_allow_tf32(bool allow) { g_cudnn_tf32.store(allow, std::memory_order_relaxed); }
bool benchmark() { return g_cudnn_benchmark.load(std::memory_order_relaxed); }
void set_benchmark(bool on) { g_cudnn_benchmark.store(on, std::memory_order_relaxed); }
bool deterministic() { return g_cudnn_deterministic.load(std::memory_order_relaxed); }
void set_deterministic(bool on) { g_cudnn_deterministic.store(on, std::memory_order_relaxed); }
}  // namespace cudnn

namespace cpu {
bool conv_allow_winograd4() { return g_cpu_winograd4.load(std::memory_order_relaxed); }
void set_conv_allow_winograd4(bool allow) { g_cpu_winograd4.store(allow, std::memory_order_relaxed); }
}  // namespace cpu

BackendSettings backend_settings() {
  return {cuda::matmul::allow_tf32(), cudnn::allow_tf32(), cudnn::benchmark(), cudnn::deterministic(),
          cpu::conv_allow_winograd4()};
}

void set_backend_settings(const BackendSettings& s) {
  cuda::matmul::set_allow_tf32(s.matmul_allow_tf32);
  cudnn::set_allow_tf32(s.cudnn_allow_tf32);
  cudnn::set_benchmark(s.cudnn_benchmark);
  cudnn::set_deterministic(s.cudnn_deterministic);
  cpu::set_conv_allow_winograd4(s.cpu_conv_allow_winograd4);
}

}  // namespace minidl::backends
