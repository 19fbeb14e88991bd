// BatchNorm1d/2d/3d, as torch.nn.BatchNorm*d, and NormBaseImpl (PyTorch's
// _NormBase), which InstanceNorm*d shares.
//
//   auto bn = nn::BatchNorm2d(64);                        // eps 1e-5, momentum 0.1
//   auto cma = nn::BatchNorm2d(nn::BatchNormOptions(64).momentum(std::nullopt));
//
// Parameters weight (ones) and bias (zeros) when affine (bias only with
// bias=true, PyTorch's keyword-only bias: BatchNormOptions(64).bias(false)
// has a weight and no bias; affine=false has neither); buffers running_mean
// (zeros), running_var (ones) and num_batches_tracked (int64 0-d, 0) when
// track_running_stats, otherwise registered as undefined (PyTorch's None).
// forward (PyTorch's _BatchNorm.forward):
//   training and track_running_stats: num_batches_tracked += 1; the update
//     factor is momentum, or 1 / num_batches_tracked with momentum=None (a
//     cumulative moving average: the equal-weight mean of the batch statistics;
//     its count comes from a host mirror, not a per-step device read)
//   batch statistics are used if training or there are no running stats
//     (track_running_stats=False at construction: batch stats in eval too)
//   the running stats are handed to batch_norm only if not training or
//     track_running_stats (so flipping options.track_running_stats(false)
//     later stops the updates, while eval still uses the buffers).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "minidl/nn/module.h"

namespace minidl::nn {

struct BatchNormOptions {
  BatchNormOptions(int64_t num_features) : num_features_(num_features) {}  // NOLINT: as PyTorch's int
  MINIDL_ARG(int64_t, num_features);
  MINIDL_ARG(double, eps) = 1e-5;
  // std::nullopt is PyTorch's momentum=None (cumulative moving average).
  MINIDL_ARG(std::optional<double>, momentum) = 0.1;
  MINIDL_ARG(bool, affine) = true;
  MINIDL_ARG(bool, track_running_stats) = true;
  // A bias (zeros) beside the weight when affine; ignored without affine (PyTorch's bias=).
  MINIDL_ARG(bool, bias) = true;
};

// Parameters, buffers, reset and printing of BatchNorm and InstanceNorm.
class NormBaseImpl : public Module {
 public:
  NormBaseImpl(std::string name, const BatchNormOptions& options);

  // running_mean = 0, running_var = 1, num_batches_tracked = 0 (in place).
  void reset_running_stats();
  // reset_running_stats(), then weight = 1, bias = 0.
  void reset_parameters();
  // "64, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True"
  // (bias= says whether there is one, as PyTorch's `self.bias is not None`)
  std::string extra_repr() const override;
  // Checkpoints from before num_batches_tracked existed load (the counter
  // keeps its value), as in PyTorch.
  bool is_optional_state(const std::string& buffer_name) const override {
    return buffer_name == "num_batches_tracked";
  }

  BatchNormOptions options;
  Tensor weight, bias;                                   // (C) or undefined
  Tensor running_mean, running_var, num_batches_tracked;  // or undefined
};

class BatchNormImplBase : public NormBaseImpl {
 public:
  using NormBaseImpl::NormBaseImpl;
  Tensor forward(const Tensor& input) override;

 protected:
  // Throws PyTorch's "expected 4D input (got 3D input)".
  virtual void check_input_dim(const Tensor& input) const = 0;

  // What forward decided before normalizing (PyTorch's _BatchNorm.forward).
  struct Step {
    double momentum;         // the update factor actually applied
    bool use_batch_stats;    // training, or no running stats to use
    Tensor running_mean, running_var;  // handed to the kernel, or undefined
  };
  // Runs the normalization; SyncBatchNorm overrides it to synchronize.
  virtual Tensor normalize(const Tensor& input, const Step& step);

 private:
  // num_batches_tracked += 1 for momentum=None; returns the new count.
  int64_t count_batch();

  // Host mirror of num_batches_tracked (see count_batch): its value, valid
  // while the buffer still has the storage, offset and version it had after
  // this module's last write.
  struct TrackedMirror {
    std::shared_ptr<Storage> storage;  // held, so a new storage cannot reuse the address
    int64_t offset = 0;
    uint64_t version = 0;
    int64_t value = 0;
  } tracked_;
};

#define MINIDL_BATCH_NORM_CLASS(Name)                                                            \
  class Name##Impl : public BatchNormImplBase {                                                 \
   public:                                                                                      \
    explicit Name##Impl(const BatchNormOptions& options) : BatchNormImplBase(#Name, options) {} \
    Name##Impl(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,   \
               bool affine = true, bool track_running_stats = true)                             \
        : Name##Impl(BatchNormOptions(num_features)                                             \
                         .eps(eps)                                                              \
                         .momentum(momentum)                                                    \
                         .affine(affine)                                                        \
                         .track_running_stats(track_running_stats)) {}                          \
                                                                                                \
   protected:                                                                                   \
    void check_input_dim(const Tensor& input) const override;                                   \
  };                                                                                            \
  MINIDL_MODULE(Name)

MINIDL_BATCH_NORM_CLASS(BatchNorm1d);  // (N, C) or (N, C, L)
MINIDL_BATCH_NORM_CLASS(BatchNorm2d);  // (N, C, H, W)
MINIDL_BATCH_NORM_CLASS(BatchNorm3d);  // (N, C, D, H, W)

#undef MINIDL_BATCH_NORM_CLASS

}  // namespace minidl::nn
