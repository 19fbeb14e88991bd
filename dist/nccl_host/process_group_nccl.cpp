// ProcessGroupNCCL's host logic (see process_group_nccl.h): argument checks,
// lazy communicator creation, sequence numbers, the pending list the
// watchdog polls, and the error path (describe, abort, break the group).
#include "minidl/dist/nccl_host/process_group_nccl.h"

#include <algorithm>

#include "minidl/core/check.h"
#include "minidl/dist/nccl_host/nccl_checks.h"
#include "minidl/ops/shape_ops.h"

namespace minidl::dist {

using Clock = std::chrono::steady_clock;

// ---- WorkNCCL ---------------------------------------------------------------

bool ProcessGroupNCCL::WorkNCCL::event_done() const {
  std::lock_guard<std::mutex> lock(event_mutex_);
  return event_->query();
}

bool ProcessGroupNCCL::WorkNCCL::is_completed() const {
  if (finished()) return true;
  try {
    return event_done();
  } catch (const std::exception&) {
    return true;  // it failed; wait() or synchronize() throws once the watchdog has the error
  }
}

// Stream-ordered: later work of this thread's current stream runs after the
// collective; the host goes on at once. A collective the watchdog already
// failed throws its error instead.
void ProcessGroupNCCL::WorkNCCL::wait() {
  if (finished()) {
    block_until_finished();  // returns at once, rethrowing the error if any
    return;
  }
  std::lock_guard<std::mutex> lock(event_mutex_);
  event_->make_current_stream_wait();
}

// Polls the end event (backing off from 20 us to 1 ms) until it has passed,
// or until the watchdog fails the collective (timeout or NCCL error), so it
// never blocks longer than the group's timeout.
void ProcessGroupNCCL::WorkNCCL::synchronize() {
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    if (finished()) {
      block_until_finished();
      return;
    }
    if (event_done()) return;
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::microseconds(1000));
  }
}

// ---- ProcessGroupNCCL -------------------------------------------------------

ProcessGroupNCCL::ProcessGroupNCCL(std::shared_ptr<Store> store, int rank, int size, Milliseconds timeout,
                                   NcclBackend backend)
    : ProcessGroup(rank, size), store_(std::move(store)), timeout_(timeout), backend_(std::move(backend)) {
  MINIDL_CHECK(store_ != nullptr, "ProcessGroupNCCL: the store is null");
  MINIDL_CHECK(size >= 1, "ProcessGroupNCCL: world_size must be >= 1, got ", size);
  MINIDL_CHECK(rank >= 0 && rank < size, "ProcessGroupNCCL: rank must be in [0, ", size - 1, "], got ", rank);
  MINIDL_CHECK(timeout.count() > 0, "ProcessGroupNCCL: the timeout must be positive, got ", timeout.count(), " ms");
  MINIDL_CHECK(backend_.make_unique_id && backend_.make_communicator,
               "ProcessGroupNCCL: the backend lacks make_unique_id or make_communicator");
  // Polling often enough to notice a timeout within ~10% of it, at most
  // every 100 ms (a short timeout in a test), at least every 1 ms.
  poll_interval_ = std::clamp(timeout_ / 20, Milliseconds(1), Milliseconds(100));
  arrivals_ = std::make_unique<CollectiveWatchdog>(store_, rank, size, timeout);
  watchdog_ = std::thread([this] { watchdog_loop(); });
}

ProcessGroupNCCL::~ProcessGroupNCCL() {
  // Let the watchdog see the pending collectives through (it fails them at
  // the timeout, which aborts the communicator), then stop it.
  {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return pending_.empty(); });
    stopping_ = true;
  }
  cv_.notify_all();
  watchdog_.join();
  arrivals_.reset();
  comm_.reset();  // ncclCommDestroy (or nothing after an abort)
}

uint64_t ProcessGroupNCCL::next_sequence_number() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return next_seq_;
}

bool ProcessGroupNCCL::has_communicator() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return comm_ != nullptr;
}

size_t ProcessGroupNCCL::pending_collectives() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pending_.size();
}

void ProcessGroupNCCL::throw_broken(const std::string& name) const {
  MINIDL_FAIL(name, ": the process group is unusable after an earlier collective failed: ", broken_reason_);
}

// Lazily, on the first collective: one communicator per group and device.
// A failure here breaks the group (the ranks no longer agree on anything).
Communicator& ProcessGroupNCCL::communicator_locked() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (comm_) return *comm_;
  }
  CommunicatorPtr comm;
  try {
    nccl::check_one_device_per_rank(*store_, rank(), size(), backend_.device_identity, backend_.device.str(),
                                    timeout_);
    const std::string id =
        nccl::exchange_unique_id(*store_, rank(), backend_.device.index, backend_.make_unique_id, timeout_);
    comm = backend_.make_communicator(id, rank(), size(), timeout_);
    MINIDL_CHECK(comm != nullptr, "ProcessGroupNCCL: the backend made no communicator");
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    broken_ = true;
    broken_reason_ = e.what();
    throw;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  comm_ = std::move(comm);
  return *comm_;
}

WorkPtr ProcessGroupNCCL::issue(const std::string& name, std::vector<Tensor> keep_alive, const Launch& launch) {
  std::lock_guard<std::mutex> issuing(issue_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_) throw_broken(name);
    MINIDL_CHECK(!stopping_, name, ": the process group is being destroyed");
  }
  Communicator& comm = communicator_locked();
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_) throw_broken(name);  // the watchdog may have failed it meanwhile
    seq = next_seq_++;
  }
  CollectiveEventPtr event;
  try {
    event = launch(comm);
  } catch (const std::exception& e) {
    // NCCL refused to enqueue: this rank has now skipped a collective the
    // others run, so the group cannot go on.
    fail_group(name, seq, e.what());
    std::lock_guard<std::mutex> lock(mutex_);
    MINIDL_FAIL(broken_reason_);
  }
  auto work = std::make_shared<WorkNCCL>(name, seq, std::move(event));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back(Pending{work, std::move(keep_alive), Clock::now()});
  }
  cv_.notify_all();
  return work;
}

void ProcessGroupNCCL::fail_group(const std::string& name, uint64_t seq, const std::string& what) {
  // Naming the missing ranks waits up to ~1 s for the peers' marks.
  const std::string reason = arrivals_->describe_failure(name, seq, what);
  Communicator* comm = nullptr;
  std::deque<Pending> failed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_) {
      broken_ = true;
      broken_reason_ = reason;
    }
    if (!aborted_ && comm_) {
      aborted_ = true;
      comm = comm_.get();
    }
    failed.swap(pending_);
  }
  if (comm) comm->abort();  // frees the hung kernels; the streams move on
  const auto error = std::make_exception_ptr(Error(reason));
  for (Pending& p : failed) p.work->finish(error);
  cv_.notify_all();  // the destructor may be waiting for pending_ to drain
}

void ProcessGroupNCCL::watchdog_loop() {
  // CollectiveWatchdog::set_running restarts its clock: tell it only when
  // the oldest pending collective changes.
  uint64_t reported = UINT64_MAX;
  auto report = [&](const std::shared_ptr<WorkNCCL>& oldest) {
    const uint64_t seq = oldest ? oldest->sequence_number() : UINT64_MAX;
    if (seq == reported) return;
    reported = seq;
    if (oldest) arrivals_->set_running(seq);
    else arrivals_->set_idle();
  };
  for (;;) {
    std::shared_ptr<WorkNCCL> oldest;
    Clock::time_point issued;
    Communicator* comm = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait_for(lock, poll_interval_, [this] { return stopping_; });
      if (stopping_) return;
      if (broken_) continue;
      if (!pending_.empty()) {
        oldest = pending_.front().work;
        issued = pending_.front().issued;
      }
      comm = aborted_ ? nullptr : comm_.get();
    }
    std::string error;
    // Retire what has finished, in issue order (one stream: in order), so
    // an error below is blamed on a collective that is really pending.
    while (oldest) {
      try {
        if (!oldest->event_done()) break;
      } catch (const std::exception& e) {
        error = e.what();
        break;
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        // (fail_group, from an issuing thread, may have emptied the list)
        if (!pending_.empty() && pending_.front().work == oldest) pending_.pop_front();  // drops the tensors
        oldest = pending_.empty() ? nullptr : pending_.front().work;
        if (oldest) issued = pending_.front().issued;
      }
      cv_.notify_all();
    }
    if (oldest && error.empty()) {
      try {
        if (comm) error = comm->async_error();
        if (!error.empty()) error = "NCCL error: " + error;
      } catch (const std::exception& e) {
        error = std::string("NCCL error: ") + e.what();
      }
    }
    report(oldest);
    if (!oldest) continue;
    const auto ran = std::chrono::duration_cast<Milliseconds>(Clock::now() - issued);
    if (error.empty() && ran > timeout_)
      error = "Watchdog caught collective operation timeout: it ran for " + std::to_string(ran.count()) +
              " ms, longer than the group's timeout of " + std::to_string(timeout_.count()) +
              " ms (usually a rank that never issued it, or ranks that issued different collectives)";
    if (!error.empty()) {
      fail_group(oldest->name(), oldest->sequence_number(), error);
      report(nullptr);
    }
  }
}

// ---- collectives ------------------------------------------------------------

WorkPtr ProcessGroupNCCL::all_reduce(Tensor& tensor, ReduceOp op) {
  nccl::check_tensor("all_reduce", tensor, device());
  nccl::check_reduce_op("all_reduce", op, tensor.dtype());
  Tensor t = tensor;
  return issue(std::string("all_reduce(") + reduce_op_name(op) + ")", {t},
               [t, op](Communicator& c) mutable { return c.all_reduce(t, op); });
}

WorkPtr ProcessGroupNCCL::broadcast(Tensor& tensor, int root) {
  nccl::check_tensor("broadcast", tensor, device());
  MINIDL_CHECK(root >= 0 && root < size(), "broadcast: root must be in [0, ", size() - 1, "], got ", root);
  Tensor t = tensor;
  return issue("broadcast", {t}, [t, root](Communicator& c) mutable { return c.broadcast(t, root); });
}

WorkPtr ProcessGroupNCCL::all_gather(std::vector<Tensor>& outputs, const Tensor& input) {
  nccl::check_tensor("all_gather", input, device(), "input");
  MINIDL_CHECK(static_cast<int>(outputs.size()) == size(), "all_gather: expected ", size(),
               " output tensors (one per rank), got ", outputs.size());
  for (size_t r = 0; r < outputs.size(); ++r) {
    nccl::check_tensor("all_gather", outputs[r], device(), "output");
    MINIDL_CHECK(outputs[r].dtype() == input.dtype(), "all_gather: output ", r, " has dtype ",
                 dtype_name(outputs[r].dtype()), " but the input has ", dtype_name(input.dtype()));
  }
  MINIDL_CHECK(outputs[rank()].numel() == input.numel(), "all_gather: output ", rank(), " (this rank's) has ",
               outputs[rank()].numel(), " elements but the input has ", input.numel());
  std::vector<Tensor> keep = outputs, outs = outputs;
  keep.push_back(input);
  Tensor in = input;
  return issue("all_gather", std::move(keep), [in, outs](Communicator& c) mutable { return c.all_gather_v(in, outs); });
}

WorkPtr ProcessGroupNCCL::all_gather_into_tensor(Tensor& output, const Tensor& input) {
  nccl::check_tensor("all_gather_into_tensor", input, device(), "input");
  nccl::check_tensor("all_gather_into_tensor", output, device(), "output");
  MINIDL_CHECK(output.dtype() == input.dtype(), "all_gather_into_tensor: output dtype ", dtype_name(output.dtype()),
               " differs from input dtype ", dtype_name(input.dtype()));
  MINIDL_CHECK(output.numel() == input.numel() * size(), "all_gather_into_tensor: output tensor size must be equal to ",
               "world_size times input tensor size: expected ", input.numel() * size(), " elements, got ",
               output.numel());
  Tensor in = input, out = output;
  return issue("all_gather_into_tensor", {in, out},
               [in, out](Communicator& c) mutable { return c.all_gather(in, out); });
}

// NCCL reduces one buffer of size() equal shares: the inputs are packed into
// one (on the caller's stream, so before the collective's fence).
WorkPtr ProcessGroupNCCL::reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) {
  nccl::check_tensor("reduce_scatter", output, device(), "output");
  MINIDL_CHECK(static_cast<int>(inputs.size()) == size(), "reduce_scatter: expected ", size(),
               " input tensors (one per rank), got ", inputs.size());
  std::vector<Tensor> flat;
  for (size_t r = 0; r < inputs.size(); ++r) {
    nccl::check_tensor("reduce_scatter", inputs[r], device(), "input");
    MINIDL_CHECK(inputs[r].dtype() == output.dtype(), "reduce_scatter: input ", r, " has dtype ",
                 dtype_name(inputs[r].dtype()), " but the output has ", dtype_name(output.dtype()));
    MINIDL_CHECK(inputs[r].numel() == output.numel(), "reduce_scatter: ProcessGroupNCCL needs every input to ",
                 "have the output's ", output.numel(), " elements, but input ", r, " has ", inputs[r].numel());
    flat.push_back(inputs[r].detach().reshape({inputs[r].numel()}));
  }
  nccl::check_reduce_op("reduce_scatter", op, output.dtype());
  Tensor packed = cat(flat, 0), out = output;
  return issue(std::string("reduce_scatter(") + reduce_op_name(op) + ")", {packed, out},
               [packed, out, op](Communicator& c) mutable { return c.reduce_scatter(packed, out, op); });
}

WorkPtr ProcessGroupNCCL::barrier() {
  Tensor t = zeros({1}, TensorOptions(kFloat32).device(device()));
  return issue("barrier", {t}, [t](Communicator& c) mutable { return c.all_reduce(t, ReduceOp::SUM); });
}

}  // namespace minidl::dist
