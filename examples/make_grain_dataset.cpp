// Writes the synthetic grain-structure segmentation data set
// (data/grain_volumes.h) as .npy folders that VolumeDataset reads:
//
//   make_grain_dataset --out runs/data/grains --count 16 --size 64 --seed 0
//   -> runs/data/grains/images/000.npy ... and runs/data/grains/labels/000.npy ...
//
// --tensorboard DIR also logs each volume's middle z slice (image and label)
// as TensorBoard images, step = volume index, to look at the data:
//   tensorboard --logdir DIR
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "examples/common/cli_checks.h"
#include "examples/common/main_guard.h"
#include "examples/common/tensorboard.h"
#include "minidl/data/grain_volumes.h"
#include "minidl/data/npy.h"

using namespace minidl;

static int program(int argc, char** argv) {
  std::string out, tensorboard;
  int64_t count = 16, size = 64;
  uint64_t seed = 0;
  data::GrainVolumeOptions o;
  CLI::App app{"Write a synthetic 3-D grain-boundary segmentation data set as .npy files"};
  app.add_option("--out", out, "output folder (images/ and labels/ are created in it)")->required();
  app.add_option("--count", count, "number of volumes")->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--size", size, "edge length of each cubic volume")->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--seed", seed)->capture_default_str();
  // Checked here so a mistake names the flag (--noise inf wrote volumes of nan, exit 0).
  app.add_option("--grain-size", o.grain_size, "grain diameter in voxels")
      ->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--boundary-width", o.boundary_width, "labelled boundary width (gap d2 - d1)")
      ->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--noise", o.noise_sigma, "Gaussian noise sigma on the [0, 1] scale")
      ->check(minidl::examples::kNonNegative)->capture_default_str();
  app.add_option("--tensorboard", tensorboard, "also log the middle slices as TensorBoard images here");
  MINIDL_CLI_PARSE(app, argc, argv);

  examples::create_output_dir("--out", out);
  if (!tensorboard.empty()) examples::create_output_dir("--tensorboard", tensorboard);  // before the volumes
  {
    const auto t0 = std::chrono::steady_clock::now();
    const data::GrainDatasetStats s = data::generate_grain_volumes(out, count, size, seed, o);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("wrote %lld volumes of %lld^3 to %s in %.2f s; boundary (foreground) fraction %.3f "
                "(per volume %.3f-%.3f)\n",
                static_cast<long long>(s.count), static_cast<long long>(size), out.c_str(), secs,
                s.foreground_fraction, s.min_foreground_fraction, s.max_foreground_fraction);
    if (!tensorboard.empty()) {
      examples::TensorBoardWriter tb(tensorboard);
      // Read back what was written, so the images show the files, not memory.
      namespace fs = std::filesystem;
      for (int64_t step = 0; step < count; ++step) {
        const std::string name = data::grain_volume_file_name(step, count);
        const Tensor image = data::npy_to_tensor(data::load_npy((fs::path(out) / "images" / name).string()));
        const Tensor label = data::npy_to_tensor(data::load_npy((fs::path(out) / "labels" / name).string()));
        const int64_t mid = image.size(0) / 2;
        tb.add_image("grains/image", image.select(0, mid), step);
        Tensor mask = label.select(0, mid).contiguous();
        uint8_t* m = mask.data_ptr<uint8_t>();
        for (int64_t i = 0; i < mask.numel(); ++i) m[i] = m[i] ? 255 : 0;
        tb.add_image("grains/label", mask, step);
      }
      tb.flush();
      std::printf("TensorBoard images (middle z slices) in %s\n", tb.path().c_str());
    }
  }
  return 0;
}

// Errors exit 1 with "make_grain_dataset: error: ...", usage errors 2 (main_guard.h).
int main(int argc, char** argv) {
  return minidl::examples::run_main("make_grain_dataset", [&] { return program(argc, argv); });
}
