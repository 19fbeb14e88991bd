// train_cifar10 --cuda-graph: one whole training step (forward, loss,
// backward, optimizer step, the device-side running metrics) captured once
// into a CUDA graph (core/cuda_graph.h) and replayed for every full batch,
// which PyTorch leaves to hand-written code (its docs' "whole network
// capture" example). Per batch the host then only copies the batch into the
// static inputs, writes the lr into the optimizer's device lr and launches
// the graph: no per-kernel launch cost, which dominates small batches.
//
//   examples::GraphedStep graphed([&](const Tensor& x, const Tensor& y) { ...one step... }, *opt, device);
//   for (batch : loader) graphed.run(batch.data, batch.targets);  // full batches
//
// The first `warmup` calls run the step eagerly on the capture stream (the
// optimizer state, momentum buffers, cuBLAS workspace and cuDNN algorithm
// choices are made there, never inside the capture); the next call captures
// (the capture runs nothing) and replays; later calls replay. The optimizer
// must be capturable (optim/optimizer.h). A batch of another shape (the
// last, partial one) is the caller's to run eagerly.
//
// Ran on an H100 (scripts/gpu-check.sh, 2026-11-27): train_cifar10 --cuda-graph
// ended with the eager run's train loss (2 epochs of batch 32, deterministic
// cuDNN, 251 replays).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "minidl/core/cuda_graph.h"
#include "minidl/core/tensor.h"
#include "minidl/nn/module.h"
#include "minidl/optim/optimizer.h"

namespace minidl::examples {

// Throws minidl::Error saying why when --cuda-graph cannot run this setup:
// not a CUDA device, --amp fp16 (GradScaler), distributed training, a model
// with dropout, an optimizer that is not capturable.
void check_cuda_graph_supported(Device device, const std::string& amp, bool distributed, nn::Module& model,
                                const optim::Optimizer& opt);

class GraphedStep {
 public:
  // step(x, y): one eager training step on device tensors x (inputs) and y (targets).
  using StepFn = std::function<void(const Tensor& x, const Tensor& y)>;
  GraphedStep(StepFn step, optim::Optimizer& opt, Device device, int64_t warmup = 3);

  // One step on batch (x, y), host or device tensors, always of the first
  // call's shapes (throws otherwise).
  void run(const Tensor& x, const Tensor& y);

  bool captured() const { return graph_.has_graph(); }
  int64_t replays() const { return replays_; }

 private:
  void copy_inputs(const Tensor& x, const Tensor& y);

  StepFn step_;
  optim::Optimizer& opt_;
  Device device_;
  int64_t warmup_, warmed_ = 0, replays_ = 0;
  Tensor static_x_, static_y_;
  cuda::CUDAGraph graph_;
};

}  // namespace minidl::examples
