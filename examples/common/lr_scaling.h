// Learning-rate scaling with the global batch size, for data-parallel runs:
//   linear  lr * (total batch / reference batch)        (Goyal et al. 2017, "Accurate, Large Minibatch SGD")
//   sqrt    lr * sqrt(total batch / reference batch)    (often preferred for Adam)
//   none    lr unchanged
// total batch = per-process batch x number of processes.
//
//   const auto s = examples::scale_lr(0.05, "linear", 2 * 128, 128);   // s.lr == 0.1
//   std::cout << s.describe() << "\n";
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace minidl::examples {

const std::vector<std::string>& lr_scaling_modes();  // "none", "linear", "sqrt"

struct ScaledLr {
  std::string mode;
  double base_lr = 0, factor = 1, lr = 0;
  int64_t total_batch = 0, ref_batch = 0;
  // "lr 0.05 x 2 (linear: total batch 256 / reference 128) = 0.1"; "lr 0.05 (not scaled)" for none.
  std::string describe() const;
};

// Throws minidl::Error for an unknown mode or a non-positive batch.
ScaledLr scale_lr(double base_lr, const std::string& mode, int64_t total_batch, int64_t ref_batch);

}  // namespace minidl::examples
