#include "minidl/core/check.h"

namespace minidl::detail {

void throw_error(const char* file, int line, const std::string& message) {
  throw Error(str_cat(message, " (", file, ":", line, ")"));
}

void throw_assert(const char* file, int line, const char* cond, const std::string& message) {
  throw Error(str_cat("internal assert failed: ", cond, " at ", file, ":", line,
                      message.empty() ? "" : ": ", message,
                      ". This is a bug in minidl; please report it."));
}

}  // namespace minidl::detail
