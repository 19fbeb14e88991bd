// VolumeDataset: 3-D image/label volume pairs stored as .npy files, for
// binary segmentation (one foreground class, trained with BCE):
//
//   root/images/<name>.npy   image, (D, H, W) or (1, D, H, W); bool, uint8,
//                            uint16, int32, int64, float32 or float64
//   root/labels/<name>.npy   label of the same shape; every voxel 0 or 1
//
// Pairs are matched by file name (sorted); an image without a label, a label
// without an image, and an image/label shape mismatch are errors naming both
// files. All volumes are read, checked and converted once, in the
// constructor, and kept in memory as float32:
//   image: normalized per volume, see VolumeNormalization;
//   label: 0.0 / 1.0 (any other value is an error naming the file and voxel).
//
// Training draws random patches: sample() cuts a patch_size (D, H, W) window
// at a uniformly random position (the z, y, x origins drawn in that order from
// the Generator), then, if random_flip, flips it along D, H and W, each with
// probability 1/2 (three more draws, in that order). A volume smaller than the
// patch in any dimension is refused in the constructor (no padding: pad the
// data or choose a smaller patch). The same Generator state gives the same
// patches. The dataset is immutable, so several threads may sample at once
// (each with its own Generator).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "minidl/core/generator.h"
#include "minidl/core/tensor.h"

namespace minidl::data {

enum class VolumeNormalization {
  kMeanStd,  // (x - mean) / std over each image volume (std 0: only the mean is removed)
  kScale,    // x / 255 for uint8, x / 65535 for uint16; bool and float images as they are;
             // int32/int64 images are refused (no natural range)
};

struct VolumeDatasetOptions {
  std::array<int64_t, 3> patch_size{32, 32, 32};  // (D, H, W)
  bool random_flip = true;
  VolumeNormalization normalization = VolumeNormalization::kMeanStd;
};

struct VolumeSample {
  Tensor image;  // float32 (1, D, H, W)
  Tensor label;  // float32 (1, D, H, W), 0 or 1
};

struct VolumeBatch {
  Tensor images;                 // float32 (N, 1, pd, ph, pw)
  Tensor labels;                 // float32 (N, 1, pd, ph, pw)
  std::vector<int64_t> indices;  // the volume each patch came from
};

class VolumeDataset {
 public:
  explicit VolumeDataset(const std::string& root, VolumeDatasetOptions options = {});

  int64_t size() const { return static_cast<int64_t>(images_.size()); }
  const VolumeDatasetOptions& options() const { return options_; }
  const std::vector<std::string>& image_paths() const { return image_paths_; }
  const std::vector<std::string>& label_paths() const { return label_paths_; }

  // The whole normalized volume `index`, no crop or flip (for evaluation).
  VolumeSample volume(int64_t index) const;
  // A random patch of volume `index` (see above).
  VolumeSample sample(int64_t index, Generator& gen) const;
  // Patches of the given volumes, stacked in order.
  VolumeBatch batch(const std::vector<int64_t>& indices, Generator& gen) const;
  // batch_size patches from volumes drawn uniformly with replacement: all
  // volume indices are drawn first, then batch(indices, gen) runs.
  VolumeBatch random_batch(int64_t batch_size, Generator& gen) const;

  // The fraction of label voxels that are 1, over all volumes (for a BCE
  // pos_weight or to report class balance).
  double foreground_fraction() const;

 private:
  VolumeDatasetOptions options_;
  std::vector<std::string> image_paths_, label_paths_;
  std::vector<Tensor> images_, labels_;  // float32 (1, D, H, W), contiguous
};

// One volume read from a .npy file as VolumeDataset reads its pairs (for
// inference on volumes outside a dataset): float32 (1, D, H, W), the image
// normalized per `normalization`, the label checked to be 0 or 1. Errors name
// the file.
Tensor read_volume_image(const std::string& path, VolumeNormalization normalization = VolumeNormalization::kMeanStd);
Tensor read_volume_label(const std::string& path);

}  // namespace minidl::data
