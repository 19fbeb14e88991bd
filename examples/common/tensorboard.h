// TensorBoard scalar logging without TensorFlow or protobuf: a TFRecord file
// of hand-encoded Event protos, readable by `tensorboard --logdir DIR`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

namespace minidl::examples {

// CRC32C (Castagnoli), as TFRecord framing needs; zlib only has plain CRC32.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// TFRecord stores CRCs masked so that CRCs of CRCs stay well distributed.
uint32_t masked_crc32c(const void* data, size_t n);

class TensorBoardWriter {
 public:
  // Creates log_dir (with parents) and the file
  // events.out.tfevents.<unix time>.<hostname>.<pid> inside it.
  explicit TensorBoardWriter(const std::string& log_dir);
  void add_scalar(const std::string& tag, double value, int64_t step);
  void flush();
  ~TensorBoardWriter();
  const std::string& path() const;

  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

 private:
  void write_record(const std::string& data);

  std::string path_;
  std::ofstream out_;
};

}  // namespace minidl::examples
