// Data-parallel training throughput of the small net: one process, or several
// under the launcher with DDP (gradients all-reduced during backward):
//   build/bench/bench_ddp --threads 2 --batch 128
//   build/bin/minidl-launch --nproc-per-node 2 build/bench/bench_ddp --threads 1 --batch 64 [--norm syncbatchnorm]
// A step is forward, cross_entropy, zero_grad, backward, SGD step on a fixed
// random batch per rank. Rank 0 prints one JSON line: the median step time
// (after a barrier, over --reps steps) and images/s over all ranks
// (world * batch / step time). bench/run_bench_ddp.py compares the settings
// and PyTorch's DDP.
#include <cstdio>
#include <cstring>
#include <memory>

#include "bench/bench_util.h"
#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/sync_batch_norm.h"
#include "minidl/minidl.h"

using namespace minidl;

static int program(int argc, char** argv) {
  const auto options = bench::parse_options(argc, argv);
  int64_t batch = 128;
  std::string norm = "batchnorm";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--batch") == 0) batch = examples::parse_int_arg(argv[i + 1], argv[i]);
    if (std::strcmp(argv[i], "--norm") == 0) norm = argv[i + 1];
  }
  const bool distributed = std::getenv("RANK") && std::getenv("WORLD_SIZE");
  if (distributed) dist::init_process_group("gloo", "env://");
  const int rank = distributed ? dist::get_rank() : 0, world = distributed ? dist::get_world_size() : 1;

  manual_seed(0);
  auto model = models::create_model("smallnet", models::ModelOptions().norm(norm == "syncbatchnorm" ? "batchnorm" : norm));
  if (norm == "syncbatchnorm") model = nn::convert_sync_batch_norm(model);
  model->train();
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  if (distributed) ddp = std::make_unique<dist::DistributedDataParallel>(model);
  optim::SGD sgd(model->parameters(), 0.1, 0.9, 0.0, 5e-4);
  manual_seed(1 + rank);  // each rank its own batch
  const Tensor x = randn({batch, 3, 32, 32});
  const Tensor y = randint(0, 10, {batch});

  if (distributed) dist::barrier();
  const double ms = bench::median_ms(
      [&] {
        Tensor loss = cross_entropy(ddp ? ddp->forward(x) : model->forward(x), y);
        sgd.zero_grad();
        loss.backward();
        sgd.step();
      },
      options.reps, /*warm_ms=*/0);  // the same number of steps (collectives) on every rank
  if (rank == 0) {
    std::printf(
        "{\"impl\":\"minidl\",\"op\":\"ddp_step_smallnet\",\"norm\":\"%s\",\"world\":%d,\"batch\":%lld,"
        "\"threads\":%d,\"median_ms\":%.3f,\"images_per_s\":%.1f}\n",
        norm.c_str(), world, static_cast<long long>(batch), options.threads, ms, 1000.0 * world * batch / ms);
    std::fflush(stdout);
  }
  ddp.reset();
  if (distributed) dist::destroy_process_group();
  return 0;
}

int main(int argc, char** argv) {
  return minidl::examples::run_main_with_usage(
      "bench_ddp", "bench_ddp [--threads N] [--reps N] [--batch N] [--norm NAME] (alone or under minidl-launch)",
      argc, argv, [&] { return program(argc, argv); });
}
