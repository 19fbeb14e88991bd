// What the example programs share about their data: where to find it when
// --data is not given, and how many predictions match the labels.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "minidl/core/tensor.h"

namespace minidl::examples {

// The repository root: the nearest folder above the executable
// (build*/examples/<name>) that holds minidl.h, so default data paths work
// from any working directory. The working directory if there is none.
std::filesystem::path repo_root();

// train_cifar10's --data default. "fashion-mnist": Debian's
// /usr/share/datasets/fashion-mnist. Otherwise the first folder holding
// data_batch_1.bin of <root>/data/cifar-10-batches-bin (the official release)
// and <root>/../shared/data/cifar10-subset; the official one if neither does.
std::string default_data_dir(const std::string& dataset = "cifar10");

// <root>/../shared/data/cifar10-subset, canonical: the 5,085-image subset,
// for examples whose run time and claims are sized for it.
std::string shared_cifar10_subset_dir();

// How many rows of logits (N, classes) have their argmax equal to targets (N, int64).
int64_t count_correct(const Tensor& logits, const Tensor& targets);

}  // namespace minidl::examples
