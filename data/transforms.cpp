// Transforms. Crop and flip only move elements, so they copy bytes and work
// for any dtype; ToFloat and Normalize do arithmetic on float data.
#include "minidl/data/transforms.h"

#include <algorithm>
#include <cstring>

#include "minidl/core/check.h"

namespace minidl::data {

namespace {
Tensor check_chw(const char* who, const Tensor& x) {
  MINIDL_CHECK(x.defined(), who, ": expected a defined tensor");
  MINIDL_CHECK(x.dim() == 3, who, ": expected a 3-D (C, H, W) tensor, but got input of size: ",
               shape_str(x.shape()));
  MINIDL_CHECK(!x.is_cuda(), who, ": expected a CPU tensor");
  return x.contiguous();
}
}  // namespace

RandomCrop::RandomCrop(int64_t height, int64_t width, int64_t padding)
    : height_(height), width_(width), padding_(padding) {
  MINIDL_CHECK(height > 0 && width > 0, "RandomCrop: size must be positive, got ", height, "x", width);
  MINIDL_CHECK(padding >= 0, "RandomCrop: padding must be non-negative, got ", padding);
}

Tensor RandomCrop::operator()(const Tensor& input, Generator& gen) const {
  const Tensor x = check_chw("RandomCrop", input);
  const int64_t C = x.size(0), H = x.size(1), W = x.size(2);
  int64_t ph = 0, pw = 0;  // padding near int64's limit must not wrap around
  MINIDL_CHECK(padding_ <= INT64_MAX / 2 && !__builtin_add_overflow(H, 2 * padding_, &ph) &&
                   !__builtin_add_overflow(W, 2 * padding_, &pw),
               "RandomCrop: padding ", padding_, " makes the padded image size overflow int64");
  MINIDL_CHECK(height_ <= ph && width_ <= pw, "RandomCrop: required crop size ", height_, "x", width_,
               " is larger than the padded input image size ", ph, "x", pw);
  const int64_t top = gen.randint(0, ph - height_ + 1);
  const int64_t left = gen.randint(0, pw - width_ + 1);
  Tensor out = zeros({C, height_, width_}, x.dtype());
  const size_t es = element_size(x.dtype());
  const auto* src = static_cast<const char*>(x.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  // Output (i, j) reads padded (top + i, left + j) = input (top + i - pad, left + j - pad).
  const int64_t j0 = std::max<int64_t>(0, padding_ - left);
  const int64_t j1 = std::min<int64_t>(width_, W + padding_ - left);
  if (j1 <= j0) return out;
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t i = 0; i < height_; ++i) {
      const int64_t si = top + i - padding_;
      if (si < 0 || si >= H) continue;
      const int64_t sj = left + j0 - padding_;
      std::memcpy(dst + ((c * height_ + i) * width_ + j0) * es, src + ((c * H + si) * W + sj) * es,
                  static_cast<size_t>(j1 - j0) * es);
    }
  }
  return out;
}

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  MINIDL_CHECK(p >= 0.0 && p <= 1.0, "RandomHorizontalFlip: p must be in [0, 1], got ", p);
}

Tensor RandomHorizontalFlip::operator()(const Tensor& input, Generator& gen) const {
  const Tensor x = check_chw("RandomHorizontalFlip", input);
  if (!(gen.uniform() < p_)) return x;
  const int64_t rows = x.size(0) * x.size(1), W = x.size(2);
  Tensor out = empty(x.shape(), x.dtype());
  const size_t es = element_size(x.dtype());
  const auto* src = static_cast<const char*>(x.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < W; ++j) std::memcpy(dst + (r * W + j) * es, src + (r * W + (W - 1 - j)) * es, es);
  return out;
}

Tensor ToFloat::operator()(const Tensor& input, Generator&) const {
  MINIDL_CHECK(input.defined(), "ToFloat: expected a defined tensor");
  if (input.dtype() == kFloat32) return input;
  MINIDL_CHECK(input.dtype() == kUInt8, "ToFloat: expected a uint8 or float32 tensor, got ",
               dtype_name(input.dtype()));
  const Tensor x = input.contiguous();
  Tensor out = empty(x.shape(), kFloat32);
  const uint8_t* src = x.data_ptr<uint8_t>();
  float* dst = out.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) dst[i] = static_cast<float>(src[i]) / 255.0f;
  return out;
}

Normalize::Normalize(std::vector<double> mean, std::vector<double> std) : mean_(std::move(mean)), std_(std::move(std)) {
  MINIDL_CHECK(!mean_.empty() && mean_.size() == std_.size(), "Normalize: expected mean and std of the same ",
               "non-zero length, got ", mean_.size(), " and ", std_.size());
  for (double s : std_) MINIDL_CHECK(s > 0.0, "Normalize: std evaluated to zero or less (", s, "), leading to division by zero.");
}

Tensor Normalize::operator()(const Tensor& input, Generator&) const {
  const Tensor x = check_chw("Normalize", input);
  MINIDL_CHECK(x.dtype() == kFloat32 || x.dtype() == kFloat64,
               "Normalize: expected a float tensor (apply ToFloat first), got ", dtype_name(x.dtype()));
  const int64_t C = x.size(0), plane = x.size(1) * x.size(2);
  MINIDL_CHECK(mean_.size() == 1 || static_cast<int64_t>(mean_.size()) == C, "Normalize: got ", mean_.size(),
               " mean/std values for an image with ", C, " channels");
  Tensor out = empty(x.shape(), x.dtype());
  MINIDL_DISPATCH_FLOATING(x.dtype(), "Normalize", [&] {
    const scalar_t* src = x.data_ptr<scalar_t>();
    scalar_t* dst = out.data_ptr<scalar_t>();
    for (int64_t c = 0; c < C; ++c) {
      const size_t k = mean_.size() == 1 ? 0 : static_cast<size_t>(c);
      const auto m = static_cast<scalar_t>(mean_[k]);
      const auto inv = static_cast<scalar_t>(1.0 / std_[k]);
      for (int64_t p = 0; p < plane; ++p) dst[c * plane + p] = (src[c * plane + p] - m) * inv;
    }
  });
  return out;
}

Compose::Compose(std::vector<TransformPtr> transforms) : transforms_(std::move(transforms)) {
  for (const auto& t : transforms_) MINIDL_CHECK(t != nullptr, "Compose: got a null transform");
}

Tensor Compose::operator()(const Tensor& x, Generator& gen) const {
  Tensor y = x;
  for (const auto& t : transforms_) y = (*t)(y, gen);
  return y;
}

}  // namespace minidl::data
