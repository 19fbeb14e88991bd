// A CSV file that grows one row at a time and is flushed after each row, so a
// crashed or still-running training run leaves a readable log.
#pragma once

#include <fstream>
#include <string>
#include <vector>

namespace minidl::examples {

// `text` as one CSV field (RFC 4180): as it is, or in double quotes with its
// quotes doubled when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& text);

class CsvLog {
 public:
  // Writes the header line (each name through csv_field) unless append is true
  // and the file already has content. Throws minidl::Error if the file cannot
  // be opened.
  CsvLog(const std::string& path, std::vector<std::string> columns, bool append = false);
  // One value per column, written with %.6g; throws on a wrong count.
  void row(const std::vector<double>& values);

 private:
  std::string path_;
  std::vector<std::string> columns_;
  std::ofstream out_;
};

}  // namespace minidl::examples
