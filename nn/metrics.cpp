// dice_score and iou_score: binarize, count with sums over the kept dims, then
// (score numerator + e) / (denominator + e) with e = 1 where the denominator
// is 0 (empty prediction on an empty target), so that case is exactly 1 with
// no branch on device values. Composed from device ops under NoGradGuard.
#include "minidl/nn/metrics.h"

#include <numeric>

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/ops/binary.h"
#include "minidl/ops/reduce.h"
#include "minidl/ops/unary.h"

namespace minidl::metrics {

namespace {

struct Counts {
  Tensor intersection, predicted, actual;  // |pred & fg|, |pred|, |fg|
};

Counts count(const Tensor& input, const Tensor& target, const OverlapOptions& o, const char* op) {
  MINIDL_CHECK(input.defined() && target.defined(), op, ": expected defined input and target tensors");
  MINIDL_CHECK(input.dim() >= 1, op, ": expected an input of shape (N, ...), got a 0-d tensor");
  MINIDL_CHECK(input.shape() == target.shape(), op, ": expected a target of the input's shape ",
               shape_str(input.shape()), ", got ", shape_str(target.shape()));
  MINIDL_CHECK(is_floating(input.dtype()), op, ": expected a floating point input, got ", dtype_name(input.dtype()));
  MINIDL_CHECK(input.device() == target.device(), op, ": expected input and target on the same device, got ",
               input.device(), " and ", target.device());
  const Tensor x = input.dim() == 1 ? input.unsqueeze(1) : input;
  const Tensor t = target.dim() == 1 ? target.unsqueeze(1) : target;
  const Tensor pred = gt(o.from_logits ? sigmoid(x) : x, o.threshold);
  const Tensor fg = gt(t.dtype() == x.dtype() ? t : t.to(x.dtype()), 0.5);
  Shape dims;  // empty: all dims (batch)
  if (!o.batch) {
    dims.resize(static_cast<size_t>(x.dim() - 1));
    std::iota(dims.begin(), dims.end(), int64_t{1});
  }
  return {sum(pred * fg, dims), sum(pred, dims), sum(fg, dims)};
}

// numerator / denominator per sample, 1 where the denominator is 0; then the mean over samples.
Tensor score(const Tensor& numerator, const Tensor& denominator, bool batch) {
  const Tensor empty_case = eq(denominator, zeros_like(denominator));
  const Tensor s = (numerator + empty_case) / (denominator + empty_case);
  return batch ? s : mean(s);
}

}  // namespace

Tensor dice_score(const Tensor& input, const Tensor& target, const OverlapOptions& options) {
  NoGradGuard no_grad;
  const Counts c = count(input, target, options, "dice_score");
  return score(c.intersection * 2.0, c.predicted + c.actual, options.batch);
}

Tensor iou_score(const Tensor& input, const Tensor& target, const OverlapOptions& options) {
  NoGradGuard no_grad;
  const Counts c = count(input, target, options, "iou_score");
  return score(c.intersection, c.predicted + c.actual - c.intersection, options.batch);
}

}  // namespace minidl::metrics
