// ProcessGroupGloo: the collectives of process_group.h run by Gloo (Debian's
// libgloo) over TCP. Peers find each other through a Store (gloo's
// connectFullMesh exchanges addresses under the store's keys).
//
// One worker thread per group runs the collectives in the order they were
// issued, so async calls keep the same order on every rank. Tensors on any
// device are staged through host copies (see process_group_gloo.cpp). Its Work blocks
// the host in wait() (Gloo computes on host memory, so "later work ordered
// after" needs the host to wait). A collective that fails (a peer's
// connection closed, or the group's timeout passed) fails its Work with an
// error naming the collective, its sequence number and the ranks that,
// according to the store, never reached it (dist/watchdog.h).
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "minidl/dist/gloo_profile.h"
#include "minidl/dist/process_group.h"
#include "minidl/dist/store.h"
#include "minidl/dist/watchdog.h"

namespace gloo {
class Context;
}

namespace minidl::dist {

class ProcessGroupGloo : public ProcessGroup {
 public:
  // host: the address this process listens on for its peers (127.0.0.1 for
  // one machine). GLOO_SOCKET_IFNAME, when set, names an interface instead.
  ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, Milliseconds timeout,
                   const std::string& host = "127.0.0.1");
  ~ProcessGroupGloo() override;

  std::string backend_name() const override { return "gloo"; }
  WorkPtr all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::SUM) override;
  WorkPtr broadcast(Tensor& tensor, int root = 0) override;
  WorkPtr all_gather(std::vector<Tensor>& outputs, const Tensor& input) override;
  WorkPtr all_gather_into_tensor(Tensor& output, const Tensor& input) override;
  WorkPtr reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op = ReduceOp::SUM) override;
  WorkPtr barrier() override;
  Milliseconds timeout() const override { return timeout_; }
  // Gloo reduces float32, float64 and int64 only: uint8 travels as int64,
  // float16 and bfloat16 as float32.
  DType wire_dtype(DType dtype) const override;

 private:
  class WorkGloo;
  struct Task {
    std::string name;
    uint64_t seq;
    std::function<void(uint32_t tag)> run;
    std::shared_ptr<WorkGloo> work;
    int64_t bytes = 0;  // for the profile only
    GlooProfile::Clock::time_point issued;
  };
  // The collectives not yet started.
  struct Queue {
    std::mutex mutex;
    std::condition_variable cv;  // the worker waits on it
    std::deque<Task> tasks;
    bool stopping = false;
  };
  // bytes: the payload, for MINIDL_GLOO_PROFILE's breakdown.
  WorkPtr enqueue(std::string name, std::function<void(uint32_t tag)> run, int64_t bytes = 0);
  void worker_loop();
  // Runs `task` and finishes its Work (worker thread).
  void run_task(Task& task);

  std::shared_ptr<Store> store_;
  Milliseconds timeout_;
  std::shared_ptr<gloo::Context> context_;
  std::unique_ptr<Queue> queue_;
  uint64_t next_seq_ = 0;  // under queue_->mutex
  // After a failure Gloo's pairs are in an unknown state: later collectives
  // fail at once with the first error (worker thread only).
  bool broken_ = false;
  std::string broken_reason_;
  std::unique_ptr<CollectiveWatchdog> watchdog_;
  std::unique_ptr<GlooProfile> profile_;  // MINIDL_GLOO_PROFILE only
  std::vector<unsigned char> scratch_;     // the all-reduce exchange's (worker thread only)
  std::thread worker_;
};

}  // namespace minidl::dist
