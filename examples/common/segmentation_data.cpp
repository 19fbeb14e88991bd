// Volume folders, or the synthetic grain set written on first use. See
// examples/common/segmentation_data.h.
#include "examples/common/segmentation_data.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "minidl/core/check.h"
#include "minidl/data/grain_volumes.h"
#include "minidl/dist/distributed.h"

namespace fs = std::filesystem;

namespace minidl::examples {

SegmentationData load_segmentation_data(const SegmentationDataOptions& o, std::ostream& log) {
  const fs::path dir(o.dir);
  const bool flat = fs::exists(dir / "images");  // a user's folder: images/ and labels/ directly
  const fs::path train_dir = flat ? dir : dir / "train";
  const fs::path val_dir = !o.val_dir.empty() ? fs::path(o.val_dir) : dir / "val";
  MINIDL_CHECK(!flat || !o.val_dir.empty(), "train_unet3d: ", o.dir,
               " holds images/ and labels/ directly (a training set); name the validation folder with --val-data");
  std::string origin = "npy volumes from " + o.dir;
  if (!flat && !fs::exists(train_dir / "images")) {
    origin = "synthetic grain volumes generated in " + o.dir;
    if (o.main_rank) {
      // Synthetic data goes only where nothing is: a folder with the user's own
      // files in another layout (a typo'd subfolder, .npy files directly in it)
      // must not get grain volumes written next to them and be trained on.
      MINIDL_CHECK(!fs::exists(dir) || fs::is_directory(dir), "train_unet3d: --data ", o.dir,
                   " is a file; expected a folder");
      if (fs::exists(dir) && !fs::is_empty(dir)) {
        const std::string name = fs::directory_iterator(dir)->path().filename().string();
        MINIDL_FAIL("train_unet3d: ", o.dir, " holds ", name,
                    " but neither train/images nor images/: expected DIR/train/{images,labels}/*.npy and "
                    "DIR/val/{images,labels}/*.npy, or DIR/{images,labels}/*.npy with --val-data; synthetic "
                    "volumes are generated only into an absent or empty folder");
      }
      MINIDL_CHECK(o.generate_train > 0 && o.generate_val > 0, "train_unet3d: no data in ", train_dir.string(),
                   " and nothing to generate (--generate ", o.generate_train, ", --generate-val ", o.generate_val, ")");
      const auto t0 = std::chrono::steady_clock::now();
      const auto tr = data::generate_grain_volumes((train_dir).string(), o.generate_train, o.volume_size, o.seed);
      data::generate_grain_volumes(val_dir.string(), o.generate_val, o.volume_size, o.seed + 1);
      log << "generated " << o.generate_train << " + " << o.generate_val << " synthetic grain volumes of "
          << o.volume_size << "^3 in " << o.dir << " ("
          << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s; boundary fraction "
          << tr.foreground_fraction << ")\n";
    }
  }
  if (o.distributed) dist::barrier();  // every rank reads what rank 0 wrote
  data::VolumeDatasetOptions train_options;
  train_options.patch_size = o.patch_size;
  train_options.random_flip = true;
  data::VolumeDatasetOptions val_options = train_options;
  val_options.random_flip = false;  // validation uses whole volumes
  SegmentationData d;
  d.train = std::make_shared<data::VolumeDataset>(train_dir.string(), train_options);
  d.val = std::make_shared<data::VolumeDataset>(val_dir.string(), val_options);
  MINIDL_CHECK(d.train->size() > 0, "train_unet3d: no training volumes in ", train_dir.string());
  MINIDL_CHECK(d.val->size() > 0, "train_unet3d: no validation volumes in ", val_dir.string());
  // Predicting foreground everywhere scores Dice 2f / (1 + f) and IoU f on a
  // foreground fraction f: the floor any learned Dice must beat.
  const double f = d.val->foreground_fraction();
  char text[200];
  std::snprintf(text, sizeof text,
                ": %lld train (%s), %lld val (%s); foreground %.1f%% of train voxels, %.1f%% of val voxels "
                "(all-foreground prediction: val Dice %.3f, IoU %.3f)",
                static_cast<long long>(d.train->size()), volume_shape(*d.train, 0).c_str(),
                static_cast<long long>(d.val->size()), volume_shape(*d.val, 0).c_str(),
                100 * d.train->foreground_fraction(), 100 * f, 2 * f / (1 + f), f);
  d.description = origin + text;
  return d;
}

data::VolumeBatch patch_batch(const data::VolumeDataset& dataset, const std::vector<int64_t>& indices, size_t begin,
                              size_t end, Generator& gen) {
  std::vector<int64_t> volumes;
  for (size_t i = begin; i < end; ++i) volumes.push_back(indices[i] % dataset.size());
  return dataset.batch(volumes, gen);
}

std::string volume_shape(const data::VolumeDataset& dataset, int64_t index) {
  const Tensor v = dataset.volume(index).image;  // (1, D, H, W)
  return std::to_string(v.size(1)) + "x" + std::to_string(v.size(2)) + "x" + std::to_string(v.size(3));
}

}  // namespace minidl::examples
