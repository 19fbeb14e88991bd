#include "minidl/core/parallel.h"

#include <omp.h>

#include <cstdlib>
#include <string>

#include "minidl/core/check.h"

namespace minidl {

int get_num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
  MINIDL_CHECK(n > 0 && n <= kMaxThreads, "set_num_threads: expected 1 to ", kMaxThreads, " threads, got ", n);
  omp_set_num_threads(n);
}

void init_num_threads_from_env() {
  const char* env = std::getenv("MINIDL_NUM_THREADS");
  if (env == nullptr || *env == '\0') return;  // OpenMP already read OMP_NUM_THREADS
  int n = 0;
  try {
    n = std::stoi(env);
  } catch (const std::exception&) {
  }
  MINIDL_CHECK(n > 0 && n <= kMaxThreads, "MINIDL_NUM_THREADS must be an integer in 1..", kMaxThreads, ", got '", env,
               "'");
  omp_set_num_threads(n);
}

}  // namespace minidl
