// Checks for the programs' flags: numbers (CLI11 validators) and output
// folders. CLI11 2.1's PositiveNumber and NonNegativeNumber refuse
// `--epochs 0` with "Value 0 not in range 0.000000 to
// 1797693134862315708145274237317043567980...000.000000" (a 300-digit upper
// bound, and a range that seems to hold 0); these say what was expected and
// what was got: "--epochs: expected a positive number, got 0"; and they
// refuse nan, inf and integers beyond int64.
#pragma once

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "minidl/core/check.h"

namespace minidl::examples {

namespace detail {
// "" when `text` is a number that satisfies `ok`, else the message.
template <class Ok>
std::string check_number(const std::string& text, const char* expected, Ok ok) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE) return "expected a number, got '" + text + "'";
  if (!ok(v)) return std::string("expected ") + expected + ", got " + text;
  // An integer beyond int64: CLI11 2.1 would store INT64_MAX without a word
  // (--epochs 99999999999999999999 trained "epoch 1/9223372036854775807").
  if (text.find_first_not_of("+-0123456789") == std::string::npos) {
    errno = 0;
    (void)std::strtoll(text.c_str(), nullptr, 10);
    if (errno == ERANGE) return "expected a number, got " + text + ": out of range";
  }
  return "";
}
}  // namespace detail

inline const CLI::Validator kPositive(
    [](std::string& text) { return detail::check_number(text, "a positive number", [](double v) { return std::isfinite(v) && v > 0; }); },
    "POSITIVE", "POSITIVE");
inline const CLI::Validator kNonNegative(
    [](std::string& text) {
      return detail::check_number(text, "a number >= 0", [](double v) { return std::isfinite(v) && v >= 0; });
    },
    "NONNEGATIVE", "NONNEGATIVE");

// Whether `dir` could be created by create_output_dir, or is a folder
// already, without creating it (so that a program which refuses its other
// input afterwards leaves no empty folder): the nearest part of the path
// that exists must be a folder. Throws minidl::Error naming the flag;
// permissions are left to create_output_dir.
inline void check_output_dir(const char* flag, const std::string& dir) {
  MINIDL_CHECK(!dir.empty(), flag, ": expected a folder, got an empty path");
  std::error_code ec;
  std::filesystem::path p = dir;
  while (!p.empty() && !std::filesystem::exists(p, ec)) p = p.parent_path();
  MINIDL_CHECK(p.empty() || std::filesystem::is_directory(p, ec), flag, ": cannot create directory '", dir,
               "': Not a directory");
}

// Creates the output folder `dir` (with parents) that the flag `flag`
// ("--log-dir", "--out") names; throws minidl::Error naming both (the
// filesystem's own error named only the path).
inline void create_output_dir(const char* flag, const std::string& dir) {
  check_output_dir(flag, dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  MINIDL_CHECK(!ec && std::filesystem::is_directory(dir), flag, ": cannot create directory '", dir,
               "': ", ec ? ec.message() : "not a directory");
}

}  // namespace minidl::examples
