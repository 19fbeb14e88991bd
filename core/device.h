// Where a tensor's memory lives. Only CPU kernels exist without
// -DMINIDL_CUDA=ON, but every tensor carries its device from day one.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace minidl {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };
inline constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(i) {}  // NOLINT: implicit like torch
  explicit Device(const std::string& spec);  // "cpu", "cuda", "cuda:1"

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device&) const = default;
  std::string str() const;
};

inline constexpr Device kCPU{DeviceType::CPU, 0};
inline constexpr DeviceType kCUDA = DeviceType::CUDA;

const char* device_type_name(DeviceType t);
std::ostream& operator<<(std::ostream& os, const Device& d);

}  // namespace minidl
