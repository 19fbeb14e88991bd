// --amp for the example programs: the one place a training step asks how to
// run its forward, backward and optimizer step in mixed precision.
//
//   examples::MixedPrecision amp(args.amp, device);   // "off", "bf16" or "fp16"
//   Tensor logits;
//   {
//     auto region = amp.autocast();                  // amp::autocast, or a disabled one
//     logits = model(x);                             // conv/linear in bf16 or fp16
//   }
//   Tensor loss = criterion(logits.to(kFloat32), y); // the loss in float32
//   amp.backward(loss);                              // loss.backward(), or scaled (fp16)
//   amp.step(optimizer);                             // optimizer.step(), or the scaler's step + update
//
// bf16 (CPU or CUDA): autocast to bfloat16, no loss scaling (bfloat16 has
// float32's exponent range, so gradients do not underflow; PyTorch's CPU
// recipe has no scaler either). fp16: autocast to float16 with a GradScaler
// (PyTorch's defaults), CUDA only: float16 training without a GPU gains
// nothing, so it is refused with a message saying so. Apex's O1 is this
// (autocast + dynamic loss scaling).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "minidl/core/autocast.h"
#include "minidl/core/tensor.h"
#include "minidl/optim/grad_scaler.h"
#include "minidl/optim/optimizer.h"

namespace minidl::examples {

const std::vector<std::string>& amp_modes();  // "off", "bf16", "fp16"

class MixedPrecision {
 public:
  // Throws for an unknown mode, and for fp16 off CUDA. `training` false (a
  // program that only runs forward passes): no GradScaler, and the fp16
  // refusal says so.
  MixedPrecision(const std::string& mode, Device device, bool training = true);
  const std::string& mode() const { return mode_; }
  bool enabled() const { return mode_ != "off"; }
  // The dtype conv/matmul outputs have in the region (float32 when off).
  DType activation_dtype() const { return enabled() ? dtype_ : kFloat32; }

  // The autocast region of a forward pass (a disabled one for "off").
  amp::autocast autocast() const { return amp::autocast(device_.type, dtype_, enabled()); }

  void backward(const Tensor& loss);
  // Returns false when the GradScaler skipped the step (inf/NaN gradients).
  bool step(optim::Optimizer& optimizer);

  // The GradScaler's loss scale and how many steps it skipped (fp16 only: the
  // scale is 1 and nothing is skipped otherwise); for logs.
  bool has_scaler() const { return scaler_ != nullptr; }
  double loss_scale() const;
  int64_t skipped_steps() const { return skipped_; }

  // The GradScaler's state for checkpoints; null when there is none (off, bf16).
  nlohmann::json state_dict() const;
  void load_state_dict(const nlohmann::json& state);

 private:
  std::string mode_;
  Device device_;
  DType dtype_ = kFloat32;
  std::unique_ptr<amp::GradScaler> scaler_;
  int64_t skipped_ = 0;
};

}  // namespace minidl::examples
