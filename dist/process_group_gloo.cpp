// ProcessGroupGloo: argument checks on the caller's thread, the collective
// itself on the group's worker thread through Gloo:
//   all_reduce              Gloo's ring, or a one-step exchange for small
//                           tensors (dist/gloo_all_reduce.h); AVG = SUM / size
//   broadcast               gloo::broadcast
//   all_gather              gloo::allgatherv into one buffer, then split
//   all_gather_into_tensor  gloo::allgather
//   reduce_scatter          all_reduce of the concatenated inputs, then
//                           this rank's slice (as PyTorch's gloo backend)
//   barrier                 gloo::barrier
// The worker reports the collective it runs to a CollectiveWatchdog
// (dist/watchdog.h), whose arrival marks name the ranks that never came when
// a collective fails.
//
// Tensors on any device: Gloo reads and writes host memory, so a non-CPU
// tensor is staged (dist/gloo_staging.h) as PyTorch's Gloo backend stages
// CUDA tensors. Its value is captured when the collective is issued (the
// value a stream-ordered backend would see), the collective runs on the host
// buffer once that copy is done, and the worker copies the result back into
// the device tensor before completing the Work, so wait() covers the copy
// back. CPU tensors are used in place. CUDA tensors go through pinned buffers
// and copies ordered on the caller's stream (run on an H100 by
// tests/test_cuda_dist_oracles, 2026-11-27); the
// test device through synchronous copies.
#include "minidl/dist/process_group_gloo.h"

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/check.h"
#include "minidl/core/dtype.h"
#include "minidl/dist/gloo_all_reduce.h"
#include "minidl/dist/gloo_staging.h"

namespace minidl::dist {

// The Work of one Gloo collective: the worker thread finishes it; wait() and
// synchronize() both block the host. (Running the collective on the waiting
// thread instead was measured: slower with 2 busy-loop processes on 2 cores,
// 1.13 vs 0.60 ms at 4 KiB, as the worker, woken by every enqueue, still
// wakes up for nothing.)
class ProcessGroupGloo::WorkGloo final : public Work {
 public:
  void finish_task(std::exception_ptr error) {
    if (profile) finished = GlooProfile::Clock::now();
    finish(error);
  }
  void wait() override { block_and_profile(); }
  void synchronize() override { block_and_profile(); }

  // Set by enqueue when profiling.
  GlooProfile* profile = nullptr;
  std::string name;
  int64_t bytes = 0;
  GlooProfile::Clock::time_point issued, finished;

 private:
  void block_and_profile() {
    block_until_finished();
    if (!profile) return;
    auto now = GlooProfile::Clock::now();
    using us = std::chrono::duration<double, std::micro>;
    profile->record(name, bytes, GlooProfile::kWake, std::max(0.0, us(now - finished).count()));
    profile->record(name, bytes, GlooProfile::kTotal, us(now - issued).count());
  }
};

namespace {

// Gloo's rendezvous talks to our Store through this adapter.
class GlooStore : public gloo::rendezvous::Store {
 public:
  explicit GlooStore(std::shared_ptr<dist::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string v = store_->get(key);
    return {v.begin(), v.end()};
  }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    store_->wait(keys, timeout);
  }

 private:
  std::shared_ptr<dist::Store> store_;
};

bool is_half(DType d) { return d == kFloat16 || d == kBFloat16; }

// half_ok: the collective also takes float16 / bfloat16 (all_reduce).
void check_tensor(const char* op, const Tensor& t, const char* what = "tensor", bool half_ok = false) {
  MINIDL_CHECK(t.defined(), op, ": the ", what, " is undefined");
  // Strided tensors elsewhere go through a contiguous host copy (dist/gloo_staging.h); the CUDA
  // staging copies a tensor's bytes as they are.
  MINIDL_CHECK(t.is_contiguous() || !t.device().is_cuda(), op, ": CUDA tensors must be contiguous (the ", what,
               " is not)");
  DType d = t.dtype();
  MINIDL_CHECK(d == kFloat32 || d == kFloat64 || d == kInt64 || (half_ok && is_half(d)), op, ": expected a ",
               half_ok ? "float16, bfloat16, " : "", "float32, float64 or int64 ", what, ", got ", dtype_name(d));
}

// The host memory Gloo works on for `t` (dist/gloo_staging.h): its value (an
// input, or an in-place tensor) or a buffer to fill (an output only).
using Staged = std::shared_ptr<StagedTensor>;
Staged host_value(const Tensor& t) { return stage_for_gloo(t, /*value=*/true); }
Staged host_output(const Tensor& t) { return stage_for_gloo(t, /*value=*/false); }
// T* of a staged tensor's host memory, once its copy in has finished (worker thread).
template <class T>
T* ready_ptr(const Staged& s) {
  s->wait_ready();
  return s->host().data_ptr<T>();
}

#define GLOO_DISPATCH(dtype, ...)                            \
  [&] {                                                      \
    switch (dtype) {                                         \
      case kFloat32: { using scalar_t = float; return __VA_ARGS__(); }   \
      case kFloat64: { using scalar_t = double; return __VA_ARGS__(); }  \
      case kInt64: { using scalar_t = int64_t; return __VA_ARGS__(); }   \
      default: MINIDL_FAIL("gloo: unsupported dtype ", dtype_name(dtype)); \
    }                                                        \
  }()

std::shared_ptr<gloo::transport::Device> make_device(const std::string& host) {
  gloo::transport::tcp::attr attr;
  if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); iface && *iface) attr.iface = iface;
  else attr.hostname = host;
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    MINIDL_FAIL("ProcessGroupGloo: cannot create a TCP device on ",
                attr.iface.empty() ? "host " + host : "interface " + attr.iface, ": ", e.what());
  }
}

// Gloo's TCP loop thread throws gloo::EnforceNotMet when a peer's message
// does not fit the buffer posted for it, which std::terminate reports only as
// Gloo's own assertion. Almost always the ranks ran different collectives:
// say so and how to find where, then hand over to the previous handler.
std::terminate_handler g_previous_terminate = nullptr;

[[noreturn]] void gloo_failure_hint() {
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const gloo::EnforceNotMet& failure) {
      std::fprintf(stderr,
                   "minidl: a Gloo network thread failed (%s): the ranks most likely ran different collectives "
                   "(another size, dtype or order); run every rank with MINIDL_DISTRIBUTED_DEBUG=DETAIL to have "
                   "the mismatch named before anything is sent\n",
                   failure.what());
    } catch (...) {
    }
  }
  if (g_previous_terminate) g_previous_terminate();
  std::abort();
}

void install_gloo_failure_hint() {
  static std::once_flag once;
  std::call_once(once, [] { g_previous_terminate = std::set_terminate(gloo_failure_hint); });
}

}  // namespace

ProcessGroupGloo::ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, Milliseconds timeout,
                                   const std::string& host)
    : ProcessGroup(rank, size), store_(std::move(store)), timeout_(timeout), queue_(std::make_unique<Queue>()) {
  MINIDL_CHECK(store_ != nullptr, "ProcessGroupGloo: the store is null");
  MINIDL_CHECK(size >= 1, "ProcessGroupGloo: world_size must be >= 1, got ", size);
  MINIDL_CHECK(rank >= 0 && rank < size, "ProcessGroupGloo: rank must be in [0, ", size - 1, "], got ", rank);
  MINIDL_CHECK(timeout.count() > 0, "ProcessGroupGloo: the timeout must be positive, got ", timeout.count(), " ms");
#ifdef MINIDL_WITH_CUDA
  register_gloo_cuda_staging();  // CUDA tensors through pinned buffers on the caller's stream (idempotent)
#endif
  install_gloo_failure_hint();
  auto device = make_device(host);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(timeout);
  GlooStore adapter(store_);
  try {
    context->connectFullMesh(adapter, device);
  } catch (const minidl::Error&) {
    throw;
  } catch (const std::exception& e) {
    MINIDL_FAIL("ProcessGroupGloo: rank ", rank, " could not connect to its ", size - 1, " peers: ", e.what());
  }
  // Gloo's connect returns on a rank once its own side is done. A rank that
  // then exited at once (a program with nothing to communicate, an error
  // found before any collective) closed its sockets while a peer was still
  // completing the handshake: "Connection closed by peer" in the peer's
  // init. So no rank leaves before every rank has connected.
  store_based_barrier(*store_, "gloo_connected", rank, size, timeout);
  context_ = context;
  if (GlooProfile::enabled()) profile_ = std::make_unique<GlooProfile>();
  watchdog_ = std::make_unique<CollectiveWatchdog>(store_, rank, size, timeout);
  worker_ = std::thread([this] { worker_loop(); });
}

ProcessGroupGloo::~ProcessGroupGloo() {
  {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    queue_->stopping = true;
  }
  queue_->cv.notify_all();
  worker_.join();  // runs what is queued first; the watchdog stops after it
  if (profile_) profile_->print(rank());
}

WorkPtr ProcessGroupGloo::enqueue(std::string name, std::function<void(uint32_t)> run, int64_t bytes) {
  auto work = std::make_shared<WorkGloo>();
  auto issued = GlooProfile::Clock::now();
  if (profile_) {
    work->profile = profile_.get();
    work->name = name;
    work->bytes = bytes;
    work->issued = issued;
  }
  {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    MINIDL_CHECK(!queue_->stopping, name, ": the process group is being destroyed");
    queue_->tasks.push_back(Task{std::move(name), next_seq_++, std::move(run), work, bytes, issued});
  }
  queue_->cv.notify_all();
  return work;
}

void ProcessGroupGloo::worker_loop() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(queue_->mutex);
      queue_->cv.wait(lock, [this] { return queue_->stopping || !queue_->tasks.empty(); });
      if (queue_->tasks.empty()) return;  // stopping, nothing left
      task = std::move(queue_->tasks.front());
      queue_->tasks.pop_front();
    }
    run_task(task);
  }
}

void ProcessGroupGloo::run_task(Task& task) {
  using us = std::chrono::duration<double, std::micro>;
  GlooProfile::Clock::time_point start;
  double cpu0 = 0;
  if (profile_) {
    start = GlooProfile::Clock::now();
    cpu0 = GlooProfile::thread_cpu_us();
    GlooProfile::take_reduce_us();
  }
  std::exception_ptr error;
  if (broken_) {
    error = std::make_exception_ptr(
        Error(task.name + ": the process group is unusable after an earlier collective failed: " + broken_reason_));
  } else {
    watchdog_->set_running(task.seq);
    try {
      task.run(static_cast<uint32_t>(task.seq));
    } catch (const std::exception& e) {
      broken_reason_ = watchdog_->describe_failure(task.name, task.seq, e.what());
      broken_ = true;
      error = std::make_exception_ptr(Error(broken_reason_));
    }
    watchdog_->set_idle();
  }
  if (profile_) {
    profile_->record(task.name, task.bytes, GlooProfile::kHandoff, us(start - task.issued).count());
    profile_->record(task.name, task.bytes, GlooProfile::kRun, us(GlooProfile::Clock::now() - start).count());
    profile_->record(task.name, task.bytes, GlooProfile::kRunCpu, GlooProfile::thread_cpu_us() - cpu0);
    profile_->record(task.name, task.bytes, GlooProfile::kReduce, GlooProfile::take_reduce_us());
  }
  task.work->finish_task(error);
}

DType ProcessGroupGloo::wire_dtype(DType dtype) const {
  switch (dtype) {
    case DType::UInt8: return kInt64;
    case DType::Float16:
    case DType::BFloat16: return kFloat32;
    default: return dtype;
  }
}

namespace {
// float16 / bfloat16 reduce as float32 (their wire_dtype; PyTorch's Gloo
// reduces them too, in their own precision): widened in the worker once the
// copy in is done, rounded back before the copy back.
class WidenedStage : public StagedTensor {
 public:
  explicit WidenedStage(Staged inner) : inner_(std::move(inner)) {}
  void wait_ready() override {
    inner_->wait_ready();
    NoGradGuard no_grad;  // on the worker thread: no history for a tensor that requires grad
    host_ = inner_->host().to(kFloat32);
  }
  void copy_back() override {
    NoGradGuard no_grad;
    Tensor narrow = inner_->host();
    narrow.copy_(host_);
    inner_->copy_back();
  }

 private:
  Staged inner_;
};
}  // namespace

WorkPtr ProcessGroupGloo::all_reduce(Tensor& tensor, ReduceOp op) {
  check_tensor("all_reduce", tensor, "tensor", /*half_ok=*/true);
  MINIDL_CHECK(op != ReduceOp::AVG || tensor.dtype() != kInt64,
               "all_reduce: ReduceOp.AVG needs a floating-point tensor, got int64");
  Staged host = is_half(tensor.dtype()) ? std::make_shared<WidenedStage>(host_value(tensor)) : host_value(tensor);
  return enqueue(std::string("all_reduce(") + reduce_op_name(op) + ")", [this, host, op](uint32_t tag) {
    host->wait_ready();
    const Tensor& h = host->host();
    gloo_all_reduce(context_, h.raw_data(), h.dtype(), static_cast<size_t>(h.numel()), op, tag, timeout_, scratch_);
    host->copy_back();
  }, tensor.numel() * static_cast<int64_t>(element_size(tensor.dtype())));
}

WorkPtr ProcessGroupGloo::broadcast(Tensor& tensor, int root) {
  check_tensor("broadcast", tensor);
  MINIDL_CHECK(root >= 0 && root < size(), "broadcast: root must be in [0, ", size() - 1, "], got ", root);
  Staged host = rank() == root ? host_value(tensor) : host_output(tensor);
  return enqueue("broadcast", [this, host, root](uint32_t tag) {
    GLOO_DISPATCH(host->host().dtype(), [&] {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(ready_ptr<scalar_t>(host), static_cast<size_t>(host->host().numel()));
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::broadcast(opts);
    });
    if (rank() != root) host->copy_back();
  });
}

WorkPtr ProcessGroupGloo::all_gather(std::vector<Tensor>& outputs, const Tensor& input) {
  check_tensor("all_gather", input, "input");
  MINIDL_CHECK(static_cast<int>(outputs.size()) == size(), "all_gather: expected ", size(),
               " output tensors (one per rank), got ", outputs.size());
  std::vector<size_t> counts;
  for (size_t r = 0; r < outputs.size(); ++r) {
    check_tensor("all_gather", outputs[r], "output");
    MINIDL_CHECK(outputs[r].dtype() == input.dtype(), "all_gather: output ", r, " has dtype ",
                 dtype_name(outputs[r].dtype()), " but the input has ", dtype_name(input.dtype()));
    counts.push_back(static_cast<size_t>(outputs[r].numel()));
  }
  MINIDL_CHECK(counts[rank()] == static_cast<size_t>(input.numel()), "all_gather: output ", rank(),
               " (this rank's) has ", counts[rank()], " elements but the input has ", input.numel());
  Staged in = host_value(input);
  std::vector<Staged> host_outs;
  for (const Tensor& o : outputs) host_outs.push_back(host_output(o));
  return enqueue("all_gather", [this, in, host_outs, counts](uint32_t tag) {
    GLOO_DISPATCH(in->host().dtype(), [&] {
      size_t total = 0;
      for (size_t c : counts) total += c;
      std::vector<scalar_t> flat(total);
      gloo::AllgathervOptions opts(context_);
      opts.setInput(ready_ptr<scalar_t>(in), static_cast<size_t>(in->host().numel()));
      opts.setOutput(flat.data(), counts);
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::allgatherv(opts);
      size_t offset = 0;
      for (size_t r = 0; r < host_outs.size(); ++r) {
        if (counts[r])
          std::memcpy(host_outs[r]->host().data_ptr<scalar_t>(), flat.data() + offset, counts[r] * sizeof(scalar_t));
        offset += counts[r];
      }
    });
    for (const Staged& o : host_outs) o->copy_back();
  });
}

WorkPtr ProcessGroupGloo::all_gather_into_tensor(Tensor& output, const Tensor& input) {
  check_tensor("all_gather_into_tensor", input, "input");
  check_tensor("all_gather_into_tensor", output, "output");
  MINIDL_CHECK(output.dtype() == input.dtype(), "all_gather_into_tensor: output dtype ", dtype_name(output.dtype()),
               " differs from input dtype ", dtype_name(input.dtype()));
  MINIDL_CHECK(output.numel() == input.numel() * size(), "all_gather_into_tensor: output tensor size must be equal to ",
               "world_size times input tensor size: expected ", input.numel() * size(), " elements, got ",
               output.numel());
  Staged in = host_value(input), host_out = host_output(output);
  return enqueue("all_gather_into_tensor", [this, in, host_out](uint32_t tag) {
    if (in->host().numel() == 0) return;
    GLOO_DISPATCH(in->host().dtype(), [&] {
      gloo::AllgatherOptions opts(context_);
      opts.setInput(ready_ptr<scalar_t>(in), static_cast<size_t>(in->host().numel()));
      opts.setOutput(host_out->host().data_ptr<scalar_t>(), static_cast<size_t>(host_out->host().numel()));
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::allgather(opts);
    });
    host_out->copy_back();
  });
}

WorkPtr ProcessGroupGloo::reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) {
  check_tensor("reduce_scatter", output, "output");
  MINIDL_CHECK(static_cast<int>(inputs.size()) == size(), "reduce_scatter: expected ", size(),
               " input tensors (one per rank), got ", inputs.size());
  for (size_t r = 0; r < inputs.size(); ++r) {
    check_tensor("reduce_scatter", inputs[r], "input");
    MINIDL_CHECK(inputs[r].dtype() == output.dtype(), "reduce_scatter: input ", r, " has dtype ",
                 dtype_name(inputs[r].dtype()), " but the output has ", dtype_name(output.dtype()));
  }
  MINIDL_CHECK(inputs[rank()].numel() == output.numel(), "reduce_scatter: the output has ", output.numel(),
               " elements but input ", rank(), " (this rank's share) has ", inputs[rank()].numel());
  MINIDL_CHECK(op != ReduceOp::AVG || output.dtype() != kInt64,
               "reduce_scatter: ReduceOp.AVG needs a floating-point tensor, got int64");
  Staged host_out = host_output(output);
  std::vector<Staged> ins;
  for (const Tensor& i : inputs) ins.push_back(host_value(i));
  return enqueue(std::string("reduce_scatter(") + reduce_op_name(op) + ")",
                 [this, host_out, ins, op](uint32_t tag) {
    const Tensor& out = host_out->host();
    GLOO_DISPATCH(out.dtype(), [&] {
      std::vector<scalar_t> flat;
      size_t offset = 0;
      for (int r = 0; r < size(); ++r) {
        const scalar_t* p = ready_ptr<scalar_t>(ins[r]);
        if (r == rank()) offset = flat.size();
        flat.insert(flat.end(), p, p + ins[r]->host().numel());
      }
      gloo_all_reduce(context_, flat.data(), out.dtype(), flat.size(), op, tag, timeout_, scratch_);
      if (out.numel())
        std::memcpy(out.data_ptr<scalar_t>(), flat.data() + offset, out.numel() * sizeof(scalar_t));
    });
    host_out->copy_back();
  });
}

WorkPtr ProcessGroupGloo::barrier() {
  return enqueue("barrier", [this](uint32_t tag) {
    gloo::BarrierOptions opts(context_);
    opts.setTag(tag);
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  });
}

}  // namespace minidl::dist
