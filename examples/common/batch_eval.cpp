// A classifier over an in-memory dataset in batches; see batch_eval.h.
#include "examples/common/batch_eval.h"

#include <algorithm>

#include "examples/common/example_data.h"
#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/check.h"
#include "minidl/data/dataloader.h"
#include "minidl/ops/loss.h"
#include "minidl/ops/shape_ops.h"

namespace minidl::examples {

Images load_all(std::shared_ptr<const data::Dataset> ds, data::TransformPtr transform, const std::string& program) {
  data::DataLoaderOptions options;  // (assigned, not designated: -Wmissing-field-initializers)
  options.batch_size = ds->size();
  options.transform = std::move(transform);
  data::DataLoader loader(ds, options);
  for (data::Batch& b : loader) return {b.data.contiguous(), b.targets.contiguous()};
  MINIDL_FAIL(program, ": empty dataset");
}

BufferSnapshot::BufferSnapshot(nn::Module& m) {
  for (auto& [name, buf] : m.named_buffers()) saved.emplace_back(buf, buf.clone());
}

void BufferSnapshot::restore() {
  NoGradGuard no_grad;
  for (auto& [buf, copy] : saved) buf.copy_(copy);
}

Eval run_batches(nn::Module& model, const Images& data, int64_t batch, bool keep_logits) {
  NoGradGuard no_grad;
  Eval e;
  std::vector<Tensor> all;
  for (int64_t s = 0; s < data.size(); s += batch) {
    const int64_t n = std::min(batch, data.size() - s);
    Tensor logits = model.forward(data.x.narrow(0, s, n));
    Tensor target = data.y.narrow(0, s, n);
    e.loss_sum += cross_entropy(logits, target, Reduction::Sum).item<double>();
    e.correct += count_correct(logits, target);
    if (keep_logits) all.push_back(logits);
  }
  if (keep_logits) e.logits = cat(all, 0);
  return e;
}

Eval run_batches_train_mode(nn::Module& model, const Images& data, int64_t batch, bool keep_logits) {
  BufferSnapshot snapshot(model);
  model.train();
  Eval e = run_batches(model, data, batch, keep_logits);
  model.eval();
  snapshot.restore();
  return e;
}

}  // namespace minidl::examples
