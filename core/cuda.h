// minidl::cuda: what a user asks of the CUDA backend (torch.cuda's names),
// in every build and without CUDA headers, so a program can write
//   Device dev = cuda::is_available() ? Device("cuda") : Device("cpu");
// and compile and run on a machine without CUDA. In a build without
// -DMINIDL_CUDA=ON is_available() is false and unavailable_reason() says how
// to get it; device_count() is 0; the other calls throw minidl::Error.
// Streams, events and error checks for backend code: core/cuda/runtime.h.
#pragma once

#include <cstddef>
#include <string>

namespace minidl::cuda {

// Whether this build has the CUDA backend (torch.backends.cuda.is_built()),
// whatever the machine has.
bool is_built();

// Never throws and never crashes: false on a machine without a driver or a
// GPU (cudaErrorInsufficientDriver / cudaErrorNoDevice, cleared afterwards),
// and in a build without the CUDA backend.
bool is_available();
// Why is_available() is false ("no CUDA driver: cudaErrorInsufficientDriver
// (CUDA driver version is insufficient for CUDA runtime version)", "minidl
// was built without CUDA: configure with -DMINIDL_CUDA=ON"); empty when true.
std::string unavailable_reason();
int device_count();  // 0 when unavailable
int current_device();
void set_device(int index);  // throws for an index outside [0, device_count())
// Blocks the host until every stream of device `index` (-1: the current
// device) has finished its work.
void synchronize(int index = -1);
// Bracket the work a profiler started with "profile from start off" records
// (cudaProfilerStart/Stop, torch.cuda.profiler.start/stop), e.g.
// `ncu --profile-from-start off`: the steps after a warm-up, not cuDNN's
// algorithm search. Without a profiler attached they do nothing.
void profiler_start();
void profiler_stop();

// torch.cuda.set_sync_debug_mode: what an operation that makes the host wait
// for the device does (a blocking copy between host memory and a device:
// item(), to(kCPU), to_vector(), copy_; non_blocking copies are not flagged,
// as in PyTorch): "default" (0) nothing, "warn" (1)
// prints "UserWarning: called a synchronizing CUDA operation (...)", "error"
// (2) throws minidl::Error with that message. Unlike the calls above these
// work in every build and cover the test device too (core/sync_debug.h);
// an explicit synchronize() is not flagged.
void set_sync_debug_mode(int debug_mode);
void set_sync_debug_mode(const std::string& debug_mode);
int get_sync_debug_mode();

// ---- the caching allocator's statistics (torch.cuda's names), in bytes -----
// Per device (-1: the current device). Before the first CUDA allocation, and
// in a build or on a machine without CUDA, they are 0 and the calls below do
// nothing (as torch.cuda's before initialization).
size_t memory_allocated(int index = -1);      // held by live tensors
size_t max_memory_allocated(int index = -1);  // peak of the above since reset
size_t memory_reserved(int index = -1);       // obtained from cudaMalloc (live + cached)
size_t max_memory_reserved(int index = -1);
void reset_peak_memory_stats(int index = -1);
// Returns every cached block that no tensor uses to the driver (cudaFree), so
// other processes can use it; memory_allocated is unchanged.
void empty_cache();

}  // namespace minidl::cuda
