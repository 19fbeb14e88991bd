// A number operand of an op (x * 2, x + 0.5), remembering whether it was
// written as an integer or a floating value. PyTorch's type promotion tells
// them apart: a uint8 or int64 tensor times 2 stays integral, times 2.0 is
// float32 (so 200 * 2.0 is 400, not 144). c10::Scalar's role, minus complex.
#pragma once

#include <cstdint>
#include <type_traits>

namespace minidl {

class Scalar {
 public:
  template <class T>
    requires std::is_arithmetic_v<T>
  Scalar(T value)  // NOLINT: implicit, as c10::Scalar
      : value_(static_cast<double>(value)), integral_(std::is_integral_v<T>) {
    if constexpr (std::is_integral_v<T>) {
      in_int64_ = std::is_signed_v<T> || static_cast<uint64_t>(value) <= static_cast<uint64_t>(INT64_MAX);
      int_ = in_int64_ ? static_cast<int64_t>(value) : 0;
    }
  }

  // The value as the kernels take it (an integer past 2^53 rounds: see rounds_in_double).
  double to_double() const { return value_; }
  bool is_integral() const { return integral_; }
  bool is_floating_point() const { return !integral_; }
  // An int64 value the kernels' double argument would round (|v| > 2^53):
  // int64 tensors take it exactly, through a one-element tensor.
  bool rounds_in_double() const {
    return in_int64_ && (int_ < -(int64_t{1} << 53) || int_ > (int64_t{1} << 53));
  }
  int64_t to_int64() const { return int_; }  // exact when rounds_in_double()
  bool fits_int64() const { return in_int64_; }  // an integer within int64's range (uint64 past it is not)

 private:
  double value_;
  bool integral_;
  bool in_int64_ = false;  // an integer within int64's range
  int64_t int_ = 0;
};

}  // namespace minidl
