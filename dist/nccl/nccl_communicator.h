// The real Communicator (dist/nccl_host/communicator.h) over NCCL, and the
// CUDA event that ends each collective. CUDA builds only; compiled, not run
// on a GPU yet.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <string>

#include "minidl/dist/nccl_host/communicator.h"

namespace minidl::dist {

// Throws minidl::Error "NCCL error in <call>: <ncclGetErrorString> (<last
// error>)" unless result is ncclSuccess (or ncclInProgress when allowed).
void nccl_check(ncclResult_t result, const char* call, ncclComm_t comm = nullptr, bool in_progress_ok = false);
ncclDataType_t to_nccl_dtype(DType dtype);
ncclRedOp_t to_nccl_op(ReduceOp op);

// ncclUniqueId <-> the printable string that travels through the store
// (hex: FileStore and TCPStore both take it as it is).
std::string encode_unique_id(const ncclUniqueId& id);
ncclUniqueId decode_unique_id(const std::string& text);

class CudaCollectiveEvent final : public CollectiveEvent {
 public:
  // Records a new event on `stream` (of `device`).
  CudaCollectiveEvent(int device, cudaStream_t stream);
  ~CudaCollectiveEvent() override;
  bool query() override;
  void make_current_stream_wait() override;

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
};

class NcclCommunicator final : public Communicator {
 public:
  // ncclCommInitRankConfig, non-blocking (so it can be aborted): waits for
  // the peers up to `timeout`, then aborts and throws.
  NcclCommunicator(const std::string& unique_id, int rank, int size, int device, Milliseconds timeout);
  ~NcclCommunicator() override;  // ncclCommDestroy unless aborted

  CollectiveEventPtr all_reduce(Tensor& tensor, ReduceOp op) override;
  CollectiveEventPtr broadcast(Tensor& tensor, int root) override;
  CollectiveEventPtr all_gather(const Tensor& input, Tensor& output) override;
  CollectiveEventPtr all_gather_v(const Tensor& input, std::vector<Tensor>& outputs) override;
  CollectiveEventPtr reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) override;
  std::string async_error() override;
  void abort() noexcept override;

 private:
  template <class Fn>
  CollectiveEventPtr launch(const char* call, Fn&& enqueue);
  // A non-blocking communicator may answer ncclInProgress: poll until done.
  void wait_ready(const char* call);

  ncclComm_t comm_ = nullptr;
  int rank_, size_, device_;
  Milliseconds timeout_;
  cudaStream_t stream_;  // the communication stream (from the device's pool)
  std::atomic<bool> aborted_{false};
};

}  // namespace minidl::dist
