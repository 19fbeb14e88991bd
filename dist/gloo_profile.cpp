// GlooProfile: samples per (collective, bytes, phase), printed as medians.
#include "minidl/dist/gloo_profile.h"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace minidl::dist {

namespace {
thread_local double reduce_us_counter = 0;

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}
}  // namespace

bool GlooProfile::enabled() {
  static const bool on = [] {
    const char* v = std::getenv("MINIDL_GLOO_PROFILE");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

double GlooProfile::thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

void GlooProfile::add_reduce_us(double us) { reduce_us_counter += us; }

double GlooProfile::take_reduce_us() {
  double us = reduce_us_counter;
  reduce_us_counter = 0;
  return us;
}

void GlooProfile::record(const std::string& name, int64_t bytes, Phase phase, double us) {
  std::lock_guard<std::mutex> lock(mutex_);
  samples_[{name, bytes}][phase].push_back(us);
}

void GlooProfile::print(int rank) const {
  static const char* names[kPhases] = {"handoff", "run", "run_cpu", "reduce", "wake", "total"};
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [key, phases] : samples_) {
    std::fprintf(stderr, "[gloo profile rank %d] %s bytes=%lld n=%zu us median(p90):", rank, key.first.c_str(),
                 static_cast<long long>(key.second), phases[kRun].size());
    for (int p = 0; p < kPhases; ++p)
      std::fprintf(stderr, " %s %.1f(%.1f)", names[p], quantile(phases[p], 0.5), quantile(phases[p], 0.9));
    std::fprintf(stderr, "\n");
  }
}

}  // namespace minidl::dist
