// NcclCommunicator: NCCL's collectives on a communication stream, fenced
// after the caller's current stream (PyTorch's ProcessGroupNCCL::collective):
//   1. record an event on the caller's current stream; the communication
//      stream waits on it, so NCCL reads the inputs as the caller wrote them;
//   2. enqueue the NCCL call(s) on the communication stream;
//   3. record the end event there (WorkNCCL's wait/is_completed use it).
// The communicator is non-blocking (ncclConfig_t::blocking = 0): creation
// and enqueueing may answer ncclInProgress and are polled, so a hung peer
// can be given up on and ncclCommAbort frees everything.
// Run on an H100 at world size 1 (tests/test_cuda_nccl, 2026-11-26).
#include "minidl/dist/nccl/nccl_communicator.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "minidl/core/check.h"
#include "minidl/core/cuda/runtime.h"
#include "minidl/core/dtype.h"

namespace minidl::dist {

void nccl_check(ncclResult_t result, const char* call, ncclComm_t comm, bool in_progress_ok) {
  if (result == ncclSuccess || (in_progress_ok && result == ncclInProgress)) return;
  std::string last = comm ? ncclGetLastError(comm) : ncclGetLastError(nullptr);
  MINIDL_FAIL("NCCL error in ", call, ": ", ncclGetErrorString(result), last.empty() ? "" : " (", last,
              last.empty() ? "" : ")");
}

ncclDataType_t to_nccl_dtype(DType dtype) {
  switch (dtype) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Int64: return ncclInt64;
    default: break;
  }
  MINIDL_FAIL("ProcessGroupNCCL: unsupported dtype ", dtype_name(dtype));
}

ncclRedOp_t to_nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return ncclSum;
    case ReduceOp::AVG: return ncclAvg;
    case ReduceOp::PRODUCT: return ncclProd;
    case ReduceOp::MIN: return ncclMin;
    case ReduceOp::MAX: return ncclMax;
  }
  MINIDL_FAIL("ProcessGroupNCCL: unknown ReduceOp");
}

std::string encode_unique_id(const ncclUniqueId& id) {
  static const char* digits = "0123456789abcdef";
  std::string text;
  for (char c : id.internal) {
    const auto b = static_cast<unsigned char>(c);
    text += digits[b >> 4];
    text += digits[b & 15];
  }
  return text;
}

ncclUniqueId decode_unique_id(const std::string& text) {
  ncclUniqueId id;
  MINIDL_CHECK(text.size() == 2 * sizeof(id.internal), "ProcessGroupNCCL: the NCCL unique id from the store has ",
               text.size(), " characters, expected ", 2 * sizeof(id.internal));
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    MINIDL_FAIL("ProcessGroupNCCL: the NCCL unique id from the store is not hex");
  };
  for (size_t i = 0; i < sizeof(id.internal); ++i)
    id.internal[i] = static_cast<char>(nibble(text[2 * i]) << 4 | nibble(text[2 * i + 1]));
  return id;
}

// ---- CudaCollectiveEvent ----------------------------------------------------

CudaCollectiveEvent::CudaCollectiveEvent(int device, cudaStream_t stream) : device_(device) {
  cuda::DeviceGuard guard(device_);
  MINIDL_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
  MINIDL_CUDA_CHECK(cudaEventRecord(event_, stream));
}

CudaCollectiveEvent::~CudaCollectiveEvent() {
  if (event_) (void)cudaEventDestroy(event_);  // never throws
}

bool CudaCollectiveEvent::query() {
  const cudaError_t err = cudaEventQuery(event_);
  if (err == cudaErrorNotReady) {
    // Cleared as PyTorch's CUDAEvent::query does: left as this thread's last
    // error, the next MINIDL_CUDA_KERNEL_LAUNCH_CHECK here (Work::synchronize
    // and is_completed poll from the caller's thread) would report it.
    (void)cudaGetLastError();
    return false;
  }
  MINIDL_CUDA_CHECK_OP(err, "ProcessGroupNCCL (end event of a collective)");
  return true;
}

void CudaCollectiveEvent::make_current_stream_wait() {
  cuda::DeviceGuard guard(device_);
  MINIDL_CUDA_CHECK(cudaStreamWaitEvent(cuda::current_stream(device_), event_, 0));
}

// ---- NcclCommunicator -------------------------------------------------------

NcclCommunicator::NcclCommunicator(const std::string& unique_id, int rank, int size, int device, Milliseconds timeout)
    : rank_(rank), size_(size), device_(device), timeout_(timeout) {
  cuda::DeviceGuard guard(device_);
  stream_ = cuda::stream_from_pool(device_);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclUniqueId id = decode_unique_id(unique_id);
  try {
    nccl_check(ncclCommInitRankConfig(&comm_, size, id, rank, &config), "ncclCommInitRankConfig", nullptr, true);
    wait_ready("ncclCommInitRankConfig");
  } catch (const std::exception& e) {
    abort();
    MINIDL_FAIL("ProcessGroupNCCL: rank ", rank, " of ", size, " on cuda:", device,
                " could not create its NCCL communicator: ", e.what());
  }
}

NcclCommunicator::~NcclCommunicator() {
  if (!comm_ || aborted_) return;
  cuda::DeviceGuard guard(device_);
  (void)ncclCommDestroy(comm_);  // never throws
}

void NcclCommunicator::wait_ready(const char* call) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    nccl_check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", comm_);
    if (state == ncclSuccess) return;
    nccl_check(state, call, comm_, true);
    MINIDL_CHECK(std::chrono::steady_clock::now() < deadline, call, " did not finish within ", timeout_.count(),
                 " ms (are all ranks running and using the nccl backend?)");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

template <class Fn>
CollectiveEventPtr NcclCommunicator::launch(const char* call, Fn&& enqueue) {
  MINIDL_CHECK(!aborted_, call, ": the NCCL communicator was aborted");
  cuda::DeviceGuard guard(device_);
  // The fence: the communication stream waits for the caller's work so far.
  cudaEvent_t ready = nullptr;
  MINIDL_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  const cudaError_t recorded = cudaEventRecord(ready, cuda::current_stream(device_));
  const cudaError_t waited = recorded == cudaSuccess ? cudaStreamWaitEvent(stream_, ready, 0) : recorded;
  (void)cudaEventDestroy(ready);  // freed once the recorded work has run
  MINIDL_CUDA_CHECK_OP(waited, call);
  nccl_check(enqueue(), call, comm_, true);
  wait_ready(call);
  return std::make_unique<CudaCollectiveEvent>(device_, stream_);
}

CollectiveEventPtr NcclCommunicator::all_reduce(Tensor& t, ReduceOp op) {
  return launch("ncclAllReduce", [&] {
    return ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()), to_nccl_dtype(t.dtype()),
                         to_nccl_op(op), comm_, stream_);
  });
}

CollectiveEventPtr NcclCommunicator::broadcast(Tensor& t, int root) {
  return launch("ncclBroadcast", [&] {
    return ncclBroadcast(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()), to_nccl_dtype(t.dtype()), root,
                         comm_, stream_);
  });
}

CollectiveEventPtr NcclCommunicator::all_gather(const Tensor& in, Tensor& out) {
  return launch("ncclAllGather", [&] {
    return ncclAllGather(in.raw_data(), out.raw_data(), static_cast<size_t>(in.numel()), to_nccl_dtype(in.dtype()),
                         comm_, stream_);
  });
}

// Rank r broadcasts its input into everyone's outputs[r], all in one NCCL
// group (one launch; NCCL needs the group for the calls to progress together).
CollectiveEventPtr NcclCommunicator::all_gather_v(const Tensor& in, std::vector<Tensor>& outs) {
  return launch("ncclGroupStart/ncclBroadcast/ncclGroupEnd (all_gather)", [&]() -> ncclResult_t {
    nccl_check(ncclGroupStart(), "ncclGroupStart", comm_);
    for (int r = 0; r < size_; ++r) {
      const ncclResult_t res = ncclBroadcast(r == rank_ ? in.raw_data() : outs[r].raw_data(), outs[r].raw_data(),
                                             static_cast<size_t>(outs[r].numel()), to_nccl_dtype(in.dtype()), r,
                                             comm_, stream_);
      if (res != ncclSuccess && res != ncclInProgress) {
        (void)ncclGroupEnd();
        return res;
      }
    }
    return ncclGroupEnd();
  });
}

CollectiveEventPtr NcclCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  return launch("ncclReduceScatter", [&] {
    return ncclReduceScatter(in.raw_data(), out.raw_data(), static_cast<size_t>(out.numel()),
                             to_nccl_dtype(out.dtype()), to_nccl_op(op), comm_, stream_);
  });
}

std::string NcclCommunicator::async_error() {
  if (aborted_) return "";
  ncclResult_t state = ncclSuccess;
  const ncclResult_t res = ncclCommGetAsyncError(comm_, &state);
  if (res != ncclSuccess) state = res;
  if (state == ncclSuccess || state == ncclInProgress) return "";
  const std::string last = ncclGetLastError(comm_);
  return std::string(ncclGetErrorString(state)) + (last.empty() ? "" : " (" + last + ")");
}

void NcclCommunicator::abort() noexcept {
  if (!comm_ || aborted_.exchange(true)) return;
  int previous = -1;
  const bool switched = cudaGetDevice(&previous) == cudaSuccess && cudaSetDevice(device_) == cudaSuccess;
  (void)ncclCommAbort(comm_);
  if (switched && previous >= 0) (void)cudaSetDevice(previous);
}

}  // namespace minidl::dist
