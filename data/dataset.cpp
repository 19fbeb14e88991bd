// TensorDataset and the in-memory image store shared by CIFAR-10 and
// Fashion-MNIST. get() copies one sample out so callers may modify it.
#include "minidl/data/dataset.h"

#include <cmath>
#include <cstring>

#include "minidl/core/check.h"

namespace minidl::data {

void detail::check_index(const char* who, int64_t index, int64_t size) {
  MINIDL_CHECK(index >= 0 && index < size, who, ": index ", index,
               " is out of range for a dataset of size ", size);
}

namespace {
// A copy of row `index` of a contiguous CPU tensor.
Tensor copy_row(const Tensor& t, int64_t index) {
  Shape shape(t.shape().begin() + 1, t.shape().end());
  const size_t row_bytes = t.nbytes() / static_cast<size_t>(t.size(0));
  const auto* base = static_cast<const char*>(t.raw_data());
  return from_buffer(base + row_bytes * static_cast<size_t>(index), shape, t.dtype());
}
}  // namespace

TensorDataset::TensorDataset(Tensor data, Tensor targets) {
  MINIDL_CHECK(data.defined() && targets.defined(), "TensorDataset: data and targets must be defined");
  MINIDL_CHECK(data.dim() >= 1, "TensorDataset: data must have at least 1 dimension, got a 0-D tensor");
  MINIDL_CHECK(!data.is_cuda() && !targets.is_cuda(), "TensorDataset: expected CPU tensors");
  MINIDL_CHECK(targets.dim() == 1, "TensorDataset: expected 1-D targets, got ", targets.dim(), "-D");
  MINIDL_CHECK(targets.size(0) == data.size(0), "TensorDataset: size mismatch between data (",
               data.size(0), " samples) and targets (", targets.size(0), ")");
  data_ = data.contiguous();
  // Targets are class indices (Example::target): integer tensors as they are,
  // floating ones only when every value is a whole number (to_vector<int64_t>
  // would truncate 0.5 without a word), read once as double.
  if (!is_floating(targets.dtype())) {
    targets_ = targets.to_vector<int64_t>();
    return;
  }
  const std::vector<double> values = targets.to_vector<double>();
  targets_.reserve(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    MINIDL_CHECK(std::trunc(values[i]) == values[i] && std::fabs(values[i]) < 0x1p63, "TensorDataset: ",
                 "targets are class indices, got ", values[i], " at index ", i, " of a ", dtype_name(targets.dtype()),
                 " tensor (minidl's Example::target is an int64 label)");
    targets_.push_back(static_cast<int64_t>(values[i]));
  }
}

Example TensorDataset::get(int64_t index) const {
  detail::check_index("TensorDataset", index, size());
  return {copy_row(data_, index), targets_[static_cast<size_t>(index)]};
}

Example InMemoryImageDataset::get(int64_t index) const {
  detail::check_index("Dataset", index, size());
  return {copy_row(images_, index), labels_[static_cast<size_t>(index)]};
}

}  // namespace minidl::data
