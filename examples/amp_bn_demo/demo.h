// What the parts of examples/amp_bn_demo share: its arguments, where it runs
// (DemoDevice) and the four sections, one file each after the first and the
// last (examples/amp_bn_demo.cpp): bn_stats.cpp, grad_scaler.cpp.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "examples/common/batch_eval.h"
#include "examples/common/demo_checks.h"
#include "minidl/minidl.h"

namespace minidl::amp_demo {

struct Args {
  std::string data, out = "runs/amp_bn_demo", device = "test";
  int64_t epochs = 10, batch_size = 64, limit_train = 0, limit_test = 0;
  int64_t level_batch = 32, level_steps = 4, stat_batch = 256, rv_updates = 200, scaler_steps = 60, growth_interval = 10;
  double width = 0.25, level_width = 0.5, lr = 0.05;
  int threads = 1;  // small tensors: a second thread costs more than it gives on a busy machine
  uint64_t seed = 0;
  bool smoke = false;
};

// Where the measured parts run. "test": section 1 on the test device (the
// CPU kernels on separately counted memory, so a step's memory is read from
// its allocator), sections 3 and 4 on the CPU, half = bfloat16 (the CPU's
// autocast type; float16 where a section is about float16). "cuda": sections
// 1, 3 and 4 on the GPU, half = float16, memory from the caching allocator.
// Section 2 emulates 16-bit accumulation on the host either way.
struct DemoDevice {
  Device levels;   // section 1 (memory is counted)
  Device compute;  // sections 3 and 4
  DType half;      // amp::initialize's half type there

  static DemoDevice parse(const std::string& name);
  bool is_cuda() const { return compute.is_cuda(); }
  const char* half_name() const { return half == kFloat16 ? "float16" : "bfloat16"; }
  int64_t live_bytes() const;
  int64_t peak_bytes() const;
  void reset_peak() const;
  void synchronize() const;  // before reading a clock
};

inline std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

inline const char* const kLevels[] = {"O0", "O1", "O2", "O3"};

using examples::Checks;
using examples::Images;
namespace fs = std::filesystem;

void section_levels(const Images& train, const Args& a, const DemoDevice& dd, const fs::path& out, Checks& check);
void section_bn_stats(const Images& train, const Args& a, const fs::path& out, Checks& check);
void section_grad_scaler(const Images& train, const Args& a, const DemoDevice& dd, const fs::path& out, Checks& check);
void section_accuracy(const std::shared_ptr<const data::Dataset>& train_set, const data::TransformPtr& augment,
                      const Images& test, const Args& a, const DemoDevice& dd, const fs::path& out, Checks& check);

}  // namespace minidl::amp_demo
