// ProcessGroup: the collectives a group of processes runs together, each
// returning a Work to wait on (PyTorch's c10d API, one tensor per call).
// Every rank of the group must issue the same collectives in the same order.
// Collectives run on the group's own thread in issue order, so a caller may
// start several and wait later (DDP overlaps bucket all-reduces with backward).
// A collective that does not complete within the group's timeout fails with a
// minidl::Error naming the collective and, where the store can tell, the
// ranks that never arrived.
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "dist/store.h"

namespace minidl::dist {

enum class ReduceOp { SUM, AVG, PRODUCT, MIN, MAX };
const char* reduce_op_name(ReduceOp op);

// The handle of one collective. wait() blocks until it is done and rethrows
// its error; is_completed() polls.
class Work {
 public:
  virtual ~Work() = default;
  bool is_completed() const;
  // Throws the collective's error, if any (every call).
  void wait();
  // Called by the backend when the collective has finished.
  void finish(std::exception_ptr error = nullptr);

 private:
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
};
using WorkPtr = std::shared_ptr<Work>;

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend_name() const = 0;

  // In place on `tensor` (contiguous; float32, float64 or int64). AVG needs a
  // floating dtype.
  virtual WorkPtr all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::SUM) = 0;
  // Every rank's `tensor` becomes root's.
  virtual WorkPtr broadcast(Tensor& tensor, int root = 0) = 0;
  // outputs[r] receives rank r's input. Sizes may differ between ranks
  // (outputs[r].numel() must equal rank r's input.numel()).
  virtual WorkPtr all_gather(std::vector<Tensor>& outputs, const Tensor& input) = 0;
  // output (size()*input.numel() elements) receives the inputs in rank order.
  virtual WorkPtr all_gather_into_tensor(Tensor& output, const Tensor& input) = 0;
  // inputs[r] from every rank are reduced into rank r's output.
  virtual WorkPtr reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs,
                                 ReduceOp op = ReduceOp::SUM) = 0;
  virtual WorkPtr barrier() = 0;

  virtual Milliseconds timeout() const = 0;

 private:
  int rank_, size_;
};
using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

}  // namespace minidl::dist
