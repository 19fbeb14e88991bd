// make_norm: the norm layer named by a string. See models/norm_factory.h.
#include "minidl/models/norm_factory.h"

#include "minidl/core/check.h"
#include "minidl/nn/modules/batch_norm.h"
#include "minidl/nn/modules/group_norm.h"
#include "minidl/nn/modules/instance_norm.h"
#include "minidl/nn/modules/linear.h"
#include "minidl/nn/norm_utils.h"

namespace minidl::models {

const std::vector<std::string>& norm_kinds() {
  static const std::vector<std::string> kinds{"batchnorm", "groupnorm", "layernorm", "instancenorm", "none"};
  return kinds;
}

nn::AnyModule make_norm(const std::string& kind, int64_t channels, int64_t spatial_dims) {
  MINIDL_CHECK(channels > 0, "make_norm: expected a positive number of channels, got ", channels);
  MINIDL_CHECK(spatial_dims >= 1 && spatial_dims <= 3, "make_norm: expected spatial_dims 1, 2 or 3, got ",
               spatial_dims);
  if (kind == "batchnorm") {
    if (spatial_dims == 1) return nn::AnyModule(nn::BatchNorm1d(channels));
    if (spatial_dims == 3) return nn::AnyModule(nn::BatchNorm3d(channels));
    return nn::AnyModule(nn::BatchNorm2d(channels));
  }
  // GroupNorm works on any number of spatial dims.
  if (kind == "groupnorm") return nn::AnyModule(nn::GroupNorm(nn::group_norm_groups_for(channels, 32), channels));
  if (kind == "layernorm") return nn::AnyModule(nn::GroupNorm(1, channels));  // over (C, H, W): see the header
  if (kind == "instancenorm") {
    const auto options = nn::BatchNormOptions(channels).affine(true).track_running_stats(false);
    if (spatial_dims == 1) return nn::AnyModule(nn::InstanceNorm1d(options));
    if (spatial_dims == 3) return nn::AnyModule(nn::InstanceNorm3d(options));
    return nn::AnyModule(nn::InstanceNorm2d(options));
  }
  if (kind == "none") return nn::AnyModule(nn::Identity());
  // models/ sits below dist/ (it must not need a process group), so SyncBN is
  // made the way PyTorch makes it: build with BatchNorm, then convert.
  MINIDL_CHECK(kind != "syncbatchnorm",
               "make_norm: 'syncbatchnorm' is made by converting a BatchNorm model, as in PyTorch: build it with "
               "norm \"batchnorm\", then call nn::convert_sync_batch_norm(model) (dist/sync_batch_norm.h)");
  std::string choices;
  for (const std::string& k : norm_kinds()) choices += (choices.empty() ? "" : ", ") + k;
  MINIDL_FAIL("make_norm: unknown norm kind '", kind, "'; expected one of: ", choices);
}

}  // namespace minidl::models
