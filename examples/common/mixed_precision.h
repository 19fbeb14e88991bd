// --amp for the example programs: the one place a training step asks how to
// run its forward, backward and optimizer step in mixed precision.
//
//   examples::MixedPrecision amp(args.amp);    // "off", "bf16" or "fp16"
//   Tensor loss = criterion(model(x), y);      // (an autocast guard will open here)
//   amp.backward(loss);                        // loss.backward(), or scaled by a GradScaler
//   amp.step(optimizer);                       // optimizer.step(), or unscale + inf check + update
//
// minidl has no autocast and no GradScaler yet (their own issue), so only
// "off" runs; "bf16" and "fp16" throw a minidl::Error saying so rather than
// silently training in float32. When they land, this class gains an autocast
// guard (guard()), the GradScaler (fp16) and its state_dict(), and the
// programs need no other change.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "minidl/core/tensor.h"
#include "minidl/optim/optimizer.h"

namespace minidl::examples {

const std::vector<std::string>& amp_modes();  // "off", "bf16", "fp16"

class MixedPrecision {
 public:
  // Throws for an unknown mode, and for bf16/fp16 (not available yet).
  explicit MixedPrecision(const std::string& mode);
  const std::string& mode() const { return mode_; }
  bool enabled() const { return mode_ != "off"; }

  void backward(const Tensor& loss);
  void step(optim::Optimizer& optimizer);

  // The GradScaler's state for checkpoints; null when there is none (off, bf16).
  nlohmann::json state_dict() const { return nullptr; }
  void load_state_dict(const nlohmann::json& state);

 private:
  std::string mode_;
};

}  // namespace minidl::examples
