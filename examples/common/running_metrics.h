// A training epoch's loss and accuracy, summed on the model's device and read
// back to the host every `every` steps (train_cifar10 --log-every): each read
// waits for the device, so reading loss.item() after every step would keep a
// GPU idle while the host catches up. On the CPU a read costs nothing.
//
// The sums are added in place into buffers made at the first batch and kept
// across reset(): so a CUDA graph that captured accumulate() (train_cifar10
// --cuda-graph) keeps adding into them at every replay, and count() does the
// host's half for each replay.
#pragma once

#include <cstdint>

#include "minidl/core/tensor.h"

namespace minidl::examples {

class RunningMetrics {
 public:
  explicit RunningMetrics(int64_t every);

  // One batch: its mean loss (a 0-d tensor), logits (N, classes), targets (N).
  // accumulate() then count(N). Reads the sums back when this is the every-th
  // batch since the last read.
  void add(const Tensor& loss, const Tensor& logits, const Tensor& targets);
  // The device half of add(): loss * N and the correct predictions added to
  // the device sums (no host read, capturable).
  void accumulate(const Tensor& loss, const Tensor& logits, const Tensor& targets);
  // The host half: one more batch of n samples; reads back when due.
  void count(int64_t n);
  // Whether the last add()/count() read the sums back (time to show progress).
  bool fresh() const { return fresh_; }
  // Reads the sums back now (at the end of an epoch).
  void read();
  // Zeroes everything for the next epoch, the device sums in place.
  void reset();

  // As of the last read.
  double loss_sum() const { return loss_sum_; }  // sum over samples of the loss
  int64_t correct() const { return correct_; }
  int64_t seen() const { return seen_; }

 private:
  int64_t every_, pending_ = 0, seen_ = 0, seen_on_device_ = 0, correct_ = 0;
  double loss_sum_ = 0;
  bool fresh_ = false;
  Tensor device_loss_sum_, device_correct_;  // float64 and int64, on the model's device
};

}  // namespace minidl::examples
