// amp::initialize: NVIDIA Apex's opt levels (apex/amp/frontend.py) as one
// helper over minidl's native pieces (amp::autocast, amp::GradScaler).
//
//   auto model = models::create_model("resnet20");
//   optim::SGD opt(model->parameters(), 0.1, 0.9);
//   amp::Amp amp = amp::initialize(model, opt, "O2");   // before the first step
//   for (data::Batch& b : loader) {
//     Tensor loss = cross_entropy(amp.forward(b.data), b.targets);  // float32 logits
//     amp.zero_grad();
//     amp.backward(loss);        // scaled when there is a GradScaler
//     amp.step();                // false when the scaler skipped the step (inf/NaN)
//   }
//
// The levels ("half" is bfloat16 on the CPU and the test device, float16 on
// CUDA; Apex's properties in brackets):
//   O0  float32 training; every call below is the plain one.
//   O1  the model stays float32; forward() runs under amp::autocast (conv,
//       linear, matmul in half), backward() scales by a GradScaler with
//       PyTorch's defaults (dynamic loss scaling) [patch_torch_functions,
//       loss_scale "dynamic"]. This is what PyTorch's native AMP replaced
//       Apex with: autocast + GradScaler.
//   O2  the model cast to half except BatchNorm layers, whose parameters and
//       buffers stay float32 [cast_model_type half, keep_batchnorm_fp32];
//       the optimizer updates float32 master copies of the half parameters
//       [master_weights]: step() copies the half gradients into the masters'
//       (float32) gradients, lets the GradScaler unscale, check and step, and
//       then refreshes each half parameter from its master (rounded);
//       dynamic loss scaling. forward() casts floating inputs to half and the
//       output to float32, as Apex's patched forward.
//   O3  the whole model in half, BatchNorm included, no master weights and no
//       scaler [keep_batchnorm_fp32 False, loss_scale 1]: Apex's speed ceiling,
//       not a recipe (small updates round away; see examples/amp_bn_demo).
// A bfloat16 model gets a GradScaler in O1/O2 too, as Apex's levels say, though
// bfloat16's float32 exponent range seldom needs one (the scale just grows).
//
// initialize() changes `model` in place (Module::to keeps every handle) and,
// for O2, swaps the optimizer's half parameters for their masters in its
// param_groups, so it refuses an optimizer that has stepped already (its
// state would belong to the half tensors), and an optimizer holding a
// parameter that is not the model's.
//
// On CUDA, as on the CPU, the SGD/Adam and running-statistics kernels take
// 16-bit tensors too: O0-O3 ran on an H100 in
// examples/amp_bn_demo --device cuda (ResNet-20 steps, 2026-11-27).
// Checkpoints: Amp::state_dict() / load_state_dict() carry the loss scaler,
// as Apex's amp.state_dict() / amp.load_state_dict() (save it next to the
// model's and the optimizer's). In O2 the float32 masters are not in it (nor
// in Apex's): the half model only approximates them.
// Not done: Apex's per-property overrides (loss_scale=128.0, cast_model_outputs,
// ...), several models/optimizers (num_losses > 1) in one call.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "minidl/core/autocast.h"
#include "minidl/core/tensor.h"
#include "minidl/nn/module.h"
#include "minidl/optim/grad_scaler.h"
#include "minidl/optim/optimizer.h"

namespace minidl::amp {

enum class OptLevel { O0, O1, O2, O3 };

// "O0".."O3" -> OptLevel; anything else throws Apex's message ("Unexpected
// optimization level O4. Options are 'O0', 'O1', 'O2', 'O3'. ...").
OptLevel parse_opt_level(const std::string& opt_level);
const char* opt_level_name(OptLevel level);

// What to train with. Movable, not copyable (it owns the GradScaler).
class Amp {
 public:
  OptLevel opt_level() const { return level_; }
  const std::shared_ptr<nn::Module>& model() const { return model_; }
  optim::Optimizer& optimizer() const { return *optimizer_; }
  DType half_dtype() const { return half_; }  // bfloat16 (CPU, test) or float16 (CUDA)
  bool use_autocast() const { return level_ == OptLevel::O1; }
  // The GradScaler (O1, O2), or nullptr (O0, O3).
  GradScaler* scaler() const { return scaler_.get(); }
  // O2: (half model parameter, its float32 master) pairs; empty otherwise.
  // BatchNorm parameters are float32 already and have no master: the
  // optimizer updates them directly.
  const std::vector<std::pair<Tensor, Tensor>>& master_params() const { return masters_; }

  // An autocast region for a custom forward: enabled only for O1.
  amp::autocast autocast() const;
  // model->forward(x) in the level's way: O1 under autocast; O2/O3 with a
  // floating x cast to half; the output cast to float32 (O1-O3).
  Tensor forward(const Tensor& x) const;
  // Resets the model's and the optimizer's gradients (the masters' too).
  void zero_grad() const;
  // loss.backward(), the loss scaled by the GradScaler when there is one.
  void backward(const Tensor& loss) const;
  // The optimizer step of the level (see the header comment); false when the
  // GradScaler skipped it. Calls the scaler's update().
  bool step();

  // Apex's amp.state_dict(): {"loss_scaler0": {"loss_scale": S, "unskipped": n}},
  // the GradScaler's scale and its count of steps since the scale last changed
  // (PyTorch's _growth_tracker, Apex's _unskipped). O0 and O3 have no scaler:
  // Apex's static scale, {"loss_scale": 1.0, "unskipped": 0}. Reads the device.
  nlohmann::json state_dict() const;
  // Apex's amp.load_state_dict(): sets the GradScaler's scale and growth
  // tracker (its factors and interval stay initialize()'s). As Apex: a count
  // of entries other than one prints a warning, entries past the first
  // loss_scaler are skipped with a message, keys without "loss_scaler" fail
  // ("Unexpected key(s) in state_dict"). A missing or mistyped value fails;
  // so does a loss_scale other than 1 for O0/O3, which have no scaler to take it.
  void load_state_dict(const nlohmann::json& state);

  Amp(Amp&&) = default;
  Amp& operator=(Amp&&) = default;

 private:
  friend Amp initialize(std::shared_ptr<nn::Module> model, optim::Optimizer& optimizer, const std::string& opt_level);
  Amp() = default;

  OptLevel level_ = OptLevel::O0;
  std::shared_ptr<nn::Module> model_;
  optim::Optimizer* optimizer_ = nullptr;
  DType half_ = kBFloat16;
  DeviceType device_type_ = DeviceType::CPU;
  std::unique_ptr<GradScaler> scaler_;
  std::vector<std::pair<Tensor, Tensor>> masters_;
};

// Apex's amp.initialize(model, optimizer, opt_level) for one model and one
// optimizer built over its parameters. The model's parameters must be float32
// and on one device; call it before the optimizer's first step.
Amp initialize(std::shared_ptr<nn::Module> model, optim::Optimizer& optimizer, const std::string& opt_level = "O1");

}  // namespace minidl::amp
