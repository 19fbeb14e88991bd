// lr * (total batch / reference batch)^p. See examples/common/lr_scaling.h.
#include "examples/common/lr_scaling.h"

#include <cmath>
#include <sstream>

#include "minidl/core/check.h"

namespace minidl::examples {

const std::vector<std::string>& lr_scaling_modes() {
  static const std::vector<std::string> modes{"none", "linear", "sqrt"};
  return modes;
}

ScaledLr scale_lr(double base_lr, const std::string& mode, int64_t total_batch, int64_t ref_batch) {
  MINIDL_CHECK(total_batch > 0, "scale_lr: expected a total batch size > 0, got ", total_batch);
  MINIDL_CHECK(ref_batch > 0, "scale_lr: expected a reference batch size > 0, got ", ref_batch);
  const double ratio = static_cast<double>(total_batch) / static_cast<double>(ref_batch);
  ScaledLr s{mode, base_lr, 1.0, base_lr, total_batch, ref_batch};
  if (mode == "linear")
    s.factor = ratio;
  else if (mode == "sqrt")
    s.factor = std::sqrt(ratio);
  else
    MINIDL_CHECK(mode == "none", "scale_lr: unknown mode '", mode, "'; expected one of: none, linear, sqrt");
  s.lr = base_lr * s.factor;
  return s;
}

std::string ScaledLr::describe() const {
  std::ostringstream o;
  if (mode == "none") {
    o << "lr " << base_lr << " (not scaled; total batch " << total_batch << ")";
  } else {
    o << "lr " << base_lr << " x " << factor << " (" << mode << ": total batch " << total_batch << " / reference "
      << ref_batch << ") = " << lr;
  }
  return o.str();
}

}  // namespace minidl::examples
