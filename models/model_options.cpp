// scaled_width: a layer width times ModelOptions::width.
#include "minidl/models/model_options.h"

#include <algorithm>
#include <cmath>

#include "minidl/core/check.h"

namespace minidl::models {

int64_t scaled_width(int64_t base, double width) {
  MINIDL_CHECK(std::isfinite(width) && width > 0.0, "models: expected a width multiplier > 0, got ", width);
  // llround of a value beyond int64 is unspecified (it gave 1: --width 1e30 trained a 1-channel net).
  const double scaled = std::round(static_cast<double>(base) * width);
  MINIDL_CHECK(scaled < 0x1p62, "models: width multiplier ", width, " times a layer width of ", base, " is ", scaled,
               ": too large");
  return std::max<int64_t>(1, static_cast<int64_t>(scaled));
}

}  // namespace minidl::models
