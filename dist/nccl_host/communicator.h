// The seam between ProcessGroupNCCL's host logic (dist/nccl_host/, every
// build, unit-tested on the CPU with fakes) and NCCL itself (dist/nccl/, CUDA
// builds only): the handful of NCCL calls the group makes, and the event that
// marks a collective's end on the device.
//
// A real Communicator (dist/nccl/nccl_communicator.cpp) enqueues each
// collective on its communication stream after an event recorded on the
// caller's current stream (so it sees every earlier write of the caller), and
// records a CollectiveEvent after it. Tests substitute a fake whose events
// complete when the test says so.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "minidl/core/tensor.h"
#include "minidl/dist/process_group.h"

namespace minidl::dist {

// The end of one collective on the device (a CUDA event on the
// communication stream).
class CollectiveEvent {
 public:
  virtual ~CollectiveEvent() = default;
  // cudaEventQuery: true once everything before the event has run. Never
  // blocks; an error the device reports is thrown.
  virtual bool query() = 0;
  // cudaStreamWaitEvent(caller's current stream, event): later work of the
  // calling thread runs after the collective, the host is not blocked.
  virtual void make_current_stream_wait() = 0;
};
using CollectiveEventPtr = std::unique_ptr<CollectiveEvent>;

// One NCCL communicator (one group on one device). Every collective returns
// at once with the event after it; failures to enqueue throw minidl::Error
// with NCCL's own text (ncclGetErrorString, ncclGetLastError). The caller
// checks arguments first (nccl_checks.h): the communicator trusts them.
class Communicator {
 public:
  virtual ~Communicator() = default;
  // ncclAllReduce, in place (AVG is ncclAvg).
  virtual CollectiveEventPtr all_reduce(Tensor& tensor, ReduceOp op) = 0;
  // ncclBroadcast, in place.
  virtual CollectiveEventPtr broadcast(Tensor& tensor, int root) = 0;
  // ncclAllGather: output holds size() * input.numel() elements, rank order.
  virtual CollectiveEventPtr all_gather(const Tensor& input, Tensor& output) = 0;
  // Unequal sizes: outputs[r] receives rank r's input, as one NCCL group of
  // ncclBroadcast calls (rank r broadcasts its input into outputs[r]), as
  // PyTorch's ProcessGroupNCCL does for uneven all_gather.
  virtual CollectiveEventPtr all_gather_v(const Tensor& input, std::vector<Tensor>& outputs) = 0;
  // ncclReduceScatter: input holds size() * output.numel() elements.
  virtual CollectiveEventPtr reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) = 0;
  // ncclCommGetAsyncError: "" while healthy, else NCCL's text for the error
  // (a peer failed, a network error).
  virtual std::string async_error() = 0;
  // ncclCommAbort: frees a hung collective; the communicator is unusable
  // afterwards. Idempotent, never throws.
  virtual void abort() noexcept = 0;
};
using CommunicatorPtr = std::unique_ptr<Communicator>;

}  // namespace minidl::dist
