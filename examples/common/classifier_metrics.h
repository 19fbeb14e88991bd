// The per-epoch metrics of examples/train_cifar10 (a classifier): kept in its
// checkpoints as JSON so a resumed run plots whole curves, and drawn as
// curves.svg (loss, and accuracy with the test set in eval and train mode:
// BatchNorm's train/eval gap).
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace minidl::examples {

struct EpochMetrics {
  int64_t epoch = 0;
  double lr = 0, train_loss = NAN, train_acc = NAN, test_loss = NAN, test_acc = NAN, test_acc_train_mode = NAN;
  double seconds = 0, images_per_s = 0;
};

nlohmann::json to_json(const EpochMetrics& m);  // NaN (not measured) as null
EpochMetrics metrics_from_json(const nlohmann::json& j);

void write_curves(const std::filesystem::path& path, const std::vector<EpochMetrics>& history,
                  const std::string& title);

}  // namespace minidl::examples
