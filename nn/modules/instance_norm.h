// InstanceNorm1d/2d/3d, as torch.nn.InstanceNorm*d: defaults eps=1e-5,
// momentum=0.1, affine=False, track_running_stats=False, bias=True (a bias
// only when affine; .affine(true).bias(false): a weight alone); accepts unbatched
// input ((C, L), (C, H, W), (C, D, H, W)).
//
//   auto in = nn::InstanceNorm2d(64);
//   auto tracked = nn::InstanceNorm2d(nn::InstanceNormOptions(64).affine(true).track_running_stats(true));
//
// forward: instance statistics in training or without running stats; the
// running stats (if any) in eval. With momentum=None PyTorch silently passes
// momentum 0, so the running stats never move; minidl does the same but says
// so on stderr, once per module, the first time it happens.
#pragma once

#include <cstdint>
#include <optional>

#include "minidl/nn/modules/batch_norm.h"

namespace minidl::nn {

struct InstanceNormOptions : BatchNormOptions {
  InstanceNormOptions(int64_t num_features) : BatchNormOptions(num_features) {  // NOLINT: as PyTorch's int
    affine_ = false;
    track_running_stats_ = false;
  }
};

class InstanceNormImplBase : public NormBaseImpl {
 public:
  using NormBaseImpl::NormBaseImpl;
  Tensor forward(const Tensor& input) override;

 protected:
  // Dims of an unbatched input (2 for InstanceNorm1d).
  virtual int64_t no_batch_dim() const = 0;

 private:
  bool warned_momentum_none_ = false;
};

#define MINIDL_INSTANCE_NORM_CLASS(Name, kNoBatchDim)                                                \
  class Name##Impl : public InstanceNormImplBase {                                                  \
   public:                                                                                          \
    explicit Name##Impl(const BatchNormOptions& options) : InstanceNormImplBase(#Name, options) {}  \
    Name##Impl(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,       \
               bool affine = false, bool track_running_stats = false)                               \
        : Name##Impl(BatchNormOptions(num_features)                                                 \
                         .eps(eps)                                                                  \
                         .momentum(momentum)                                                        \
                         .affine(affine)                                                            \
                         .track_running_stats(track_running_stats)) {}                              \
                                                                                                    \
   protected:                                                                                       \
    int64_t no_batch_dim() const override { return kNoBatchDim; }                                  \
  };                                                                                                \
  MINIDL_MODULE(Name)

MINIDL_INSTANCE_NORM_CLASS(InstanceNorm1d, 2);  // (N, C, L) or (C, L)
MINIDL_INSTANCE_NORM_CLASS(InstanceNorm2d, 3);  // (N, C, H, W) or (C, H, W)
MINIDL_INSTANCE_NORM_CLASS(InstanceNorm3d, 4);  // (N, C, D, H, W) or (C, D, H, W)

#undef MINIDL_INSTANCE_NORM_CLASS

}  // namespace minidl::nn
