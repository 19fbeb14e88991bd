// CsvLog: header once (names quoted per RFC 4180 where needed), then one %.6g
// row per call, flushed immediately.
#include "examples/common/csv_log.h"

#include <cstdio>
#include <filesystem>

#include "minidl/core/check.h"

namespace minidl::examples {

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (const char c : text) {
    if (c == '"') quoted += '"';  // RFC 4180: a quote inside a quoted field is doubled
    quoted += c;
  }
  return quoted + '"';
}

CsvLog::CsvLog(const std::string& path, std::vector<std::string> columns, bool append)
    : path_(path), columns_(std::move(columns)) {
  MINIDL_CHECK(!columns_.empty(), "CsvLog: expected at least one column for '", path_, "'");
  std::error_code ec;
  bool has_content = append && std::filesystem::exists(path_, ec) &&
                     std::filesystem::file_size(path_, ec) > 0 && !ec;
  auto parent = std::filesystem::path(path_).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  out_.open(path_, append ? std::ios::app : std::ios::trunc);
  MINIDL_CHECK(out_.is_open(), "CsvLog: cannot open '", path_, "' for writing");
  if (!has_content) {
    for (size_t i = 0; i < columns_.size(); ++i) out_ << (i ? "," : "") << csv_field(columns_[i]);
    out_ << '\n';
    out_.flush();
  }
}

void CsvLog::row(const std::vector<double>& values) {
  MINIDL_CHECK(values.size() == columns_.size(), "CsvLog: expected ", columns_.size(),
               " values per row (", path_, "), but got ", values.size());
  char buf[64];
  for (size_t i = 0; i < values.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%.6g", values[i]);
    out_ << (i ? "," : "") << buf;
  }
  out_ << '\n';
  out_.flush();
  MINIDL_CHECK(out_.good(), "CsvLog: write to '", path_, "' failed");
}

}  // namespace minidl::examples
