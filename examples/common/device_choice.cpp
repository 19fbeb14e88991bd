// See device_choice.h.
#include "examples/common/device_choice.h"

#include <cstdlib>

#include "minidl/core/backend_settings.h"
#include "minidl/core/check.h"
#include "minidl/core/cuda.h"

namespace minidl::examples {

ChosenDevice choose_device(const std::string& spec, bool distributed) {
  if (spec == "auto") {
    if (distributed) return {Device(DeviceType::CPU), " (auto: distributed runs stay on the CPU; --device cuda "
                                                      "to train on GPUs)"};
    if (cuda::is_available()) return {Device(DeviceType::CUDA, 0), " (auto: a CUDA device is usable)"};
    return {Device(DeviceType::CPU), " (auto: no CUDA: " + cuda::unavailable_reason() + ")"};
  }
  Device d(spec);
  if (d.type != DeviceType::CUDA) return {d, ""};
  MINIDL_CHECK(cuda::is_available(), "--device ", spec, ": ", cuda::unavailable_reason());
  if (!distributed) return {d, ""};
  if (spec == "cuda") {  // one GPU per local rank, round robin
    const char* local = std::getenv("LOCAL_RANK");
    d.index = (local != nullptr ? std::atoi(local) : 0) % cuda::device_count();
  }
  return {d, ""};  // the backend's line says how collectives travel
}

std::string configure_backends(Device device, bool deterministic) {
  if (device.type != DeviceType::CUDA)
    return deterministic ? "; deterministic (CPU kernels are deterministic always)" : "";
  backends::cudnn::set_deterministic(deterministic);
  backends::cudnn::set_benchmark(!deterministic);
  return deterministic ? "; deterministic: cuDNN's deterministic algorithms only, no benchmark search"
                       : "; cudnn benchmark on, TF32 convolutions (--deterministic for bit-identical runs)";
}

}  // namespace minidl::examples
