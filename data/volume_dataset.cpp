// VolumeDataset: load and check every pair up front (so training never fails
// half-way on a bad file), then cut patches with plain index arithmetic.
#include "minidl/data/volume_dataset.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "minidl/core/check.h"
#include "minidl/data/npy.h"

namespace minidl::data {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> npy_files(const fs::path& dir) {
  std::error_code ec;
  MINIDL_CHECK(fs::is_directory(dir, ec), "VolumeDataset: ", dir.string(), " is not a directory (expected ",
               "root/images/*.npy and root/labels/*.npy)");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".npy") names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

// (D, H, W) of a (D, H, W) or (1, D, H, W) array.
std::array<int64_t, 3> spatial_shape(const NpyArray& a, const std::string& path) {
  const auto& s = a.shape;
  MINIDL_CHECK(s.size() == 3 || (s.size() == 4 && s[0] == 1), "VolumeDataset: ", path,
               ": expected a (D, H, W) or (1, D, H, W) volume, got shape ", shape_str(s));
  return {s[s.size() - 3], s[s.size() - 2], s[s.size() - 1]};
}

// Calls f(element as double, flat index) for every element, whatever the dtype.
template <class F>
void for_each_value(const NpyArray& a, F&& f) {
  const int64_t n = a.numel();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, a.data.data() + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
      f(static_cast<double>(v), i);
    }
  };
  switch (a.dtype) {
    case NpyDType::Bool:
    case NpyDType::UInt8: return run(uint8_t{});
    case NpyDType::UInt16: return run(uint16_t{});
    case NpyDType::Int32: return run(int32_t{});
    case NpyDType::Int64: return run(int64_t{});
    case NpyDType::Float32: return run(float{});
    case NpyDType::Float64: return run(double{});
  }
}

Tensor image_tensor(const NpyArray& a, const std::array<int64_t, 3>& s, VolumeNormalization norm,
                    const std::string& path) {
  Tensor out = empty({1, s[0], s[1], s[2]}, kFloat32);
  float* dst = out.data_ptr<float>();
  const int64_t n = a.numel();
  double scale = 1.0;
  if (norm == VolumeNormalization::kScale) {
    MINIDL_CHECK(a.dtype != NpyDType::Int32 && a.dtype != NpyDType::Int64, "VolumeDataset: ", path,
                 ": kScale normalization has no range for '", npy_descr(a.dtype),
                 "' images (use kMeanStd, or store uint8/uint16/float)");
    scale = a.dtype == NpyDType::UInt8 ? 1.0 / 255 : a.dtype == NpyDType::UInt16 ? 1.0 / 65535 : 1.0;
  }
  bool finite = true;
  double sum = 0.0;
  for_each_value(a, [&](double v, int64_t i) {
    finite = finite && std::isfinite(v);
    sum += v;
    dst[i] = static_cast<float>(v * scale);
  });
  MINIDL_CHECK(finite, "VolumeDataset: ", path, ": the image contains NaN or infinite values");
  if (norm == VolumeNormalization::kMeanStd && n > 0) {
    const double mean = sum / static_cast<double>(n);
    double ss = 0.0;
    for_each_value(a, [&](double v, int64_t) { ss += (v - mean) * (v - mean); });
    const double sd = std::sqrt(ss / static_cast<double>(n));
    const double inv = sd > 0.0 ? 1.0 / sd : 1.0;
    for_each_value(a, [&](double v, int64_t i) { dst[i] = static_cast<float>((v - mean) * inv); });
  }
  return out;
}

Tensor label_tensor(const NpyArray& a, const std::array<int64_t, 3>& s, const std::string& path) {
  Tensor out = empty({1, s[0], s[1], s[2]}, kFloat32);
  float* dst = out.data_ptr<float>();
  for_each_value(a, [&](double v, int64_t i) {
    if (v != 0.0 && v != 1.0) [[unlikely]] {
      const int64_t hw = s[1] * s[2];
      MINIDL_FAIL("VolumeDataset: ", path, ": labels must be 0 or 1 (binary segmentation), got ", v,
                  " at voxel (", i / hw, ", ", i % hw / s[2], ", ", i % s[2], ")");
    }
    dst[i] = static_cast<float>(v);
  });
  return out;
}

// Copies the window at `origin` of a (1, D, H, W) volume into dst (a
// contiguous (pd, ph, pw) block), mirrored along the axes with flip[k].
void cut(const Tensor& vol, const std::array<int64_t, 3>& origin, const std::array<int64_t, 3>& p,
         const std::array<bool, 3>& flip, float* dst) {
  const float* src = vol.data_ptr<float>();
  const int64_t H = vol.size(2), W = vol.size(3);
  for (int64_t z = 0; z < p[0]; ++z) {
    const int64_t sz = origin[0] + (flip[0] ? p[0] - 1 - z : z);
    for (int64_t y = 0; y < p[1]; ++y) {
      const int64_t sy = origin[1] + (flip[1] ? p[1] - 1 - y : y);
      const float* row = src + (sz * H + sy) * W + origin[2];
      float* out = dst + (z * p[1] + y) * p[2];
      if (flip[2]) {
        for (int64_t x = 0; x < p[2]; ++x) out[x] = row[p[2] - 1 - x];
      } else {
        std::memcpy(out, row, static_cast<size_t>(p[2]) * sizeof(float));
      }
    }
  }
}

}  // namespace

VolumeDataset::VolumeDataset(const std::string& root, VolumeDatasetOptions options) : options_(options) {
  const auto& p = options_.patch_size;
  MINIDL_CHECK(p[0] > 0 && p[1] > 0 && p[2] > 0, "VolumeDataset: patch_size must be positive, got (", p[0], ", ",
               p[1], ", ", p[2], ")");
  const fs::path image_dir = fs::path(root) / "images", label_dir = fs::path(root) / "labels";
  const std::vector<std::string> images = npy_files(image_dir), labels = npy_files(label_dir);
  MINIDL_CHECK(!images.empty(), "VolumeDataset: no .npy files in ", image_dir.string());
  for (const auto& name : labels)
    MINIDL_CHECK(std::binary_search(images.begin(), images.end(), name), "VolumeDataset: ",
                 (label_dir / name).string(), " has no image: ", (image_dir / name).string(), " does not exist");
  for (const auto& name : images) {
    const std::string ip = (image_dir / name).string(), lp = (label_dir / name).string();
    MINIDL_CHECK(std::binary_search(labels.begin(), labels.end(), name), "VolumeDataset: ", ip,
                 " has no label: ", lp, " does not exist");
    const NpyArray image = load_npy(ip), label = load_npy(lp);
    const auto is = spatial_shape(image, ip), ls = spatial_shape(label, lp);
    MINIDL_CHECK(is == ls, "VolumeDataset: shape mismatch between image ", ip, " ", shape_str(image.shape),
                 " and label ", lp, " ", shape_str(label.shape));
    MINIDL_CHECK(is[0] >= p[0] && is[1] >= p[1] && is[2] >= p[2], "VolumeDataset: ", ip, " is ",
                 shape_str({is[0], is[1], is[2]}), " (D, H, W), smaller than the patch size ",
                 shape_str({p[0], p[1], p[2]}), "; volumes are not padded: use a smaller patch");
    images_.push_back(image_tensor(image, is, options_.normalization, ip));
    labels_.push_back(label_tensor(label, ls, lp));
    image_paths_.push_back(ip);
    label_paths_.push_back(lp);
  }
}

Tensor read_volume_image(const std::string& path, VolumeNormalization normalization) {
  const NpyArray image = load_npy(path);
  return image_tensor(image, spatial_shape(image, path), normalization, path);
}

Tensor read_volume_label(const std::string& path) {
  const NpyArray label = load_npy(path);
  return label_tensor(label, spatial_shape(label, path), path);
}

VolumeSample VolumeDataset::volume(int64_t index) const {
  MINIDL_CHECK(index >= 0 && index < size(), "VolumeDataset: index ", index,
               " is out of range for a dataset of size ", size());
  const auto i = static_cast<size_t>(index);
  return {images_[i].clone(), labels_[i].clone()};
}

VolumeSample VolumeDataset::sample(int64_t index, Generator& gen) const {
  VolumeBatch b = batch({index}, gen);
  return {b.images[0], b.labels[0]};
}

VolumeBatch VolumeDataset::batch(const std::vector<int64_t>& indices, Generator& gen) const {
  MINIDL_CHECK(!indices.empty(), "VolumeDataset: expected at least one index for a batch");
  const auto& p = options_.patch_size;
  const auto n = static_cast<int64_t>(indices.size());
  VolumeBatch out{empty({n, 1, p[0], p[1], p[2]}, kFloat32), empty({n, 1, p[0], p[1], p[2]}, kFloat32), indices};
  const int64_t patch = p[0] * p[1] * p[2];
  for (int64_t k = 0; k < n; ++k) {
    const int64_t index = indices[static_cast<size_t>(k)];
    MINIDL_CHECK(index >= 0 && index < size(), "VolumeDataset: index ", index,
                 " is out of range for a dataset of size ", size());
    const Tensor& image = images_[static_cast<size_t>(index)];
    std::array<int64_t, 3> origin{};
    for (int d = 0; d < 3; ++d) origin[d] = gen.randint(0, image.size(d + 1) - p[d] + 1);
    std::array<bool, 3> flip{false, false, false};
    if (options_.random_flip)
      for (int d = 0; d < 3; ++d) flip[d] = gen.uniform() < 0.5;
    cut(image, origin, p, flip, out.images.data_ptr<float>() + k * patch);
    cut(labels_[static_cast<size_t>(index)], origin, p, flip, out.labels.data_ptr<float>() + k * patch);
  }
  return out;
}

VolumeBatch VolumeDataset::random_batch(int64_t batch_size, Generator& gen) const {
  MINIDL_CHECK(batch_size > 0, "VolumeDataset: batch_size must be positive, got ", batch_size);
  // Draw all volume indices first, then the patches: batch() then sees the
  // same Generator state as a caller passing these indices would.
  std::vector<int64_t> indices(static_cast<size_t>(batch_size));
  for (auto& i : indices) i = gen.randint(0, size());
  return batch(indices, gen);
}

double VolumeDataset::foreground_fraction() const {
  double fg = 0.0, total = 0.0;
  for (const Tensor& l : labels_) {
    const float* p = l.data_ptr<float>();
    for (int64_t i = 0; i < l.numel(); ++i) fg += p[i];
    total += static_cast<double>(l.numel());
  }
  return fg / total;
}

}  // namespace minidl::data
