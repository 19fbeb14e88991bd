// Per-sample transforms on CHW tensors (uint8 images or float32/float64).
// Randomness comes only from the Generator passed in: the DataLoader seeds one
// per sample from (seed, epoch, sample index), so augmentation does not depend
// on the worker count or on which thread runs it. Transforms are immutable and
// may run on several threads at once.
//
//   auto t = std::make_shared<Compose>(std::vector<TransformPtr>{
//       std::make_shared<RandomCrop>(32, 4), std::make_shared<RandomHorizontalFlip>(),
//       std::make_shared<ToFloat>(), std::make_shared<Normalize>(mean, std)});
#pragma once

#include <memory>
#include <vector>

#include "minidl/core/generator.h"
#include "minidl/core/tensor.h"

namespace minidl::data {

class Transform {
 public:
  virtual ~Transform() = default;
  virtual Tensor operator()(const Tensor& x, Generator& gen) const = 0;
};
using TransformPtr = std::shared_ptr<const Transform>;

// Zero-pads each side by `padding`, then cuts a random size x size window
// (top and left drawn in that order, uniform over all valid positions).
class RandomCrop : public Transform {
 public:
  explicit RandomCrop(int64_t size, int64_t padding = 0) : RandomCrop(size, size, padding) {}
  RandomCrop(int64_t height, int64_t width, int64_t padding);
  Tensor operator()(const Tensor& x, Generator& gen) const override;

 private:
  int64_t height_, width_, padding_;
};

// Mirrors left-right with probability p (one uniform draw per call).
class RandomHorizontalFlip : public Transform {
 public:
  explicit RandomHorizontalFlip(double p = 0.5);
  Tensor operator()(const Tensor& x, Generator& gen) const override;

 private:
  double p_;
};

// uint8 -> float32 in [0, 1] (divides by 255); float32 passes through.
class ToFloat : public Transform {
 public:
  Tensor operator()(const Tensor& x, Generator& gen) const override;
};

// (x[c] - mean[c]) / std[c] on a float CHW tensor; one value means every channel.
class Normalize : public Transform {
 public:
  Normalize(std::vector<double> mean, std::vector<double> std);
  Tensor operator()(const Tensor& x, Generator& gen) const override;

 private:
  std::vector<double> mean_, std_;
};

// Applies the transforms in order with the same generator.
class Compose : public Transform {
 public:
  explicit Compose(std::vector<TransformPtr> transforms);
  Tensor operator()(const Tensor& x, Generator& gen) const override;

 private:
  std::vector<TransformPtr> transforms_;
};

}  // namespace minidl::data
