// CIFAR-10 binary reader. Every file is checked before it is used: it must
// exist, hold a whole number of 3073-byte records, and every label must be
// 0-9; errors name the file and the byte offset of the bad record.
#include "minidl/data/cifar10.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "minidl/core/check.h"

namespace minidl::data {

namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> read_file(const std::string& path) {
  // An ifstream opens a directory fine and then fails to read: say what it is.
  std::error_code ec;
  MINIDL_CHECK(!fs::is_directory(path, ec), "CIFAR10: ", path, " is a directory, expected a CIFAR-10 binary file");
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) {
    const int err = errno;
    // A data file given where its folder belongs (--data .../data_batch_1.bin)
    // reads as ".../data_batch_1.bin/data_batch_1.bin: Not a directory".
    const fs::path parent = fs::path(path).parent_path();
    MINIDL_CHECK(err != ENOTDIR || !fs::is_regular_file(parent, ec), "CIFAR10: cannot open ", path, ": ",
                 parent.string(), " is a file, expected the folder that holds the CIFAR-10 .bin files");
    MINIDL_FAIL("CIFAR10: cannot open ", path, ": ", std::strerror(err));
  }
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  MINIDL_CHECK(!in.bad(), "CIFAR10: error reading ", path);
  return bytes;
}

std::vector<std::string> read_class_names(const std::string& path) {
  std::vector<std::string> names;
  std::ifstream in(path);
  MINIDL_CHECK(in.good(), "CIFAR10: cannot open class names file ", path);
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) names.push_back(line);
  }
  MINIDL_CHECK(names.size() == 10, "CIFAR10: expected 10 class names in ", path, ", got ", names.size());
  return names;
}

}  // namespace

CIFAR10::CIFAR10(const std::string& root, bool train) {
  std::vector<std::string> files;
  if (train) {
    for (int i = 1; i <= 5; ++i) files.push_back((fs::path(root) / ("data_batch_" + std::to_string(i) + ".bin")).string());
  } else {
    files.push_back((fs::path(root) / "test_batch.bin").string());
  }
  load(files, "");
}

CIFAR10 CIFAR10::from_files(const std::vector<std::string>& files, const std::string& meta_file) {
  CIFAR10 dataset;
  dataset.load(files, meta_file);
  return dataset;
}

CIFAR10 CIFAR10::from_bytes(std::string_view bytes, const std::string& name) {
  CIFAR10 dataset;
  dataset.decode({name}, {bytes});
  return dataset;
}

void CIFAR10::load(const std::vector<std::string>& files, const std::string& meta_file) {
  MINIDL_CHECK(!files.empty(), "CIFAR10: no files given");
  std::vector<std::vector<uint8_t>> contents;
  std::vector<std::string_view> views;
  for (const auto& path : files) contents.push_back(read_file(path));
  for (const auto& c : contents) views.emplace_back(reinterpret_cast<const char*>(c.data()), c.size());
  decode(files, views);
  std::string meta = meta_file;
  if (meta.empty()) {
    const fs::path beside = fs::path(files.front()).parent_path() / "batches.meta.txt";
    if (fs::exists(beside)) meta = beside.string();
  }
  if (!meta.empty()) classes_ = read_class_names(meta);
}

// Checks every file (whole records, labels 0-9), then copies the images.
void CIFAR10::decode(const std::vector<std::string>& names, const std::vector<std::string_view>& contents) {
  constexpr int64_t kImageBytes = kRecordBytes - 1;
  int64_t total = 0;
  for (size_t f = 0; f < names.size(); ++f) {
    const std::string& path = names[f];
    const auto size = static_cast<int64_t>(contents[f].size());
    MINIDL_CHECK(size > 0, "CIFAR10: ", path, " is empty");
    MINIDL_CHECK(size % kRecordBytes == 0, "CIFAR10: ", path, ": size ", size,
                 " is not a whole number of ", kRecordBytes, "-byte records (a partial record of ",
                 size % kRecordBytes, " bytes starts at byte offset ", size - size % kRecordBytes, ")");
    total += size / kRecordBytes;
  }

  images_ = empty({total, 3, 32, 32}, kUInt8);
  auto* out = images_.data_ptr<uint8_t>();
  labels_.resize(static_cast<size_t>(total));
  int64_t n = 0;
  for (size_t f = 0; f < names.size(); ++f) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(contents[f].data());
    const auto records = static_cast<int64_t>(contents[f].size()) / kRecordBytes;
    for (int64_t r = 0; r < records; ++r, ++n) {
      const uint8_t* record = bytes + r * kRecordBytes;
      MINIDL_CHECK(record[0] <= 9, "CIFAR10: ", names[f], ": label ", int(record[0]),
                   " at byte offset ", r * kRecordBytes, " (record ", r, ") is not a class index 0-9");
      labels_[static_cast<size_t>(n)] = record[0];
      std::memcpy(out + n * kImageBytes, record + 1, kImageBytes);
    }
  }
}

}  // namespace minidl::data
