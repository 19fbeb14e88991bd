// CIFAR-10 in the official binary format (cifar-10-binary.tar.gz): each record
// is 1 label byte (0-9) then 3072 pixel bytes (1024 red, 1024 green, 1024 blue,
// row-major 32x32), i.e. already CHW. Files may hold any positive whole number
// of records (the shared subset holds 1017 per file, the official ones 10000).
// All images are kept in memory as uint8 (N, 3, 32, 32); get() returns a uint8
// (3, 32, 32) copy and the label.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "minidl/data/dataset.h"

namespace minidl::data {

class CIFAR10 : public InMemoryImageDataset {
 public:
  static constexpr int64_t kRecordBytes = 3073;

  // root/data_batch_1.bin .. data_batch_5.bin (train) or root/test_batch.bin.
  // Class names come from root/batches.meta.txt when it exists.
  explicit CIFAR10(const std::string& root, bool train = true);

  // Exactly these files, in order (e.g. batches 1-4 to train, 5 to test).
  // Class names come from batches.meta.txt next to the first file when it
  // exists, or from meta_file when given.
  static CIFAR10 from_files(const std::vector<std::string>& files, const std::string& meta_file = "");

  // One batch file's bytes already in memory; `name` stands for the file in
  // error messages. No class names.
  static CIFAR10 from_bytes(std::string_view bytes, const std::string& name);

 private:
  CIFAR10() = default;
  void load(const std::vector<std::string>& files, const std::string& meta_file);
  void decode(const std::vector<std::string>& names, const std::vector<std::string_view>& contents);
};

}  // namespace minidl::data
