#include "minidl/core/device.h"

#include "minidl/core/check.h"

namespace minidl {

namespace {

// "<name>" or "<name>:<index>" -> index; throws with the accepted forms.
int parse_index(const std::string& spec, size_t name_len) {
  if (spec.size() == name_len) return 0;
  const std::string name = spec.substr(0, name_len);
  MINIDL_CHECK(spec[name_len] == ':' && spec.size() > name_len + 1, "Device: expected '", name,
               ":<index>', got '", spec, "'");
  size_t used = 0;
  int parsed = -1;
  try {
    parsed = std::stoi(spec.substr(name_len + 1), &used);
  } catch (const std::exception&) {
  }
  MINIDL_CHECK(parsed >= 0 && used == spec.size() - name_len - 1,
               "Device: expected a non-negative device index, got '", spec, "'");
  return parsed;
}

}  // namespace

Device::Device(const std::string& spec) {
  if (spec == "cpu") {
    type = DeviceType::CPU;
    index = 0;
  } else if (spec.rfind("cuda", 0) == 0) {
    type = DeviceType::CUDA;
    index = parse_index(spec, 4);
  } else if (spec.rfind("test", 0) == 0) {
    type = DeviceType::Test;
    index = parse_index(spec, 4);
  } else {
    MINIDL_FAIL("Device: expected a device string like 'cpu', 'cuda' or 'cuda:1', got '", spec, "'");
  }
}

const char* device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::CPU: return "CPU";
    case DeviceType::CUDA: return "CUDA";
    case DeviceType::Test: return "Test";
  }
  return "unknown";
}

std::string Device::str() const {
  switch (type) {
    case DeviceType::CPU: return "cpu";
    case DeviceType::CUDA: return "cuda:" + std::to_string(index);
    case DeviceType::Test: return "test:" + std::to_string(index);
  }
  return "unknown";
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace minidl
