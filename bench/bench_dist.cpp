// all_reduce bandwidth over the Gloo process group: run under the launcher,
//   build/bin/minidl-launch --nproc-per-node 2 build/bench/bench_dist [--reps N]
// For each size (float32, 4 KiB to 64 MiB), rank 0 prints one JSON line with
// the median time of one all_reduce(SUM) and the algorithm bandwidth
// (bytes / time), as nccl-tests and PyTorch's benchmarks report it.
#include <cstdio>
#include <cstring>

#include "bench/bench_util.h"
#include "minidl/dist/distributed.h"

using namespace minidl;

static int program(int argc, char** argv) {
  auto options = bench::parse_options(argc, argv);
  dist::init_process_group("gloo", "env://", -1, -1, std::chrono::minutes(2));
  const int world = dist::get_world_size();
  {  // warm the connections up (first-use costs are not bandwidth)
    Tensor warm = ones({1 << 18});
    for (int i = 0; i < 20; ++i) dist::all_reduce(warm);
  }
  for (int64_t bytes = 4 << 10; bytes <= (64 << 20); bytes *= 4) {
    Tensor t = ones({bytes / 4});
    // Enough repetitions for small sizes to be measurable.
    const int inner = static_cast<int>(std::max<int64_t>(1, (1 << 20) / bytes));
    dist::barrier();
    double ms = bench::median_ms(
                    [&] {
                      for (int i = 0; i < inner; ++i) dist::all_reduce(t);
                    },
                    options.reps) /
                inner;
    // Every rank's median differs a little; report rank 0's.
    if (dist::get_rank() == 0) {
      std::printf(
          "{\"impl\":\"minidl\",\"op\":\"all_reduce\",\"bytes\":%lld,\"world\":%d,\"median_ms\":%.4f,"
          "\"algbw_gbps\":%.4f}\n",
          static_cast<long long>(bytes), world, ms, bytes / (ms * 1e6));
      std::fflush(stdout);
    }
  }
  dist::destroy_process_group();
  return 0;
}

int main(int argc, char** argv) {
  return minidl::examples::run_main_with_usage("bench_dist", "bench_dist [--threads N] [--reps N] [options]",
                                               [&] { return program(argc, argv); });
}
