// What identifies one cuDNN convolution for the algorithm cache, and the
// cache itself: pure host code (no cuDNN headers), so
// tests/test_gpu_host_logic.cpp checks it on the CPU in every build.
//
// As PyTorch's cuDNN cache (aten/src/ATen/native/cudnn/ConvShared.h
// ConvolutionParams): a new entry for every distinct direction, device,
// dtype, input/weight sizes and strides (layouts), padding, stride, dilation, groups,
// and the deterministic / allow_tf32 / benchmark switches (a choice made
// under one setting is never reused under another).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "minidl/core/dtype.h"
#include "minidl/ops/conv2d.h"
#include "minidl/ops/conv3d.h"

namespace minidl::cudnn_conv {

// Strides of a contiguous tensor of these sizes (first nd entries; the rest 0).
inline std::array<int64_t, 5> contiguous_strides(const std::array<int64_t, 5>& sizes, int nd) {
  std::array<int64_t, 5> st{};
  int64_t s = 1;
  for (int d = nd; d-- > 0;) {
    st[static_cast<size_t>(d)] = s;
    s *= sizes[static_cast<size_t>(d)];
  }
  return st;
}

// Strides of these sizes laid out channels last (NHWC / NDHWC: C innermost,
// then the spatial dims from the last, the batch outermost), or contiguous.
inline std::array<int64_t, 5> layout_strides(const std::array<int64_t, 5>& sizes, int nd, bool channels_last) {
  if (!channels_last) return contiguous_strides(sizes, nd);
  std::array<int64_t, 5> st{};
  int64_t s = 1;
  st[1] = s;
  s *= sizes[1];
  for (int d = nd; d-- > 2;) {
    st[static_cast<size_t>(d)] = s;
    s *= sizes[static_cast<size_t>(d)];
  }
  st[0] = s;
  return st;
}

// A 2-D or 3-D convolution's sizes in one shape: spatial arrays hold
// (D, H, W) for 3-D and (H, W) in the first two slots for 2-D.
struct ConvShape {
  int spatial = 2;  // 2 or 3
  int64_t batch = 0, in_channels = 0, out_channels = 0, groups = 1;
  std::array<int64_t, 3> in{}, out{}, kernel{}, stride{1, 1, 1}, pad{}, dilation{1, 1, 1};
  bool channels_last = false;  // x, w, y (and their gradients) NHWC, else contiguous NCHW

  // (N, C, spatial...) of x and y, (K, C/groups, kernel...) of w: nd = spatial + 2 entries.
  std::array<int64_t, 5> x_sizes() const { return sizes(batch, in_channels, in); }
  std::array<int64_t, 5> y_sizes() const { return sizes(batch, out_channels, out); }
  std::array<int64_t, 5> w_sizes() const { return sizes(out_channels, in_channels / groups, kernel); }
  std::array<int64_t, 5> x_strides() const { return layout_strides(x_sizes(), nd(), channels_last); }
  std::array<int64_t, 5> y_strides() const { return layout_strides(y_sizes(), nd(), channels_last); }
  std::array<int64_t, 5> w_strides() const { return layout_strides(w_sizes(), nd(), channels_last); }
  int nd() const { return spatial + 2; }

 private:
  std::array<int64_t, 5> sizes(int64_t a, int64_t b, const std::array<int64_t, 3>& s) const {
    std::array<int64_t, 5> r{a, b, 0, 0, 0};
    for (int i = 0; i < spatial; ++i) r[static_cast<size_t>(2 + i)] = s[static_cast<size_t>(i)];
    return r;
  }
};

inline ConvShape conv_shape(const Conv2dGeometry& g) {
  ConvShape s;
  s.spatial = 2;
  s.batch = g.batch, s.in_channels = g.in_channels, s.out_channels = g.out_channels, s.groups = g.groups;
  s.in = {g.in_h, g.in_w, 0}, s.out = {g.out_h, g.out_w, 0}, s.kernel = {g.kernel_h, g.kernel_w, 0};
  s.stride = {g.stride_h, g.stride_w, 1}, s.pad = {g.pad_h, g.pad_w, 0};
  s.dilation = {g.dilation_h, g.dilation_w, 1};
  s.channels_last = g.channels_last;
  return s;
}

inline ConvShape conv_shape(const Conv3dGeometry& g) {
  const Conv2dGeometry& h = g.hw;
  ConvShape s;
  s.spatial = 3;
  s.batch = h.batch, s.in_channels = h.in_channels, s.out_channels = h.out_channels, s.groups = h.groups;
  s.in = {g.in_d, h.in_h, h.in_w}, s.out = {g.out_d, h.out_h, h.out_w};
  s.kernel = {g.kernel_d, h.kernel_h, h.kernel_w};
  s.stride = {g.stride_d, h.stride_h, h.stride_w}, s.pad = {g.pad_d, h.pad_h, h.pad_w};
  s.dilation = {g.dilation_d, h.dilation_h, h.dilation_w};
  return s;
}

enum class ConvDirection : uint8_t { Forward, BackwardData, BackwardFilter };

// The switches that change which algorithm may be chosen (core/backend_settings.h).
struct ConvSwitches {
  bool deterministic = false, allow_tf32 = true, benchmark = false;
};

struct ConvKey {
  ConvDirection direction = ConvDirection::Forward;
  DType dtype = DType::Float32;
  int device = 0;
  int spatial = 2;
  int64_t groups = 1;
  std::array<int64_t, 5> x_sizes{}, x_strides{}, w_sizes{};
  std::array<int64_t, 3> pad{}, stride{}, dilation{};
  bool channels_last = false;  // w's and y's layout (x's is in x_strides)
  bool deterministic = false, allow_tf32 = true, benchmark = false;

  bool operator==(const ConvKey&) const = default;
};

// x, w contiguous or all channels last (the kernels' contract: ops/conv2d.h); y follows from the rest.
inline ConvKey make_conv_key(ConvDirection direction, const ConvShape& s, DType dtype, int device,
                             const ConvSwitches& sw) {
  ConvKey k;
  k.direction = direction, k.dtype = dtype, k.device = device, k.spatial = s.spatial, k.groups = s.groups;
  k.x_sizes = s.x_sizes(), k.x_strides = s.x_strides(), k.w_sizes = s.w_sizes(), k.channels_last = s.channels_last;
  k.pad = s.pad, k.stride = s.stride, k.dilation = s.dilation;
  k.deterministic = sw.deterministic, k.allow_tf32 = sw.allow_tf32, k.benchmark = sw.benchmark;
  return k;
}

// FNV-1a over every field's value (not the struct's bytes: padding bytes
// are indeterminate).
struct ConvKeyHash {
  static void mix(uint64_t& h, uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xFFu;
      h *= 1099511628211ull;
    }
  }
  size_t operator()(const ConvKey& k) const {
    uint64_t h = 14695981039346656037ull;
    mix(h, static_cast<uint64_t>(k.direction));
    mix(h, static_cast<uint64_t>(k.dtype));
    mix(h, static_cast<uint64_t>(k.device));
    mix(h, static_cast<uint64_t>(k.spatial));
    mix(h, static_cast<uint64_t>(k.groups));
    for (int64_t v : k.x_sizes) mix(h, static_cast<uint64_t>(v));
    for (int64_t v : k.x_strides) mix(h, static_cast<uint64_t>(v));
    for (int64_t v : k.w_sizes) mix(h, static_cast<uint64_t>(v));
    for (int64_t v : k.pad) mix(h, static_cast<uint64_t>(v));
    for (int64_t v : k.stride) mix(h, static_cast<uint64_t>(v));
    for (int64_t v : k.dilation) mix(h, static_cast<uint64_t>(v));
    mix(h, (k.deterministic ? 1u : 0u) | (k.allow_tf32 ? 2u : 0u) | (k.benchmark ? 4u : 0u) |
               (k.channels_last ? 8u : 0u));
    return static_cast<size_t>(h);
  }
};

// Thread-safe map from key to a chosen algorithm (Value). Two threads that
// miss on one key may both search; the first insert wins, as in PyTorch's
// BenchmarkCache, and both then use the stored value.
template <class Value>
class ConvAlgoCache {
 public:
  std::optional<Value> find(const ConvKey& k) const {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = map_.find(k);
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }
  Value insert(const ConvKey& k, const Value& v) {
    std::lock_guard<std::mutex> lock(mu_);
    return map_.emplace(k, v).first->second;
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return map_.size();
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    map_.clear();
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<ConvKey, Value, ConvKeyHash> map_;
};

}  // namespace minidl::cudnn_conv
