// What every bench/ program shares: --threads/--reps options, the median
// timer, and the JSON line format bench/run_bench.py reads.
#pragma once

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "examples/common/main_guard.h"

namespace minidl::bench {

struct Options {
  int reps = 15;
  int threads = 2;
};

// Reads --threads N and --reps N (a bad number throws examples::UsageError), and sets the thread count.
inline Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--threads") == 0) o.threads = std::max<int>(1, examples::parse_int_arg(argv[i + 1], "--threads"));
    if (std::strcmp(argv[i], "--reps") == 0) o.reps = std::max<int>(1, examples::parse_int_arg(argv[i + 1], "--reps"));
  }
  omp_set_num_threads(o.threads);
  return o;
}

// CPU time of the calling thread in milliseconds (CLOCK_THREAD_CPUTIME_ID).
inline double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// The median CPU time of the calling thread over the last median_ms's runs,
// which print_result adds as "cpu_ms": at --threads 1 the op runs on that
// thread, and on a loaded machine it moves much less than wall time.
inline double& last_cpu_ms() {
  static double ms = 0;
  return ms;
}

// Median wall time of f() in milliseconds over `reps` runs, after warm-up
// calls: at least 3 and at least 50 ms of them. A fast op's first dozens of
// calls can be several times slower (glibc raises its mmap threshold only
// after freeing a few large blocks, so early outputs are fresh pages: a 1 MB
// softmax read 0.24 ms instead of 0.05 over its first 12 calls).
// warm_ms = 0: exactly 3 warm-up calls, as a program whose f runs
// collectives needs (every rank must call f equally often: with a time-based
// warm-up the ranks' counts differed and bench_dist hung in an all_reduce
// one rank never joined).
inline double median_ms(const std::function<void()>& f, int reps, int warm_ms = 50) {
  const auto warm_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(warm_ms);
  for (int i = 0; i < 3 || std::chrono::steady_clock::now() < warm_until; ++i) f();
  std::vector<double> ms, cpu;
  for (int i = 0; i < reps; ++i) {
    const double c0 = thread_cpu_ms();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    cpu.push_back(thread_cpu_ms() - c0);
  }
  std::sort(ms.begin(), ms.end());
  std::sort(cpu.begin(), cpu.end());
  last_cpu_ms() = cpu[cpu.size() / 2];
  return ms[ms.size() / 2];
}

// {"impl":"minidl","op":...,"shape":...,"median_ms":...,"gflops":...,"threads":...,"version":...,"cpu_ms":...}
// (cpu_ms: last_cpu_ms(), from the median_ms call that timed this result)
inline void print_result(const std::string& op, const std::string& shape, double ms, double flops, int threads,
                         const std::string& version) {
  std::printf(
      "{\"impl\":\"minidl\",\"op\":\"%s\",\"shape\":\"%s\",\"median_ms\":%.3f,\"gflops\":%.1f,\"threads\":%d,"
      "\"version\":\"%s\",\"cpu_ms\":%.3f}\n",
      op.c_str(), shape.c_str(), ms, flops / (ms * 1e6), threads, version.c_str(), last_cpu_ms());
  std::fflush(stdout);
}

}  // namespace minidl::bench
