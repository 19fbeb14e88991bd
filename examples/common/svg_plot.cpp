// SVG line plots. Each panel maps data to pixels with a linear scale whose
// range is widened to whole "nice" tick steps (1, 2, 2.5 or 5 times a power
// of ten), so ticks land on round numbers. The legend goes into whichever
// corner of the plot area covers the least of the drawn lines. A log axis maps
// log10 of the value linearly and puts its ticks at 1, 2, 5 times powers of ten.
#include "examples/common/svg_plot.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "minidl/core/atomic_file.h"
#include "minidl/core/check.h"

namespace minidl::examples {
namespace {

constexpr double kPanelW = 480, kPanelH = 360;
constexpr double kLeft = 72, kRight = 30, kTop = 38, kBottom = 52;  // plot-area margins
constexpr double kTitleH = 36;
constexpr const char* kFont = "DejaVu Sans, Helvetica, Arial, sans-serif";
// Matplotlib's tab10: distinct and colour-blind tolerable.
constexpr const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string num(double v) {  // pixel coordinates: 2 decimals is plenty
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// A font size at most `size` at which `text` fits in `width` pixels, taking
// a bold sans-serif character as ~0.68 em wide (long titles shrink, not clip).
double fit_font(const std::string& text, double width, double size) {
  const double needed = 0.68 * size * static_cast<double>(text.size());
  return needed > width ? std::max(9.0, size * width / needed) : size;
}

double nice_step(double span, int target_ticks) {
  double raw = span / target_ticks;
  double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

struct Axis {
  double lo, hi, step;
  std::vector<double> ticks;
  int decimals;
  bool log = false;
  // Where v falls between lo (0) and hi (1).
  double frac(double v) const {
    return log ? (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)) : (v - lo) / (hi - lo);
  }
};

// Values an axis can span: beyond these its padding, steps or logarithms
// overflow or underflow (a range of +-1.7e308 gave NaN ticks and a loop
// without end); points outside are skipped like non-finite ones.
bool plottable(double v, bool log) {
  return log ? v >= 1e-280 && v <= 1e280 : std::abs(v) <= 1e300;
}

// lo/hi are the data range (plottable, lo <= hi).
Axis make_axis(double lo, double hi) {
  if (hi - lo <= 1e-12 * std::max(1.0, std::abs(hi))) {  // flat data: give it some room
    double pad = std::abs(lo) < 1e-290 ? 1.0 : std::abs(lo) * 0.1;  // (a subnormal's 10% is 0)
    lo -= pad;
    hi += pad;
  }
  Axis a;
  a.step = nice_step(hi - lo, 5);
  a.lo = std::floor(lo / a.step + 1e-9) * a.step;
  a.hi = std::ceil(hi / a.step - 1e-9) * a.step;
  for (int i = 0;; ++i) {
    double t = a.lo + i * a.step;
    if (t > a.hi + a.step * 1e-6) break;
    a.ticks.push_back(std::abs(t) < a.step * 1e-9 ? 0.0 : t);
  }
  a.decimals = std::max(0, static_cast<int>(-std::floor(std::log10(a.step) + 1e-9)));
  if (std::fmod(a.step * std::pow(10.0, a.decimals), 1.0) > 1e-6) ++a.decimals;  // 2.5 steps
  return a;
}

// lo/hi: the positive data range. Pads 4% of the span (in log space) on each
// side; ticks at 1, 2, 5 x 10^k inside, or 1..9 x 10^k when that gives < 2.
Axis make_log_axis(double lo, double hi) {
  if (hi <= lo * (1 + 1e-12)) lo /= 2, hi *= 2;
  const double llo = std::log10(lo), lhi = std::log10(hi), pad = 0.04 * (lhi - llo);
  Axis a{std::pow(10.0, llo - pad), std::pow(10.0, lhi + pad), 0, {}, 0, true};
  for (const std::vector<double>& mantissas : {std::vector<double>{1, 2, 5}, std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9}}) {
    a.ticks.clear();
    for (int k = static_cast<int>(std::floor(std::log10(a.lo))); k <= static_cast<int>(std::ceil(std::log10(a.hi))); ++k)
      for (double m : mantissas) {
        const double t = m * std::pow(10.0, k);
        if (t >= a.lo && t <= a.hi) a.ticks.push_back(t);
      }
    if (a.ticks.size() >= 2) break;
  }
  return a;
}

// Caller-chosen ticks: the axis spans them and the data, padded 4%.
Axis make_fixed_axis(std::vector<double> ticks, double lo, double hi, bool log) {
  Axis a{lo, hi, 0, {}, 0, log};
  for (double t : ticks)
    if (plottable(t, log)) a.ticks.push_back(t), a.lo = std::min(a.lo, t), a.hi = std::max(a.hi, t);
  if (a.hi <= a.lo) return log ? make_log_axis(a.lo, a.hi) : make_axis(a.lo, a.hi);
  if (log) {
    const double pad = 0.04 * (std::log10(a.hi) - std::log10(a.lo));
    a.lo /= std::pow(10.0, pad), a.hi *= std::pow(10.0, pad);
  } else {
    const double pad = 0.04 * (a.hi - a.lo);
    a.lo -= pad, a.hi += pad;
  }
  return a;
}

std::string tick_label(double v, const Axis& a) {
  char buf[48];
  if (a.log || a.step == 0) {  // log or caller-chosen ticks: shortest form
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
  }
  double mag = std::max(std::abs(a.lo), std::abs(a.hi));
  if (mag >= 1e6 || (mag < 1e-3 && mag > 0))
    std::snprintf(buf, sizeof buf, "%.3g", v);
  else
    std::snprintf(buf, sizeof buf, "%.*f", a.decimals, v);
  return buf;
}

void draw_panel(std::ostringstream& os, const Panel& panel, double ox, double oy) {
  const double x0 = ox + kLeft, x1 = ox + kPanelW - kRight;
  const double y0 = oy + kTop, y1 = oy + kPanelH - kBottom;  // y0 top, y1 bottom
  os << "<g>\n";
  if (!panel.title.empty())
    os << "<text x=\"" << num((x0 + x1) / 2) << "\" y=\"" << num(oy + 24)
       << "\" text-anchor=\"middle\" font-size=\"" << num(fit_font(panel.title, 2 * (ox + kPanelW - (x0 + x1) / 2) - 8, 16))
       << "\" font-weight=\"bold\">" << escape(panel.title) << "</text>\n";

  // A point is drawn when finite and within what its axes can span (positive on a log axis).
  auto usable = [&](double x, double y) { return plottable(x, panel.log_x) && plottable(y, panel.log_y); };
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin, ymin = xmin, ymax = -xmin;
  for (const auto& s : panel.series) {
    MINIDL_CHECK(s.x.size() == s.y.size(), "write_svg_plot: series '", s.name,
                 "' has ", s.x.size(), " x values but ", s.y.size(), " y values");
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!usable(s.x[i], s.y[i])) continue;
      xmin = std::min(xmin, s.x[i]);
      xmax = std::max(xmax, s.x[i]);
      ymin = std::min(ymin, s.y[i]);
      ymax = std::max(ymax, s.y[i]);
    }
  }
  const bool empty = !(xmin <= xmax);
  if (empty) {
    xmin = panel.log_x ? 1 : 0, xmax = panel.log_x ? 10 : 1;
    ymin = panel.log_y ? 1 : 0, ymax = panel.log_y ? 10 : 1;
  }
  if (panel.y_from_zero && !panel.log_y) ymin = std::min(ymin, 0.0), ymax = std::max(ymax, 0.0);
  const Axis ax = !panel.x_ticks.empty() ? make_fixed_axis(panel.x_ticks, xmin, xmax, panel.log_x)
                  : panel.log_x          ? make_log_axis(xmin, xmax)
                                         : make_axis(xmin, xmax);
  const Axis ay = panel.log_y ? make_log_axis(ymin, ymax) : make_axis(ymin, ymax);
  auto px = [&](double x) { return x0 + ax.frac(x) * (x1 - x0); };
  auto py = [&](double y) { return y1 - ay.frac(y) * (y1 - y0); };

  // Grid, ticks, tick labels.
  for (double t : ax.ticks) {
    os << "<line x1=\"" << num(px(t)) << "\" y1=\"" << num(y0) << "\" x2=\"" << num(px(t))
       << "\" y2=\"" << num(y1) << "\" stroke=\"#e5e5e5\"/>\n";
    os << "<text x=\"" << num(px(t)) << "\" y=\"" << num(y1 + 18)
       << "\" text-anchor=\"middle\" font-size=\"12\" fill=\"#333\">" << tick_label(t, ax)
       << "</text>\n";
  }
  for (double t : ay.ticks) {
    os << "<line x1=\"" << num(x0) << "\" y1=\"" << num(py(t)) << "\" x2=\"" << num(x1)
       << "\" y2=\"" << num(py(t)) << "\" stroke=\"#e5e5e5\"/>\n";
    os << "<text x=\"" << num(x0 - 6) << "\" y=\"" << num(py(t) + 4)
       << "\" text-anchor=\"end\" font-size=\"12\" fill=\"#333\">" << tick_label(t, ay)
       << "</text>\n";
  }
  os << "<rect x=\"" << num(x0) << "\" y=\"" << num(y0) << "\" width=\"" << num(x1 - x0)
     << "\" height=\"" << num(y1 - y0) << "\" fill=\"none\" stroke=\"#444\"/>\n";
  if (!panel.xlabel.empty())
    os << "<text x=\"" << num((x0 + x1) / 2) << "\" y=\"" << num(y1 + 40)
       << "\" text-anchor=\"middle\" font-size=\"14\">" << escape(panel.xlabel) << "</text>\n";
  if (!panel.ylabel.empty()) {
    double cx = ox + 18, cy = (y0 + y1) / 2;
    os << "<text x=\"" << num(cx) << "\" y=\"" << num(cy) << "\" transform=\"rotate(-90 "
       << num(cx) << " " << num(cy) << ")\" text-anchor=\"middle\" font-size=\"14\">"
       << escape(panel.ylabel) << "</text>\n";
  }
  if (empty) {
    os << "<text x=\"" << num((x0 + x1) / 2) << "\" y=\"" << num((y0 + y1) / 2)
       << "\" text-anchor=\"middle\" font-size=\"14\" fill=\"#888\">no data</text>\n</g>\n";
    return;
  }

  // Lines: a polyline per run of finite points; dots when points are few.
  std::vector<std::pair<double, double>> samples;  // pixel points along the lines
  for (size_t k = 0; k < panel.series.size(); ++k) {
    const Series& s = panel.series[k];
    const char* color = kColors[k % std::size(kColors)];
    const bool dots = s.x.size() <= 40;
    std::string pts;
    double prev_x = NAN, prev_y = NAN;
    auto flush_line = [&] {
      if (!pts.empty())
        os << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\" stroke-linejoin=\"round\""
           << (s.dashed ? " stroke-dasharray=\"7 5\"" : "") << " points=\"" << pts << "\"/>\n";
      pts.clear();
      prev_x = prev_y = NAN;
    };
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!usable(s.x[i], s.y[i])) {
        flush_line();
        continue;
      }
      double X = px(s.x[i]), Y = py(s.y[i]);
      pts += num(X) + "," + num(Y) + " ";
      if (dots)
        os << "<circle cx=\"" << num(X) << "\" cy=\"" << num(Y) << "\" r=\"2.5\" fill=\""
           << color << "\"/>\n";
      // Sample the segment every ~3 px so long straight segments count too.
      if (std::isnan(prev_x)) {
        samples.emplace_back(X, Y);
      } else {
        int n = std::max(1, static_cast<int>(std::hypot(X - prev_x, Y - prev_y) / 3));
        for (int j = 1; j <= n; ++j)
          samples.emplace_back(prev_x + (X - prev_x) * j / n, prev_y + (Y - prev_y) * j / n);
      }
      prev_x = X, prev_y = Y;
    }
    flush_line();
  }

  // Legend in the corner whose box covers the fewest line samples (ties
  // prefer top-right, the usual spot).
  std::vector<const Series*> named;
  for (const auto& s : panel.series)
    if (!s.name.empty()) named.push_back(&s);
  if (named.empty()) {
    os << "</g>\n";
    return;
  }
  size_t longest = 0;
  for (auto* s : named) longest = std::max(longest, s->name.size());
  const double row_h = 18, w = 40 + 7.5 * static_cast<double>(longest),
               h = 8 + row_h * static_cast<double>(named.size());
  auto box_x = [&](int c) { return (c & 1) ? x1 - w - 8 : x0 + 8; };  // corners: TL TR BL BR
  auto box_y = [&](int c) { return (c & 2) ? y1 - h - 8 : y0 + 8; };
  int corner = 1;
  size_t best = SIZE_MAX;
  for (int c : {1, 3, 0, 2}) {
    size_t covered = 0;
    for (auto [X, Y] : samples)
      covered += X >= box_x(c) - 4 && X <= box_x(c) + w + 4 && Y >= box_y(c) - 4 &&
                 Y <= box_y(c) + h + 4;
    if (covered < best) best = covered, corner = c;
  }
  const double lx = box_x(corner), ly = box_y(corner);
  os << "<rect x=\"" << num(lx) << "\" y=\"" << num(ly) << "\" width=\"" << num(w)
     << "\" height=\"" << num(h) << "\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#bbb\" rx=\"3\"/>\n";
  for (size_t k = 0; k < panel.series.size(); ++k) {
    const Series& s = panel.series[k];
    if (s.name.empty()) continue;
    size_t row = std::find(named.begin(), named.end(), &s) - named.begin();
    double ry = ly + 4 + row_h * (static_cast<double>(row) + 0.5);
    const char* color = kColors[k % std::size(kColors)];
    os << "<line x1=\"" << num(lx + 6) << "\" y1=\"" << num(ry) << "\" x2=\"" << num(lx + 26)
       << "\" y2=\"" << num(ry) << "\" stroke=\"" << color << "\" stroke-width=\"2.5\""
       << (s.dashed ? " stroke-dasharray=\"5 3\"" : "") << "/>\n";
    os << "<text x=\"" << num(lx + 30) << "\" y=\"" << num(ry + 4)
       << "\" font-size=\"12\">" << escape(s.name) << "</text>\n";
  }
  os << "</g>\n";
}

}  // namespace

void write_svg_plot(const std::string& path, const std::vector<Panel>& panels,
                    const std::string& title) {
  const size_t n = std::max<size_t>(1, panels.size());
  const double top = title.empty() ? 0 : kTitleH;
  const double W = kPanelW * static_cast<double>(n), H = kPanelH + top;
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(W) << "\" height=\""
     << num(H) << "\" viewBox=\"0 0 " << num(W) << " " << num(H) << "\" font-family=\""
     << kFont << "\">\n";
  os << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  if (!title.empty())
    os << "<text x=\"" << num(W / 2) << "\" y=\"25\" text-anchor=\"middle\" font-size=\""
       << num(fit_font(title, W - 12, 18)) << "\" font-weight=\"bold\">" << escape(title) << "</text>\n";
  for (size_t i = 0; i < panels.size(); ++i)
    draw_panel(os, panels[i], kPanelW * static_cast<double>(i), top);
  os << "</svg>\n";

  std::filesystem::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), ec);
  write_file_atomically(path, {os.str()}, "write_svg_plot");
}

}  // namespace minidl::examples
