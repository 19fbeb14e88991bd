// Tests for the example logging helpers (examples/common): CRC32C, the
// TensorBoard event file (parsed back with an independent reader here), CSV,
// SVG plots and the non-terminal progress output.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "examples/common/csv_log.h"
#include "examples/common/progress.h"
#include "examples/common/svg_plot.h"
#include "examples/common/tensorboard.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace minidl::examples;

namespace {

// A fresh directory per test case, removed afterwards.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() /
             ("minidl_test_logs_" + name + "_" + std::to_string(getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Bit-at-a-time CRC32C, written independently of the table version.
uint32_t crc32c_bitwise(const std::string& s) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : s) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}
uint32_t mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

uint64_t le(const std::string& s, size_t pos, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s[pos + i])) << (8 * i);
  return v;
}

// One decoded protobuf field: varint/fixed values in `num`, bytes in `bytes`.
struct Field {
  uint32_t number, wire;
  uint64_t num = 0;
  std::string bytes;
};

std::vector<Field> parse_proto(const std::string& s) {
  std::vector<Field> fields;
  size_t pos = 0;
  auto varint = [&] {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      REQUIRE(pos < s.size());
      auto b = static_cast<unsigned char>(s[pos++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
  };
  while (pos < s.size()) {
    uint64_t key = varint();
    Field f{static_cast<uint32_t>(key >> 3), static_cast<uint32_t>(key & 7)};
    if (f.wire == 0) {
      f.num = varint();
    } else if (f.wire == 1) {
      REQUIRE(pos + 8 <= s.size());
      f.num = le(s, pos, 8), pos += 8;
    } else if (f.wire == 5) {
      REQUIRE(pos + 4 <= s.size());
      f.num = le(s, pos, 4), pos += 4;
    } else {
      REQUIRE(f.wire == 2);
      uint64_t n = varint();
      REQUIRE(pos + n <= s.size());
      f.bytes = s.substr(pos, n), pos += n;
    }
    fields.push_back(f);
  }
  return fields;
}

const Field* find(const std::vector<Field>& fs_, uint32_t number) {
  for (const auto& f : fs_)
    if (f.number == number) return &f;
  return nullptr;
}

// Splits a TFRecord file into its records, checking lengths and both CRCs.
std::vector<std::string> read_tfrecords(const std::string& file) {
  std::vector<std::string> records;
  size_t pos = 0;
  while (pos < file.size()) {
    REQUIRE(pos + 12 <= file.size());
    const std::string len_bytes = file.substr(pos, 8);
    uint64_t len = le(file, pos, 8);
    CHECK(le(file, pos + 8, 4) == mask(crc32c_bitwise(len_bytes)));
    REQUIRE(pos + 12 + len + 4 <= file.size());
    std::string data = file.substr(pos + 12, len);
    CHECK(le(file, pos + 12 + len, 4) == mask(crc32c_bitwise(data)));
    records.push_back(data);
    pos += 12 + len + 4;
  }
  return records;
}

double as_double(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}
float as_float(uint64_t bits) {
  auto b32 = static_cast<uint32_t>(bits);
  float f;
  std::memcpy(&f, &b32, 4);
  return f;
}

}  // namespace

TEST_CASE("crc32c matches the standard check values") {
  const std::string digits = "123456789";
  CHECK(crc32c(digits.data(), digits.size()) == 0xE3069283u);
  const std::string zeros(32, '\0');
  CHECK(crc32c(zeros.data(), zeros.size()) == 0x8A9136AAu);
  const std::string ones(32, '\xff');
  CHECK(crc32c(ones.data(), ones.size()) == 0x62A8AB43u);  // RFC 3720 B.4
  CHECK(crc32c(nullptr, 0) == 0u);
  // Incremental use equals one pass; table version equals the bitwise one.
  std::string text;
  for (int i = 0; i < 1000; ++i) text.push_back(static_cast<char>((i * 131 + 7) & 0xFF));
  CHECK(crc32c(text.data() + 300, 700, crc32c(text.data(), 300)) == crc32c(text.data(), 1000));
  CHECK(crc32c(text.data(), text.size()) == crc32c_bitwise(text));
  CHECK(masked_crc32c(digits.data(), digits.size()) == mask(0xE3069283u));
}

TEST_CASE("TensorBoardWriter writes TFRecord-framed Event protos") {
  TempDir dir("tb");
  const fs::path log_dir = dir.path / "runs" / "exp1";  // parents must be created
  std::string file;
  {
    TensorBoardWriter w(log_dir.string());
    file = w.path();
    CHECK(fs::path(file).parent_path() == log_dir);
    CHECK(fs::path(file).filename().string().rfind("events.out.tfevents.", 0) == 0);
    w.add_scalar("train/loss", 2.25, 0);
    w.add_scalar("train/loss", 1.5, 7);
    w.add_scalar("val/acc", 0.1, 123456789012LL);  // step beyond 32 bits
    w.flush();
    CHECK(read_tfrecords(read_all(file)).size() == 4);  // flushed while still open
  }
  std::vector<std::string> records = read_tfrecords(read_all(file));
  REQUIRE(records.size() == 4);

  auto first = parse_proto(records[0]);
  REQUIRE(find(first, 3) != nullptr);
  CHECK(find(first, 3)->bytes == "brain.Event:2");
  REQUIRE(find(first, 1) != nullptr);
  CHECK(find(first, 1)->wire == 1);
  const double now = static_cast<double>(std::time(nullptr));
  CHECK(std::abs(as_double(find(first, 1)->num) - now) < 600);

  struct Expected { std::string tag; float value; int64_t step; };
  const Expected expected[] = {{"train/loss", 2.25f, 0}, {"train/loss", 1.5f, 7},
                               {"val/acc", 0.1f, 123456789012LL}};
  for (int i = 0; i < 3; ++i) {
    CAPTURE(i);
    auto event = parse_proto(records[i + 1]);
    CHECK(find(event, 3) == nullptr);
    REQUIRE(find(event, 1) != nullptr);
    CHECK(std::abs(as_double(find(event, 1)->num) - now) < 600);
    const Field* step = find(event, 2);
    REQUIRE(step != nullptr);
    CHECK(step->wire == 0);
    CHECK(static_cast<int64_t>(step->num) == expected[i].step);
    const Field* summary = find(event, 5);
    REQUIRE(summary != nullptr);
    auto values = parse_proto(summary->bytes);
    REQUIRE(values.size() == 1);
    CHECK(values[0].number == 1);
    auto value = parse_proto(values[0].bytes);
    REQUIRE(find(value, 1) != nullptr);
    CHECK(find(value, 1)->bytes == expected[i].tag);
    REQUIRE(find(value, 2) != nullptr);
    CHECK(find(value, 2)->wire == 5);
    CHECK(as_float(find(value, 2)->num) == expected[i].value);
  }
}

TEST_CASE("TensorBoardWriter rejects an unusable log directory") {
  TempDir dir("tb_bad");
  const fs::path blocker = dir.path / "a_file";
  std::ofstream(blocker) << "x";
  CHECK_THROWS_CONTAINS(TensorBoardWriter((blocker / "sub").string()), "cannot create log directory");
  CHECK_THROWS_CONTAINS(TensorBoardWriter(""), "empty path");
}

TEST_CASE("CsvLog writes a header and %.6g rows, flushed per row") {
  TempDir dir("csv");
  const fs::path path = dir.path / "sub" / "log.csv";
  {
    CsvLog log(path.string(), {"epoch", "loss", "acc"});
    log.row({1, 0.5, 1.0 / 3.0});
    CHECK(read_all(path) == "epoch,loss,acc\n1,0.5,0.333333\n");  // visible before close
    log.row({2, 1234567.0, -2.5e-7});
    CHECK_THROWS_CONTAINS(log.row({3, 0.1}), "expected 3 values per row");
    CHECK_THROWS_CONTAINS(log.row({3, 0.1, 0.2, 0.3}), "but got 4");
  }
  CHECK(read_all(path) == "epoch,loss,acc\n1,0.5,0.333333\n2,1.23457e+06,-2.5e-07\n");
  {
    CsvLog log(path.string(), {"epoch", "loss", "acc"}, /*append=*/true);  // no second header
    log.row({3, 0.25, 0.75});
  }
  CHECK(read_all(path) == "epoch,loss,acc\n1,0.5,0.333333\n2,1.23457e+06,-2.5e-07\n3,0.25,0.75\n");
  {
    CsvLog log(path.string(), {"a"});  // not appending: starts over
    log.row({7});
  }
  CHECK(read_all(path) == "a\n7\n");
  CHECK_THROWS_CONTAINS(CsvLog(path.string(), {}), "at least one column");
}

TEST_CASE("CsvLog quotes column names holding commas, quotes or line breaks (RFC 4180)") {
  // Were written as they are: "loss, val" split into two columns, a newline into two lines.
  CHECK(csv_field("plain name") == "plain name");
  CHECK(csv_field("a,b") == "\"a,b\"");
  CHECK(csv_field("say \"hi\"") == "\"say \"\"hi\"\"\"");
  CHECK(csv_field("two\nlines") == "\"two\nlines\"");
  CHECK(csv_field("cr\r") == "\"cr\r\"");
  TempDir dir("csv_quote");
  const fs::path path = dir.path / "log.csv";
  {
    CsvLog log(path.string(), {"epoch", "loss, val", "6\" model", "multi\nline"});
    log.row({1, 0.5, 2, 3});
  }
  CHECK(read_all(path) == "epoch,\"loss, val\",\"6\"\" model\",\"multi\nline\"\n1,0.5,2,3\n");
}

TEST_CASE("write_svg_plot writes a complete SVG atomically") {
  TempDir dir("svg");
  const fs::path path = dir.path / "plot.svg";
  std::ofstream(path) << "old contents";

  Panel loss{"Loss", "epoch", "cross-entropy", {}};
  loss.series.push_back({"train", {1, 2, 3, 4, 5}, {2.3, 1.7, NAN, 1.1, 0.9}});
  loss.series.push_back({"val <test>", {1, 2, 3, 4, 5}, {2.2, 1.8, 1.5, INFINITY, 1.3}});
  Panel acc{"Accuracy", "epoch", "%", {}, /*y_from_zero=*/true};
  acc.series.push_back({"val_acc", {1, 2, 3}, {40, 55, 61}});
  Panel flat{"Flat", "step", "lr", {{"lr", {0, 1000}, {0.1, 0.1}}}};
  Panel empty{"Nothing yet", "x", "y", {{"none", {}, {}}}};
  write_svg_plot(path.string(), {loss, acc, flat, empty}, "run & co");

  const std::string svg = read_all(path);
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.size() >= 7);
  CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
  for (const char* s : {"train", "val &lt;test&gt;", "val_acc", ">lr<", "Accuracy", "cross-entropy",
                        "run &amp; co", "no data"})
    CHECK_MESSAGE(svg.find(s) != std::string::npos, s);
  std::string lower = svg;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  CHECK(lower.find("nan") == std::string::npos);
  CHECK(lower.find("inf") == std::string::npos);
  auto count = [&](const std::string& s) {
    size_t n = 0;
    for (size_t p = svg.find(s); p != std::string::npos; p = svg.find(s, p + 1)) ++n;
    return n;
  };
  CHECK(count("<svg") == 1);
  CHECK(count("<g>") == count("</g>"));
  CHECK(count("<text") == count("</text>"));
  CHECK(count("<polyline") >= 4);  // NaN/inf split the two loss series into runs
  // Only the final file is left behind (the temp file was renamed).
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) {
    (void)e;
    ++files;
  }
  CHECK(files == 1);

  Panel bad{"bad", "x", "y", {{"s", {1, 2}, {1}}}};
  CHECK_THROWS_CONTAINS(write_svg_plot(path.string(), {bad}), "has 2 x values but 1 y values");
  CHECK(read_all(path) == svg);  // a failed plot leaves the old file intact
}

TEST_CASE("ProgressBar without a terminal prints few plain lines") {
  std::ostringstream out;
  {
    ProgressBar bar(100 * 128, "epoch 1/3", &out);
    for (int i = 1; i <= 100; ++i) bar.update(int64_t{i} * 128, "loss " + std::to_string(i));
    bar.finish("train loss 1.23 acc 45.6%");
  }
  const std::string s = out.str();
  CHECK(s.find('\r') == std::string::npos);
  CHECK(s.find('\033') == std::string::npos);
  int lines = 0;
  for (char c : s) lines += c == '\n';
  CHECK(lines >= 10);
  CHECK(lines <= 12);
  CHECK(s.find("12800/12800") != std::string::npos);
  CHECK(s.find("epoch 1/3") != std::string::npos);
  CHECK(s.find("loss 100") != std::string::npos);
  CHECK(s.find("train loss 1.23 acc 45.6%") != std::string::npos);
  CHECK(s.back() == '\n');

  // Jumps past several 10% marks give one line; control characters in the
  // postfix are neutralised; an unknown total (0) does not divide by zero.
  std::ostringstream out2;
  ProgressBar jump(10, "", &out2);
  jump.update(7, "a\rb\nc");
  jump.update(10, "");
  jump.finish("");
  std::string s2 = out2.str();
  int lines2 = 0;
  for (char c : s2) lines2 += c == '\n';
  CHECK(lines2 == 3);
  CHECK(s2.find('\r') == std::string::npos);
  CHECK(s2.find("a b c") != std::string::npos);

  std::ostringstream out3;
  ProgressBar unknown(0, "eval", &out3);
  unknown.update(5, "x");
  unknown.finish("ok");
  CHECK(out3.str().find("eval done") != std::string::npos);
}
