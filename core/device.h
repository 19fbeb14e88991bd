// Where a tensor's memory lives. Only CPU kernels exist without
// -DMINIDL_CUDA=ON, but every tensor carries its device from day one.
//
// DeviceType::Test ("test") is a second device for CPU-only CI
// (core/test_device.h): the CPU kernels run on separately allocated and
// counted memory, so any code path that silently moves a tensor to the CPU,
// or hands a kernel tensors from two devices, fails in a test long before a
// GPU runs it. It plays the role PyTorch's PrivateUse1 slot plays for
// out-of-tree backends.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace minidl {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1, Test = 2 };
inline constexpr int kNumDeviceTypes = 3;

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(i) {}  // NOLINT: implicit like torch
  explicit Device(const std::string& spec);  // "cpu", "cuda", "cuda:1", "test"

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool is_test() const { return type == DeviceType::Test; }
  bool operator==(const Device&) const = default;
  std::string str() const;
};

inline constexpr Device kCPU{DeviceType::CPU, 0};
inline constexpr DeviceType kCUDA = DeviceType::CUDA;
inline constexpr Device kTestDevice{DeviceType::Test, 0};

const char* device_type_name(DeviceType t);
std::ostream& operator<<(std::ostream& os, const Device& d);

}  // namespace minidl
