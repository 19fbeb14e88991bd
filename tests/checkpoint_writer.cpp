// Helper of tests/test_checkpoint_kill.cpp: writes checkpoints of a 4 MiB
// model to argv[1] in a loop, version after version, until it is killed.
// Version v has every weight and bias element equal to v, and a buffer-like
// "version" entry of the file's metadata is not needed: the values say it.
// After each save returns it prints "saved v" on stdout, so the parent knows
// which versions were complete before its SIGKILL.
//   checkpoint_writer PATH FIRST_VERSION
#include <cstdio>
#include <string>

#include "minidl/minidl.h"

using namespace minidl;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: checkpoint_writer PATH FIRST_VERSION\n");
    return 2;
  }
  try {
    set_num_threads(1);
    const std::string path = argv[1];
    nn::Linear model(1024, 1024);
    NoGradGuard no_grad;
    for (long v = std::stol(argv[2]);; ++v) {
      model->weight.fill_(static_cast<double>(v));
      model->bias.fill_(static_cast<double>(v));
      nn::save_state_dict(*model, path);
      std::printf("saved %ld\n", v);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_writer: error: %s\n", e.what());
    return 1;
  }
}
