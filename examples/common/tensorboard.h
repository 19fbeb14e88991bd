// TensorBoard scalar and image logging without TensorFlow or protobuf: a
// TFRecord file of hand-encoded Event protos, readable by
// `tensorboard --logdir DIR`. Images are stored PNG-encoded (stb_image_write).
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "minidl/core/tensor.h"

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
  // An image, as PyTorch's SummaryWriter.add_image: (H, W) or (C, H, W) with
  // C = 1 (grey), 3 (RGB) or 4 (RGBA); uint8 as is, float32/float64 in [0, 1]
  // (scaled by 255, rounded, clamped; NaN becomes 0). Any device.
  void add_image(const std::string& tag, const Tensor& image, int64_t step);
  // The same from raw interleaved pixels: height * width * channels bytes, HWC.
  void add_image(const std::string& tag, const uint8_t* hwc, int height, int width, int channels, int64_t step);
  void flush();
  ~TensorBoardWriter();
  const std::string& path() const;

  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

 private:
  void write_record(const std::string& data);
  void write_summary_value(const std::string& summary_value, int64_t step);  // wraps it in an Event

  std::string path_;
  std::ofstream out_;
};

}  // namespace minidl::examples
