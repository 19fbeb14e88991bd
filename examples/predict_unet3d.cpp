// predict_unet3d: segments new volumes with a UNet3d trained by train_unet3d,
// by sliding windows over each whole volume (nn::sliding_window_inference,
// MONAI's method), the template's inference half:
//
//   build/examples/train_unet3d --epochs 10 --checkpoint-dir runs/unet3d_ckpt
//   build/examples/predict_unet3d --checkpoint runs/unet3d_ckpt --images DIR --out runs/unet3d_pred
//   build/examples/predict_unet3d ... --labels DIR        # also Dice and IoU per volume
//
// Inputs: .npy volumes (D, H, W) or (1, D, H, W) in --images (a folder or one
// file), normalized as in training (data::read_volume_image). The network is
// rebuilt from the checkpoint's config (base width, levels, norm, upsampling;
// a SyncBatchNorm model loads as BatchNorm) and runs in eval mode, windows of
// --roi voxels (default: the training patch) overlapping by --overlap, blended
// by --mode. Writes <out>/<name>.npy per input, atomically: float32
// foreground probabilities sigmoid(logits) (D, H, W), or with --save mask a
// uint8 mask of probability > --threshold.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "examples/common/checkpoint.h"
#include "examples/common/cli_checks.h"
#include "examples/common/device_choice.h"
#include "examples/common/main_guard.h"
#include "examples/common/mixed_precision.h"
#include "minidl/core/json_int.h"
#include "minidl/minidl.h"

namespace fs = std::filesystem;
using namespace minidl;
using nlohmann::json;

namespace {

struct Args {
  std::string checkpoint, images, labels, out;
  int64_t roi = 0;  // 0: the checkpoint's training patch
  double overlap = 0.25;
  std::string mode = "constant";
  int64_t sw_batch_size = 4;
  std::string save = "probabilities";
  double threshold = 0.5;
  std::string device = "auto";
  std::string amp = "off";
  int64_t threads = 0;
  double expect_dice = -1;
};

// The .npy files to segment: --images itself, or the ones in it (sorted).
std::vector<fs::path> input_files(const std::string& images) {
  MINIDL_CHECK(fs::exists(images), "predict_unet3d: --images ", images, " does not exist");
  if (!fs::is_directory(images)) return {fs::path(images)};
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(images))
    if (e.is_regular_file() && e.path().extension() == ".npy") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  MINIDL_CHECK(!files.empty(), "predict_unet3d: no .npy files in ", images);
  return files;
}

std::shared_ptr<nn::Module> load_model(const examples::LoadedCheckpoint& c, int64_t* patch, int64_t* levels) {
  try {  // a missing key or another model's tensors: an error naming the file
    const json& cfg = c.json.at("config");
    *patch = json_int64(cfg.at("patch"), "predict_unet3d: the checkpoint's patch");
    *levels = json_int64(cfg.at("levels"), "predict_unet3d: the checkpoint's levels");
    auto model = models::UNet3d(models::UNetOptions()
                                    .in_channels(1)
                                    .classes(1)
                                    .base_width(json_int64(cfg.at("base_width"), "predict_unet3d: base_width"))
                                    .levels(*levels)
                                    .norm(cfg.at("norm").get<std::string>())
                                    .upsample(cfg.at("upsample").get<std::string>()))
                     .ptr();
    nn::load_state_dict_file(*model, (c.dir / c.json.at("model").get<std::string>()).string());
    return model;
  } catch (const std::exception& e) {
    MINIDL_FAIL("predict_unet3d: cannot load the model of ", c.file.string(), ": ", e.what());
  }
}

std::string shape_str(const Tensor& t) {
  std::string s;
  for (int64_t d = 0; d < t.dim(); ++d) s += (s.empty() ? "" : "x") + std::to_string(t.size(d));
  return s;
}

int run(const Args& a) {
  if (a.threads > 0) set_num_threads(a.threads);
  // The cheap checks of the flags first, then the checkpoint, then --out.
  const auto [device, device_note] = examples::choose_device(a.device, /*distributed=*/false);
  const examples::MixedPrecision amp(a.amp, device, /*training=*/false);
  const std::vector<fs::path> files = input_files(a.images);
  std::error_code ec;
  for (const fs::path& f : files)
    MINIDL_CHECK(!fs::equivalent(f.parent_path(), a.out, ec), "predict_unet3d: --out ", a.out,
                 " is the folder of the input ", f.string(), "; choose another (inputs are never overwritten)");
  examples::check_output_dir("--out", a.out);  // created below, once everything is accepted
  const examples::LoadedCheckpoint checkpoint = examples::read_checkpoint(a.checkpoint, "predict_unet3d", "train_unet3d");
  int64_t patch = 0, levels = 0;
  const std::shared_ptr<nn::Module> model = load_model(checkpoint, &patch, &levels);
  model->to(device);
  model->eval();

  const int64_t roi = a.roi > 0 ? a.roi : patch, multiple = int64_t{1} << (levels - 1);
  MINIDL_CHECK(roi % multiple == 0, "predict_unet3d: --roi ", roi, " is not a multiple of ", multiple,
               " (the network pools ", levels - 1, " times)");
  // Only now, every refusal done: a refused run leaves no empty --out folder.
  examples::create_output_dir("--out", a.out);
  nn::SlidingWindowOptions sw;
  sw.roi_size = {roi, roi, roi};
  sw.overlap = a.overlap;
  sw.mode = a.mode == "gaussian" ? nn::BlendMode::kGaussian : nn::BlendMode::kConstant;
  sw.sw_batch_size = a.sw_batch_size;

  std::cout << "model: UNet3d from " << checkpoint.file.string() << " (epoch " << checkpoint.epoch << ", "
            << levels << " levels)\n"
            << "windows: " << roi << "^3, overlap " << a.overlap << ", " << a.mode << " blending, " << a.sw_batch_size
            << " per batch; device " << device.str() << device_note << ", amp " << a.amp << "\n";

  double dice_sum = 0, iou_sum = 0;
  for (const fs::path& f : files) {
    const auto t0 = std::chrono::steady_clock::now();
    const Tensor x = data::read_volume_image(f.string()).unsqueeze(0).to(device);  // (1, 1, D, H, W)
    const Tensor logits = nn::sliding_window_inference(x, sw, [&](const Tensor& w) {
      auto region = amp.autocast();
      return model->forward(w).to(kFloat32);
    });
    const Tensor prob = sigmoid(logits).select(0, 0).select(0, 0).to(kCPU);  // (D, H, W)
    const Tensor saved = a.save == "mask" ? gt(prob, a.threshold).to(kUInt8) : prob;
    const fs::path out_file = fs::path(a.out) / f.filename();
    data::save_npy(out_file.string(), saved);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    char line[256];
    std::snprintf(line, sizeof line, "%s: %s, foreground %.1f%%, %.2f s", f.filename().string().c_str(),
                  shape_str(prob).c_str(),
                  100.0 * gt(prob, a.threshold).to(kFloat32).mean().item<float>(), seconds);
    std::cout << line;
    if (!a.labels.empty()) {
      const Tensor y = data::read_volume_label((fs::path(a.labels) / f.filename()).string());
      const std::vector<int64_t> want{1, prob.size(0), prob.size(1), prob.size(2)};
      MINIDL_CHECK(y.shape() == want,
                   "predict_unet3d: the label of ", f.string(), " has another shape");
      metrics::OverlapOptions o;
      o.threshold = a.threshold;
      const Tensor p = prob.unsqueeze(0).unsqueeze(0), t = y.unsqueeze(0);
      const double dice = metrics::dice_score(p, t, o).item<double>(), iou = metrics::iou_score(p, t, o).item<double>();
      dice_sum += dice, iou_sum += iou;
      std::snprintf(line, sizeof line, ", Dice %.4f, IoU %.4f", dice, iou);
      std::cout << line;
    }
    std::cout << " -> " << out_file.string() << "\n";
  }
  if (a.labels.empty()) return 0;
  const double n = static_cast<double>(files.size()), dice = dice_sum / n;
  char line[128];
  // %.6g as train_unet3d's metrics.csv, so the two compare as text.
  std::snprintf(line, sizeof line, "mean over %zu volumes: Dice %.6g, IoU %.6g\n", files.size(), dice, iou_sum / n);
  std::cout << line;
  if (a.expect_dice >= 0 && !(dice >= a.expect_dice)) {
    std::cerr << "FAILED: mean Dice " << dice << " < expected " << a.expect_dice << "\n";
    return 3;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Segment .npy volumes with a UNet3d trained by train_unet3d (sliding-window inference)"};
  app.add_option("--checkpoint", a.checkpoint, "train_unet3d's --checkpoint-dir (or its checkpoint.json)")->required();
  app.add_option("--images", a.images, "a folder of .npy volumes, or one .npy file")->required();
  app.add_option("--out", a.out, "folder for the predictions (<name>.npy per input)")->required();
  app.add_option("--labels", a.labels, "a folder of label volumes named as the images: Dice and IoU per volume");
  // A window of 2048^3 voxels is 32 GiB of float32 input before any feature
  // map: beyond that no device holds one (3000000 overflowed int64 in pad).
  const CLI::Validator roi_range(
      [](std::string& text) {
        return examples::detail::check_number(text, "a window edge in [1, 2048] voxels",
                                              [](double v) { return v >= 1 && v <= 2048; });
      },
      "[1, 2048]", "ROI");
  app.add_option("--roi", a.roi, "window edge in voxels (default: the training patch)")->check(roi_range);
  app.add_option("--overlap", a.overlap, "fraction of a window shared with the next, in [0, 1)")
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  app.add_option("--mode", a.mode, "blending of overlapping windows")
      ->check(CLI::IsMember({"constant", "gaussian"}))
      ->capture_default_str();
  app.add_option("--sw-batch-size", a.sw_batch_size, "windows per forward pass")
      ->check(examples::kPositive)
      ->capture_default_str();
  app.add_option("--save", a.save, "probabilities (float32) or mask (uint8)")
      ->check(CLI::IsMember({"probabilities", "mask"}))
      ->capture_default_str();
  app.add_option("--threshold", a.threshold, "foreground where the probability is above it")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--device", a.device, "auto (cuda when a GPU is usable, else cpu), cpu, cuda[:N] or test")
      ->capture_default_str();
  app.add_option("--amp", a.amp, "off, bf16 or fp16 (CUDA only): the forward passes under autocast")
      ->check(CLI::IsMember(examples::amp_modes()))
      ->capture_default_str();
  app.add_option("--threads", a.threads, "compute threads (0: MINIDL_NUM_THREADS/OMP_NUM_THREADS or all cores)")
      ->check(minidl::examples::kNonNegative);
  app.add_option("--expect-dice", a.expect_dice, "exit 3 unless the mean Dice (needs --labels) is >= this")
      ->check(minidl::examples::kNonNegative);  // nan or < 0 turned the check off
  MINIDL_CLI_PARSE(app, argc, argv);
  return examples::run_main("predict_unet3d", [&] {
    MINIDL_CHECK(a.expect_dice < 0 || !a.labels.empty(), "predict_unet3d: --expect-dice needs --labels");
    return run(a);
  });
}
