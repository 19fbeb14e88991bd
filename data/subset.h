// Subset: the samples of another dataset at chosen indices, in that order
// (PyTorch's torch.utils.data.Subset). It shares the base dataset, so the
// base stays alive as long as the Subset does.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "minidl/data/dataset.h"

namespace minidl::data {

class Subset : public Dataset {
 public:
  // Every index must lie in [0, base->size()); repeats are allowed.
  Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices);
  // The first min(n, base->size()) samples, e.g. for --limit-train.
  static Subset first(std::shared_ptr<const Dataset> base, int64_t n);

  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  // The base's sample at indices()[index].
  Example get(int64_t index) const override;

  const std::shared_ptr<const Dataset>& dataset() const { return base_; }
  const std::vector<int64_t>& indices() const { return indices_; }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
};

}  // namespace minidl::data
