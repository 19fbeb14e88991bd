// ProgressBar: rate = done / elapsed, ETA = (total - done) / rate. On a
// terminal the line is redrawn with '\r' + erase-to-end (at most ~10 times a
// second); elsewhere each report is its own plain line, printed when done
// crosses the next 10% of total or 30 s after the previous line.
#include "examples/common/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

namespace minidl::examples {
namespace {

constexpr double kTtyRedrawSeconds = 0.1;
constexpr double kPlainLineSeconds = 30.0;
constexpr int kBarWidth = 24;

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%02lld:%02lld", s / 60, s % 60);
  return buf;
}

std::string format_rate(double per_second) {
  char buf[32];
  if (!std::isfinite(per_second)) return "? img/s";
  std::snprintf(buf, sizeof buf, per_second >= 100 ? "%.0f img/s" : "%.1f img/s", per_second);
  return buf;
}

// Log files must not get control characters from a caller's postfix.
std::string printable(const std::string& s) {
  std::string out = s;
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  return out;
}

}  // namespace

ProgressBar::ProgressBar(int64_t total, std::string desc, std::ostream* out)
    : total_(std::max<int64_t>(total, 0)),
      desc_(std::move(desc)),
      out_(out ? out : &std::cerr),
      tty_(out == nullptr && isatty(STDERR_FILENO)),
      start_(Clock::now()),
      last_print_(start_) {}

ProgressBar::~ProgressBar() {
  if (tty_ && !finished_ && last_width_ > 0) *out_ << '\n' << std::flush;
}

std::string ProgressBar::line(int64_t done, const std::string& postfix, bool with_bar) const {
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  // A rate from the first few milliseconds is noise; show "?" until then.
  const double rate = elapsed > 0.05 ? static_cast<double>(done) / elapsed : NAN;
  std::string s = desc_.empty() ? "" : desc_ + " ";
  char buf[96];
  if (total_ > 0) {
    const double frac = std::clamp(static_cast<double>(done) / static_cast<double>(total_), 0.0, 1.0);
    std::snprintf(buf, sizeof buf, "%3d%% ", static_cast<int>(frac * 100));
    s += buf;
    if (with_bar) {
      int fill = static_cast<int>(frac * kBarWidth);
      s += '[';
      s.append(fill, '=');
      if (fill < kBarWidth) s += '>';
      s.append(std::max(0, kBarWidth - fill - 1), ' ');
      s += "] ";
    }
    const double eta = rate > 0 ? static_cast<double>(total_ - done) / rate : NAN;
    std::snprintf(buf, sizeof buf, "%lld/%lld [%s<%s, %s]", static_cast<long long>(done),
                  static_cast<long long>(total_), format_duration(elapsed).c_str(),
                  format_duration(eta).c_str(), format_rate(rate).c_str());
  } else {
    std::snprintf(buf, sizeof buf, "%lld [%s, %s]", static_cast<long long>(done),
                  format_duration(elapsed).c_str(), format_rate(rate).c_str());
  }
  s += buf;
  if (!postfix.empty()) s.append(" ").append(printable(postfix));
  return s;
}

void ProgressBar::emit(const std::string& text) {
  if (tty_) {
    *out_ << '\r' << text << "\033[K" << std::flush;
    last_width_ = text.size();
  } else {
    *out_ << text << '\n' << std::flush;
  }
  last_print_ = Clock::now();
}

void ProgressBar::update(int64_t done, const std::string& postfix) {
  if (finished_) return;
  last_done_ = done;
  const auto now = Clock::now();
  const double since = std::chrono::duration<double>(now - last_print_).count();
  if (tty_) {
    if (since >= kTtyRedrawSeconds || (total_ > 0 && done >= total_) || last_width_ == 0)
      emit(line(done, postfix, true));
    return;
  }
  bool due = false;
  if (total_ > 0) {
    // Advance past every 10% mark that done has crossed (done may jump).
    while (next_decile_ <= 10 && done * 10 >= next_decile_ * total_) {
      ++next_decile_;
      due = true;
    }
  }
  if (!due && since >= kPlainLineSeconds && done != last_printed_done_) due = true;
  if (due) {
    emit(line(done, postfix, false));
    last_printed_done_ = done;
  }
}

void ProgressBar::finish(const std::string& summary) {
  if (finished_) return;
  finished_ = true;
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  const int64_t done = last_done_ >= 0 ? last_done_ : total_;
  const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : NAN;
  std::string s = desc_.empty() ? "" : desc_ + " ";
  s += "done";
  if (total_ > 0) s.append(" ").append(std::to_string(done)).append("/").append(std::to_string(total_));
  s.append(" in ").append(format_duration(elapsed));
  if (done > 0) s.append(" (").append(format_rate(rate)).append(")");
  if (!summary.empty()) s.append(": ").append(printable(summary));
  if (tty_)
    *out_ << '\r' << s << "\033[K\n" << std::flush;
  else
    *out_ << s << '\n' << std::flush;
}

}  // namespace minidl::examples
