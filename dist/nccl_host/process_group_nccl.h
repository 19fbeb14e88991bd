// ProcessGroupNCCL: the collectives of process_group.h on one CUDA device per
// rank, run by NCCL (PyTorch's torch/csrc/distributed/c10d/ProcessGroupNCCL).
// This class is the host logic and is compiled in every build: it reaches
// NCCL only through an NcclBackend (communicator.h), which dist/nccl/ fills
// with the real calls in CUDA builds (make_process_group_nccl) and tests fill
// with fakes (tests/test_nccl_logic.cpp).
//
//  - Communicator: created lazily, on the group's first collective (as
//    PyTorch), after checking that no two ranks share a GPU; rank 0's
//    ncclUniqueId travels through the group's store (nccl_checks.h).
//  - Sequence numbers: every collective (barrier included) takes the group's
//    next number, from 0; ranks issue collectives in the same order, so
//    numbers name the same collective on every rank.
//  - Work: the collective runs on the communicator's stream after the
//    caller's current stream (an event); wait() makes the caller's current
//    stream wait on its end event without blocking the host; synchronize()
//    blocks the host; is_completed() queries the end event.
//  - Tensors: the group holds references to every tensor a collective uses
//    until its end event has passed (PyTorch's "stashing"), so the caching
//    allocator cannot hand their memory out while NCCL still reads it.
//  - Watchdog: a thread polls the end events and the communicator's async
//    error. When the oldest collective has run longer than the timeout, or
//    NCCL reports an error, it builds the error (collective, sequence number,
//    this rank, NCCL's text, and the ranks that never reached it, from the
//    arrival marks of dist/watchdog.h), aborts the communicator
//    (ncclCommAbort frees the hung kernels) and breaks the group: pending
//    Works fail with that error and every later call throws it. (PyTorch's
//    default also tears the process down; minidl leaves that to the caller.)
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "minidl/dist/nccl_host/communicator.h"
#include "minidl/dist/process_group.h"
#include "minidl/dist/store.h"
#include "minidl/dist/watchdog.h"

namespace minidl::dist {

// How a ProcessGroupNCCL reaches NCCL and its device.
struct NcclBackend {
  Device device = kCPU;         // where the group's tensors live (cuda:i; a fake may use the CPU)
  std::string device_identity;  // one per physical GPU: host name + PCI bus id
  std::function<std::string()> make_unique_id;  // ncclGetUniqueId's bytes
  // ncclCommInitRankConfig with the exchanged id; gives up after `timeout`.
  std::function<CommunicatorPtr(const std::string& unique_id, int rank, int size, Milliseconds timeout)>
      make_communicator;
};

class ProcessGroupNCCL : public ProcessGroup {
 public:
  class WorkNCCL;

  // PyTorch's kProcessGroupNCCLDefaultTimeout (10 min).
  static constexpr Milliseconds kDefaultTimeout{10 * 60 * 1000};

  ProcessGroupNCCL(std::shared_ptr<Store> store, int rank, int size, Milliseconds timeout, NcclBackend backend);
  // Stops the watchdog after the pending collectives finish (aborting the
  // communicator when they do not within the timeout). Never throws.
  ~ProcessGroupNCCL() override;

  std::string backend_name() const override { return "nccl"; }
  WorkPtr all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::SUM) override;
  WorkPtr broadcast(Tensor& tensor, int root = 0) override;
  WorkPtr all_gather(std::vector<Tensor>& outputs, const Tensor& input) override;
  WorkPtr all_gather_into_tensor(Tensor& output, const Tensor& input) override;
  WorkPtr reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op = ReduceOp::SUM) override;
  // An all-reduce of one element on the device (as PyTorch): synchronize()
  // its Work to block the host until every rank got here.
  WorkPtr barrier() override;
  Milliseconds timeout() const override { return timeout_; }

  Device device() const { return backend_.device; }
  // For tests and diagnostics.
  uint64_t next_sequence_number() const;
  bool has_communicator() const;
  size_t pending_collectives() const;  // issued, end event not yet seen by the watchdog

 private:
  struct Pending {
    std::shared_ptr<WorkNCCL> work;
    std::vector<Tensor> keep_alive;
    std::chrono::steady_clock::time_point issued;
  };
  using Launch = std::function<CollectiveEventPtr(Communicator&)>;
  WorkPtr issue(const std::string& name, std::vector<Tensor> keep_alive, const Launch& launch);
  Communicator& communicator_locked();  // issue_mutex_ held
  [[noreturn]] void throw_broken(const std::string& name) const;  // mutex_ held
  void watchdog_loop();
  // Breaks the group: the error for every pending and later collective.
  void fail_group(const std::string& name, uint64_t seq, const std::string& what);

  std::shared_ptr<Store> store_;
  Milliseconds timeout_;
  NcclBackend backend_;
  Milliseconds poll_interval_;

  std::mutex issue_mutex_;  // one caller issues at a time: the same order on every rank
  mutable std::mutex mutex_;  // the state below
  std::condition_variable cv_;
  CommunicatorPtr comm_;
  bool aborted_ = false;
  uint64_t next_seq_ = 0;
  std::deque<Pending> pending_;
  bool broken_ = false;
  std::string broken_reason_;
  bool stopping_ = false;

  std::unique_ptr<CollectiveWatchdog> arrivals_;  // arrival marks, failure messages
  std::thread watchdog_;
};

// The Work of one NCCL collective (see process_group.h for the contract).
class ProcessGroupNCCL::WorkNCCL final : public Work {
 public:
  WorkNCCL(std::string name, uint64_t seq, CollectiveEventPtr event)
      : name_(std::move(name)), seq_(seq), event_(std::move(event)) {}
  bool is_completed() const override;
  void wait() override;
  void synchronize() override;

  const std::string& name() const { return name_; }
  uint64_t sequence_number() const { return seq_; }

 private:
  friend class ProcessGroupNCCL;
  using Work::finish;
  bool finished() const { return Work::is_completed(); }
  bool event_done() const;  // queries the end event (thread-safe)

  std::string name_;
  uint64_t seq_;
  mutable std::mutex event_mutex_;
  CollectiveEventPtr event_;
};

}  // namespace minidl::dist
