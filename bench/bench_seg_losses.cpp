// Times the segmentation losses, amax and the overlap metrics on a 3-D
// segmentation-sized batch, forward + backward, and prints one JSON object
// per line (bench/bench_util.h's format; gflops is 0: these are memory-bound).
// bench/bench_seg_losses_torch.py prints the same lines for PyTorch (Dice is
// written there with torch ops, the formula of ops/dice_loss.h).
// Options: --threads N (default 2), --reps N (default 15).
#include <functional>
#include <string>

#include "bench/bench_util.h"
#include "minidl/minidl.h"

using namespace minidl;

namespace {

bench::Options g_options;

void report(const std::string& op, const std::string& shape, const std::function<void()>& f) {
  bench::print_result(op, shape, bench::median_ms(f, g_options.reps), 0.0, g_options.threads, "minidl");
}

// loss(x, t).backward() with fresh gradients each time.
void fwd_bwd(const std::string& op, const std::string& shape, Tensor x, Tensor t,
             const std::function<Tensor(const Tensor&, const Tensor&)>& loss) {
  x.requires_grad_(true);
  report(op, shape, [&] {
    x.set_grad(Tensor());
    loss(x, t).backward();
  });
}

}  // namespace

int main(int argc, char** argv) {
  g_options = bench::parse_options(argc, argv);
  manual_seed(0);
  const std::string vol = "2x1x64x64x64";
  const Tensor logits = randn({2, 1, 64, 64, 64}), masks = gt(rand({2, 1, 64, 64, 64}), 0.7);
  fwd_bwd("bce_with_logits_fwd_bwd", vol, logits, masks,
          [](const Tensor& x, const Tensor& t) { return binary_cross_entropy_with_logits(x, t); });
  fwd_bwd("dice_loss_fwd_bwd", vol, logits, masks, [](const Tensor& x, const Tensor& t) { return dice_loss(x, t); });
  fwd_bwd("bce_dice_loss_fwd_bwd", vol, logits, masks,
          [](const Tensor& x, const Tensor& t) { return bce_dice_loss(x, t); });
  report("dice_score", vol, [&] { (void)metrics::dice_score(logits, masks, {.from_logits = true}); });

  const std::string cls = "2x4x32x64x64";
  const Tensor x4 = randn({2, 4, 32, 64, 64}), labels = randint(0, 4, {2, 32, 64, 64});
  const Tensor weight = tensor<float>({0.1f, 1.0f, 2.0f, 3.0f});
  fwd_bwd("cross_entropy_weighted_fwd_bwd", cls, x4, labels,
          [&](const Tensor& x, const Tensor& t) { return cross_entropy(x, t, weight); });
  const Tensor soft = softmax(randn({2, 4, 32, 64, 64}), 1);
  fwd_bwd("cross_entropy_probs_fwd_bwd", cls, x4, soft, [](const Tensor& x, const Tensor& t) { return cross_entropy(x, t); });
  fwd_bwd("amax_dims_fwd_bwd", cls, x4, Tensor(),
          [](const Tensor& x, const Tensor&) { return amax(x, {2, 3, 4}).sum(); });
  return 0;
}
