// Per-(thread, device) library handles, PyTorch's DeviceThreadHandlePool:
// a thread takes a handle from its device's pool on first use and gives it
// back when the thread exits, so a later thread reuses it. The pools are
// never destroyed: destroying a handle after the CUDA runtime has unloaded
// at exit can crash, and the driver reclaims everything then anyway.
#include "minidl/core/cuda/library_handles.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "minidl/core/allocator.h"
#include "minidl/core/cuda/graph.h"
#include "minidl/core/cuda/handles.h"

namespace minidl::cuda {

namespace {

template <class Handle>
class HandlePool {
 public:
  Handle take(int index) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& free = free_[index];
      if (!free.empty()) {
        Handle h = std::move(free.back());
        free.pop_back();
        return h;
      }
    }
    DeviceGuard guard(index);
    return Handle::create();
  }
  void give_back(int index, Handle h) noexcept {
    try {
      std::lock_guard<std::mutex> lock(mu_);
      free_[index].push_back(std::move(h));
    } catch (...) {
      (void)h.release();  // out of memory at thread exit: leak it rather than destroy it late
    }
  }

 private:
  std::mutex mu_;
  std::map<int, std::vector<Handle>> free_;
};

template <class Handle>
HandlePool<Handle>& pool() {
  static auto* p = new HandlePool<Handle>;  // never destroyed: see the file comment
  return *p;
}

// The calling thread's handles, one per device, returned to the pool at thread exit.
template <class Handle>
class ThreadHandles {
 public:
  ~ThreadHandles() {
    for (auto& [index, h] : handles_) pool<Handle>().give_back(index, std::move(h));
  }
  auto get(int index) {
    auto it = handles_.find(index);
    if (it == handles_.end()) it = handles_.emplace(index, pool<Handle>().take(index)).first;
    return it->second.get();
  }

 private:
  std::map<int, Handle> handles_;
};

int resolve(int index) { return index < 0 ? current_device() : index; }

// cuBLAS workspaces per (handle, stream): a handle used on two streams must
// not share scratch memory between them (PyTorch's cublas_handle_stream_to_workspace).
// Blocks from the caching allocator, kept for the process (never freed).
void* workspace_for(cublasHandle_t handle, cudaStream_t stream, int index) {
  static std::mutex mu;
  static auto* workspaces = new std::map<std::pair<cublasHandle_t, cudaStream_t>, void*>;
  std::lock_guard<std::mutex> lock(mu);
  auto [it, inserted] = workspaces->try_emplace({handle, stream}, nullptr);
  if (inserted) {
    try {
      // Made during a capture, it would live in the graph's private pool and
      // outlive it in this map.
      check_not_capturing(stream, "creating the cuBLAS workspace of a stream",
                          "run a warm-up step on the capture stream first (cuda::CaptureStreamGuard)");
      // allocate() puts the block on current_stream(index), which is `stream`.
      it->second = allocator_for(DeviceType::CUDA)->allocate(cublas_workspace_size(), Device(DeviceType::CUDA, index));
    } catch (...) {
      workspaces->erase(it);
      throw;
    }
  }
  return it->second;
}

}  // namespace

cublasHandle_t cublas_handle(int index) {
  index = resolve(index);
  thread_local ThreadHandles<CublasHandle> handles;
  cublasHandle_t h = handles.get(index);
  const cudaStream_t stream = current_stream(index);
  MINIDL_CUBLAS_CHECK(cublasSetStream(h, stream));
  // cublasSetStream resets the workspace to cuBLAS's own: set ours after it.
  MINIDL_CUBLAS_CHECK(cublasSetWorkspace(h, workspace_for(h, stream, index), cublas_workspace_size()));
  return h;
}

cublasLtHandle_t cublaslt_handle(int index) {
  index = resolve(index);
  thread_local ThreadHandles<CublasLtHandle> handles;
  return handles.get(index);  // cuBLASLt takes the stream and workspace per cublasLtMatmul call
}

cudnnHandle_t cudnn_handle(int index) {
  index = resolve(index);
  thread_local ThreadHandles<CudnnHandle> handles;
  cudnnHandle_t h = handles.get(index);
  MINIDL_CUDNN_CHECK(cudnnSetStream(h, current_stream(index)));
  return h;
}

size_t cublas_workspace_size() {
  static const size_t size = [] {
    // CUBLAS_WORKSPACE_CONFIG=:SIZE_KiB:COUNT[:SIZE_KiB:COUNT...]: the sum of SIZE * COUNT KiB, as PyTorch.
    if (const char* env = std::getenv("CUBLAS_WORKSPACE_CONFIG")) {
      const std::string config(env);
      static const std::regex pair(":([0-9]+):([0-9]+)");
      size_t total = 0;
      for (auto it = std::sregex_iterator(config.begin(), config.end(), pair); it != std::sregex_iterator(); ++it)
        total += std::stoull((*it)[1]) * std::stoull((*it)[2]) * 1024;
      if (total > 0) return total;
    }
    int major = 0;
    MINIDL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, current_device()));
    return major >= 9 ? size_t{32} << 20 : size_t{8} << 20;  // Hopper: 4096 KiB x 8; else 4096 x 2 (+ small)
  }();
  return size;
}

}  // namespace minidl::cuda
