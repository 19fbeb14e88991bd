// Sliding-window inference. See nn/sliding_window.h.
#include "minidl/nn/sliding_window.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/check.h"
#include "minidl/ops/ops.h"

namespace minidl::nn {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// The spatial windows of one image: starts per dim, enumerated last dim fastest.
struct Windows {
  std::vector<std::vector<int64_t>> starts;  // per dim
  int64_t count = 1;
  std::vector<int64_t> start(int64_t index) const {
    std::vector<int64_t> s(starts.size());
    for (size_t k = starts.size(); k-- > 0;) {
      const auto n = static_cast<int64_t>(starts[k].size());
      s[k] = starts[k][static_cast<size_t>(index % n)];
      index /= n;
    }
    return s;
  }
};

// Narrows dims 2.. of t to the window at `start` of size `roi`.
Tensor window(Tensor t, const std::vector<int64_t>& start, const std::vector<int64_t>& roi) {
  for (size_t k = 0; k < roi.size(); ++k) t = t.narrow(static_cast<int64_t>(k) + 2, start[k], roi[k]);
  return t;
}

}  // namespace

std::vector<int64_t> window_starts(int64_t size, int64_t roi, double overlap) {
  MINIDL_CHECK(roi >= 1 && size >= roi, "window_starts: expected 1 <= roi <= size, got roi ", roi, ", size ", size);
  MINIDL_CHECK(overlap >= 0 && overlap < 1, "window_starts: expected overlap in [0, 1), got ", overlap);
  // MONAI's _get_scan_interval and dense_patch_slices.
  const int64_t interval =
      roi == size ? roi : std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(roi) * (1 - overlap)));
  std::vector<int64_t> starts;
  for (int64_t i = 0;; ++i) {
    const int64_t s = i * interval;
    starts.push_back(std::min(s, size - roi));
    if (s + roi >= size) break;
  }
  return starts;
}

Tensor importance_map(const std::vector<int64_t>& patch_size, BlendMode mode, double sigma_scale, Device device) {
  for (int64_t p : patch_size) MINIDL_CHECK(p >= 1, "importance_map: expected positive sizes, got ", shape_str(patch_size));
  if (mode == BlendMode::kConstant) return ones(patch_size, TensorOptions().device(device));
  MINIDL_CHECK(sigma_scale > 0 && std::isfinite(sigma_scale), "importance_map: expected sigma_scale > 0, got ",
               sigma_scale);
  // exp(-x^2 / (2 sigma^2)) per dim at x = i - (p - 1) / 2, multiplied
  // across dims (computed in float32 as MONAI's compute_importance_map).
  Tensor map = ones({1}, kFloat32);
  for (size_t k = 0; k < patch_size.size(); ++k) {
    const int64_t p = patch_size[k];
    const float sigma = static_cast<float>(static_cast<double>(p) * sigma_scale);
    Tensor g = empty({p}, kFloat32);
    float* v = g.data_ptr<float>();
    for (int64_t i = 0; i < p; ++i) {
      const float x = static_cast<float>(i) - static_cast<float>(p - 1) / 2.0f;
      v[i] = std::exp(x * x / (-2.0f * sigma * sigma));
    }
    std::vector<int64_t> shape(k + 1, 1);
    shape[k] = p;
    map = map.unsqueeze(-1) * g.reshape(shape);
  }
  map = map.reshape(patch_size).contiguous();
  // Weights that underflowed (or nearly) would make voxels seen only by window
  // borders divide by ~0: raise them to max(min, 1e-3).
  const float floor = std::max(map.min().item<float>(), 1e-3f);
  map = clamp(map, floor, std::nullopt);
  return map.to(device);
}

Tensor sliding_window_inference(const Tensor& inputs, const SlidingWindowOptions& o,
                                const std::function<Tensor(const Tensor&)>& predictor) {
  MINIDL_CHECK(inputs.defined() && inputs.dim() >= 3,
               "sliding_window_inference: expected an (N, C, *spatial) input with at least one spatial dim, got ",
               inputs.defined() ? std::to_string(inputs.dim()) + "D" : std::string("an undefined tensor"));
  const int64_t dims = inputs.dim() - 2;
  MINIDL_CHECK(static_cast<int64_t>(o.roi_size.size()) == dims, "sliding_window_inference: expected roi_size with ",
               dims, " entries (one per spatial dim of the input of shape ", shape_str(inputs.shape()), "), got ",
               shape_str(o.roi_size));
  MINIDL_CHECK(o.overlap >= 0 && o.overlap < 1, "sliding_window_inference: expected overlap in [0, 1), got ",
               o.overlap);
  MINIDL_CHECK(inputs.size(0) > 0, "sliding_window_inference: expected at least one image in the batch, got shape ",
               shape_str(inputs.shape()));
  MINIDL_CHECK(o.sw_batch_size >= 1, "sliding_window_inference: expected sw_batch_size >= 1, got ", o.sw_batch_size);
  MINIDL_CHECK(static_cast<bool>(predictor), "sliding_window_inference: expected a predictor");
  NoGradGuard no_grad;

  // Window size, padding where the input is smaller than the window.
  std::vector<int64_t> roi(static_cast<size_t>(dims)), size(static_cast<size_t>(dims)), before(roi.size());
  std::vector<int64_t> pads;  // pad()'s order: last dim first, (before, after) each
  for (int64_t k = dims - 1; k >= 0; --k) {
    const auto i = static_cast<size_t>(k);
    const int64_t s = inputs.size(k + 2);
    MINIDL_CHECK(s > 0, "sliding_window_inference: expected non-empty spatial dims, got shape ",
                 shape_str(inputs.shape()));
    roi[i] = o.roi_size[i] > 0 ? o.roi_size[i] : s;
    size[i] = std::max(s, roi[i]);
    before[i] = (size[i] - s) / 2;
    pads.push_back(before[i]);
    pads.push_back(size[i] - s - before[i]);
  }
  const bool padded = std::any_of(pads.begin(), pads.end(), [](int64_t p) { return p > 0; });
  const Tensor x = padded ? pad(inputs, pads, PadMode::kConstant, o.cval) : inputs;

  Windows windows;
  for (size_t k = 0; k < roi.size(); ++k) {
    windows.starts.push_back(window_starts(size[k], roi[k], o.overlap));
    windows.count *= static_cast<int64_t>(windows.starts.back().size());
  }
  const Tensor weight = importance_map(roi, o.mode, o.sigma_scale, inputs.device()).reshape([&] {
    std::vector<int64_t> s{1, 1};
    s.insert(s.end(), roi.begin(), roi.end());
    return s;
  }());

  const int64_t n = inputs.size(0), total = n * windows.count;
  Tensor out, count, w;  // w: the importance map in the accumulation dtype
  for (int64_t first = 0; first < total; first += o.sw_batch_size) {
    const int64_t last = std::min(total, first + o.sw_batch_size);
    std::vector<Tensor> parts;
    for (int64_t i = first; i < last; ++i)
      parts.push_back(window(x.narrow(0, i / windows.count, 1), windows.start(i % windows.count), roi));
    const Tensor batch = parts.size() == 1 ? parts[0] : cat(parts, 0);
    const Tensor pred = predictor(batch);
    std::vector<int64_t> expected = pred.defined() ? pred.shape() : std::vector<int64_t>{};
    if (pred.defined() && pred.dim() == inputs.dim()) {
      expected[0] = last - first;
      for (size_t k = 0; k < roi.size(); ++k) expected[k + 2] = roi[k];
    }
    MINIDL_CHECK(pred.defined() && pred.dim() == inputs.dim() && pred.shape() == expected, "sliding_window_inference: expected the predictor to map ",
                 "windows of shape ", shape_str(batch.shape()), " to (", last - first, ", C_out, ",
                 shape_str(roi).substr(1), ", got ", pred.defined() ? shape_str(pred.shape()) : "an undefined tensor");
    MINIDL_CHECK(pred.device() == inputs.device(), "sliding_window_inference: expected the predictor's output on ",
                 inputs.device().str(), ", got ", pred.device().str());
    if (!out.defined()) {
      const DType acc = is_floating(pred.dtype()) && !is_reduced_floating(pred.dtype()) ? pred.dtype() : kFloat32;
      std::vector<int64_t> shape{n, pred.size(1)};
      shape.insert(shape.end(), size.begin(), size.end());
      out = zeros(shape, TensorOptions().dtype(acc).device(inputs.device()));
      shape[0] = shape[1] = 1;
      count = zeros(shape, TensorOptions().dtype(acc).device(inputs.device()));
      w = weight.to(acc);
      for (int64_t i = 0; i < windows.count; ++i) window(count, windows.start(i), roi).add_(w);
    }
    for (int64_t i = first; i < last; ++i)
      window(out.narrow(0, i / windows.count, 1), windows.start(i % windows.count), roi)
          .add_(pred.narrow(0, i - first, 1).to(out.dtype()) * w);
  }
  Tensor result = out / count;
  if (padded) result = window(result, before, std::vector<int64_t>(inputs.shape().begin() + 2, inputs.shape().end()));
  return result.contiguous();
}

}  // namespace minidl::nn
