// --amp off|bf16|fp16; only off exists today. See examples/common/mixed_precision.h.
#include "examples/common/mixed_precision.h"

#include "minidl/core/check.h"

namespace minidl::examples {

const std::vector<std::string>& amp_modes() {
  static const std::vector<std::string> modes{"off", "bf16", "fp16"};
  return modes;
}

MixedPrecision::MixedPrecision(const std::string& mode) : mode_(mode) {
  MINIDL_CHECK(mode == "off" || mode == "bf16" || mode == "fp16", "--amp: unknown mode '", mode,
               "'; expected off, bf16 or fp16");
  MINIDL_CHECK(mode == "off", "--amp ", mode,
               ": mixed precision is not available in minidl yet (autocast and GradScaler are still to be "
               "written); run with --amp off (float32)");
}

void MixedPrecision::backward(const Tensor& loss) { loss.backward(); }

void MixedPrecision::step(optim::Optimizer& optimizer) { optimizer.step(); }

void MixedPrecision::load_state_dict(const nlohmann::json& state) {
  MINIDL_CHECK(state.is_null(), "--amp ", mode_,
               ": the checkpoint holds a GradScaler state, but this run has no GradScaler");
}

}  // namespace minidl::examples
