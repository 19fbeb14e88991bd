// Process-wide switches of the math libraries, with PyTorch's names and
// defaults (torch.backends.cuda.matmul.*, torch.backends.cudnn.*). Every
// build has them (no CUDA headers here); only the CUDA backend reads them.
//
//   backends::cuda::matmul::allow_tf32   false  cuBLAS float32 GEMMs may round
//       inputs to TF32 (10-bit mantissa) on tensor cores. Off since PyTorch
//       1.12: non-DL users got visibly wrong matmuls (pytorch/pytorch#67384).
//   backends::cudnn::allow_tf32          true   cuDNN float32 convolutions may
//       use TF32 (DL-only op; trains the same, several times faster).
//   backends::cudnn::benchmark           false  time every cuDNN algorithm once
//       per new shape (cudnnFind*) instead of taking the heuristic's choice.
//   backends::cudnn::deterministic       false  only cuDNN algorithms that give
//       bit-identical results run to run (no atomics), in heuristic and
//       benchmark modes alike (PyTorch once let benchmark override it:
//       pytorch/pytorch#6351).
//   backends::cpu::conv_allow_winograd4  true   CPU 3x3 stride-1 float32 and
//       float64 convolutions may take Winograd F(4x4, 3x3) (4x fewer products,
//       2-3 bits less accurate in float32 than the direct sum); false keeps
//       F(2x2, 3x3) there (rounding as the direct sum). minidl's own switch.
//
// Thread-safe (relaxed atomics): a change is seen by ops that start after it;
// an op already running keeps the value it read. The cuDNN algorithm cache
// keys on all three cuDNN switches, so flipping them never reuses a stale
// choice. Tests compare CUDA with the CPU under BackendSettingsGuard with TF32 off.
#pragma once

namespace minidl::backends {

namespace cuda::matmul {
bool allow_tf32();
void set_allow_tf32(bool allow);
}  // namespace cuda::matmul

namespace cudnn {
bool allow_tf32();
void set_allow_tf32(bool allow);
bool benchmark();
void set_benchmark(bool on);
bool deterministic();
void set_deterministic(bool on);
}  // namespace cudnn

namespace cpu {
bool conv_allow_winograd4();
void set_conv_allow_winograd4(bool allow);
}  // namespace cpu

// All the switches at once (a snapshot; the defaults are PyTorch's where it has them).
struct BackendSettings {
  bool matmul_allow_tf32 = false;
  bool cudnn_allow_tf32 = true;
  bool cudnn_benchmark = false;
  bool cudnn_deterministic = false;
  bool cpu_conv_allow_winograd4 = true;
};
BackendSettings backend_settings();
void set_backend_settings(const BackendSettings& s);

// Sets the switches for a scope and restores the previous ones after
// (tests: `BackendSettingsGuard g({.cudnn_allow_tf32 = false});`).
class BackendSettingsGuard {
 public:
  explicit BackendSettingsGuard(const BackendSettings& s) : previous_(backend_settings()) { set_backend_settings(s); }
  ~BackendSettingsGuard() { set_backend_settings(previous_); }
  BackendSettingsGuard(const BackendSettingsGuard&) = delete;
  BackendSettingsGuard& operator=(const BackendSettingsGuard&) = delete;

 private:
  BackendSettings previous_;
};

}  // namespace minidl::backends
