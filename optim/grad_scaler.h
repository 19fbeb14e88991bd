// amp::GradScaler: dynamic loss scaling for mixed-precision training, with
// torch.amp.GradScaler's algorithm, defaults, state_dict keys and messages.
//
//   amp::GradScaler scaler("cuda");
//   for (...) {
//     optimizer.zero_grad();
//     Tensor loss = loss_fn(model->forward(x), y);   // under amp::autocast
//     scaler.scale(loss).backward();                  // gradients scaled by S
//     scaler.unscale_(optimizer);                     // optional: to clip real gradients
//     optim::clip_grad_norm_(model->parameters(), 1.0);
//     scaler.step(optimizer);                         // skipped if a gradient is inf/NaN
//     scaler.update();                                // S *= 0.5 after a skip, *2 after
//   }                                                 // growth_interval clean steps
//
// Where things live and what reads the device:
//   - the scale (float32) and growth tracker (int64: minidl has no int32;
//     PyTorch's is int32) are 0-d tensors created by the first scale() on
//     that output's device; unscale_ checks and unscales each (device, dtype)
//     group of gradients with one kernel call (ops/amp.h) into a found_inf
//     flag per device; update() runs on the device too;
//   - step() reads the device once: the sum of the found_inf flags (PyTorch
//     reads each device's flag, one read per device). get_scale(),
//     state_dict() and get_growth_tracker() read it too, when asked.
// Gradient accumulation: scale every micro-batch's loss with the same scale
// and call unscale_/step/update once per effective batch. DDP needs nothing
// special: it all-reduces the scaled gradients (the scale is the same on
// every rank, and the found_inf of identical averaged gradients is too).
//
// Differences from PyTorch: step() returns whether optimizer.step() ran
// (PyTorch returns its return value or None); the growth tracker is int64;
// bad init_scale / growth_interval values and bad setter arguments are
// refused (PyTorch takes them); there are no closures, sparse gradients or
// optimizers with built-in scaling (_step_supports_amp_scaling), because
// minidl has none of them.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "minidl/core/tensor.h"
#include "minidl/optim/optimizer.h"

namespace minidl::amp {

class GradScaler {
 public:
  // device: the device type whose training this scaler serves ("cuda", "cpu",
  // "test"), as PyTorch's: for "cuda" without an available CUDA device the
  // scaler warns and disables itself. Refuses growth_factor <= 1 and
  // backoff_factor >= 1 (PyTorch's messages), and, where PyTorch does not
  // check, a non-finite or non-positive init_scale and growth_interval < 1,
  // all only when enabled (as PyTorch).
  explicit GradScaler(const std::string& device = "cuda", double init_scale = 65536.0, double growth_factor = 2.0,
                      double backoff_factor = 0.5, int64_t growth_interval = 2000, bool enabled = true);
  // Not copyable: a copy would share the scale tensor with its original
  // (Tensor is a handle) but not the per-optimizer stages. Movable.
  GradScaler(const GradScaler&) = delete;
  GradScaler& operator=(const GradScaler&) = delete;
  GradScaler(GradScaler&&) = default;
  GradScaler& operator=(GradScaler&&) = default;

  // outputs * scale (differentiable; the scale is copied to the output's
  // device). The result's dtype is PyTorch's: float64 stays float64; a
  // 16-bit output with dimensions stays 16-bit (the product rounded once; on
  // a device, CUDA or the test device, the scale is rounded to the 16-bit
  // type first, so 65536 is inf in float16 there, as in PyTorch's CUDA
  // kernels; on the CPU it is not, as PyTorch's CPU scalar); a 0-d 16-bit
  // output becomes float32. A disabled scaler returns outputs unchanged.
  Tensor scale(const Tensor& outputs);
  std::vector<Tensor> scale(const std::vector<Tensor>& outputs);

  // Multiplies the gradients of `optimizer`'s parameters by 1/scale in place
  // (the reciprocal taken in float64, rounded to float32) and records
  // whether any is inf/NaN; no host read. Once per optimizer between updates.
  void unscale_(optim::Optimizer& optimizer);
  // unscale_ (unless already called), then optimizer.step() unless some
  // gradient was inf/NaN (one host read). Returns whether it stepped. Once
  // per optimizer between updates.
  bool step(optim::Optimizer& optimizer);
  // Backs off or grows the scale from every optimizer's found_inf since the
  // last update (on the device), then forgets them.
  void update();
  // Sets the scale instead (the growth tracker is left as it is).
  void update(double new_scale);
  // new_scale: one float32 element on this scaler's device type, not
  // requiring grad; its value is copied.
  void update(const Tensor& new_scale);

  // The scale as a double (a host read), init_scale before the first
  // scale(), 1 when disabled.
  double get_scale() const;
  // The scale tensor (float32, 0-d) without a host read; undefined before
  // the first scale() or when disabled. PyTorch's _get_scale_async.
  Tensor get_scale_async() const { return scale_; }
  // Consecutive unskipped steps since the last growth or backoff (a host
  // read). PyTorch's _get_growth_tracker.
  int64_t get_growth_tracker() const;
  // The setters refuse what the constructor refuses (PyTorch's do not check).
  double get_growth_factor() const { return growth_factor_; }
  void set_growth_factor(double new_factor);
  double get_backoff_factor() const { return backoff_factor_; }
  void set_backoff_factor(double new_factor);
  int64_t get_growth_interval() const { return growth_interval_; }
  void set_growth_interval(int64_t new_interval);
  bool is_enabled() const { return enabled_; }

  // {"scale", "growth_factor", "backoff_factor", "growth_interval",
  // "_growth_tracker"} (PyTorch's keys and JSON types: float, float, float,
  // int, int); {} when disabled. Call it after update().
  nlohmann::json state_dict() const;
  // Takes the values of state_dict(); a no-op when disabled. Refuses an
  // empty dict (PyTorch's message), a missing key or a value of the wrong
  // type.
  void load_state_dict(const nlohmann::json& state);

  // The found_inf flags unscale_/step recorded for `optimizer` since the last
  // update, one per gradient device (float32, 0-d). PyTorch's
  // _found_inf_per_device.
  std::vector<Tensor> found_inf_per_device(const optim::Optimizer& optimizer) const;

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct OptimizerState {
    Stage stage = Stage::Ready;
    std::vector<std::pair<Device, Tensor>> found_inf_per_device;
  };

  void check_scale_growth_tracker(const char* funcname) const;
  void lazy_init_scale_growth_tracker(Device device);
  std::vector<std::pair<Device, Tensor>> unscale_grads(optim::Optimizer& optimizer, const Tensor& inv_scale,
                                                       bool allow_fp16);

  std::string device_;
  bool enabled_ = true;
  double init_scale_ = 65536.0;
  double growth_factor_ = 2.0;
  double backoff_factor_ = 0.5;
  int64_t growth_interval_ = 2000;
  int64_t init_growth_tracker_ = 0;
  Tensor scale_;           // float32 0-d, lazily created
  Tensor growth_tracker_;  // int64 0-d, lazily created
  std::unordered_map<const optim::Optimizer*, OptimizerState> per_optimizer_states_;
};

}  // namespace minidl::amp
