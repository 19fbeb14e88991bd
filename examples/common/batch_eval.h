// A classifier run over a whole in-memory dataset in consecutive batches of a
// chosen size, under no_grad: the number of correct predictions, the summed
// cross-entropy and, if asked, every logit. Either in the model's current mode
// or in train mode with every buffer put back afterwards: a train-mode pass
// overwrites the running statistics that eval mode uses (BatchNorm). What
// examples/bn_train_eval measures its train/eval differences with.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "minidl/core/tensor.h"
#include "minidl/data/dataset.h"
#include "minidl/data/transforms.h"
#include "minidl/nn/module.h"

namespace minidl::examples {

// A whole dataset as one float tensor (N, 3, 32, 32) after `transform`, with its labels.
struct Images {
  Tensor x;
  Tensor y;  // int64 (N)
  int64_t size() const { return x.size(0); }
  // The first n images (all of them when there are fewer), as views.
  Images first(int64_t n) const {
    const int64_t k = n < size() ? n : size();
    return {x.narrow(0, 0, k), y.narrow(0, 0, k)};
  }
};

// `program` names the caller in the error for an empty dataset.
Images load_all(std::shared_ptr<const data::Dataset> ds, data::TransformPtr transform, const std::string& program);

// Saves every buffer of a model and puts it back: train-mode forwards change
// running_mean, running_var and num_batches_tracked.
struct BufferSnapshot {
  std::vector<std::pair<Tensor, Tensor>> saved;
  explicit BufferSnapshot(nn::Module& m);
  void restore();
};

struct Eval {
  int64_t correct = 0;
  double loss_sum = 0;
  Tensor logits;  // all of them, (N, 10)
};

// Forwards `images` in consecutive batches of `batch` (the last one may be
// smaller) in the model's current mode, under no_grad.
Eval run_batches(nn::Module& model, const Images& data, int64_t batch, bool keep_logits = false);

// The same in train mode, then eval mode and the buffers put back: a
// train-mode pass overwrites the running statistics that eval mode uses.
Eval run_batches_train_mode(nn::Module& model, const Images& data, int64_t batch, bool keep_logits = false);

}  // namespace minidl::examples
