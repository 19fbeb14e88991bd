#include "minidl/core/sync_debug.h"

#include <atomic>
#include <iostream>
#include <string>

#include "minidl/core/check.h"
#include "minidl/core/cuda.h"

namespace minidl {

namespace {

std::atomic<int> g_mode{0};
std::atomic<int64_t> g_count{0};

}  // namespace

SyncDebugMode sync_debug_mode() { return static_cast<SyncDebugMode>(g_mode.load(std::memory_order_relaxed)); }

void warn_or_error_on_sync(Device device, const char* what) {
  g_count.fetch_add(1, std::memory_order_relaxed);
  const SyncDebugMode mode = sync_debug_mode();
  if (mode == SyncDebugMode::kDefault) return;
  const std::string message = std::string("called a synchronizing ") + (device.is_cuda() ? "CUDA" : device.str()) +
                              " operation (" + what + " with " + device.str() + ")";
  MINIDL_CHECK(mode != SyncDebugMode::kError, message);
  std::cerr << "UserWarning: " << message << "\n";
}

int64_t synchronizing_operations() { return g_count.load(std::memory_order_relaxed); }

namespace cuda {

void set_sync_debug_mode(int debug_mode) {
  MINIDL_CHECK(debug_mode >= 0 && debug_mode <= 2,
               "invalid value of debug_mode, expected one of `default`, `warn`, `error` (0, 1, 2), got ", debug_mode);
  g_mode.store(debug_mode, std::memory_order_relaxed);
}

void set_sync_debug_mode(const std::string& debug_mode) {
  if (debug_mode == "default") return set_sync_debug_mode(0);
  if (debug_mode == "warn") return set_sync_debug_mode(1);
  if (debug_mode == "error") return set_sync_debug_mode(2);
  MINIDL_CHECK(false, "invalid value of debug_mode, expected one of `default`, `warn`, `error`, got '", debug_mode,
               "'");
}

int get_sync_debug_mode() { return g_mode.load(std::memory_order_relaxed); }

}  // namespace cuda

}  // namespace minidl
