// GradScaler, a line-by-line port of torch/amp/grad_scaler.py (see the
// header for the algorithm): the per-optimizer stage machine READY ->
// UNSCALED -> STEPPED, reset by update(); gradients grouped per (device,
// dtype) for ops/amp.h's kernels; one found_inf flag per gradient device.
#include "minidl/optim/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/check.h"
#include "minidl/core/cuda.h"
#include "minidl/core/json_int.h"
#include "minidl/ops/amp.h"
#include "minidl/ops/binary.h"

namespace minidl::amp {

namespace {

void check_factors(double growth_factor, double backoff_factor) {
  MINIDL_CHECK(growth_factor > 1.0, "The growth factor must be > 1.0.");
  MINIDL_CHECK(backoff_factor < 1.0, "The backoff factor must be < 1.0.");
}

void check_init_scale(double init_scale) {
  MINIDL_CHECK(std::isfinite(init_scale) && init_scale > 0.0,
               "GradScaler: expected a finite init_scale > 0, got ", init_scale);
}

void check_growth_interval(int64_t growth_interval) {
  MINIDL_CHECK(growth_interval >= 1, "GradScaler: expected growth_interval >= 1, got ", growth_interval);
}

}  // namespace

GradScaler::GradScaler(const std::string& device, double init_scale, double growth_factor, double backoff_factor,
                       int64_t growth_interval, bool enabled)
    : device_(device), enabled_(enabled) {
  const DeviceType type = Device(device).type;  // refuses an unknown device name
  if (type == DeviceType::CUDA && enabled_ && !cuda::is_available()) {
    std::cerr << "UserWarning: GradScaler is enabled, but CUDA is not available.  Disabling.\n";
    enabled_ = false;
  }
  if (!enabled_) return;
  check_factors(growth_factor, backoff_factor);
  check_init_scale(init_scale);
  check_growth_interval(growth_interval);
  init_scale_ = init_scale;
  growth_factor_ = growth_factor;
  backoff_factor_ = backoff_factor;
  growth_interval_ = growth_interval;
}

void GradScaler::check_scale_growth_tracker(const char* funcname) const {
  const char* fix =
      "This may indicate your script did not use scaler.scale(loss or outputs) earlier in the iteration.";
  MINIDL_CHECK(scale_.defined(), "Attempted ", funcname, " but _scale is None.  ", fix);
  MINIDL_CHECK(growth_tracker_.defined(), "Attempted ", funcname, " but _growth_tracker is None.  ", fix);
}

void GradScaler::lazy_init_scale_growth_tracker(Device device) {
  MINIDL_ASSERT(!growth_tracker_.defined(), "_growth_tracker initialized before _scale");
  scale_ = full({}, init_scale_, TensorOptions(kFloat32).device(device));
  growth_tracker_ = full({}, static_cast<double>(init_growth_tracker_), TensorOptions(kInt64).device(device));
}

Tensor GradScaler::scale(const Tensor& outputs) {
  if (!enabled_) return outputs;
  MINIDL_CHECK(outputs.defined(), "GradScaler.scale: got an undefined tensor");
  const DType dtype = outputs.dtype();
  MINIDL_CHECK(is_floating(dtype), "GradScaler.scale: expected floating-point outputs, got ", dtype_name(dtype));
  if (!scale_.defined()) lazy_init_scale_growth_tracker(outputs.device());
  const Tensor s = scale_.device() == outputs.device() ? scale_ : scale_.to(outputs.device());
  // PyTorch's type promotion of outputs * (0-d float32 scale).
  if (dtype == kFloat32) return mul(outputs, s);
  if (dtype == kFloat64) return mul(outputs, s.to(kFloat64));
  if (outputs.dim() == 0) return mul(outputs.to(kFloat32), s);  // both 0-d: float32 wins
  // A 16-bit tensor with dimensions keeps its dtype; the product is taken in
  // float32 and rounded once. On the CPU the 0-d scale is a CPU scalar to
  // PyTorch, used at full precision; on a device its kernel loads the scale
  // as the 16-bit type first (65536 is inf in float16).
  if (outputs.device().is_cpu()) return mul(outputs.to(kFloat32), s).to(dtype);
  return mul(outputs.to(kFloat32), s.to(dtype).to(kFloat32)).to(dtype);
}

std::vector<Tensor> GradScaler::scale(const std::vector<Tensor>& outputs) {
  std::vector<Tensor> scaled;
  scaled.reserve(outputs.size());
  for (const Tensor& t : outputs) scaled.push_back(scale(t));
  return scaled;
}

std::vector<std::pair<Device, Tensor>> GradScaler::unscale_grads(optim::Optimizer& optimizer, const Tensor& inv_scale,
                                                                 bool allow_fp16) {
  // Split the gradients by device, then dtype, in first-seen order.
  struct DeviceGrads {
    Device device;
    std::map<DType, std::vector<Tensor>> by_dtype;
  };
  std::vector<DeviceGrads> groups;
  NoGradGuard no_grad;
  for (const optim::ParamGroup& group : optimizer.param_groups()) {
    for (const Tensor& param : group.params) {
      const Tensor grad = param.grad();
      if (!grad.defined()) continue;
      MINIDL_CHECK(allow_fp16 || grad.dtype() != kFloat16, "Attempting to unscale FP16 gradients.");
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const DeviceGrads& d) { return d.device == grad.device(); });
      if (it == groups.end()) it = groups.insert(groups.end(), DeviceGrads{grad.device(), {}});
      it->by_dtype[grad.dtype()].push_back(grad);
    }
  }
  // One zeroed found_inf and one copy of inv_scale per device (PyTorch's
  // _MultiDeviceReplicator), then one kernel call per (device, dtype).
  std::vector<std::pair<Device, Tensor>> found_infs;
  for (const DeviceGrads& d : groups) {
    const Tensor found_inf = zeros({}, TensorOptions(kFloat32).device(d.device));
    const Tensor inv = inv_scale.device() == d.device ? inv_scale : inv_scale.to(d.device);
    for (const auto& [dtype, grads] : d.by_dtype) amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv);
    found_infs.emplace_back(d.device, found_inf);
  }
  return found_infs;
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!enabled_) return;
  check_scale_growth_tracker("unscale_");
  OptimizerState& state = per_optimizer_states_[&optimizer];
  MINIDL_CHECK(state.stage != Stage::Unscaled,
               "unscale_() has already been called on this optimizer since the last update().");
  MINIDL_CHECK(state.stage != Stage::Stepped, "unscale_() is being called after step().");
  // The reciprocal in float64 (float32 division can be imprecise), rounded to float32.
  NoGradGuard no_grad;
  const Tensor inv_scale = rdiv(scale_.to(kFloat64), 1.0).to(kFloat32);
  state.found_inf_per_device = unscale_grads(optimizer, inv_scale, /*allow_fp16=*/false);
  state.stage = Stage::Unscaled;
}

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (!enabled_) {
    optimizer.step();
    return true;
  }
  check_scale_growth_tracker("step");
  OptimizerState& state = per_optimizer_states_[&optimizer];
  MINIDL_CHECK(state.stage != Stage::Stepped, "step() has already been called since the last update().");
  if (state.stage == Stage::Ready) unscale_(optimizer);
  MINIDL_CHECK(!state.found_inf_per_device.empty(), "No inf checks were recorded for this optimizer.");

  // The sum of the flags on the first one's device, read once.
  NoGradGuard no_grad;
  const Device device = state.found_inf_per_device.front().first;
  Tensor total = state.found_inf_per_device.front().second;
  for (size_t i = 1; i < state.found_inf_per_device.size(); ++i)
    total = add(total, state.found_inf_per_device[i].second.to(device));
  const bool ok = total.item<float>() == 0.0f;
  if (ok) optimizer.step();
  state.stage = Stage::Stepped;
  return ok;
}

void GradScaler::update() {
  if (!enabled_) return;
  check_scale_growth_tracker("update");
  NoGradGuard no_grad;
  Tensor combined;
  for (const auto& [opt, state] : per_optimizer_states_) {
    for (const auto& [device, found_inf] : state.found_inf_per_device) {
      const Tensor f = found_inf.device() == scale_.device() ? found_inf : found_inf.to(scale_.device());
      combined = combined.defined() ? add(combined, f) : f.clone();
    }
  }
  MINIDL_CHECK(combined.defined(), "No inf checks were recorded prior to update.");
  amp_update_scale_(scale_, growth_tracker_, combined, growth_factor_, backoff_factor_, growth_interval_);
  per_optimizer_states_.clear();
}

void GradScaler::update(double new_scale) {
  if (!enabled_) return;
  check_scale_growth_tracker("update");
  NoGradGuard no_grad;
  scale_.fill_(new_scale);
  per_optimizer_states_.clear();
}

void GradScaler::update(const Tensor& new_scale) {
  if (!enabled_) return;
  check_scale_growth_tracker("update");
  const char* reason =
      "new_scale should be a float or a 1-element torch.cuda.FloatTensor or torch.FloatTensor with "
      "requires_grad=False.";
  MINIDL_CHECK(new_scale.defined(), reason);
  MINIDL_CHECK(new_scale.device().type == Device(device_).type, reason);
  MINIDL_CHECK(new_scale.numel() == 1, reason);
  MINIDL_CHECK(!new_scale.requires_grad(), reason);
  NoGradGuard no_grad;
  scale_.copy_(new_scale.reshape({}));
  per_optimizer_states_.clear();
}

double GradScaler::get_scale() const {
  if (!enabled_) return 1.0;
  return scale_.defined() ? scale_.item<double>() : init_scale_;
}

int64_t GradScaler::get_growth_tracker() const {
  if (!enabled_) return 0;
  return growth_tracker_.defined() ? growth_tracker_.item<int64_t>() : init_growth_tracker_;
}

void GradScaler::set_growth_factor(double new_factor) {
  check_factors(new_factor, backoff_factor_);
  growth_factor_ = new_factor;
}

void GradScaler::set_backoff_factor(double new_factor) {
  check_factors(growth_factor_, new_factor);
  backoff_factor_ = new_factor;
}

void GradScaler::set_growth_interval(int64_t new_interval) {
  check_growth_interval(new_interval);
  growth_interval_ = new_interval;
}

std::vector<Tensor> GradScaler::found_inf_per_device(const optim::Optimizer& optimizer) const {
  std::vector<Tensor> out;
  const auto it = per_optimizer_states_.find(&optimizer);
  if (it == per_optimizer_states_.end()) return out;
  for (const auto& [device, found_inf] : it->second.found_inf_per_device) out.push_back(found_inf);
  return out;
}

nlohmann::json GradScaler::state_dict() const {
  if (!enabled_) return nlohmann::json::object();
  return {{"scale", get_scale()},
          {"growth_factor", growth_factor_},
          {"backoff_factor", backoff_factor_},
          {"growth_interval", growth_interval_},
          {"_growth_tracker", get_growth_tracker()}};
}

void GradScaler::load_state_dict(const nlohmann::json& state) {
  if (!enabled_) return;
  MINIDL_CHECK(state.is_object(), "GradScaler.load_state_dict: expected a JSON object, got ", state.type_name());
  MINIDL_CHECK(!state.empty(),
               "The source state dict is empty, possibly because it was saved from a disabled instance of "
               "GradScaler.");
  auto number = [&](const char* key, bool integer) -> const nlohmann::json& {
    MINIDL_CHECK(state.contains(key), "GradScaler.load_state_dict: missing key \"", key, "\"");
    const nlohmann::json& v = state.at(key);
    MINIDL_CHECK(integer ? v.is_number_integer() : v.is_number(), "GradScaler.load_state_dict: expected \"", key,
                 "\" to be ", integer ? "an integer" : "a number", ", got ", v.dump());
    return v;
  };
  const double scale = number("scale", false).get<double>();
  const double growth_factor = number("growth_factor", false).get<double>();
  const double backoff_factor = number("backoff_factor", false).get<double>();
  const int64_t growth_interval =
      json_int64(number("growth_interval", true), "GradScaler.load_state_dict: growth_interval");
  const int64_t growth_tracker =
      json_int64(number("_growth_tracker", true), "GradScaler.load_state_dict: _growth_tracker");
  check_factors(growth_factor, backoff_factor);
  // 0 is a state update() reaches (about 150 backoffs of a float32 scale
  // underflow it), so a checkpoint may hold it; init_scale may not be 0.
  MINIDL_CHECK(std::isfinite(scale) && scale >= 0.0,
               "GradScaler.load_state_dict: expected a finite \"scale\" >= 0, got ", scale);
  check_growth_interval(growth_interval);
  MINIDL_CHECK(growth_tracker >= 0, "GradScaler.load_state_dict: expected \"_growth_tracker\" >= 0, got ",
               growth_tracker);

  NoGradGuard no_grad;
  init_scale_ = scale;
  if (scale_.defined()) scale_.fill_(scale);
  growth_factor_ = growth_factor;
  backoff_factor_ = backoff_factor;
  growth_interval_ = growth_interval;
  init_growth_tracker_ = growth_tracker;
  if (growth_tracker_.defined()) growth_tracker_.fill_(static_cast<double>(growth_tracker));
}

}  // namespace minidl::amp
