// The four BatchNorm tools on a small conv net, on real CIFAR-10 pixels:
// batch_norm_report, precise_bn, freeze_batch_norm and
// convert_batch_norm_to_group_norm. Prints each step; exits non-zero if a
// tool does not do what it says (it runs in `make test`).
//
//   build/examples/bn_tools [path/to/cifar10-subset/data_batch_1.bin]
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>

#include "examples/common/main_guard.h"
#include "minidl/minidl.h"

using namespace minidl;

// The first `n` images of a CIFAR-10 binary file as float (n, 3, 32, 32) in
// [0, 1], read by hand so this example needs only nn/.
Tensor read_cifar_images(const std::string& path, int64_t n) {
  std::ifstream f(path, std::ios::binary);
  MINIDL_CHECK(f.good() && !std::filesystem::is_directory(path), "bn_tools: cannot open ", path,
               std::filesystem::exists(path) ? (std::filesystem::is_directory(path) ? ": is a directory" : "") : ": no such file");
  std::vector<uint8_t> record(3073);
  std::vector<float> pixels;
  for (int64_t i = 0; i < n && f.read(reinterpret_cast<char*>(record.data()), 3073); ++i)
    for (int k = 1; k < 3073; ++k) pixels.push_back(record[k] / 255.0f);
  const auto got = static_cast<int64_t>(pixels.size() / 3072);
  MINIDL_CHECK(got == n, "bn_tools: ", path, " holds fewer than ", n, " images");
  return tensor(pixels, {n, 3, 32, 32});
}

static int program(int argc, char** argv) {
  if (argc > 2) throw examples::UsageError("expected at most one argument, got " + std::to_string(argc - 1));
  if (argc == 2 && argv[1][0] == '-') throw examples::UsageError(std::string("unknown option '") + argv[1] + "'");
  const std::string path = argc > 1 ? argv[1] : "../shared/data/cifar10-subset/data_batch_1.bin";
  manual_seed(0);
  Tensor images = read_cifar_images(path, 256);

  nn::Sequential model(nn::Conv2d(nn::Conv2dOptions(3, 48, 3).padding(1).bias(false)), nn::BatchNorm2d(48),
                       nn::ReLU(), nn::Conv2d(nn::Conv2dOptions(48, 64, 3).stride(2).bias(false)),
                       nn::BatchNorm2d(64), nn::ReLU(), nn::AdaptiveAvgPool2d(1), nn::Flatten(),
                       nn::Linear(64, 10));
  std::cout << model << "\n";
  bool ok = true;

  // 1. Running stats after three training-mode forwards (no backward needed).
  model->train();
  {
    NoGradGuard no_grad;
    for (int64_t b = 0; b < 3; ++b) model(images.narrow(0, b * 16, 16));
  }
  std::cout << "\nAfter 3 training forwards of 16 images (momentum 0.1: still near the init 0/1):\n"
            << nn::batch_norm_report(*model);

  // 2. PreciseBN: the exact population statistics over 8 batches of 32.
  std::vector<Tensor> batches;
  for (int64_t b = 0; b < 8; ++b) batches.push_back(images.narrow(0, b * 32, 32));
  nn::PreciseBNResult precise = nn::precise_bn(*model, batches);
  std::cout << "\n" << precise << "\nAfter precise_bn over 256 images:\n" << nn::batch_norm_report(*model);
  const auto& bn0 = model->at<nn::BatchNorm2dImpl>(1);
  ok = ok && precise.batches_run == 8 && bn0.num_batches_tracked.item<int64_t>() == 3;

  // 3. freeze_batch_norm: BN stays in eval (running stats frozen) through train().
  nn::freeze_batch_norm(*model);
  model->train();
  const std::vector<float> before = bn0.running_mean.to_vector<float>();
  {
    NoGradGuard no_grad;
    model(images.narrow(0, 0, 16));
  }
  const bool frozen = bn0.running_mean.to_vector<float>() == before;
  std::cout << "\nfreeze_batch_norm: running_mean unchanged by a training forward: " << (frozen ? "yes" : "NO") << "\n";
  ok = ok && frozen;

  // 4. BN -> GroupNorm: C=48 gets 24 groups (48 has no divisor 32), C=64 gets 32.
  nn::GroupNormConversionReport report = nn::convert_batch_norm_to_group_norm(*model);
  std::cout << "\n" << report << "\n" << model << "\n";
  ok = ok && report.layers.size() == 2 && report.layers[0].num_groups == 24 && report.layers[1].num_groups == 32;
  Tensor logits = model(images.narrow(0, 0, 4));
  ok = ok && logits.shape() == Shape{4, 10};

  std::printf("%s\n", ok ? "all four tools behaved as documented" : "a tool did NOT behave as documented");
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  return examples::run_main_with_usage("bn_tools", "bn_tools [path/to/data_batch_1.bin]",
                                       argc, argv, [&] { return program(argc, argv); });
}
