// Helpers shared by tests/test_norm_utils.cpp and tests/test_norm_utils_stats.cpp:
// a printed report as a string, a substring test, and overwriting a parameter
// or buffer in place without recording it for autograd.
#pragma once

#include <sstream>
#include <string>

#include "minidl/minidl.h"

namespace minidl::testing {

template <class T>
std::string str_of(const T& value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

inline void set_values(Tensor t, const Tensor& values) {
  NoGradGuard no_grad;
  t.copy_(values);
}

}  // namespace minidl::testing
