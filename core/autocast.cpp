// Autocast state, guard, cast cache and the entry-point hook (core/autocast.h).
#include "minidl/core/autocast.h"

#include <atomic>
#include <iostream>
#include <memory>
#include <unordered_map>

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/check.h"
#include "minidl/core/cuda.h"

namespace minidl::amp {

namespace {

struct CacheEntry {
  std::weak_ptr<TensorImpl> source;  // the parameter; a dead one means the address was reused
  Tensor cast;
};

struct State {
  bool enabled[kNumDeviceTypes] = {false, false, false};
  DType dtype[kNumDeviceTypes] = {kBFloat16, kFloat16, kBFloat16};  // CPU, CUDA, test
  bool cache_enabled = true;
  bool excluded = false;
  int nesting = 0;
  std::unordered_map<const TensorImpl*, CacheEntry> cache;
};

State& state() {
  thread_local State s;
  return s;
}

int slot(DeviceType type) { return static_cast<int>(type); }

const char* autocast_device_name(DeviceType type) {
  switch (type) {
    case DeviceType::CPU: return "CPU";
    case DeviceType::CUDA: return "CUDA";
    case DeviceType::Test: return "test";
  }
  return "?";
}

// PyTorch's is_eligible: a defined floating tensor on the autocast device type,
// not float64 (float64 is never cast, it is what gradient checks use).
bool is_eligible(const Tensor& t, DeviceType type) {
  return t.defined() && is_floating(t.dtype()) && t.dtype() != kFloat64 && t.device().type == type;
}


// The dtype PyTorch's type promotion gives two floating dtypes.
DType widest(DType a, DType b) {
  if (a == b) return a;
  if (a == kFloat64 || b == kFloat64) return kFloat64;
  return kFloat32;  // float32 with anything narrower, or float16 with bfloat16
}

}  // namespace

bool is_autocast_enabled(DeviceType type) { return state().enabled[slot(type)]; }
void set_autocast_enabled(DeviceType type, bool enabled) { state().enabled[slot(type)] = enabled; }
DType get_autocast_dtype(DeviceType type) { return state().dtype[slot(type)]; }

void set_autocast_dtype(DeviceType type, DType dtype) {
  // PyTorch warns and disables autocast for another dtype; minidl refuses, as
  // silently running in float32 hides the mistake.
  MINIDL_CHECK(dtype == kBFloat16 || dtype == kFloat16, "In ", autocast_device_name(type),
               " autocast, but the target dtype is not supported: ", autocast_device_name(type),
               " Autocast only supports dtypes of bfloat16, float16 currently, got ", dtype_name(dtype));
  state().dtype[slot(type)] = dtype;
}

bool is_autocast_cache_enabled() { return state().cache_enabled; }
void set_autocast_cache_enabled(bool enabled) { state().cache_enabled = enabled; }
int increment_nesting() { return ++state().nesting; }
int decrement_nesting() { return --state().nesting; }
void clear_cache() { state().cache.clear(); }
size_t cache_size() { return state().cache.size(); }

autocast::autocast(DeviceType type, bool enabled) : autocast(type, get_autocast_dtype(type), enabled) {}

autocast::autocast(DeviceType type, DType dtype, bool enabled, bool cache_enabled)
    : type_(type),
      prev_enabled_(is_autocast_enabled(type)),
      prev_dtype_(get_autocast_dtype(type)),
      prev_cache_enabled_(is_autocast_cache_enabled()) {
  if (enabled) set_autocast_dtype(type, dtype);  // checks the dtype; a disabled guard takes any
  if (enabled && type == DeviceType::CUDA && !cuda::is_available()) {
    // As torch.autocast("cuda") without CUDA (and GradScaler here): warned (once
    // a process, as Python's warning filter shows it once a call site) and off.
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      std::cerr << "UserWarning: autocast(CUDA): CUDA is not available (" << cuda::unavailable_reason()
                << "). Disabling autocast.\n";
    enabled = false;
  }
  set_autocast_enabled(type, enabled);
  increment_nesting();
  set_autocast_cache_enabled(cache_enabled);
}

autocast::~autocast() {
  // torch.autocast.__exit__: the outermost region's exit empties the cache.
  if (decrement_nesting() == 0) clear_cache();
  State& s = state();
  s.enabled[slot(type_)] = prev_enabled_;
  s.dtype[slot(type_)] = prev_dtype_;
  s.cache_enabled = prev_cache_enabled_;
}

AutocastExcludeGuard::AutocastExcludeGuard() : prev_(state().excluded) { state().excluded = true; }
AutocastExcludeGuard::~AutocastExcludeGuard() { state().excluded = prev_; }

bool any_autocast_active() {
  const State& s = state();
  return !s.excluded && (s.enabled[0] || s.enabled[1] || s.enabled[2]);
}

Tensor cached_cast(DType dtype, const Tensor& t, DeviceType type) {
  if (!is_eligible(t, type) || t.dtype() == dtype) return t;
  State& s = state();
  // PyTorch's rule: not a view (a channels-last weight is cached too; it was
  // re-cast on every use, a copy each kept for backward).
  const bool can_try_cache = dtype == s.dtype[slot(type)] && t.dtype() == kFloat32 && t.requires_grad() &&
                             t.is_leaf() && !t.is_view() && s.cache_enabled;
  if (!can_try_cache) return t.to(dtype);
  auto it = s.cache.find(t.impl());
  if (it != s.cache.end() && it->second.source.lock() == t.impl_ptr()) return it->second.cast;
  // Recorded even under no_grad, as PyTorch's cache behaves: a region that
  // first uses a weight under no_grad (an eval or teacher pass) and then with
  // grad reuses this copy, which must lead back to the weight (it did not:
  // the weight silently got no gradient).
  autograd::AutoGradMode grad_on(true);
  Tensor cast = t.to(dtype);
  s.cache[t.impl()] = CacheEntry{t.impl_ptr(), cast};
  return cast;
}

void cast_args_inplace(AmpOp op, Tensor* const* args, size_t n) {
  if (!any_autocast_active()) return;
  const Tensor* first = nullptr;
  for (size_t i = 0; i < n && first == nullptr; ++i)
    if (args[i]->defined()) first = args[i];
  if (first == nullptr) return;
  const DeviceType type = first->device().type;
  if (!is_autocast_enabled(type)) return;
  switch (cast_policy(type, op)) {
    case CastPolicy::kFallthrough: return;
    case CastPolicy::kBanned:
      MINIDL_FAIL(amp_op_name(op), " is unsafe to autocast. Many models use a sigmoid layer right before the "
                  "binary cross entropy layer. In this case, combine the two layers using "
                  "binary_cross_entropy_with_logits or BCEWithLogitsLoss. binary_cross_entropy_with_logits and "
                  "BCEWithLogits are safe to autocast.");
    case CastPolicy::kLowerPrecisionFp: {
      const DType dtype = get_autocast_dtype(type);
      for (size_t i = 0; i < n; ++i) *args[i] = cached_cast(dtype, *args[i], type);
      return;
    }
    case CastPolicy::kFp32:
      for (size_t i = 0; i < n; ++i) *args[i] = cached_cast(kFloat32, *args[i], type);
      return;
    case CastPolicy::kPromote: {
      // PyTorch's type promotion among the floating inputs on this device
      // (float64 included): the widest dtype of those with dimensions, and of
      // the 0-d ones only when none has dimensions (a bfloat16 activation
      // times a 0-d float32 temperature stays bfloat16; it became float32).
      auto floating = [&](const Tensor& t) {
        return t.defined() && is_floating(t.dtype()) && t.device().type == type;
      };
      bool any_dims = false;
      for (size_t i = 0; i < n; ++i) any_dims = any_dims || (floating(*args[i]) && args[i]->dim() > 0);
      bool found = false;
      DType target = kFloat32;
      for (size_t i = 0; i < n; ++i) {
        const Tensor& t = *args[i];
        if (!floating(t) || (any_dims && t.dim() == 0)) continue;
        target = found ? widest(target, t.dtype()) : t.dtype();
        found = true;
      }
      if (!found) return;
      for (size_t i = 0; i < n; ++i) {
        Tensor& t = *args[i];
        if (t.defined() && is_floating(t.dtype()) && t.device().type == type && t.dtype() != target)
          t = t.to(target);
      }
      return;
    }
  }
}

std::vector<Tensor> cast_list(AmpOp op, const std::vector<Tensor>& tensors) {
  std::vector<Tensor> out = tensors;
  if (!any_autocast_active() || out.empty()) return out;
  std::vector<Tensor*> ptrs;
  ptrs.reserve(out.size());
  for (Tensor& t : out) ptrs.push_back(&t);
  cast_args_inplace(op, ptrs.data(), ptrs.size());
  return out;
}

}  // namespace minidl::amp
