// Automatic mixed precision: autocast (PyTorch's torch.autocast, from
// aten/src/ATen/autocast_mode.{h,cpp}).
//
//   {
//     minidl::amp::autocast guard(DeviceType::CPU, kBFloat16);  // enabled = true
//     Tensor y = model.forward(x);   // conv/linear/matmul run in bfloat16
//     Tensor loss = cross_entropy(y, labels);   // losses run in float32
//   }
//   loss.backward();  // each op's backward runs in its forward dtype
//
// State is thread-local and per device type: enabled + the lower-precision
// dtype (CPU default bfloat16, CUDA default float16). The guard sets both for
// its scope and restores them; guards nest. Ops consult the state in the first
// statement of their public entry point (amp::cast_args below), so the casts
// are recorded by autograd (Tensor::to, a ToCopy node): backward converts the
// gradient back, and float32 parameters get float32 gradients.
//
// Each op has one of PyTorch's cast policies per device type (the table is in
// core/autocast_policy.cpp, written like PyTorch's lists):
//   lower_precision_fp  cast floating inputs to the autocast dtype (conv, matmul)
//   fp32                cast floating inputs to float32 (losses; on CUDA also softmax, ...)
//   promote             cast floating inputs to the widest among them (cat, binary ops)
//   fallthrough         unlisted: run in whatever dtype the inputs have
// float64 inputs are never cast (PyTorch's is_eligible), nor non-floating ones.
//
// The cast cache (PyTorch's cached_cast): a float32 leaf that requires grad and
// is not a view (a parameter) is cast to the lower dtype once per outermost
// autocast region and reused by every op in it; the cache is cleared when the
// outermost region exits. The backward pass runs with autocast off.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "minidl/core/device.h"
#include "minidl/core/dtype.h"
#include "minidl/core/tensor.h"

namespace minidl::amp {

// The ops that consult autocast. The policy of each, per device type, is in
// core/autocast_policy.cpp; amp_op_name gives PyTorch's name.
#define MINIDL_AMP_OPS(X)                                                                         \
  X(conv2d) X(conv3d) X(conv_transpose2d) X(conv_transpose3d) X(matmul) X(bmm) X(linear)            \
  X(softmax) X(log_softmax) X(layer_norm) X(group_norm) X(sum) X(exp) X(log) X(pow)                  \
  X(max_pool3d) X(avg_pool3d) X(adaptive_max_pool3d) X(adaptive_avg_pool3d)                           \
  X(cross_entropy) X(nll_loss) X(mse_loss) X(binary_cross_entropy)                                   \
  X(binary_cross_entropy_with_logits) X(add) X(sub) X(mul) X(div) X(cat) X(stack)                   \
  X(reflection_pad1d) X(reflection_pad2d) X(replication_pad1d) X(replication_pad2d) X(replication_pad3d)

enum class AmpOp : uint8_t {
#define MINIDL_AMP_ENUM_(name) name,
  MINIDL_AMP_OPS(MINIDL_AMP_ENUM_)
#undef MINIDL_AMP_ENUM_
};
inline constexpr int kNumAmpOps = 0
#define MINIDL_AMP_COUNT_(name) +1
    MINIDL_AMP_OPS(MINIDL_AMP_COUNT_)
#undef MINIDL_AMP_COUNT_
    ;

const char* amp_op_name(AmpOp op);

enum class CastPolicy : uint8_t { kFallthrough, kLowerPrecisionFp, kFp32, kPromote, kBanned };
const char* cast_policy_name(CastPolicy policy);  // "lower_precision_fp", "fp32", ...

// The policy of `op` on `type` (core/autocast_policy.cpp). The test device
// (CPU kernels on separate memory) uses the CPU lists.
CastPolicy cast_policy(DeviceType type, AmpOp op);

// ---- state (thread-local) ------------------------------------------------------
bool is_autocast_enabled(DeviceType type);
void set_autocast_enabled(DeviceType type, bool enabled);
DType get_autocast_dtype(DeviceType type);  // CPU, test: bfloat16; CUDA: float16
// Refuses a dtype autocast cannot use on `type` (PyTorch: bfloat16 and float16 on
// the CPU and CUDA), with PyTorch's message.
void set_autocast_dtype(DeviceType type, DType dtype);
bool is_autocast_cache_enabled();
void set_autocast_cache_enabled(bool enabled);
int increment_nesting();  // returns the new depth
int decrement_nesting();
void clear_cache();
// Number of entries in this thread's cast cache (for tests).
size_t cache_size();

// A scoped, nestable autocast region (torch.autocast(device_type, dtype, enabled,
// cache_enabled)). dtype defaults to the device type's current autocast dtype.
class autocast {
 public:
  explicit autocast(DeviceType type, bool enabled = true);
  autocast(DeviceType type, DType dtype, bool enabled = true, bool cache_enabled = true);
  explicit autocast(Device device, bool enabled = true) : autocast(device.type, enabled) {}
  autocast(Device device, DType dtype, bool enabled = true, bool cache_enabled = true)
      : autocast(device.type, dtype, enabled, cache_enabled) {}
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

 private:
  DeviceType type_;
  bool prev_enabled_;
  DType prev_dtype_;
  bool prev_cache_enabled_;
};

// Turns autocast off on this thread for a scope (the autograd engine holds one
// while it runs backward formulas), without touching the per-device settings.
class AutocastExcludeGuard {
 public:
  AutocastExcludeGuard();
  ~AutocastExcludeGuard();
  AutocastExcludeGuard(const AutocastExcludeGuard&) = delete;
  AutocastExcludeGuard& operator=(const AutocastExcludeGuard&) = delete;

 private:
  bool prev_;
};

// ---- the hook ------------------------------------------------------------------

// True when some device type has autocast on and it is not excluded: the one
// branch ops pay when autocast is off.
bool any_autocast_active();

// PyTorch's cached_cast: `t` cast to `dtype` if it is eligible (defined,
// floating, not float64, on a device of `type`), through the cache for
// parameters (float32 leaves that require grad and are not views) when casting
// to the lower-precision dtype.
Tensor cached_cast(DType dtype, const Tensor& t, DeviceType type);

// The inputs of `op` cast by its policy, for the device type of the first
// defined input; unchanged when autocast is off there. Call it first:
//   Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, ...) {
//     const auto [x, weight, bias] = amp::cast_args(amp::AmpOp::conv2d, x_in, w_in, b_in);
void cast_args_inplace(AmpOp op, Tensor* const* args, size_t n);
template <class... T>
std::array<Tensor, sizeof...(T)> cast_args(AmpOp op, const T&... args) {
  std::array<Tensor, sizeof...(T)> out{args...};
  if (any_autocast_active()) {
    std::array<Tensor*, sizeof...(T)> ptrs;
    for (size_t i = 0; i < out.size(); ++i) ptrs[i] = &out[i];
    cast_args_inplace(op, ptrs.data(), ptrs.size());
  }
  return out;
}
// The same for a list of tensors (cat, stack).
std::vector<Tensor> cast_list(AmpOp op, const std::vector<Tensor>& tensors);

}  // namespace minidl::amp
