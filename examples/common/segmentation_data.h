// The data of the 3-D segmentation examples (train_unet3d): .npy volume
// folders (data/volume_dataset.h), or the synthetic grain data set
// (data/grain_volumes.h), generated on first use.
//
// Layout: DIR/train/{images,labels}/*.npy and DIR/val/{images,labels}/*.npy.
// When DIR/train/images does not exist and DIR is absent or empty, rank 0
// writes generate_train + generate_val synthetic volumes of volume_size^3
// there (train from seed, val from seed + 1, so no volume is in both); the
// other ranks wait for it. A non-empty DIR in neither layout is an error.
// A folder with images/ and labels/ directly in it (a user's own data) is the
// training set, and val_dir must then name the validation folder.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "minidl/core/generator.h"
#include "minidl/data/volume_dataset.h"

namespace minidl::examples {

struct SegmentationDataOptions {
  std::string dir;
  std::string val_dir;  // "": DIR/val
  int64_t generate_train = 16, generate_val = 4, volume_size = 64;
  uint64_t seed = 0;
  std::array<int64_t, 3> patch_size{32, 32, 32};
  bool main_rank = true;     // writes the synthetic data
  bool distributed = false;  // the others wait at a barrier
};

struct SegmentationData {
  std::shared_ptr<const data::VolumeDataset> train, val;
  std::string description;  // where the volumes came from, how many, their shape
};

SegmentationData load_segmentation_data(const SegmentationDataOptions& options, std::ostream& log);

// One training step's patches: volumes `indices[begin, end)` modulo the
// training set's size (a sampler over size * samples_per_volume positions
// visits each volume samples_per_volume times per epoch).
data::VolumeBatch patch_batch(const data::VolumeDataset& dataset, const std::vector<int64_t>& indices, size_t begin,
                              size_t end, Generator& gen);

// The shape of volume `index` as text, "64x64x64".
std::string volume_shape(const data::VolumeDataset& dataset, int64_t index);

}  // namespace minidl::examples
