// Line plots as a standalone SVG file: one or more panels side by side, each
// with axes, ~5 nice ticks, a legend and one colour per series.
#pragma once

#include <string>
#include <vector>

namespace minidl::examples {

struct Series {
  std::string name;
  std::vector<double> x, y;
  bool dashed = false;  // e.g. a reference level; dashed in the legend too
};

struct Panel {
  std::string title, xlabel, ylabel;
  std::vector<Series> series;
  bool y_from_zero = false;  // include 0 in the y range (ignored by a log y axis)
  // Logarithmic axes: ticks at 1, 2, 5 times powers of ten within the data's
  // range; points with a value <= 0 on a log axis are skipped.
  bool log_x = false, log_y = false;
  // Tick positions to use instead of the automatic ones (e.g. the batch sizes
  // 1, 2, 4, ..., 256 on a log x axis); the axis spans them and the data.
  std::vector<double> x_ticks = {};
};

// Written atomically (temp file + rename), so a viewer never sees half a plot.
// Non-finite points are skipped, and so are points beyond +-1e300 on a linear
// axis or outside [1e-280, 1e280] on a log one (the axis arithmetic would
// overflow). Throws minidl::Error on I/O failure or when a series has x and y
// of different lengths.
void write_svg_plot(const std::string& path, const std::vector<Panel>& panels,
                    const std::string& title = "");

}  // namespace minidl::examples
