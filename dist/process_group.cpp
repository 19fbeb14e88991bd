// Work: the host-side completion flag and error of one collective.
#include "minidl/dist/process_group.h"

namespace minidl::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return "SUM";
    case ReduceOp::AVG: return "AVG";
    case ReduceOp::PRODUCT: return "PRODUCT";
    case ReduceOp::MIN: return "MIN";
    case ReduceOp::MAX: return "MAX";
  }
  return "?";
}

bool Work::is_completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void Work::block_until_finished() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [this] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

// A backend whose collectives run on host memory has nothing to order but the
// host: both waits block it.
void Work::wait() { block_until_finished(); }

void Work::synchronize() { block_until_finished(); }

void Work::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    error_ = error;
  }
  done_cv_.notify_all();
}

}  // namespace minidl::dist
