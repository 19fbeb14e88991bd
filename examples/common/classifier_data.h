// train_cifar10's data: CIFAR-10 binary batches (the official release or the
// shared subset, which has no test batch: batch 5 is held out) or
// Fashion-MNIST, optionally cut to their first images, and the usual
// transforms (random crop with padding and horizontal flip for training,
// per-channel normalization with the data set's mean and std).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "minidl/data/dataset.h"
#include "minidl/data/transforms.h"

namespace minidl::examples {

struct ClassifierDataOptions {
  std::string dataset = "cifar10";  // or "fashion-mnist"
  std::string folder;               // --data
  std::vector<std::string> train_files, test_files;  // CIFAR-10: names in `folder`, or paths
  int64_t limit_train = 0, limit_test = 0;           // 0: all images
};

struct ClassifierData {
  std::shared_ptr<const data::Dataset> train, test;
  std::string description;  // what was loaded, for the program's first lines
  int64_t channels = 3, size = 32;
};

// Errors (a missing or corrupt file) name the file.
ClassifierData load_classifier_data(const ClassifierDataOptions& options);

// {train, test} transforms; augment: random crop + flip in the train one.
std::pair<data::TransformPtr, data::TransformPtr> classifier_transforms(const ClassifierData& d, bool augment);

}  // namespace minidl::examples
