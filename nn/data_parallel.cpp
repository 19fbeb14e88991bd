// nn::DataParallel: scatter, replicate, parallel_apply, gather (see the header).
// Autograd: scatter is narrow + to(device), gather is to(device) + cat, and a
// replica's parameters are to(device) of the module's, so backward needs no
// code here: each copy's backward moves its gradient back to the source, and
// autograd sums the replicas' gradients into the module's .grad (accumulate).
#include "minidl/nn/data_parallel.h"

#include <algorithm>
#include <exception>
#include <thread>
#include <utility>

#include "minidl/core/autocast.h"
#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/check.h"
#include "minidl/core/cuda.h"
#include "minidl/core/generator.h"
#include "minidl/core/shape.h"
#include "minidl/core/tensor_impl.h"
#include "minidl/nn/modules/dropout.h"
#include "minidl/ops/shape_ops.h"

namespace minidl::nn {

namespace {

// Restores the default generator on scope exit: building a replica runs its
// initializers, which must not move the user's random stream.
class GeneratorStateGuard {
 public:
  GeneratorStateGuard() : state_(default_generator().state()) {}
  ~GeneratorStateGuard() {
    try {
      default_generator().set_state(state_);
    } catch (...) {  // destructors never throw; the state came from state(), so this cannot fail
    }
  }
  GeneratorStateGuard(const GeneratorStateGuard&) = delete;
  GeneratorStateGuard& operator=(const GeneratorStateGuard&) = delete;

 private:
  std::string state_;
};

std::string names_of(const NamedTensors& tensors) {
  std::string out;
  for (const auto& [name, t] : tensors) out += (out.empty() ? "" : ", ") + name;
  return "[" + out + "]";
}

// Same names and shapes, in the same order (dtype and device follow the module each forward).
void check_same_tensors(const char* what, const NamedTensors& module, const NamedTensors& replica) {
  MINIDL_CHECK(module.size() == replica.size(),
               "DataParallel: make_replica built a module whose ", what, "s ", names_of(replica),
               " differ from the module's ", names_of(module), "; it must build the same architecture");
  for (size_t i = 0; i < module.size(); ++i) {
    MINIDL_CHECK(module[i].first == replica[i].first && module[i].second.shape() == replica[i].second.shape(),
                 "DataParallel: make_replica built a module that differs from the module: ", what, " '",
                 module[i].first, "' ", shape_str(module[i].second.shape()), " vs the replica's '",
                 replica[i].first, "' ", shape_str(replica[i].second.shape()));
  }
}

// Makes `dst`'s TensorImpl (the tensor a replica's layer holds) the tensor `src`,
// autograd history included, so the replica's forward uses src and its
// gradient flows through src's grad_fn.
void point_at(const Tensor& dst, const Tensor& src) {
  TensorImpl* d = dst.impl();
  const TensorImpl* s = src.impl();
  d->set_view(*s, s->shape, s->strides, s->offset);
  d->grad_fn = s->grad_fn;
  d->output_nr = s->output_nr;
  d->requires_grad = false;  // a non-leaf requires grad through its grad_fn; a no-grad copy does not
  d->grad.reset();
  d->grad_accumulator.reset();
}

// True when a forward of `module` draws random numbers (Dropout in training).
bool draws_random(Module& module) {
  for (const auto& m : module.modules()) {
    const auto* dropout = dynamic_cast<const DropoutImpl*>(m.get());
    if (dropout != nullptr && dropout->is_training() && dropout->options.p() > 0.0) return true;
  }
  return false;
}

// The calling thread's grad mode and autocast state, re-established in a worker.
struct ThreadState {
  bool grad_enabled = autograd::GradMode::is_enabled();
  bool autocast_enabled[kNumDeviceTypes];
  DType autocast_dtype[kNumDeviceTypes];
  bool cache_enabled = amp::is_autocast_cache_enabled();
  ThreadState() {
    for (int t = 0; t < kNumDeviceTypes; ++t) {
      autocast_enabled[t] = amp::is_autocast_enabled(static_cast<DeviceType>(t));
      autocast_dtype[t] = amp::get_autocast_dtype(static_cast<DeviceType>(t));
    }
  }
};

Tensor run_replica(Module& replica, const Tensor& chunk, const ThreadState& state, bool in_worker) {
  if (!in_worker) return replica.forward(chunk);
  autograd::AutoGradMode grad_mode(state.grad_enabled);
  std::vector<std::unique_ptr<amp::autocast>> regions;
  for (int t = 0; t < kNumDeviceTypes; ++t) {
    if (state.autocast_enabled[t])
      regions.push_back(std::make_unique<amp::autocast>(static_cast<DeviceType>(t), state.autocast_dtype[t],
                                                        true, state.cache_enabled));
  }
  return replica.forward(chunk);
}

}  // namespace

DataParallelImpl::DataParallelImpl(std::shared_ptr<Module> module, std::vector<Device> device_ids,
                                   std::optional<Device> output_device, ReplicaFactory make_replica)
    : Module("DataParallel"),
      module_(std::move(module)),
      device_ids_(std::move(device_ids)),
      output_device_(output_device),
      make_replica_(std::move(make_replica)) {
  MINIDL_CHECK(module_ != nullptr, "DataParallel: expected a module, got an empty one");
  register_module("module", module_);  // state_dict keys gain "module.", as PyTorch
  if (device_ids_.empty() && cuda::is_available()) {
    for (int i = 0; i < cuda::device_count(); ++i) device_ids_.emplace_back(kCUDA, i);
  }
  if (device_ids_.empty()) return;  // PyTorch's fallback without an accelerator: forward calls the module
  const Device src = device_ids_[0];
  for (size_t i = 1; i < device_ids_.size(); ++i) {
    MINIDL_CHECK(device_ids_[i].type == src.type, "DataParallel: device_ids must all be of one device type, got ",
                 src.str(), " and ", device_ids_[i].str());
    for (size_t j = 0; j < i; ++j)
      MINIDL_CHECK(device_ids_[i] != device_ids_[j], "DataParallel: device_ids must be distinct, got ",
                   device_ids_[i].str(), " twice");
  }
  if (!output_device_) output_device_ = src;
  MINIDL_CHECK(device_ids_.size() == 1 || make_replica_,
               "DataParallel: cannot replicate ", module_->name(), " onto ", device_ids_.size(),
               " devices: minidl modules have no generic clone; pass make_replica, a function that builds a "
               "module of the same architecture (derived automatically for modules constructible from their "
               "options or by default)");
}

void DataParallelImpl::check_module_on_source_device() const {
  const Device src = device_ids_[0];
  auto check = [&](const std::vector<Tensor>& tensors) {
    for (const Tensor& t : tensors) {
      MINIDL_CHECK(t.device() == src, "module must have its parameters and buffers on device ", src.str(),
                   " (device_ids[0]) but found one of them on device: ", t.device().str());
    }
  };
  check(module_->parameters());
  check(module_->buffers());
}

void DataParallelImpl::ensure_replicas(size_t n) {
  while (replicas_.size() + 1 < n) {
    std::shared_ptr<Module> replica;
    {
      GeneratorStateGuard keep_random_stream;
      replica = make_replica_();
    }
    MINIDL_CHECK(replica != nullptr, "DataParallel: make_replica returned no module");
    check_same_tensors("parameter", module_->named_parameters(), replica->named_parameters());
    check_same_tensors("buffer", module_->named_buffers(), replica->named_buffers());
    const size_t modules = module_->modules().size();
    MINIDL_CHECK(replica->modules().size() == modules, "DataParallel: make_replica built a module with ",
                 replica->modules().size(), " submodules, the module has ", modules);
    replicas_.push_back(std::move(replica));
  }
}

void DataParallelImpl::refresh_replica(size_t i) {
  Module& replica = *replicas_[i - 1];
  const Device device = device_ids_[i];
  // Modes: each submodule as its twin (train/eval and eval locks, so frozen BN stays frozen).
  const auto originals = module_->modules();
  const auto copies = replica.modules();
  for (size_t k = 0; k < originals.size(); ++k) {
    copies[k]->set_eval_locked(originals[k]->is_eval_locked());
    copies[k]->train(originals[k]->is_training());
  }
  // Parameters: copies with autograd history (under the caller's grad mode), as Broadcast.
  const std::vector<Tensor> params = module_->parameters();
  const std::vector<Tensor> replica_params = replica.parameters();
  for (size_t k = 0; k < params.size(); ++k) point_at(replica_params[k], params[k].to(device));
  // Buffers: copies without history (PyTorch broadcasts them detached).
  NoGradGuard no_grad;
  const std::vector<Tensor> buffers = module_->buffers();
  const std::vector<Tensor> replica_buffers = replica.buffers();
  for (size_t k = 0; k < buffers.size(); ++k) point_at(replica_buffers[k], buffers[k].detach().to(device));
}

Tensor DataParallelImpl::forward(const Tensor& input) {
  if (device_ids_.empty()) return module_->forward(input);
  check_module_on_source_device();
  if (device_ids_.size() == 1) return module_->forward(input.to(device_ids_[0]));

  // scatter: Tensor::chunk's split (ceil(N / devices) rows each), as comm.scatter.
  MINIDL_CHECK(input.dim() >= 1, "chunk expects at least a 1-dimensional tensor");
  const int64_t rows = input.size(0);
  const auto devices = static_cast<int64_t>(device_ids_.size());
  const int64_t split = (rows + devices - 1) / devices;
  const int64_t n_chunks = rows == 0 ? devices : (rows + split - 1) / split;
  std::vector<Tensor> chunks;
  for (int64_t i = 0; i < n_chunks; ++i) {
    const int64_t start = std::min(i * split, rows);
    chunks.push_back(input.narrow(0, start, std::min(split, rows - start)).to(device_ids_[i]));
  }

  // replicate
  const auto n = static_cast<size_t>(n_chunks);
  ensure_replicas(n);
  for (size_t i = 1; i < n; ++i) refresh_replica(i);
  auto replica = [&](size_t i) -> Module& { return i == 0 ? *module_ : *replicas_[i - 1]; };

  // parallel_apply: replica 0 on this thread, the others on their own threads.
  std::vector<Tensor> outputs(n);
  std::vector<std::exception_ptr> errors(n);
  const ThreadState state;
  auto run = [&](size_t i, bool in_worker) {
    try {
      outputs[i] = run_replica(replica(i), chunks[i], state, in_worker);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  if (draws_random(*module_)) {
    for (size_t i = 0; i < n; ++i) run(i, false);  // one generator, no lock: see the header
  } else {
    std::vector<std::thread> workers;
    for (size_t i = 1; i < n; ++i) workers.emplace_back(run, i, true);
    run(0, false);
    for (std::thread& w : workers) w.join();
  }
  for (size_t i = 0; i < n; ++i) {
    if (!errors[i]) continue;
    try {
      std::rethrow_exception(errors[i]);
    } catch (const std::exception& e) {
      MINIDL_FAIL("Caught an error in replica ", i, " on device ", device_ids_[i].str(), ".\n", e.what());
    }
  }

  // gather: onto output_device, concatenated along dim 0 (scalars become a vector, as PyTorch).
  for (Tensor& out : outputs) {
    MINIDL_CHECK(out.defined(), "DataParallel: a replica's forward returned an undefined tensor");
    if (out.dim() == 0) out = out.unsqueeze(0);
    out = out.to(*output_device_);
  }
  return cat(outputs, 0);
}

}  // namespace minidl::nn
