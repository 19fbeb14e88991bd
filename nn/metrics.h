// Overlap metrics for binary (or multi-label) segmentation at a threshold:
// Dice (F1) and IoU (Jaccard). Evaluation only: no autograd history, the
// result is a detached 0-d tensor of the input's dtype on its device (call
// .item<double>() to read it).
//   pred = (input > threshold)   (input: probabilities; from_logits: sigmoid first)
//   fg   = (target > 0.5)        (target: 0/1 masks of any dtype, input's shape)
//   dice = 2 |pred & fg| / (|pred| + |fg|),   iou = |pred & fg| / |pred | fg|
// An empty prediction on an empty target scores 1.0 (nothing to find, nothing
// found), for either metric. Per sample (default) the counts run over every
// dim but the first and the result is the mean of the N scores; batch = true
// counts over the whole batch at once.
#pragma once

#include "minidl/core/tensor.h"

namespace minidl::metrics {

struct OverlapOptions {
  double threshold = 0.5;    // on probabilities
  bool from_logits = false;  // apply sigmoid to the input first
  bool batch = false;        // one score over the whole batch instead of the mean of per-sample scores
};

Tensor dice_score(const Tensor& input, const Tensor& target, const OverlapOptions& options = {});
Tensor iou_score(const Tensor& input, const Tensor& target, const OverlapOptions& options = {});

}  // namespace minidl::metrics
