// A progress bar for training loops. On a terminal: one line redrawn in
// place with bar, done/total, items/s, ETA and a caller-supplied postfix.
// Otherwise (log files, CI): plain lines at most every ~10% or every 30 s,
// with no control characters.
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace minidl::examples {

class ProgressBar {
 public:
  // out == nullptr: std::cerr, redrawn when stderr is a terminal.
  // A given stream is treated as not a terminal (plain lines).
  ProgressBar(int64_t total, std::string desc, std::ostream* out = nullptr);
  // done: items processed so far (e.g. images); postfix e.g. "loss 1.23".
  void update(int64_t done, const std::string& postfix);
  // Final line with the total time and rate, then summary.
  void finish(const std::string& summary);
  // Ends a half-drawn terminal line if finish() was never called.
  ~ProgressBar();

  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

 private:
  using Clock = std::chrono::steady_clock;
  std::string line(int64_t done, const std::string& postfix, bool with_bar) const;
  void emit(const std::string& text);

  int64_t total_;
  std::string desc_;
  std::ostream* out_;
  bool tty_;
  Clock::time_point start_;
  Clock::time_point last_print_;
  int64_t last_printed_done_ = -1;
  int64_t last_done_ = -1;  // latest update(), for the rate in finish()
  int next_decile_ = 1;  // non-tty: next 10% mark that triggers a line
  size_t last_width_ = 0;
  bool finished_ = false;
};

}  // namespace minidl::examples
