// scaled_width: a layer width times ModelOptions::width.
#include "minidl/models/model_options.h"

#include <algorithm>
#include <cmath>

#include "minidl/core/check.h"

namespace minidl::models {

int64_t scaled_width(int64_t base, double width) {
  MINIDL_CHECK(std::isfinite(width) && width > 0.0, "models: expected a width multiplier > 0, got ", width);
  return std::max<int64_t>(1, std::llround(static_cast<double>(base) * width));
}

}  // namespace minidl::models
