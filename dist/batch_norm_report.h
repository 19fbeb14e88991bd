// How far apart the ranks' BatchNorm running statistics are. Under DDP every
// rank normalizes its own batch, so plain BatchNorm layers drift apart across
// ranks (PyTorch then checkpoints rank 0's, or broadcasts them every forward);
// SyncBatchNorm keeps them identical. This report shows which is the case.
//
//   auto report = dist::batch_norm_report_across_ranks(*model);   // on EVERY rank: a collective
//   if (dist::get_rank() == 0) std::cout << report;
//
//   BatchNorm statistics across 3 rank(s): 2 layer(s), largest difference: running_mean 0.2463, running_var 0.7784
//     layer  type           C  max |diff| running_mean  max |diff| running_var  batches  ranks
//     1      BatchNorm2d    6  0.2463                   0.7784                  3        differ
//     4      SyncBatchNorm  5  0                        0                       3        identical
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "minidl/dist/process_group.h"
#include "minidl/nn/module.h"

namespace minidl::dist {

struct CrossRankBatchNormLayer {
  std::string name;  // dotted, "" for the root
  std::string type;  // "BatchNorm2d", "SyncBatchNorm"
  int64_t num_features = 0;
  bool has_running_stats = false;  // false: track_running_stats=False, nothing to compare
  // The largest |value on rank a - value on rank b| over all rank pairs and
  // channels (0 with one rank; NaN if a rank holds a NaN), and its channel.
  double running_mean_diff = 0.0, running_var_diff = 0.0;
  int64_t running_mean_channel = -1, running_var_channel = -1;
  // num_batches_tracked, smallest and largest over the ranks (when defined).
  std::optional<int64_t> min_batches_tracked, max_batches_tracked;
};

struct CrossRankBatchNormReport {
  int world_size = 1;
  std::vector<CrossRankBatchNormLayer> layers;  // preorder, each module once
  // Over the layers with running stats (0 when there are none).
  double max_running_mean_diff() const;
  double max_running_var_diff() const;
};

// For every BatchNorm1d/2d/3d and SyncBatchNorm layer of `model`, gathers
// running_mean, running_var and num_batches_tracked from every rank of
// `group` (the default group when null) and measures how far apart they are.
// Every rank must call it, with the same model structure (if the ranks' BN
// layers differ in number or size, every rank throws saying so). Two
// collectives: the sizes, then one all-gather of all statistics (float64).
CrossRankBatchNormReport batch_norm_report_across_ranks(const nn::Module& model,
                                                        const ProcessGroupPtr& group = nullptr);

// A table, one row per layer; "identical" when both differences are 0.
std::ostream& operator<<(std::ostream& os, const CrossRankBatchNormReport& report);
std::string to_string(const CrossRankBatchNormReport& report);

}  // namespace minidl::dist
