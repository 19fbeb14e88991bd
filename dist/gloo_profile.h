// GlooProfile: where the time of ProcessGroupGloo's collectives goes, for
// measuring (MINIDL_GLOO_PROFILE=1; off by default and then free). Per
// collective and size it keeps, in microseconds:
//   handoff  issue -> the collective starts (queue + worker thread wake-up)
//   run      the collective itself (Gloo: transport, waits for the peers, reduce)
//   run_cpu  CPU time of the thread that ran it, during run
//   reduce   time inside the reduce function (part of run)
//   wake     the collective finished -> wait() returned (waiter wake-up)
//   total    issue -> wait() returned
// and prints their medians (and 90th percentiles) on stderr when the group is
// destroyed, one line per collective and size.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace minidl::dist {

class GlooProfile {
 public:
  using Clock = std::chrono::steady_clock;
  enum Phase { kHandoff, kRun, kRunCpu, kReduce, kWake, kTotal, kPhases };

  // MINIDL_GLOO_PROFILE is set to something other than "0" (read once).
  static bool enabled();
  // CPU time of the calling thread, in microseconds.
  static double thread_cpu_us();
  // Adds to the calling thread's reduce-time counter (the reduce function's wrapper).
  static void add_reduce_us(double us);
  // The calling thread's reduce-time counter since the last take (and resets it).
  static double take_reduce_us();

  void record(const std::string& name, int64_t bytes, Phase phase, double us);
  void print(int rank) const;  // stderr

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int64_t>, std::vector<double>[kPhases]> samples_;
};

}  // namespace minidl::dist
