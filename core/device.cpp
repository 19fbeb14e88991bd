#include "core/device.h"

#include "core/check.h"

namespace minidl {

Device::Device(const std::string& spec) {
  if (spec == "cpu") {
    type = DeviceType::CPU;
    index = 0;
    return;
  }
  MINIDL_CHECK(spec.rfind("cuda", 0) == 0,
               "Device: expected a device string like 'cpu', 'cuda' or 'cuda:1', got '", spec, "'");
  type = DeviceType::CUDA;
  index = 0;
  if (spec.size() > 4) {
    MINIDL_CHECK(spec[4] == ':' && spec.size() > 5,
                 "Device: expected 'cuda:<index>', got '", spec, "'");
    size_t used = 0;
    int parsed = -1;
    try {
      parsed = std::stoi(spec.substr(5), &used);
    } catch (const std::exception&) {
    }
    MINIDL_CHECK(parsed >= 0 && used == spec.size() - 5,
                 "Device: expected a non-negative device index, got '", spec, "'");
    index = parsed;
  }
}

const char* device_type_name(DeviceType t) { return t == DeviceType::CPU ? "CPU" : "CUDA"; }

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace minidl
