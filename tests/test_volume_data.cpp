// VolumeDataset (patches, flips, normalization, the errors naming files) and
// the synthetic grain-volume generator (determinism, class balance, that the
// task is neither trivial nor hopeless).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "minidl/data/grain_volumes.h"
#include "minidl/data/npy.h"
#include "minidl/data/volume_dataset.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace minidl;
using data::VolumeDataset;
using data::VolumeDatasetOptions;
using data::VolumeNormalization;

namespace {

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("minidl_test_volume_" + name + "_" + std::to_string(getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path / "images");
    fs::create_directories(path / "labels");
  }
  ~TempDir() { fs::remove_all(path); }
  std::string image(const std::string& name) const { return (path / "images" / name).string(); }
  std::string label(const std::string& name) const { return (path / "labels" / name).string(); }
};

// A float32 (D, H, W) volume whose voxel (z, y, x) holds z*10000 + y*100 + x,
// so a patch reveals where it came from; its label is (z + y + x) % 2.
void write_coded_pair(const TempDir& dir, const std::string& name, int64_t d, int64_t h, int64_t w) {
  Tensor image = empty({d, h, w}, kFloat32), label = empty({d, h, w}, kUInt8);
  float* im = image.data_ptr<float>();
  uint8_t* lb = label.data_ptr<uint8_t>();
  for (int64_t z = 0, i = 0; z < d; ++z)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x, ++i) {
        im[i] = static_cast<float>(z * 10000 + y * 100 + x);
        lb[i] = static_cast<uint8_t>((z + y + x) % 2);
      }
  data::save_npy(dir.image(name), image);
  data::save_npy(dir.label(name), label);
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

VolumeDatasetOptions raw(std::array<int64_t, 3> patch, bool flip) {
  // kScale leaves float images as they are, so the coded values survive.
  return {patch, flip, VolumeNormalization::kScale};
}

}  // namespace

TEST_CASE("VolumeDataset: a patch is the window at its origin, flipped per axis, label alike") {
  TempDir dir("patches");
  write_coded_pair(dir, "a.npy", 9, 8, 7);
  write_coded_pair(dir, "b.npy", 6, 5, 4);
  const VolumeDataset ds(dir.path.string(), raw({4, 3, 2}, true));
  REQUIRE(ds.size() == 2);
  CHECK(ds.image_paths()[0] == dir.image("a.npy"));
  CHECK(ds.label_paths()[1] == dir.label("b.npy"));

  Generator gen(3);
  std::set<int64_t> origins_z;
  int flipped[3] = {0, 0, 0};
  const int draws = 300;
  for (int k = 0; k < draws; ++k) {
    const int64_t index = k % 2;
    const auto s = ds.sample(index, gen);
    REQUIRE(s.image.shape() == Shape{1, 4, 3, 2});
    REQUIRE(s.label.shape() == Shape{1, 4, 3, 2});
    REQUIRE(s.image.dtype() == kFloat32);
    const float* im = s.image.data_ptr<float>();
    const float* lb = s.label.data_ptr<float>();
    // Each axis runs up or down by one from the first voxel; that fixes the
    // flips and the origin, and every voxel must then match.
    const auto code = [](int64_t z, int64_t y, int64_t x) { return static_cast<float>(z * 10000 + y * 100 + x); };
    const int64_t z0 = static_cast<int64_t>(im[0]) / 10000, y0 = static_cast<int64_t>(im[0]) / 100 % 100,
                  x0 = static_cast<int64_t>(im[0]) % 100;
    const bool fz = im[6] < im[0], fy = im[2] < im[0], fx = im[1] < im[0];
    flipped[0] += fz;
    flipped[1] += fy;
    flipped[2] += fx;
    const int64_t oz = fz ? z0 - 3 : z0;
    origins_z.insert(index == 0 ? oz : -1 - oz);
    for (int64_t z = 0, i = 0; z < 4; ++z)
      for (int64_t y = 0; y < 3; ++y)
        for (int64_t x = 0; x < 2; ++x, ++i) {
          const int64_t sz = fz ? z0 - z : z0 + z, sy = fy ? y0 - y : y0 + y, sx = fx ? x0 - x : x0 + x;
          REQUIRE(im[i] == code(sz, sy, sx));
          REQUIRE(lb[i] == static_cast<float>((sz + sy + sx) % 2));
          REQUIRE(sz >= 0);
          REQUIRE(sz < (index == 0 ? 9 : 6));
        }
  }
  // Every origin is reached (9 - 4 + 1 = 6 for a, 6 - 4 + 1 = 3 for b), and
  // each axis is flipped about half the time.
  CHECK(origins_z.size() == 6 + 3);
  for (int f : flipped) {
    CHECK(f > draws * 0.35);
    CHECK(f < draws * 0.65);
  }
}

TEST_CASE("VolumeDataset: batches are deterministic for a Generator seed; no flips when off") {
  TempDir dir("batches");
  for (const char* name : {"0.npy", "1.npy", "2.npy"}) write_coded_pair(dir, name, 10, 9, 8);
  const VolumeDataset ds(dir.path.string(), raw({5, 4, 3}, true));
  Generator g1(11), g2(11), g3(12);
  const data::VolumeBatch a = ds.random_batch(6, g1), b = ds.random_batch(6, g2), c = ds.random_batch(6, g3);
  CHECK(a.images.shape() == Shape{6, 1, 5, 4, 3});
  CHECK(a.labels.shape() == Shape{6, 1, 5, 4, 3});
  CHECK(a.indices == b.indices);
  CHECK(testing::max_abs_diff(a.images, b.images) == 0.0);
  CHECK(testing::max_abs_diff(a.labels, b.labels) == 0.0);
  CHECK(testing::max_abs_diff(a.images, c.images) > 0.0);
  for (int64_t i : a.indices) CHECK((i >= 0 && i < 3));
  // batch(indices) after drawing the same indices == random_batch.
  Generator g4(11);
  for (int k = 0; k < 6; ++k) g4.randint(0, 3);
  CHECK(testing::max_abs_diff(ds.batch(a.indices, g4).images, a.images) == 0.0);

  const VolumeDataset plain(dir.path.string(), raw({5, 4, 3}, false));
  Generator g5(1);
  const Tensor p = plain.batch({0, 1, 2, 0}, g5).images;
  for (int64_t n = 0; n < 4; ++n) {
    const Tensor patch = p[n].contiguous();
    const float* v = patch.data_ptr<float>();
    CHECK(v[1] == v[0] + 1);      // x increases
    CHECK(v[3] == v[0] + 100);    // y increases
    CHECK(v[12] == v[0] + 10000);  // z increases
  }
  CHECK_THROWS_CONTAINS(ds.batch({3}, g5), "index 3 is out of range for a dataset of size 3");
  CHECK_THROWS_CONTAINS(ds.random_batch(0, g5), "batch_size must be positive");
}

TEST_CASE("VolumeDataset: per-volume mean/std and /255 normalization; labels 0/1 from any dtype") {
  TempDir dir("norm");
  Tensor image = arange(4 * 5 * 6, TensorOptions(kFloat64)).reshape({4, 5, 6}).to(kUInt8);
  data::save_npy(dir.image("u8.npy"), image);
  data::NpyArray bool_label;  // a bool label, (1, D, H, W)
  bool_label.dtype = data::NpyDType::Bool;
  bool_label.shape = {1, 4, 5, 6};
  for (int i = 0; i < 120; ++i) bool_label.data.push_back(i % 4 == 0);
  data::save_npy(dir.label("u8.npy"), bool_label);  // (1, D, H, W) accepted too

  const VolumeDataset standardized(dir.path.string(), {{4, 5, 6}, false, VolumeNormalization::kMeanStd});
  const auto v = standardized.volume(0);
  CHECK(v.image.shape() == Shape{1, 4, 5, 6});
  CHECK(std::abs(v.image.mean().item<float>()) < 1e-5);
  CHECK(std::abs(v.image.var(false).item<float>() - 1.0f) < 1e-4);
  CHECK(v.label.sum().item<float>() == 30.0f);
  CHECK(standardized.foreground_fraction() == doctest::Approx(0.25));

  const VolumeDataset scaled(dir.path.string(), {{4, 5, 6}, false, VolumeNormalization::kScale});
  const auto s = scaled.volume(0);
  CHECK(s.image.to_vector<float>()[119] == doctest::Approx(119.0 / 255));
  // The patch is the whole volume here, so sample() == volume().
  Generator gen(0);
  CHECK(testing::max_abs_diff(scaled.sample(0, gen).image, s.image) == 0.0);
}

TEST_CASE("VolumeDataset: bad data sets are refused with the files named") {
  {
    TempDir dir("mismatch");
    write_coded_pair(dir, "a.npy", 6, 6, 6);
    data::save_npy(dir.label("a.npy"), zeros({6, 6, 5}, kUInt8));
    CHECK_THROWS_CONTAINS(VolumeDataset(dir.path.string(), raw({2, 2, 2}, false)),
                          "shape mismatch between image " + dir.image("a.npy") + " (6, 6, 6) and label " +
                              dir.label("a.npy") + " (6, 6, 5)");
  }
  {
    TempDir dir("missing");
    write_coded_pair(dir, "a.npy", 6, 6, 6);
    data::save_npy(dir.image("b.npy"), zeros({6, 6, 6}, kUInt8));
    CHECK_THROWS_CONTAINS(VolumeDataset(dir.path.string(), raw({2, 2, 2}, false)),
                          dir.image("b.npy") + " has no label: " + dir.label("b.npy") + " does not exist");
    fs::remove(dir.image("b.npy"));
    data::save_npy(dir.label("c.npy"), zeros({6, 6, 6}, kUInt8));
    CHECK_THROWS_CONTAINS(VolumeDataset(dir.path.string(), raw({2, 2, 2}, false)),
                          dir.label("c.npy") + " has no image: " + dir.image("c.npy") + " does not exist");
  }
  {
    TempDir dir("small");
    write_coded_pair(dir, "a.npy", 6, 3, 6);
    CHECK_THROWS_CONTAINS(VolumeDataset(dir.path.string(), raw({4, 4, 4}, false)),
                          dir.image("a.npy") + " is (6, 3, 6) (D, H, W), smaller than the patch size (4, 4, 4)");
    CHECK_THROWS_CONTAINS(VolumeDataset(dir.path.string(), raw({0, 4, 4}, false)), "patch_size must be positive");
  }
  {
    TempDir dir("labels");
    write_coded_pair(dir, "a.npy", 3, 3, 3);
    Tensor label = zeros({3, 3, 3}, kUInt8);
    label.data_ptr<uint8_t>()[1 * 9 + 2 * 3 + 0] = 2;
    data::save_npy(dir.label("a.npy"), label);
    CHECK_THROWS_CONTAINS(VolumeDataset(dir.path.string(), raw({2, 2, 2}, false)),
                          dir.label("a.npy") + ": labels must be 0 or 1 (binary segmentation), got 2 at voxel (1, 2, 0)");
  }
  {
    TempDir dir("dims");
    data::save_npy(dir.image("a.npy"), zeros({2, 3, 3, 3}, kUInt8));
    data::save_npy(dir.label("a.npy"), zeros({2, 3, 3, 3}, kUInt8));
    CHECK_THROWS_CONTAINS(VolumeDataset(dir.path.string(), raw({2, 2, 2}, false)),
                          dir.image("a.npy") + ": expected a (D, H, W) or (1, D, H, W) volume, got shape (2, 3, 3, 3)");
  }
  {
    TempDir dir("corrupt");
    write_coded_pair(dir, "a.npy", 3, 3, 3);
    const std::string bytes = read_bytes(dir.image("a.npy"));
    std::ofstream(dir.image("a.npy"), std::ios::binary) << bytes.substr(0, bytes.size() - 4);
    CHECK_THROWS_CONTAINS(VolumeDataset(dir.path.string(), raw({2, 2, 2}, false)),
                          "parse_npy: " + dir.image("a.npy") + ": at byte " + std::to_string(bytes.size() - 4) +
                              ": truncated file");
    data::save_npy(dir.image("a.npy"), zeros({3, 3, 3}, kInt64));
    CHECK_THROWS_CONTAINS(VolumeDataset(dir.path.string(), {{2, 2, 2}, false, VolumeNormalization::kScale}),
                          "kScale normalization has no range for '<i8' images");
  }
  {
    TempDir dir("empty");
    CHECK_THROWS_CONTAINS(VolumeDataset(dir.path.string()), "no .npy files in " + (dir.path / "images").string());
    CHECK_THROWS_CONTAINS(VolumeDataset((dir.path / "nope").string()), "is not a directory");
  }
}

TEST_CASE("grain volumes: deterministic for a seed, volume i independent of the count") {
  const auto a = data::make_grain_volume(20, 24, 28, 5), b = data::make_grain_volume(20, 24, 28, 5);
  const auto c = data::make_grain_volume(20, 24, 28, 6);
  CHECK(a.image.shape() == Shape{20, 24, 28});
  CHECK(a.image.dtype() == kUInt8);
  CHECK(a.image.to_vector<uint8_t>() == b.image.to_vector<uint8_t>());
  CHECK(a.label.to_vector<uint8_t>() == b.label.to_vector<uint8_t>());
  CHECK(a.label.to_vector<uint8_t>() != c.label.to_vector<uint8_t>());

  TempDir d2("gen2"), d3("gen3");
  data::generate_grain_volumes(d2.path.string(), 2, 16, 9);
  data::generate_grain_volumes(d3.path.string(), 3, 16, 9);
  for (const char* name : {"000.npy", "001.npy"}) {
    CHECK(read_bytes(d2.image(name)) == read_bytes(d3.image(name)));
    CHECK(read_bytes(d2.label(name)) == read_bytes(d3.label(name)));
  }
  CHECK(read_bytes(d2.image("000.npy")) != read_bytes(d2.image("001.npy")));
  CHECK(data::grain_volume_file_name(7, 10) == "007.npy");
  CHECK(data::grain_volume_file_name(7, 2000) == "0007.npy");
  CHECK(data::grain_volume_seed(1, 0) != data::grain_volume_seed(0, 1));
  CHECK_THROWS_CONTAINS(data::generate_grain_volumes(d2.path.string(), 0, 16, 9), "count must be positive");
  CHECK_THROWS_CONTAINS(data::make_grain_volume(0, 4, 4, 1), "expected positive sizes");
}

TEST_CASE("grain volumes: 10-25% boundary voxels, darker boundaries, no single threshold solves it") {
  TempDir dir("stats");
  const auto stats = data::generate_grain_volumes(dir.path.string(), 3, 48, 2);
  CHECK(stats.count == 3);
  CHECK(stats.min_foreground_fraction >= 0.10);
  CHECK(stats.max_foreground_fraction <= 0.25);
  const VolumeDataset ds(dir.path.string(), {{48, 48, 48}, false, VolumeNormalization::kScale});
  CHECK(ds.foreground_fraction() == doctest::Approx(stats.foreground_fraction).epsilon(1e-9));

  for (int64_t i = 0; i < ds.size(); ++i) {
    const auto v = ds.volume(i);
    const std::vector<float> im = v.image.to_vector<float>(), lb = v.label.to_vector<float>();
    // Histogram of intensities per class, then the best Dice of "x < t".
    std::vector<double> fg(256, 0), bg(256, 0);
    double fg_sum = 0, bg_sum = 0, n_fg = 0;
    for (size_t k = 0; k < im.size(); ++k) {
      const int bin = static_cast<int>(std::lround(im[k] * 255));
      (lb[k] > 0.5f ? fg : bg)[static_cast<size_t>(bin)] += 1;
      (lb[k] > 0.5f ? fg_sum : bg_sum) += im[k];
      n_fg += lb[k];
    }
    const double fg_mean = fg_sum / n_fg, bg_mean = bg_sum / (static_cast<double>(im.size()) - n_fg);
    double best = 0, tp = 0, pred = 0;
    for (size_t t = 0; t < 256; ++t) {
      tp += fg[t];
      pred += fg[t] + bg[t];
      best = std::max(best, 2 * tp / (pred + n_fg));
    }
    CAPTURE(i);
    CHECK(fg_mean < bg_mean - 0.15);  // boundaries are visibly darker on average,
    CHECK(best > 0.4);                // intensity alone finds part of them,
    CHECK(best < 0.75);               // but noise and dark grains need context to do better
  }
}
