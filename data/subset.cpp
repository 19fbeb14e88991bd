// Subset: indices are checked once, at construction, so get() only has to
// check its own position.
#include "minidl/data/subset.h"

#include <algorithm>
#include <numeric>

#include "minidl/core/check.h"

namespace minidl::data {

Subset::Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices)
    : base_(std::move(base)), indices_(std::move(indices)) {
  MINIDL_CHECK(base_ != nullptr, "Subset: the base dataset is null");
  const int64_t base_size = base_->size();
  for (size_t i = 0; i < indices_.size(); ++i)
    MINIDL_CHECK(indices_[i] >= 0 && indices_[i] < base_size, "Subset: index ", indices_[i], " (position ", i,
                 ") is out of range for a dataset of size ", base_size);
}

Subset Subset::first(std::shared_ptr<const Dataset> base, int64_t n) {
  MINIDL_CHECK(base != nullptr, "Subset: the base dataset is null");
  MINIDL_CHECK(n >= 0, "Subset::first: n must be non-negative, got ", n);
  std::vector<int64_t> indices(static_cast<size_t>(std::min(n, base->size())));
  std::iota(indices.begin(), indices.end(), int64_t{0});
  return Subset(std::move(base), std::move(indices));
}

Example Subset::get(int64_t index) const {
  detail::check_index("Subset", index, size());
  return base_->get(indices_[static_cast<size_t>(index)]);
}

}  // namespace minidl::data
