// A number operand of an op (x * 2, x + 0.5), remembering whether it was
// written as an integer or a floating value. PyTorch's type promotion tells
// them apart: a uint8 or int64 tensor times 2 stays integral, times 2.0 is
// float32 (so 200 * 2.0 is 400, not 144). c10::Scalar's role, minus complex.
#pragma once

#include <type_traits>

namespace minidl {

class Scalar {
 public:
  template <class T>
    requires std::is_arithmetic_v<T>
  Scalar(T value) : value_(static_cast<double>(value)), integral_(std::is_integral_v<T>) {}  // NOLINT: implicit, as c10::Scalar

  // The value as the kernels take it (an int64 beyond 2^53 rounds, as before).
  double to_double() const { return value_; }
  bool is_integral() const { return integral_; }
  bool is_floating_point() const { return !integral_; }

 private:
  double value_;
  bool integral_;
};

}  // namespace minidl
