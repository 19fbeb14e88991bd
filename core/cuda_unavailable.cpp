// core/cuda.h in a build without the CUDA backend (compiled only when
// MINIDL_CUDA is OFF; core/cuda/ implements it otherwise): CUDA is never
// available, the statistics are 0, and the calls that need a device say how
// to get one.
#include "minidl/core/check.h"
#include "minidl/core/cuda.h"

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

size_t memory_allocated(int) { return 0; }
size_t max_memory_allocated(int) { return 0; }
size_t memory_reserved(int) { return 0; }
size_t max_memory_reserved(int) { return 0; }
void reset_peak_memory_stats(int) {}
void empty_cache() {}

}  // namespace minidl::cuda
