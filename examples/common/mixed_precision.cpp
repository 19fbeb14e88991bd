// --amp off|bf16|fp16. See examples/common/mixed_precision.h.
#include "examples/common/mixed_precision.h"

#include "minidl/core/check.h"

namespace minidl::examples {

const std::vector<std::string>& amp_modes() {
  static const std::vector<std::string> modes{"off", "bf16", "fp16"};
  return modes;
}

MixedPrecision::MixedPrecision(const std::string& mode, Device device, bool training)
    : mode_(mode), device_(device) {
  MINIDL_CHECK(mode == "off" || mode == "bf16" || mode == "fp16", "--amp: unknown mode '", mode,
               "'; expected off, bf16 or fp16");
  if (mode == "bf16") dtype_ = kBFloat16;
  if (mode == "fp16") {
    MINIDL_CHECK(device.type == DeviceType::CUDA, "--amp fp16 ",
                 training ? "trains in float16 with loss scaling" : "runs the forward passes in float16",
                 ", which needs a CUDA device (this run is on ", device.str(), "); on the CPU use --amp bf16");
    dtype_ = kFloat16;
    if (!training) return;  // nothing to scale
    scaler_ = std::make_unique<amp::GradScaler>(device.str());  // "cuda:N" (device_type_name's "CUDA" is no device string)
  }
}

void MixedPrecision::backward(const Tensor& loss) {
  if (scaler_) {
    scaler_->scale(loss).backward();
  } else {
    loss.backward();
  }
}

bool MixedPrecision::step(optim::Optimizer& optimizer) {
  if (!scaler_) {
    optimizer.step();
    return true;
  }
  const bool stepped = scaler_->step(optimizer);
  scaler_->update();
  skipped_ += stepped ? 0 : 1;
  return stepped;
}

double MixedPrecision::loss_scale() const { return scaler_ ? scaler_->get_scale() : 1.0; }

nlohmann::json MixedPrecision::state_dict() const {
  if (!scaler_) return nullptr;
  nlohmann::json state = scaler_->state_dict();
  state["skipped_steps"] = skipped_;
  return state;
}

void MixedPrecision::load_state_dict(const nlohmann::json& state) {
  if (!scaler_) {
    MINIDL_CHECK(state.is_null(), "--amp ", mode_,
                 ": the checkpoint holds a GradScaler state (it was made with --amp fp16), but this run has no "
                 "GradScaler");
    return;
  }
  MINIDL_CHECK(state.is_object(), "--amp fp16: the checkpoint holds no GradScaler state (it was made with --amp off "
               "or bf16)");
  nlohmann::json scaler_state = state;
  skipped_ = scaler_state.value("skipped_steps", int64_t{0});
  scaler_state.erase("skipped_steps");
  scaler_->load_state_dict(scaler_state);
}

}  // namespace minidl::examples
