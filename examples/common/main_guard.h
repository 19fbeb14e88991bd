// How every bundled program (examples/, bench/) ends: an error becomes one
// line "<program>: error: <what>" on stderr and exit code 1, never an abort
// (an exception escaping main calls std::terminate: SIGABRT, exit 134, maybe
// a core dump). Usage errors (a bad flag or flag value) exit 2, as Python's
// argparse (and so torchrun) does. Header-only, so bench/ can use it too.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>
#include <utility>

namespace minidl::examples {

// Runs body() (which returns the exit code) and turns any exception into exit 1.
template <class F>
int run_main(const char* program, F&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    std::cerr << program << ": error: " << e.what() << std::endl;
  } catch (...) {
    std::cerr << program << ": error: unknown exception" << std::endl;
  }
  return 1;
}

// Thrown for a bad command line; run_main's callers map it to exit 2.
struct UsageError : std::exception {
  std::string message;
  explicit UsageError(std::string m) : message(std::move(m)) {}
  const char* what() const noexcept override { return message.c_str(); }
};

// The whole of `text` as an integer (std::atoll would read "abc" as 0 and
// "12x" as 12); `what` names the argument in the error.
inline int64_t parse_int_arg(const std::string& text, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE)
    throw UsageError(what + ": expected an integer, got '" + text + "'");
  return v;
}

// run_main for programs with a hand-written command line: `--help` or `-h`
// (before a `--`) prints the usage and exits 0, without running the program;
// UsageError exits 2.
template <class F>
int run_main_with_usage(const char* program, const char* usage, int argc, char** argv, F&& body) noexcept {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg == "--help" || arg == "-h") {
      std::cout << "usage: " << usage << std::endl;
      return 0;
    }
  }
  try {
    return body();
  } catch (const UsageError& e) {
    std::cerr << program << ": error: " << e.what() << "\nusage: " << usage << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << program << ": error: " << e.what() << std::endl;
  } catch (...) {
    std::cerr << program << ": error: unknown exception" << std::endl;
  }
  return 1;
}

// run_main for programs that take no arguments: `--help` prints what the
// program does (exit 0), any other argument is a usage error (exit 2) rather
// than silently ignored.
template <class F>
int run_main_without_arguments(const char* program, const char* what, int argc, char** argv, F&& body) noexcept {
  if (argc > 1) {
    const std::string arg = argv[1];
    if (arg == "--help" || arg == "-h") {
      std::cout << "usage: " << program << "\n" << what << std::endl;
      return 0;
    }
    std::cerr << program << ": error: unexpected argument '" << arg << "': it takes none\nusage: " << program
              << std::endl;
    return 2;
  }
  return run_main(program, std::forward<F>(body));
}

}  // namespace minidl::examples

// CLI11's parse with argparse's exit codes: --help prints and exits 0, a bad
// flag or value prints CLI11's message and exits 2 (CLI11's own codes, 105-115,
// collide with nothing documented and tell a script nothing).
#define MINIDL_CLI_PARSE(app, argc, argv)         \
  try {                                           \
    (app).parse((argc), (argv));                  \
  } catch (const CLI::ParseError& e) {            \
    return (app).exit(e) == 0 ? 0 : 2;            \
  }
