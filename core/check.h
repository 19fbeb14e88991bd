// Errors. User mistakes throw minidl::Error through MINIDL_CHECK; broken
// internal invariants (library bugs) go through MINIDL_ASSERT. Both carry
// file:line so a report points at the check that fired.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace minidl {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {

template <class... Parts>
std::string str_cat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

[[noreturn]] void throw_error(const char* file, int line, const std::string& message);
[[noreturn]] void throw_assert(const char* file, int line, const char* cond,
                               const std::string& message);

}  // namespace detail
}  // namespace minidl

// MINIDL_CHECK(cond, "conv2d: expected 4D input, got ", x.dim(), "D input")
#define MINIDL_CHECK(cond, ...)                                                        \
  do {                                                                                 \
    if (!(cond)) [[unlikely]]                                                          \
      ::minidl::detail::throw_error(__FILE__, __LINE__,                                \
                                    ::minidl::detail::str_cat(__VA_ARGS__));           \
  } while (0)

// Unconditional user error, for the end of a switch or an unsupported case.
#define MINIDL_FAIL(...) \
  ::minidl::detail::throw_error(__FILE__, __LINE__, ::minidl::detail::str_cat(__VA_ARGS__))

#define MINIDL_ASSERT(cond, ...)                                                       \
  do {                                                                                 \
    if (!(cond)) [[unlikely]]                                                          \
      ::minidl::detail::throw_assert(__FILE__, __LINE__, #cond,                        \
                                     ::minidl::detail::str_cat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
