// The README's 15-line example: a tiny conv net built from ops, one backward.
#include <iostream>

#include "examples/common/main_guard.h"
#include "minidl/minidl.h"
using namespace minidl;

static int program() {
  manual_seed(0);
  Tensor x = randn({8, 3, 16, 16});                          // a batch of images, NCHW
  Tensor w = (randn({4, 3, 3, 3}) * 0.1).requires_grad_();    // conv weight
  Tensor fc = (randn({10, 4}) * 0.1).requires_grad_();        // classifier weight
  Tensor labels = randint(0, 10, {8});

  Tensor h = relu(conv2d(x, w, Tensor(), {.padding = {1, 1}}));
  Tensor logits = linear(adaptive_avg_pool2d(h, {1, 1}).flatten(1), fc);
  Tensor loss = cross_entropy(logits, labels);
  loss.backward();
  std::cout << loss << "\n" << w.grad()[0][0] << "\n";       // PyTorch-style printing
  return 0;
}

int main(int argc, char** argv) {
  return minidl::examples::run_main_without_arguments(
      "quickstart", "The README's 15-line example: a tiny conv net built from ops, one backward.", argc, argv, program);
}
