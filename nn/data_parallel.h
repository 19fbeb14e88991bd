// nn::DataParallel: single-process data parallelism over several devices,
// with the semantics of torch.nn.DataParallel (torch/nn/parallel/data_parallel.py).
//
//   auto net = Net();                                     // built on device_ids[0]
//   net->to(Device("cuda:0"));
//   nn::DataParallel dp(net, {Device("cuda:0"), Device("cuda:1")});
//   Tensor loss = cross_entropy(dp(x), y);                // x may be on any device
//   loss.backward();                                      // net's .grad holds the sum over replicas
//   optimizer.step();                                     // the optimizer holds net's parameters
//
// Each forward, as PyTorch:
//   1. scatter: the input is split along dim 0 as Tensor::chunk does (chunks of
//      ceil(N / devices) rows, the last one smaller), so 5 rows over 2 devices
//      are 3 + 2, and a batch smaller than the device count gives fewer chunks:
//      only the first chunks.size() devices run. An empty batch gives every
//      device an empty chunk.
//   2. replicate: replica 0 IS the module (PyTorch's replica 0 is a new module
//      object whose parameters are Broadcast's outputs aliasing the originals
//      and whose buffers are the original buffers, which is the same thing).
//      Replica i > 0 is a module of the same architecture on device_ids[i]
//      whose parameters are, for this forward, `param.to(device_ids[i])` of the
//      module's parameters: non-leaf tensors whose backward copies the gradient
//      back, so every replica's gradient flows into the module's .grad, summed
//      by autograd (PyTorch: Broadcast.backward = ReduceAddCoalesced). Its
//      buffers are copied from the module's, without autograd.
//   3. parallel_apply: replica i runs on chunk i in its own thread (one
//      thread runs inline), with the caller's grad mode and autocast state.
//   4. gather: the outputs are moved to output_device and concatenated along
//      dim 0 (differentiable). Scalar outputs (a loss per replica) are
//      unsqueezed into a vector first, as PyTorch does (it also warns).
// With one device in device_ids it is a thin wrapper: the input moves to
// device_ids[0] and the module's output is returned where it is, not moved to
// output_device (PyTorch returns self.module(*inputs[0]) there too).
// With no device_ids: all CUDA devices when CUDA is available, else the module
// runs as it is, on the input as it is (PyTorch's CPU fallback).
//
// BatchNorm (and any buffer) in training mode: each replica normalizes with its
// own chunk's statistics, so a BN model under DataParallel differs from the
// same model on the whole batch (SyncBatchNorm exists for this). Running-stat
// updates: replica 0's land in the module's buffers (they are its buffers);
// the other replicas update copies that are dropped, as in PyTorch. So after a
// step, running_mean/var come from chunk 0 alone, and num_batches_tracked
// counts once per forward.
//
// Building replicas: minidl modules have no generic clone (PyTorch C++ uses
// Cloneable::clone). Replicas come from `make_replica`, which must build a
// module of the same architecture (same parameter and buffer names and
// shapes, checked); given a module handle (nn::Linear, a MINIDL_MODULE model)
// DataParallel derives it when the Impl is constructible from its `options`
// member (Linear, Conv2d, ...) or by default. A derived factory that builds
// another architecture (a model whose constructor arguments choose layers) is
// refused by that check on the first forward: pass make_replica. The replicas are built once, on the first forward
// that needs them, with the default generator's state saved and restored
// around make_replica, so the user's random stream does not move.
//
// Replicas are separate module objects: forward pre-hooks registered on the
// module's layers run in replica 0 only. A replica keeps its parameter copies
// (and the graph of the last forward) until the next forward re-points them.
//
// Random ops in replicas (Dropout) draw from the one default generator from
// several threads; minidl's generator has no lock, so DataParallel runs the
// replicas one after another (still on their own devices) while the module is
// in training mode and contains a Dropout with p > 0. Not a PyTorch behaviour:
// PyTorch has one generator per CUDA device.
//
// Why DDP is preferred (as PyTorch says): one process per device, no
// replication of the model each step, no Python GIL (here: no serialization on
// device 0 for scatter, gather and the gradient sum). See README.md.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "minidl/core/device.h"
#include "minidl/core/tensor.h"
#include "minidl/nn/module.h"

namespace minidl::nn {

// Builds a fresh module with the same architecture as the one DataParallel wraps.
using ReplicaFactory = std::function<std::shared_ptr<Module>()>;

class DataParallelImpl : public Module {
 public:
  DataParallelImpl(std::shared_ptr<Module> module, std::vector<Device> device_ids = {},
                   std::optional<Device> output_device = std::nullopt, ReplicaFactory make_replica = {});

  Tensor forward(const Tensor& input) override;

  const std::shared_ptr<Module>& module() const { return module_; }
  const std::vector<Device>& device_ids() const { return device_ids_; }
  std::optional<Device> output_device() const { return output_device_; }
  // Number of replicas built so far (device_ids.size() - 1 once a forward used them all).
  int64_t replicas_built() const { return static_cast<int64_t>(replicas_.size()); }

 private:
  void check_module_on_source_device() const;
  // Replicas for devices 1..n-1, built lazily (see the header comment).
  void ensure_replicas(size_t n);
  // Points replica i's parameters at module params .to(device_ids[i]) and copies the buffers.
  void refresh_replica(size_t i);

  std::shared_ptr<Module> module_;
  std::vector<Device> device_ids_;
  std::optional<Device> output_device_;
  ReplicaFactory make_replica_;
  std::vector<std::shared_ptr<Module>> replicas_;  // replicas_[k] runs on device_ids_[k + 1]
};

namespace detail {
template <class Impl>
concept ConstructibleFromOptions = requires(const Impl& m) { m.options; } &&
                                   std::is_constructible_v<Impl, decltype(std::declval<const Impl&>().options)>;
// A ReplicaFactory for Impl when one can be derived; empty otherwise.
template <class Impl>
ReplicaFactory default_replica_factory(const std::shared_ptr<Impl>& impl) {
  if constexpr (ConstructibleFromOptions<Impl>) {
    std::weak_ptr<Impl> weak = impl;
    return [weak]() -> std::shared_ptr<Module> {
      auto m = weak.lock();
      MINIDL_CHECK(m != nullptr, "DataParallel: the module was destroyed");
      return std::make_shared<Impl>(m->options);
    };
  } else if constexpr (std::is_default_constructible_v<Impl>) {
    return []() -> std::shared_ptr<Module> { return std::make_shared<Impl>(); };
  } else {
    return {};
  }
}
}  // namespace detail

class DataParallel : public ModuleHolder<DataParallelImpl> {
 public:
  using Impl = DataParallelImpl;
  DataParallel(std::nullptr_t) : ModuleHolder(nullptr) {}                                      // NOLINT: empty
  DataParallel(std::shared_ptr<DataParallelImpl> impl) : ModuleHolder(std::move(impl)) {}     // NOLINT: wraps
  // Any module handle (nn::Linear, a MINIDL_MODULE model); the replica factory
  // is derived when possible (see the header comment), else pass one.
  template <ModuleHolderType Holder>
    requires(!std::is_same_v<Holder, DataParallel>)
  DataParallel(const Holder& module, std::vector<Device> device_ids = {},  // NOLINT: implicit like torch
               std::optional<Device> output_device = std::nullopt, ReplicaFactory make_replica = {})
      : ModuleHolder(std::make_shared<DataParallelImpl>(
            module.ptr(), std::move(device_ids), output_device,
            make_replica ? std::move(make_replica) : detail::default_replica_factory(module.ptr()))) {}
  DataParallel(std::shared_ptr<Module> module, std::vector<Device> device_ids = {},
               std::optional<Device> output_device = std::nullopt, ReplicaFactory make_replica = {})
      : ModuleHolder(std::make_shared<DataParallelImpl>(std::move(module), std::move(device_ids), output_device,
                                                        std::move(make_replica))) {}
};

}  // namespace minidl::nn
