// The normalization layer of a model, chosen by name, so every model can be
// built with BatchNorm, GroupNorm, LayerNorm, InstanceNorm or none:
//
//   nn::AnyModule bn1 = register_module("bn1", models::make_norm("groupnorm", 64));  // GroupNorm(32, 64)
//
// kinds (for 2-D feature maps, NCHW; spatial_dims 3 gives the NCDHW layers
// BatchNorm3d / InstanceNorm3d, and 1 the NCL ones, for the same kinds):
//   batchnorm     BatchNorm2d(C)
//   groupnorm     GroupNorm(G, C), G = the largest divisor of C not above 32
//                 (nn::group_norm_groups_for): 64 -> 32, 48 -> 24, 16 -> 16
//   layernorm     GroupNorm(1, C): normalizes each sample over (C, H, W) (or (C, D, H, W)), with a
//                 per-channel affine. This is what conv nets use as "LayerNorm"
//                 (PyTorch's nn.LayerNorm([C, H, W]) would need the spatial size
//                 and would learn a gamma per pixel).
//   instancenorm  InstanceNorm2d(C, affine=true), no running stats (PyTorch's default)
//   none          Identity
//
// SyncBatchNorm is not a kind here (models/ does not depend on dist/): build
// with "batchnorm" and call nn::convert_sync_batch_norm (dist/sync_batch_norm.h),
// as PyTorch's nn.SyncBatchNorm.convert_sync_batchnorm does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "minidl/nn/module.h"

namespace minidl::models {

// The kinds make_norm accepts, in the order listed in error messages.
const std::vector<std::string>& norm_kinds();

// A new norm layer over `channels` channels, as an AnyModule ready to be
// registered (so nn::convert_batch_norm_to_group_norm can swap it later).
// spatial_dims: 1, 2 or 3, the number of dims after (N, C) of the input.
nn::AnyModule make_norm(const std::string& kind, int64_t channels, int64_t spatial_dims = 2);

}  // namespace minidl::models
