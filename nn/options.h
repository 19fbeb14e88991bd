// Helpers for module options structs (LinearOptions, Conv2dOptions, ...):
// chained setters with PyTorch's defaults, and Int2 / Int3, the "int or tuple"
// argument of conv and pool sizes (PyTorch's _pair, _triple / ExpandingArray).
//
//   struct FooOptions {
//     FooOptions(int64_t features) : features_(features) {}
//     MINIDL_ARG(int64_t, features);
//     MINIDL_ARG(double, eps) = 1e-5;
//   };
//   FooOptions(3).eps(1e-3).eps()  // == 1e-3
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>

namespace minidl::nn {

// Declares a member `name_` with a chaining setter `name(value)` and a getter
// `name()`. A default value may follow: MINIDL_ARG(bool, bias) = true;
#define MINIDL_ARG(T, name)                       \
 public:                                          \
  auto& name(const T& new_##name) {               \
    this->name##_ = new_##name;                   \
    return *this;                                 \
  }                                               \
  const T& name() const { return this->name##_; } \
                                                  \
 public:                                          \
  T name##_

// Two sizes (height, width). An int means the same value twice, as PyTorch's
// kernel_size=3 == (3, 3); `{1, 2}` or a std::pair gives them separately.
struct Int2 {
  std::array<int64_t, 2> v{0, 0};
  bool from_int = false;  // given as one int: pools print it as PyTorch does ("kernel_size=2")

  Int2(int64_t both) : v{both, both}, from_int(true) {}  // NOLINT: implicit like PyTorch's int
  Int2(int64_t h, int64_t w) : v{h, w} {}                // NOLINT: {h, w}
  Int2(std::pair<int64_t, int64_t> p) : v{p.first, p.second} {}  // NOLINT
  Int2(std::array<int64_t, 2> a) : v(a) {}               // NOLINT

  int64_t operator[](size_t i) const { return v[i]; }
  operator std::array<int64_t, 2>() const { return v; }  // NOLINT: feeds the ops' arrays
  bool operator==(const Int2& o) const { return v == o.v; }
  // "(3, 3)", as PyTorch prints a tuple in a module's repr.
  std::string pair_str() const {
    return std::string("(").append(std::to_string(v[0])).append(", ").append(std::to_string(v[1])).append(")");
  }
  // "2" when given as one int, else "(2, 3)" (PyTorch pools keep what they were given).
  std::string str() const { return from_int ? std::to_string(v[0]) : pair_str(); }
};

// Three sizes (depth, height, width), as Int2: an int means the same value
// three times (PyTorch's _triple); `{1, 2, 2}` gives them separately.
struct Int3 {
  std::array<int64_t, 3> v{0, 0, 0};
  bool from_int = false;  // given as one int: printed as one int

  Int3(int64_t all) : v{all, all, all}, from_int(true) {}            // NOLINT: implicit like PyTorch's int
  Int3(int64_t d, int64_t h, int64_t w) : v{d, h, w} {}             // NOLINT: {d, h, w}
  Int3(std::array<int64_t, 3> a) : v(a) {}                           // NOLINT

  int64_t operator[](size_t i) const { return v[i]; }
  operator std::array<int64_t, 3>() const { return v; }  // NOLINT: feeds the ops' arrays
  bool operator==(const Int3& o) const { return v == o.v; }
  std::string tuple_str() const {
    std::string s = "(";
    s.append(std::to_string(v[0])).append(", ").append(std::to_string(v[1])).append(", ");
    return s.append(std::to_string(v[2])).append(")");
  }
  std::string str() const { return from_int ? std::to_string(v[0]) : tuple_str(); }
};

// Python's repr of a float and a bool, for extra_repr(): 0.1 -> "0.1",
// 1e-5 -> "1e-05", 1.0 -> "1.0", true -> "True".
std::string repr_float(double value);
inline const char* repr_bool(bool value) { return value ? "True" : "False"; }

}  // namespace minidl::nn
