// Dataset: random access to (sample, label) pairs. get() must be safe to call
// from several threads at once (the DataLoader's workers do), so datasets keep
// no mutable state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "minidl/core/tensor.h"

namespace minidl::data {

struct Example {
  Tensor data;         // one sample, e.g. uint8 (C, H, W)
  int64_t target = 0;  // class index
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
};

// Samples are data[i] (a copy), targets are targets[i]; data's first dim and
// targets (1-D class indices: an integer tensor, or a floating one holding
// whole numbers; 0.5 is refused) must have the same length.
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor data, Tensor targets);
  int64_t size() const override { return data_.size(0); }
  Example get(int64_t index) const override;

 private:
  Tensor data_;  // contiguous
  std::vector<int64_t> targets_;
};

// Shared by the file-backed datasets: images stored as one contiguous uint8
// (N, C, H, W) buffer, labels as int64.
class InMemoryImageDataset : public Dataset {
 public:
  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Example get(int64_t index) const override;
  const Tensor& images() const { return images_; }  // uint8 (N, C, H, W)
  const std::vector<int64_t>& labels() const { return labels_; }
  const std::vector<std::string>& classes() const { return classes_; }

 protected:
  Tensor images_;
  std::vector<int64_t> labels_;
  std::vector<std::string> classes_;
};

namespace detail {
void check_index(const char* who, int64_t index, int64_t size);
}  // namespace detail

}  // namespace minidl::data
