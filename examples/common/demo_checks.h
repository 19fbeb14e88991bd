// What the demo programs (examples/bn_train_eval, examples/amp_bn_demo) share
// for their printed checks: "  check: <what> ... ok" or FAILED, with the
// failures counted for the exit status, and a wall-clock stopwatch.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace minidl::examples {

struct Checks {
  int failed = 0;
  void operator()(bool ok, const std::string& what) {
    std::printf("  check: %s ... %s\n", what.c_str(), ok ? "ok" : "FAILED");
    failed += !ok;
  }
  // The closing line ("total 83.2 s; all checks passed") and the exit status.
  int finish(double total_seconds) const {
    const std::string verdict = failed ? std::to_string(failed) + " check(s) FAILED" : "all checks passed";
    std::printf("total %.1f s; %s\n", total_seconds, verdict.c_str());
    return failed ? 1 : 0;
  }
};

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace minidl::examples
