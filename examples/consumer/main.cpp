// A small program outside minidl's tree: an MLP learns which quadrants of
// the plane have x * y > 0 (not linearly separable), a few hundred SGD steps.
// Prints the first and last loss and the training accuracy; exits 1 unless it
// learned (accuracy >= 0.9). Under minidl-launch it trains data-parallel:
//   minidl-launch --nproc-per-node 2 ./consumer
#include <cstdlib>
#include <iostream>
#include <optional>
#include <vector>

#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/minidl.h"

using namespace minidl;

int main() {
  const bool launched = std::getenv("WORLD_SIZE") != nullptr;  // set by minidl-launch
  if (launched) dist::init_process_group("gloo");
  const int rank = launched ? dist::get_rank() : 0;

  manual_seed(0);
  models::MLP model(2, std::vector<int64_t>{32}, 2);  // 2 inputs, 32 hidden, 2 classes
  std::optional<dist::DistributedDataParallel> ddp;  // broadcasts rank 0's weights
  if (launched) ddp.emplace(model);
  optim::SGD opt(model->parameters(), /*lr=*/0.2, /*momentum=*/0.9);

  manual_seed(1 + rank);  // each rank its own points
  Tensor x = randn({256, 2});
  Tensor y = gt(x.select(1, 0) * x.select(1, 1), 0.0).to(kInt64);
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    Tensor loss = cross_entropy(ddp ? (*ddp)(x) : model(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  NoGradGuard no_grad;
  const double accuracy = mean(eq(argmax(model(x), 1), y).to(kFloat64)).item<double>();
  if (rank == 0) std::cout << "loss " << first << " -> " << last << ", accuracy " << accuracy << "\n";
  if (launched) dist::destroy_process_group();
  return accuracy >= 0.9 ? 0 : 1;
}
