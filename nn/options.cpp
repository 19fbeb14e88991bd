// Python-compatible float repr for module printing (nn/options.h).
#include "minidl/nn/options.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace minidl::nn {

// Python's repr: the shortest digits that round-trip, written in fixed
// notation when the decimal exponent is in [-4, 16), in scientific otherwise
// (with at least two exponent digits), and fixed values always show a ".".
std::string repr_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-1.2345e-05"
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exponent = std::atoi(sci.c_str() + e + 1);
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits += c;

  std::string out;
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exponent + 1) {
      out = digits + std::string(static_cast<size_t>(exponent + 1) - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exponent + 1)) + "." +
            digits.substr(static_cast<size_t>(exponent + 1));
    }
  } else {
    std::string exp_str = std::to_string(std::abs(exponent));
    if (exp_str.size() < 2) exp_str = "0" + exp_str;
    out = mantissa + "e" + (exponent < 0 ? "-" : "+") + exp_str;
  }
  return negative ? "-" + out : out;
}

}  // namespace minidl::nn
