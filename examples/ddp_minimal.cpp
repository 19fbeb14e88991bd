// The README's data-parallel example, runnable:
//   build/bin/minidl-launch --nproc-per-node 2 build/examples/ddp_minimal [CIFAR_DIR] [EPOCHS]
// ResNet-20 with SyncBatchNorm under DDP on CIFAR-10 (data_batch_1..5 in
// CIFAR_DIR; default the shared subset). Prints rank 0's mean loss per epoch
// and saves the model on rank 0.
#include <cstdlib>
#include <iostream>

#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/sync_batch_norm.h"
#include "examples/common/main_guard.h"
#include "minidl/minidl.h"

using namespace minidl;

static int program(int argc, char** argv) {
  if (argc > 3) throw examples::UsageError("expected at most two arguments, got " + std::to_string(argc - 1));
  const std::string root = argc > 1 ? argv[1] : "../shared/data/cifar10-subset";
  const int64_t epochs = argc > 2 ? examples::parse_int_arg(argv[2], "EPOCHS") : 2;
  if (epochs < 1) throw examples::UsageError("EPOCHS: expected a positive number, got " + std::to_string(epochs));
  auto train = std::make_shared<data::CIFAR10>(root, /*train=*/true);

  dist::init_process_group("gloo");  // env:// from minidl-launch; or "tcp://host:port", "file:///path"
  manual_seed(0);
  auto model = nn::convert_sync_batch_norm(models::create_model("resnet20"));  // optional: BN -> SyncBN
  dist::DistributedDataParallel ddp(model);  // broadcasts rank 0's weights, checks shapes match
  optim::SGD opt(model->parameters(), 0.1, 0.9);
  auto sampler = std::make_shared<data::DistributedSampler>(train->size(), dist::get_world_size(), dist::get_rank());
  data::DataLoader loader(train, {.batch_size = 32, .sampler = sampler, .transform = std::make_shared<data::ToFloat>()});
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    loader.set_epoch(epoch);  // a new shuffle each epoch, the same on every rank
    double loss_sum = 0;
    int64_t steps = 0;
    for (auto& b : loader) {
      Tensor loss = cross_entropy(ddp(b.data), b.targets);
      opt.zero_grad();
      loss.backward();  // buckets all-reduced during backward, averaged
      opt.step();
      loss_sum += dist::reduce_tensor(loss.detach()).item<double>();  // the mean over ranks
      ++steps;
    }
    if (dist::get_rank() == 0) std::cout << "epoch " << epoch + 1 << ": mean loss " << loss_sum / steps << std::endl;
  }
  if (dist::get_rank() == 0) nn::save_state_dict(*model, "ddp_minimal.safetensors");  // no "module." prefix
  dist::destroy_process_group();
  return 0;
}

int main(int argc, char** argv) {
  return examples::run_main_with_usage("ddp_minimal", "ddp_minimal [CIFAR_DIR] [EPOCHS] (under minidl-launch)",
                                       argc, argv, [&] { return program(argc, argv); });
}
