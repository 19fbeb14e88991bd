// What every bench/ program shares: --threads/--reps options, the median
// timer, and the JSON line format bench/run_bench.py reads.
#pragma once

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// Median wall time of f() in milliseconds over `reps` runs, after 3 warm-up calls.
inline double median_ms(const std::function<void()>& f, int reps) {
  for (int i = 0; i < 3; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// {"impl":"minidl","op":...,"shape":...,"median_ms":...,"gflops":...,"threads":...,"version":...}
inline void print_result(const std::string& op, const std::string& shape, double ms, double flops, int threads,
                         const std::string& version) {
  std::printf(
      "{\"impl\":\"minidl\",\"op\":\"%s\",\"shape\":\"%s\",\"median_ms\":%.3f,\"gflops\":%.1f,\"threads\":%d,"
      "\"version\":\"%s\"}\n",
      op.c_str(), shape.c_str(), ms, flops / (ms * 1e6), threads, version.c_str());
  std::fflush(stdout);
}

}  // namespace minidl::bench
