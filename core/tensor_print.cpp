// PyTorch-style printing: Tensor::str() and operator<<, a port of
// torch/_tensor_str.py with its default print options (precision 4,
// threshold 1000 elements, 3 edge items, line width 80).
//
// One formatter per tensor picks the notation from the (summarized) values:
// integers print as they are; floats print as "1." when all finite nonzero
// values are integral, in scientific notation when max/min magnitude > 1000,
// max > 1e8 or min < 1e-4, and fixed with 4 decimals otherwise. Every element
// is right-aligned to the widest one.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "minidl/core/autograd/node.h"
#include "minidl/core/tensor.h"

namespace minidl {
namespace {

constexpr int kPrecision = 4;
constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr int64_t kLineWidth = 80;

// Host copy of the values, row-major, as double (floats) or int64 (integers).
struct HostValues {
  Shape shape;
  Shape strides;
  bool floating = true;
  std::vector<double> f;
  std::vector<int64_t> i;
};

std::string printf_str(const char* fmt, double v) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// Python's format(value, ".{p}f") / ".{p}e" / ".0f": NaN prints as "nan" whatever its sign.
std::string fixed_str(double v, int precision) {
  if (std::isnan(v)) return "nan";
  char fmt[16];
  std::snprintf(fmt, sizeof(fmt), "%%.%df", precision);
  return printf_str(fmt, v);
}

std::string sci_str(double v) {
  if (std::isnan(v)) return "nan";
  char fmt[16];
  std::snprintf(fmt, sizeof(fmt), "%%.%de", kPrecision);
  return printf_str(fmt, v);
}

class Formatter {
 public:
  Formatter(const HostValues& h, const std::vector<int64_t>& picked) : floating_(h.floating) {
    if (!floating_) {
      for (int64_t k : picked) width_ = std::max(width_, std::to_string(h.i[k]).size());
      return;
    }
    std::vector<double> vals;  // nonzero finite values
    for (int64_t k : picked)
      if (std::isfinite(h.f[k]) && h.f[k] != 0.0) vals.push_back(h.f[k]);
    if (vals.empty()) return;  // int mode, width 1
    double lo = std::abs(vals[0]), hi = lo;
    for (double v : vals) {
      lo = std::min(lo, std::abs(v));
      hi = std::max(hi, std::abs(v));
      if (v != std::ceil(v)) int_mode_ = false;
    }
    sci_mode_ = hi / lo > 1000.0 || hi > 1.0e8 || lo < 1.0e-4;
    for (double v : vals) {
      size_t w;
      if (sci_mode_)
        w = sci_str(v).size();
      else if (int_mode_)
        w = fixed_str(v, 0).size() + 1;  // room for the trailing "."
      else
        w = fixed_str(v, kPrecision).size();
      width_ = std::max(width_, w);
    }
  }

  size_t width() const { return width_; }

  std::string format_float(double v) const {
    std::string s;
    if (sci_mode_) {
      s = sci_str(v);
    } else if (int_mode_) {
      s = fixed_str(v, 0);
      if (std::isfinite(v)) s += ".";
    } else {
      s = fixed_str(v, kPrecision);
    }
    return pad(s);
  }
  std::string format_int(int64_t v) const { return pad(std::to_string(v)); }

 private:
  std::string pad(const std::string& s) const {
    return s.size() >= width_ ? s : std::string(width_ - s.size(), ' ') + s;
  }
  bool floating_;
  bool int_mode_ = true;
  bool sci_mode_ = false;
  size_t width_ = 1;
};

// Indices of the first and last kEdgeItems along a dim when summarizing, else all.
std::vector<int64_t> shown_indices(int64_t size, bool summarize) {
  std::vector<int64_t> out;
  if (summarize && size > 2 * kEdgeItems) {
    for (int64_t k = 0; k < kEdgeItems; ++k) out.push_back(k);
    for (int64_t k = size - kEdgeItems; k < size; ++k) out.push_back(k);
  } else {
    for (int64_t k = 0; k < size; ++k) out.push_back(k);
  }
  return out;
}

// Element offsets of the values that get printed (what the formatter sees).
void collect_shown(const HostValues& h, size_t dim, int64_t offset, bool summarize,
                   std::vector<int64_t>& out) {
  if (dim == h.shape.size()) {
    out.push_back(offset);
    return;
  }
  for (int64_t k : shown_indices(h.shape[dim], summarize))
    collect_shown(h, dim + 1, offset + k * h.strides[dim], summarize, out);
}

std::string element_str(const HostValues& h, const Formatter& f, int64_t offset) {
  return h.floating ? f.format_float(h.f[offset]) : f.format_int(h.i[offset]);
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t k = 0; k < parts.size(); ++k) {
    if (k) out += sep;
    out += parts[k];
  }
  return out;
}

std::string vector_str(const HostValues& h, const Formatter& f, int64_t offset, int64_t indent,
                       bool summarize) {
  const int64_t element_length = static_cast<int64_t>(f.width()) + 2;  // ", " between elements
  const int64_t per_line = std::max<int64_t>(1, (kLineWidth - indent) / element_length);
  const int64_t n = h.shape.back(), stride = h.strides.back();
  std::vector<std::string> data;
  if (summarize && n > 2 * kEdgeItems) {
    for (int64_t k = 0; k < kEdgeItems; ++k) data.push_back(element_str(h, f, offset + k * stride));
    data.push_back(" ...");
    for (int64_t k = n - kEdgeItems; k < n; ++k) data.push_back(element_str(h, f, offset + k * stride));
  } else {
    for (int64_t k = 0; k < n; ++k) data.push_back(element_str(h, f, offset + k * stride));
  }
  std::vector<std::string> lines;
  for (size_t k = 0; k < data.size(); k += static_cast<size_t>(per_line)) {
    const auto end = std::min(data.size(), k + static_cast<size_t>(per_line));
    lines.push_back(join({data.begin() + static_cast<std::ptrdiff_t>(k),
                          data.begin() + static_cast<std::ptrdiff_t>(end)}, ", "));
  }
  return "[" + join(lines, ",\n" + std::string(static_cast<size_t>(indent + 1), ' ')) + "]";
}

std::string tensor_str(const HostValues& h, const Formatter& f, size_t dim, int64_t offset,
                       int64_t indent, bool summarize) {
  const size_t ndim = h.shape.size() - dim;
  if (ndim == 0) return element_str(h, f, offset);
  if (ndim == 1) return vector_str(h, f, offset, indent, summarize);
  std::vector<std::string> slices;
  const int64_t n = h.shape[dim];
  for (int64_t k : shown_indices(n, summarize)) {
    if (summarize && n > 2 * kEdgeItems && k == n - kEdgeItems) slices.push_back("...");
    slices.push_back(tensor_str(h, f, dim + 1, offset + k * h.strides[dim], indent + 1, summarize));
  }
  const std::string sep = "," + std::string(ndim - 1, '\n') + std::string(static_cast<size_t>(indent + 1), ' ');
  return "[" + join(slices, sep) + "]";
}

// PyTorch's _add_suffixes: a suffix that would pass the line width goes on a new line.
std::string add_suffixes(const std::string& body, const std::vector<std::string>& suffixes, int64_t indent) {
  std::string out = body;
  const size_t nl = body.rfind('\n');
  int64_t last_line_len = static_cast<int64_t>(body.size()) -
                          (nl == std::string::npos ? -1 : static_cast<int64_t>(nl)) + 1;
  for (const std::string& s : suffixes) {
    const auto len = static_cast<int64_t>(s.size());
    if (last_line_len + len + 2 > kLineWidth) {
      out += ",\n" + std::string(static_cast<size_t>(indent), ' ') + s;
      last_line_len = indent + len;
    } else {
      out += ", " + s;
      last_line_len += len + 2;
    }
  }
  return out + ")";
}

HostValues to_host(const Tensor& t) {
  Tensor c = t.detach().to(kCPU).contiguous();
  HostValues h;
  h.shape = c.shape();
  h.strides = contiguous_strides(c.shape());
  h.floating = is_floating(c.dtype());
  if (h.floating)
    h.f = c.to_vector<double>();
  else
    h.i = c.to_vector<int64_t>();
  return h;
}

std::string size_tuple(const Shape& shape) {
  std::string s = "(";
  for (size_t k = 0; k < shape.size(); ++k) s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "[ Tensor (undefined) ]";
  const std::string prefix = "tensor(";
  const auto indent = static_cast<int64_t>(prefix.size());
  std::vector<std::string> suffixes;
  if (device().is_cuda()) suffixes.push_back("device='" + device().str() + "'");
  const std::string dtype_suffix = std::string("dtype=torch.") + dtype_name(dtype());

  std::string body;
  if (numel() == 0) {
    body = "[]";
    if (dim() != 1) suffixes.push_back("size=" + size_tuple(shape()));
    if (dtype() != kFloat32) suffixes.push_back(dtype_suffix);  // nothing shows it's not float
  } else {
    if (dtype() != kFloat32 && dtype() != kInt64) suffixes.push_back(dtype_suffix);
    const HostValues h = to_host(*this);
    const bool summarize = numel() > kThreshold;
    std::vector<int64_t> shown;
    collect_shown(h, 0, 0, summarize, shown);
    const Formatter f(h, shown);
    body = tensor_str(h, f, 0, 0, indent, summarize);
  }
  if (grad_fn())
    suffixes.push_back("grad_fn=<" + grad_fn()->name() + ">");
  else if (requires_grad())
    suffixes.push_back("requires_grad=True");
  return add_suffixes(prefix + body, suffixes, indent);
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace minidl
