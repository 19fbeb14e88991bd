// The process group of an example program's run. Under minidl-launch (RANK
// and WORLD_SIZE set) the process joins a group of `backend` ("gloo" or
// "nccl", examples/common/backend_choice.h picks it from --backend) for the
// whole run and leaves it at the end; otherwise it is one process, rank 0 of 1.
//
//   const bool distributed = examples::DistributedRun::launched();   // before any group exists
//   const examples::DistributedRun run(backend.name);
//   if (run.main()) std::cout << ...;   // rank 0 prints, logs and saves
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "minidl/dist/distributed.h"

namespace minidl::examples {

struct DistributedRun {
  static bool launched() { return std::getenv("RANK") != nullptr && std::getenv("WORLD_SIZE") != nullptr; }
  bool on = launched();
  int rank = 0, world = 1;
  explicit DistributedRun(const std::string& backend = "gloo") {
    if (!on) return;
    dist::init_process_group(backend, "env://");
    rank = dist::get_rank();
    world = dist::get_world_size();
  }
  ~DistributedRun() {
    if (on) dist::destroy_process_group();
  }
  DistributedRun(const DistributedRun&) = delete;
  DistributedRun& operator=(const DistributedRun&) = delete;
  bool main() const { return rank == 0; }
};

// printf-style formatting of one number: fmt("%.3f", loss).
inline std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

}  // namespace minidl::examples
