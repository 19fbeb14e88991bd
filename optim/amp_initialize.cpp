// amp::initialize: Apex's opt levels O0-O3 (see the header for the mapping).
// The O2 step: half gradients -> float32 masters' gradients, the GradScaler's
// unscale/check/step on the masters, masters -> half parameters (rounded).
#include "minidl/optim/amp_initialize.h"

#include <cstdio>
#include <unordered_map>

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/check.h"
#include "minidl/nn/modules/batch_norm.h"

namespace minidl::amp {

OptLevel parse_opt_level(const std::string& opt_level) {
  if (opt_level == "O0") return OptLevel::O0;
  if (opt_level == "O1") return OptLevel::O1;
  if (opt_level == "O2") return OptLevel::O2;
  if (opt_level == "O3") return OptLevel::O3;
  // Apex's frontend.py message, word for word.
  MINIDL_FAIL("Unexpected optimization level ", opt_level,
              ". Options are 'O0', 'O1', 'O2', 'O3'.  Note that in `O0`, `O1`, etc., the prefix O is the letter O, "
              "not the number zero.");
}

const char* opt_level_name(OptLevel level) {
  switch (level) {
    case OptLevel::O0: return "O0";
    case OptLevel::O1: return "O1";
    case OptLevel::O2: return "O2";
    case OptLevel::O3: return "O3";
  }
  return "?";
}

namespace {

// GradScaler's device string for a device type.
const char* scaler_device(DeviceType type) {
  switch (type) {
    case DeviceType::CUDA: return "cuda";
    case DeviceType::Test: return "test";
    default: return "cpu";
  }
}

// Casts the model to `half` except its BatchNorm layers (Apex's
// keep_batchnorm_fp32): their parameters and buffers are saved, the whole
// model converted, the BN layers converted back and their exact float32
// values put back (a float32 -> half -> float32 round trip would lose them).
void cast_model_keep_batchnorm_fp32(nn::Module& model, DType half) {
  std::vector<std::pair<Tensor, Tensor>> saved;  // (BN tensor, float32 copy)
  std::vector<std::shared_ptr<nn::Module>> bns;
  for (const auto& m : model.modules()) {
    if (dynamic_cast<nn::BatchNormImplBase*>(m.get()) == nullptr) continue;
    bns.push_back(m);
    for (const auto& [name, t] : m->named_parameters(false)) saved.emplace_back(t, t.detach().clone());
    for (const auto& [name, t] : m->named_buffers(false))
      if (is_floating(t.dtype())) saved.emplace_back(t, t.detach().clone());
  }
  model.to(half);
  for (const auto& bn : bns) bn->to(kFloat32);
  NoGradGuard no_grad;
  for (auto& [t, copy] : saved) t.copy_(copy);
}

}  // namespace

Amp initialize(std::shared_ptr<nn::Module> model, optim::Optimizer& optimizer, const std::string& opt_level) {
  const OptLevel level = parse_opt_level(opt_level);
  MINIDL_CHECK(model != nullptr, "amp.initialize: model is None");
  const nn::NamedTensors params = model->named_parameters();
  MINIDL_CHECK(!params.empty(), "amp.initialize: the model has no parameters");
  const Device device = params.front().second.device();
  std::unordered_map<const TensorImpl*, std::string> model_params;
  for (const auto& [name, p] : params) {
    MINIDL_CHECK(p.dtype() == kFloat32, "amp.initialize: expected the model's parameters in float32 (initialize ",
                 "a float32 model), got ", dtype_name(p.dtype()), " for '", name, "'");
    MINIDL_CHECK(p.device() == device, "amp.initialize: expected all of the model's parameters on one device, got ",
                 device.str(), " and ", p.device().str(), " ('", name, "')");
    model_params.emplace(p.impl(), name);
  }
  for (const optim::ParamGroup& g : optimizer.param_groups())
    for (const Tensor& p : g.params) {
      MINIDL_CHECK(model_params.count(p.impl()) != 0,
                   "amp.initialize: the optimizer holds a parameter that is not the model's; build the optimizer ",
                   "over model->parameters()");
      MINIDL_CHECK(!optimizer.has_state(p), "amp.initialize: the optimizer has stepped already; call ",
                   "amp.initialize before the first optimizer step");
    }

  Amp amp;
  amp.level_ = level;
  amp.model_ = model;
  amp.optimizer_ = &optimizer;
  amp.device_type_ = device.type;
  amp.half_ = device.is_cuda() ? kFloat16 : kBFloat16;
  if (level == OptLevel::O1 || level == OptLevel::O2)
    amp.scaler_ = std::make_unique<GradScaler>(scaler_device(device.type));

  if (level == OptLevel::O3) {
    model->to(amp.half_);
  } else if (level == OptLevel::O2) {
    // The float32 values before the cast become the masters of the parameters
    // that the cast turns into half (BN's stay float32 and need none).
    std::unordered_map<const TensorImpl*, Tensor> master_of;
    std::vector<std::pair<Tensor, Tensor>> before;
    for (const auto& [name, p] : params) before.emplace_back(p, p.detach().clone().requires_grad_(true));
    cast_model_keep_batchnorm_fp32(*model, amp.half_);
    for (auto& [p, master] : before) {
      if (p.dtype() == kFloat32) continue;  // a BatchNorm parameter
      master_of.emplace(p.impl(), master);
      amp.masters_.emplace_back(p, master);
    }
    for (optim::ParamGroup& g : optimizer.param_groups())
      for (Tensor& p : g.params)
        if (auto it = master_of.find(p.impl()); it != master_of.end()) p = it->second;
  }
  return amp;
}

amp::autocast Amp::autocast() const { return amp::autocast(device_type_, half_, use_autocast()); }

Tensor Amp::forward(const Tensor& x) const {
  switch (level_) {
    case OptLevel::O0: return model_->forward(x);
    case OptLevel::O1: {
      Tensor out;
      {
        amp::autocast region(device_type_, half_);
        out = model_->forward(x);
      }
      return out.to(kFloat32);
    }
    default:  // O2, O3: Apex's patched forward casts floating inputs to half, outputs to float32
      return model_->forward(is_floating(x.dtype()) ? x.to(half_) : x).to(kFloat32);
  }
}

void Amp::zero_grad() const {
  model_->zero_grad();
  optimizer_->zero_grad();  // O2: the masters' gradients
}

void Amp::backward(const Tensor& loss) const {
  if (scaler_ != nullptr)
    scaler_->scale(loss).backward();
  else
    loss.backward();
}

bool Amp::step() {
  if (scaler_ == nullptr) {
    optimizer_->step();
    return true;
  }
  if (level_ == OptLevel::O2)
    for (auto& [p, master] : masters_) {
      const Tensor g = p.grad();
      master.set_grad(g.defined() ? g.to(kFloat32) : Tensor());
    }
  const bool stepped = scaler_->step(*optimizer_);
  scaler_->update();
  if (stepped && level_ == OptLevel::O2) {
    NoGradGuard no_grad;
    for (auto& [p, master] : masters_) p.copy_(master);
  }
  return stepped;
}

nlohmann::json Amp::state_dict() const {
  nlohmann::json entry = {{"loss_scale", 1.0}, {"unskipped", 0}};
  if (scaler_) entry = {{"loss_scale", scaler_->get_scale()}, {"unskipped", scaler_->get_growth_tracker()}};
  return {{"loss_scaler0", entry}};
}

void Amp::load_state_dict(const nlohmann::json& state) {
  MINIDL_CHECK(state.is_object(), "amp.load_state_dict: expected a JSON object, got ", state.type_name());
  constexpr size_t kScalers = 1;  // num_losses: one model, one optimizer
  // Apex's messages (apex/amp/frontend.py), printed, not raised.
  if (state.size() != kScalers)
    std::fprintf(stderr, "Warning: state_dict contains %zu entries, while %zu loss_scalers are used\n", state.size(),
                 kScalers);
  std::string unexpected;
  size_t idx = 0;
  for (const auto& [key, entry] : state.items()) {
    if (key.find("loss_scaler") == std::string::npos) {
      unexpected += (unexpected.empty() ? "\"" : ", \"") + key + "\"";
      continue;
    }
    if (idx > kScalers - 1) {
      std::fprintf(stderr, "Skipping loss_scaler[%zu], since num_losses was set to %zu\n", idx, kScalers);
      break;
    }
    MINIDL_CHECK(entry.is_object() && entry.contains("loss_scale") && entry.contains("unskipped"),
                 "amp.load_state_dict: expected ", key, " to hold \"loss_scale\" and \"unskipped\", got ",
                 entry.dump());
    const nlohmann::json &scale = entry.at("loss_scale"), &unskipped = entry.at("unskipped");
    MINIDL_CHECK(scale.is_number() && unskipped.is_number_integer(), "amp.load_state_dict: expected ", key,
                 "'s \"loss_scale\" to be a number and \"unskipped\" an integer, got ", entry.dump());
    if (scaler_) {
      nlohmann::json scaler_state = scaler_->state_dict();
      scaler_state["scale"] = scale;
      scaler_state["_growth_tracker"] = unskipped;
      scaler_->load_state_dict(scaler_state);  // checks the values (scale > 0, tracker >= 0)
    } else {
      MINIDL_CHECK(scale.get<double>() == 1.0, "amp.load_state_dict: opt_level ", opt_level_name(level_),
                   " has no loss scaler (a static loss scale of 1.0), got loss_scale ", scale.dump());
    }
    ++idx;
  }
  MINIDL_CHECK(unexpected.empty(), "Error(s) in loading state_dict. Unexpected key(s) in state_dict: ", unexpected,
               ". ");
}

}  // namespace minidl::amp
