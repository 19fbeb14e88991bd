#include "examples/common/classifier_data.h"

#include <filesystem>

#include "minidl/data/cifar10.h"
#include "minidl/data/fashion_mnist.h"
#include "minidl/data/subset.h"

namespace minidl::examples {

namespace fs = std::filesystem;

ClassifierData load_classifier_data(const ClassifierDataOptions& o) {
  ClassifierData d;
  if (o.dataset == "fashion-mnist") {
    d.train = std::make_shared<data::FashionMNIST>(o.folder, true);
    d.test = std::make_shared<data::FashionMNIST>(o.folder, false);
    d.channels = 1;
    d.size = 28;
    d.description = "Fashion-MNIST from " + o.folder;
  } else {
    auto in_dir = [&](const std::string& f) { return fs::path(f).is_absolute() || fs::exists(f) ? f : o.folder + "/" + f; };
    std::vector<std::string> train_files, test_files;
    for (const auto& f : o.train_files) train_files.push_back(in_dir(f));
    for (const auto& f : o.test_files) test_files.push_back(in_dir(f));
    if (train_files.empty() && test_files.empty() && fs::exists(o.folder + "/test_batch.bin")) {
      for (int i = 1; i <= 5; ++i) train_files.push_back(o.folder + "/data_batch_" + std::to_string(i) + ".bin");
      test_files.push_back(o.folder + "/test_batch.bin");
    } else {
      // No official test batch (the shared subset): hold out batch 5.
      if (train_files.empty())
        for (int i = 1; i <= 4; ++i) train_files.push_back(o.folder + "/data_batch_" + std::to_string(i) + ".bin");
      if (test_files.empty()) test_files.push_back(o.folder + "/data_batch_5.bin");
    }
    d.train = std::make_shared<data::CIFAR10>(data::CIFAR10::from_files(train_files));
    d.test = std::make_shared<data::CIFAR10>(data::CIFAR10::from_files(test_files));
    auto names = [](const std::vector<std::string>& files) {
      std::string s;
      for (const auto& f : files) s += (s.empty() ? "" : ",") + fs::path(f).filename().string();
      return s;
    };
    d.description = "CIFAR-10 from " + o.folder + " (train " + names(train_files) + ", test " + names(test_files) + ")";
  }
  if (o.limit_train > 0) d.train = std::make_shared<data::Subset>(data::Subset::first(d.train, o.limit_train));
  if (o.limit_test > 0) d.test = std::make_shared<data::Subset>(data::Subset::first(d.test, o.limit_test));
  return d;
}

std::pair<data::TransformPtr, data::TransformPtr> classifier_transforms(const ClassifierData& d, bool augment) {
  std::vector<double> mean, std;
  if (d.channels == 3) {
    mean = {0.4914, 0.4822, 0.4465};
    std = {0.2470, 0.2435, 0.2616};
  } else {
    mean = {0.2860};
    std = {0.3530};
  }
  auto normalize = std::make_shared<data::Normalize>(mean, std);
  auto to_float = std::make_shared<data::ToFloat>();
  std::vector<data::TransformPtr> train;
  if (augment) {
    train.push_back(std::make_shared<data::RandomCrop>(d.size, d.channels == 3 ? 4 : 2));
    train.push_back(std::make_shared<data::RandomHorizontalFlip>());  // clothes are left-right symmetric too
  }
  train.push_back(to_float);
  train.push_back(normalize);
  auto test = std::make_shared<data::Compose>(std::vector<data::TransformPtr>{to_float, normalize});
  return {std::make_shared<data::Compose>(train), test};
}

}  // namespace minidl::examples
