// all_reduce bandwidth over the Gloo process group: run under the launcher,
//   build/bin/minidl-launch --nproc-per-node 2 build/bench/bench_dist [--reps N] [--bytes B]
// For each size (float32, 4 KiB to 64 MiB, or only --bytes B), rank 0 prints
// one JSON line with the median time of one all_reduce(SUM) (timed in groups
// of --inner calls, default enough for ~1 MiB), the mean over all calls, the algorithm
// bandwidth (bytes / time), as nccl-tests and PyTorch's benchmarks report it,
// and its process's context switches per all_reduce (getrusage, all threads):
// voluntary ones are the blocking waits, which under contention each can cost
// a scheduler tick, and the time its threads spent runnable but waiting for a
// core (run_delay in /proc/self/task/*/schedstat). --threads-detail 1 prints
// that per thread (in creation order) on stderr.
#include <dirent.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>

#include "bench/bench_util.h"
#include "minidl/dist/distributed.h"

using namespace minidl;

static void context_switches(long& voluntary, long& involuntary) {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  voluntary = u.ru_nvcsw;
  involuntary = u.ru_nivcsw;
}

// tid -> {run_delay_ns, timeslices} of every thread of this process.
static std::map<int, std::pair<double, double>> schedstats() {
  std::map<int, std::pair<double, double>> out;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/schedstat");
      double cpu = 0, delay = 0, slices = 0;
      if (f >> cpu >> delay >> slices) out[std::atoi(e->d_name)] = {delay, slices};
    }
    closedir(d);
  }
  return out;
}

static int program(int argc, char** argv) {
  auto options = bench::parse_options(argc, argv);
  int64_t only_bytes = 0;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::strcmp(argv[i], "--bytes") == 0) only_bytes = examples::parse_int_arg(argv[i + 1], "--bytes");
  int64_t inner_arg = 0;  // 0: enough calls per timing for ~1 MiB
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::strcmp(argv[i], "--inner") == 0) inner_arg = examples::parse_int_arg(argv[i + 1], "--inner");
  bool detail = false;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::strcmp(argv[i], "--threads-detail") == 0) detail = examples::parse_int_arg(argv[i + 1], "--threads-detail");
  dist::init_process_group("gloo", "env://", -1, -1, std::chrono::minutes(2));
  const int world = dist::get_world_size();
  {  // warm the connections up (first-use costs are not bandwidth)
    Tensor warm = ones({1 << 18});
    for (int i = 0; i < 20; ++i) dist::all_reduce(warm);
  }
  for (int64_t bytes = 4 << 10; bytes <= (64 << 20); bytes *= 4) {
    if (only_bytes && bytes != only_bytes) continue;
    Tensor t = ones({bytes / 4});
    // Enough repetitions for small sizes to be measurable.
    const int inner = static_cast<int>(inner_arg > 0 ? inner_arg : std::max<int64_t>(1, (1 << 20) / bytes));
    dist::barrier();
    long v0, iv0, v1, iv1;
    context_switches(v0, iv0);
    auto s0 = schedstats();
    const auto start = std::chrono::steady_clock::now();
    double ms = bench::median_ms(
                    [&] {
                      for (int i = 0; i < inner; ++i) dist::all_reduce(t);
                    },
                    options.reps, /*warm_ms=*/0) /
                inner;
    const double total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    context_switches(v1, iv1);
    auto s1 = schedstats();
    const double calls = double(inner) * (options.reps + 3);  // median_ms runs 3 warm-up calls of f
    double delay_us = 0, slices = 0;
    for (auto& [tid, st] : s1) {
      auto it = s0.find(tid);
      const double d = (st.first - (it == s0.end() ? 0 : it->second.first)) / 1e3 / calls;
      const double n = (st.second - (it == s0.end() ? 0 : it->second.second)) / calls;
      delay_us += d;
      slices += n;
      if (detail && dist::get_rank() == 0 && n > 0.01)
        std::fprintf(stderr, "bytes %lld thread %d: run_delay %.1f us, runs %.2f per all_reduce\n",
                     static_cast<long long>(bytes), tid, d, n);
    }
    // Every rank's median differs a little; report rank 0's.
    if (dist::get_rank() == 0) {
      std::printf(
          "{\"impl\":\"minidl\",\"op\":\"all_reduce\",\"bytes\":%lld,\"world\":%d,\"median_ms\":%.4f,\"mean_ms\":%.4f,"
          "\"algbw_gbps\":%.4f,\"vcsw\":%.2f,\"ivcsw\":%.2f,\"run_delay_us\":%.1f,\"runs\":%.2f}\n",
          static_cast<long long>(bytes), world, ms, total_ms / calls, bytes / (ms * 1e6), (v1 - v0) / calls, (iv1 - iv0) / calls,
          delay_us, slices);
      std::fflush(stdout);
    }
  }
  dist::destroy_process_group();
  return 0;
}

int main(int argc, char** argv) {
  return minidl::examples::run_main_with_usage("bench_dist",
                                               "bench_dist [--threads N] [--reps N] [--bytes B] [--inner N] [--threads-detail 1] [options]",
                                               argc, argv, [&] { return program(argc, argv); });
}
