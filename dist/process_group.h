// ProcessGroup: the collectives a group of processes runs together, each
// returning a Work (PyTorch's c10d API, one tensor per call). Every rank of
// the group must issue the same collectives in the same order. A collective
// may still be running when its call returns, so a caller may issue several
// and wait later (DDP overlaps bucket all-reduces with backward). A collective
// that does not complete within the group's timeout fails with a
// minidl::Error naming the collective and, where the store can tell, the
// ranks that never arrived. The backend keeps a collective's tensors alive
// until it completes; the caller must not touch them before wait().
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "minidl/core/tensor.h"
#include "minidl/dist/store.h"

namespace minidl::dist {

enum class ReduceOp { SUM, AVG, PRODUCT, MIN, MAX };
const char* reduce_op_name(ReduceOp op);

// The handle of one collective (c10d's Work). The contract, for every backend:
//
//   wait()          Every operation this thread issues after wait() returns
//                   (kernels, copies, further collectives) is ordered after
//                   the collective, and the collective's error, if any, is
//                   thrown (every call). It does not promise that the host has
//                   seen the result: Gloo blocks the host until the collective
//                   is done; NCCL makes the current CUDA stream wait on the
//                   collective's end event and returns at once. So after
//                   wait(), read results through tensor ops (to_vector, item,
//                   copies), which are themselves ordered after it.
//   synchronize()   Blocks the host until the collective is done (on the
//                   device too) and throws its error: for code that must know
//                   it has finished, such as a barrier or a timing.
//   is_completed()  Polls without blocking: true once the collective has
//                   finished, successfully or not.
//
// The base class holds the host-side completion flag; a backend completes it
// with finish() (protected: only the backend's Work subclass may).
class Work {
 public:
  virtual ~Work() = default;
  virtual bool is_completed() const;
  virtual void wait();
  virtual void synchronize();

 protected:
  // Marks the collective done (with its error) and wakes the host waiters.
  void finish(std::exception_ptr error = nullptr);
  // Blocks the host until finish() was called; rethrows its error.
  void block_until_finished();

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

  // Tensors may live on any device the backend supports (Gloo: any, through
  // host copies). In place on `tensor` (contiguous; a dtype the backend
  // reduces, see wire_dtype). AVG needs a floating dtype.
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

  // The dtype a tensor of `dtype` travels as through this backend's
  // collectives: callers that pack tensors (DDP's broadcast) convert to it and
  // back. The default: as it is.
  virtual DType wire_dtype(DType dtype) const { return dtype; }

 private:
  int rank_, size_;
};
using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

}  // namespace minidl::dist
