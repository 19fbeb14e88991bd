// core/cuda.h in a build without the CUDA backend (compiled only when
// MINIDL_CUDA is OFF; core/cuda/ implements it otherwise): CUDA is never
// available, the statistics are 0, and the calls that need a device say how
// to get one.
#include "minidl/core/check.h"
#include "minidl/core/cuda.h"
#include "minidl/core/cuda_graph.h"

namespace minidl::cuda {

namespace {
constexpr const char* kReason = "minidl was built without CUDA: configure with -DMINIDL_CUDA=ON";
}  // namespace

bool is_built() { return false; }
bool is_available() { return false; }
std::string unavailable_reason() { return kReason; }
int device_count() { return 0; }
int current_device() { MINIDL_FAIL("cuda::current_device: ", kReason); }
void set_device(int index) { MINIDL_FAIL("cuda::set_device(", index, "): ", kReason); }
void synchronize(int index) { MINIDL_FAIL("cuda::synchronize(", index, "): ", kReason); }
void profiler_start() { MINIDL_FAIL("cuda::profiler_start: ", kReason); }
void profiler_stop() { MINIDL_FAIL("cuda::profiler_stop: ", kReason); }

size_t memory_allocated(int) { return 0; }
size_t max_memory_allocated(int) { return 0; }
size_t memory_reserved(int) { return 0; }
size_t max_memory_reserved(int) { return 0; }
void reset_peak_memory_stats(int) {}
void empty_cache() {}

// core/cuda_graph.h: a graph can be made and reset, never captured or replayed.
bool is_current_stream_capturing() { return false; }

struct CUDAGraph::Impl {};
CUDAGraph::CUDAGraph() : impl_(std::make_unique<Impl>()) {}
CUDAGraph::~CUDAGraph() = default;
void CUDAGraph::capture_begin(uint64_t, CaptureErrorMode) {
  MINIDL_FAIL("CUDAGraph::capture_begin: CUDA is not available: ", kReason);
}
void CUDAGraph::capture_end() { MINIDL_FAIL("CUDAGraph::capture_end: called without capture_begin"); }
void CUDAGraph::replay() {
  MINIDL_FAIL("CUDAGraph::replay: called without a preceding successful capture (capture_begin, then capture_end)");
}
void CUDAGraph::reset() noexcept {}
bool CUDAGraph::has_graph() const { return false; }
bool CUDAGraph::is_capturing() const { return false; }
uint64_t CUDAGraph::pool() const { return 0; }

struct CaptureStreamGuard::Impl {};
CaptureStreamGuard::CaptureStreamGuard(int) { MINIDL_FAIL("CaptureStreamGuard: CUDA is not available: ", kReason); }
CaptureStreamGuard::~CaptureStreamGuard() = default;

}  // namespace minidl::cuda
