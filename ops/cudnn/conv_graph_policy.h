// The host-side choices of the cuDNN graph-API convolution path
// (ops/cudnn/conv_graph.cpp): which engine configurations may run and which
// timed plan wins. Pure host code (no cuDNN headers), so
// tests/test_gpu_host_logic.cpp checks it on the CPU in every build.
#pragma once

#include <cmath>
#include <cstddef>
#include <optional>
#include <vector>

#include "minidl/ops/cudnn/conv_key.h"

namespace minidl::cudnn_conv {

// The numerical notes of an engine (CUDNN_ATTR_ENGINE_NUMERICAL_NOTE) that
// decide whether it may run.
struct EngineNotes {
  bool nondeterministic = false;      // CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC
  bool down_converts_inputs = false;  // CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS
  bool tensor_core = false;           // CUDNN_NUMERICAL_NOTE_TENSOR_CORE
};

// PyTorch's filter (aten/src/ATen/native/cudnn/Conv_v8.cpp,
// filterEngineConfigs): true when the engine may not run for this key.
// Non-deterministic engines under deterministic; engines that down-convert
// their inputs, always; tensor-core engines for float32 without allow_tf32
// (for float32 data a tensor-core engine means TF32). 16-bit and float64
// data keep their tensor-core engines.
inline bool engine_excluded(const EngineNotes& n, const ConvKey& key) {
  if (key.deterministic && n.nondeterministic) return true;
  if (n.down_converts_inputs) return true;
  return key.dtype == DType::Float32 && !key.allow_tf32 && n.tensor_core;
}

// The index of the fastest of the timed plans (milliseconds; infinity or NaN
// for a plan that failed to run), the first on ties; nullopt when none ran.
inline std::optional<size_t> fastest_plan(const std::vector<float>& ms) {
  std::optional<size_t> best;
  for (size_t i = 0; i < ms.size(); ++i) {
    if (!std::isfinite(ms[i])) continue;
    if (!best || ms[i] < ms[*best]) best = i;
  }
  return best;
}

}  // namespace minidl::cudnn_conv
