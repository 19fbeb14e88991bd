// minidl::data: dataset readers on the real CIFAR-10 subset and on small files
// written here, transforms, samplers and the threaded DataLoader.
#include <stb/stb_image_write.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <unistd.h>

#include "minidl/data/data.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::data;
namespace fs = std::filesystem;

namespace {

const std::string kCifarDir = std::string(MINIDL_SHARED_DATA_DIR) + "/cifar10-subset";

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// A fresh empty directory under the system temp dir, removed at scope exit.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    path = fs::temp_directory_path() / ("minidl_test_data_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& file) const { return (path / file).string(); }
};

void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  gzclose(f);
}

void put_be32(std::vector<uint8_t>& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}

std::vector<uint8_t> idx_images(uint32_t magic, uint32_t n, uint32_t rows, uint32_t cols, size_t payload) {
  std::vector<uint8_t> b;
  put_be32(b, magic);
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  for (size_t i = 0; i < payload; ++i) b.push_back(static_cast<uint8_t>(i * 7 + 3));
  return b;
}

std::vector<uint8_t> idx_labels(uint32_t magic, const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> b;
  put_be32(b, magic);
  put_be32(b, static_cast<uint32_t>(labels.size()));
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.contiguous().raw_data());
  return {p, p + t.nbytes()};
}

// Dataset i -> data [i] (float32, shape (1)), target i % 10; throws for `bad`.
class IndexDataset : public Dataset {
 public:
  explicit IndexDataset(int64_t n, int64_t bad = -1) : n_(n), bad_(bad) {}
  int64_t size() const override { return n_; }
  Example get(int64_t i) const override {
    MINIDL_CHECK(i != bad_, "IndexDataset: sample ", i, " is broken");
    return {tensor(std::vector<float>{static_cast<float>(i)}, {1}), i % 10};
  }

 private:
  int64_t n_, bad_;
};

}  // namespace

TEST_CASE("CIFAR10 reads the real subset") {
  const auto ds = CIFAR10::from_files({kCifarDir + "/data_batch_1.bin"});
  REQUIRE(ds.size() == 1017);
  const std::vector<int64_t> first = {6, 9, 9, 4, 1, 1, 2, 7, 8, 3};
  for (size_t i = 0; i < first.size(); ++i) CHECK(ds.get(static_cast<int64_t>(i)).target == first[i]);

  // Image 0 is the 3072 bytes after the first label byte, already CHW.
  const auto raw = read_bytes(kCifarDir + "/data_batch_1.bin");
  const Example ex = ds.get(0);
  CHECK(ex.data.dtype() == kUInt8);
  CHECK(ex.data.shape() == Shape{3, 32, 32});
  CHECK(bytes_of(ex.data) == std::vector<uint8_t>(raw.begin() + 1, raw.begin() + 3073));
  // And the last record of the file.
  CHECK(bytes_of(ds.get(1016).data) == std::vector<uint8_t>(raw.end() - 3072, raw.end()));
  CHECK(ds.get(1016).target == raw[raw.size() - 3073]);

  REQUIRE(ds.classes().size() == 10);
  CHECK(ds.classes()[0] == "airplane");
  CHECK(ds.classes()[9] == "truck");

  const CIFAR10 train(kCifarDir, /*train=*/true);
  CHECK(train.size() == 5085);
  // Batch 2's first labels follow batch 1's 1017 records.
  CHECK(train.get(1017).target == 1);
  CHECK(train.get(1018).target == 6);
  CHECK(train.get(4 * 1017).target == 1);  // batch 5 starts 1 8 5
  CHECK(train.get(4 * 1017 + 1).target == 8);

  // The subset has no test_batch.bin: the missing file is named.
  CHECK_THROWS_CONTAINS(CIFAR10(kCifarDir, /*train=*/false), "test_batch.bin");
  CHECK_THROWS_CONTAINS(ds.get(1017), "out of range");
}

TEST_CASE("CIFAR10 refuses corrupt files with file name and offset") {
  TempDir dir("cifar");
  auto raw = read_bytes(kCifarDir + "/data_batch_1.bin");

  const std::string truncated = dir / "truncated.bin";
  write_bytes(truncated, std::vector<uint8_t>(raw.begin(), raw.end() - 1));
  // 3125240 = 1016 * 3073 + 3072: the partial record starts at 1016 * 3073.
  CHECK_THROWS_CONTAINS(CIFAR10::from_files({truncated}), truncated);
  CHECK_THROWS_CONTAINS(CIFAR10::from_files({truncated}), "size 3125240 is not a whole number of 3073-byte records");
  CHECK_THROWS_CONTAINS(CIFAR10::from_files({truncated}), "starts at byte offset 3122168");

  const std::string bad_label = dir / "bad_label.bin";
  std::vector<uint8_t> two(raw.begin(), raw.begin() + 2 * 3073);
  two[3073] = 10;
  write_bytes(bad_label, two);
  CHECK_THROWS_CONTAINS(CIFAR10::from_files({bad_label}), bad_label);
  CHECK_THROWS_CONTAINS(CIFAR10::from_files({bad_label}), "label 10 at byte offset 3073");

  const std::string empty_file = dir / "empty.bin";
  write_bytes(empty_file, {});
  CHECK_THROWS_CONTAINS(CIFAR10::from_files({empty_file}), "empty");

  CHECK_THROWS_CONTAINS(CIFAR10::from_files({kCifarDir + "/data_batch_1.bin", dir / "missing.bin"}), "missing.bin");

  // Two good records load; no meta file here, so no class names.
  two[3073] = 9;
  write_bytes(bad_label, two);
  const auto ok = CIFAR10::from_files({bad_label});
  CHECK(ok.size() == 2);
  CHECK(ok.get(1).target == 9);
  CHECK(ok.classes().empty());
}

TEST_CASE("FashionMNIST reads gzipped IDX files and checks them") {
  TempDir dir("fmnist");
  const std::string images = dir / "train-images-idx3-ubyte.gz", labels = dir / "train-labels-idx1-ubyte.gz";
  write_gz(images, idx_images(2051, 3, 2, 4, 3 * 2 * 4));
  write_gz(labels, idx_labels(2049, {7, 0, 9}));

  const FashionMNIST ds(dir.path.string(), /*train=*/true);
  REQUIRE(ds.size() == 3);
  CHECK(ds.get(0).target == 7);
  CHECK(ds.get(2).target == 9);
  const Tensor x = ds.get(1).data;
  CHECK(x.shape() == Shape{1, 2, 4});
  std::vector<uint8_t> expected;
  for (size_t i = 8; i < 16; ++i) expected.push_back(static_cast<uint8_t>(i * 7 + 3));
  CHECK(bytes_of(x) == expected);
  CHECK(ds.classes()[9] == "Ankle boot");

  const std::string bad = dir / "bad.gz";
  write_gz(bad, idx_images(2049, 3, 2, 4, 24));
  CHECK_THROWS_CONTAINS(FashionMNIST(bad, labels), "bad magic number 2049 at byte offset 0 (expected 2051");
  CHECK_THROWS_CONTAINS(FashionMNIST(bad, labels), bad);
  write_gz(bad, idx_images(2051, 3, 2, 4, 23));
  CHECK_THROWS_CONTAINS(FashionMNIST(bad, labels), "promises 24 bytes of data after byte offset 16");
  write_gz(bad, {0, 0, 8, 3, 0});
  CHECK_THROWS_CONTAINS(FashionMNIST(bad, labels), "header is truncated");
  write_gz(bad, idx_labels(2049, {1, 2}));
  CHECK_THROWS_CONTAINS(FashionMNIST(images, bad), "holds 3 images but");
  write_gz(bad, idx_labels(2049, {1, 12, 2}));
  CHECK_THROWS_CONTAINS(FashionMNIST(images, bad), "label 12 at byte offset 9");
  CHECK_THROWS_CONTAINS(FashionMNIST(dir.path.string(), /*train=*/false), "t10k-images-idx3-ubyte.gz");
}

TEST_CASE("ImageFolder decodes PNGs by sorted class folder") {
  TempDir dir("imgfolder");
  fs::create_directories(dir.path / "dog");
  fs::create_directories(dir.path / "cat");
  // 2x3 RGB images, HWC as stb writes them; pixel (h, w, c) = seed + 10h + 3w + c.
  auto write_png = [&](const std::string& path, int seed) {
    std::vector<uint8_t> hwc;
    for (int h = 0; h < 2; ++h)
      for (int w = 0; w < 3; ++w)
        for (int c = 0; c < 3; ++c) hwc.push_back(static_cast<uint8_t>(seed + 10 * h + 3 * w + c));
    REQUIRE(stbi_write_png(path.c_str(), 3, 2, 3, hwc.data(), 3 * 3) != 0);
  };
  write_png(dir / "dog/a.png", 100);
  write_png(dir / "cat/b.png", 50);
  write_png(dir / "cat/a.PNG", 0);
  write_bytes(dir / "cat/notes.txt", {'h', 'i'});  // not an image: ignored

  const ImageFolder ds(dir.path.string());
  CHECK(ds.classes() == std::vector<std::string>{"cat", "dog"});
  REQUIRE(ds.size() == 3);
  CHECK(ds.labels() == std::vector<int64_t>{0, 0, 1});
  const Example e = ds.get(2);  // dog/a.png
  CHECK(e.target == 1);
  CHECK(e.data.shape() == Shape{3, 2, 3});
  const auto px = bytes_of(e.data);
  for (int c = 0; c < 3; ++c)
    for (int h = 0; h < 2; ++h)
      for (int w = 0; w < 3; ++w) CHECK(px[(c * 2 + h) * 3 + w] == 100 + 10 * h + 3 * w + c);
  CHECK(bytes_of(ds.get(0).data)[0] == 0);  // cat/a.PNG sorts before cat/b.png

  const ImageFolder grey(dir.path.string(), 1);
  CHECK(grey.get(0).data.shape() == Shape{1, 2, 3});

  write_bytes(dir / "dog/broken.png", {'n', 'o', 't', ' ', 'a', ' ', 'p', 'n', 'g'});
  CHECK_THROWS_CONTAINS(ImageFolder(dir.path.string()), "cannot read image " + (dir / "dog/broken.png") + ": ");
  fs::remove(dir.path / "dog/broken.png");

  std::vector<uint8_t> big(4 * 4 * 3, 1);
  REQUIRE(stbi_write_png((dir / "dog/big.png").c_str(), 4, 4, 3, big.data(), 12) != 0);
  CHECK_THROWS_CONTAINS(ImageFolder(dir.path.string()), "does not resize");
  CHECK_THROWS_CONTAINS(ImageFolder(dir / "nope"), "is not a directory");
  CHECK_THROWS_CONTAINS(ImageFolder(dir.path.string(), 2), "channels must be 1, 3 or 4");
}

TEST_CASE("transforms") {
  // x[c, h, w] = 16c + 4h + w for a (2, 3, 4) uint8 image.
  std::vector<uint8_t> v;
  for (int i = 0; i < 24; ++i) v.push_back(static_cast<uint8_t>(i / 12 * 16 + (i % 12) / 4 * 4 + i % 4));
  const Tensor x = tensor(v, {2, 3, 4});
  Generator gen(1);

  SUBCASE("flip is a mirror; p=0 is the identity") {
    const auto y = bytes_of(RandomHorizontalFlip(1.0)(x, gen));
    for (int c = 0; c < 2; ++c)
      for (int h = 0; h < 3; ++h)
        for (int w = 0; w < 4; ++w) CHECK(y[(c * 3 + h) * 4 + w] == 16 * c + 4 * h + (3 - w));
    CHECK(bytes_of(RandomHorizontalFlip(0.0)(x, gen)) == v);
    // p=0.5 flips some and not others.
    int flipped = 0;
    for (int i = 0; i < 64; ++i) flipped += bytes_of(RandomHorizontalFlip()(x, gen)) != v;
    CHECK(flipped > 10);
    CHECK(flipped < 54);
    CHECK_THROWS_CONTAINS(RandomHorizontalFlip(1.5), "p must be in [0, 1]");
  }

  SUBCASE("crop with padding cuts a window of the zero-padded image") {
    // Padded image (2, 5, 6); a 3x4 crop has 3 * 3 positions; each output must be
    // one of them, and every position must turn up over many draws.
    auto padded = [&](int c, int h, int w) -> int {
      h -= 1, w -= 1;
      return (h < 0 || h >= 3 || w < 0 || w >= 4) ? 0 : 16 * c + 4 * h + w;
    };
    std::set<std::pair<int, int>> seen;
    const RandomCrop crop(3, 4, 1);
    for (int i = 0; i < 200; ++i) {
      const Tensor y = crop(x, gen);
      REQUIRE(y.shape() == Shape{2, 3, 4});
      REQUIRE(y.dtype() == kUInt8);
      const auto b = bytes_of(y);
      int matches = 0;
      for (int top = 0; top < 3; ++top)
        for (int left = 0; left < 3; ++left) {
          bool same = true;
          for (int c = 0; c < 2; ++c)
            for (int h = 0; h < 3; ++h)
              for (int w = 0; w < 4; ++w) same = same && b[(c * 3 + h) * 4 + w] == padded(c, top + h, left + w);
          if (same) {
            ++matches;
            seen.insert({top, left});
          }
        }
      CHECK(matches == 1);
    }
    CHECK(seen.size() == 9);
    CHECK(RandomCrop(32, 4)(zeros({3, 32, 32}), gen).shape() == Shape{3, 32, 32});
    CHECK_THROWS_CONTAINS(RandomCrop(8, 0)(x, gen), "larger than the padded input image size 3x4");
    CHECK_THROWS_CONTAINS(RandomCrop(2)(zeros({3, 4}), gen), "expected a 3-D (C, H, W) tensor");
  }

  SUBCASE("ToFloat and Normalize") {
    const Tensor f = ToFloat()(x, gen);
    CHECK(f.dtype() == kFloat32);
    const auto fv = f.to_vector<float>();
    for (size_t i = 0; i < v.size(); ++i) CHECK(fv[i] == doctest::Approx(v[i] / 255.0).epsilon(1e-6));
    const Tensor n = Normalize({0.5, 0.25}, {2.0, 0.5})(f, gen);
    const auto nv = n.to_vector<float>();
    for (size_t i = 0; i < v.size(); ++i) {
      const double m = i < 12 ? 0.5 : 0.25, s = i < 12 ? 2.0 : 0.5;
      CHECK(nv[i] == doctest::Approx((v[i] / 255.0 - m) / s).epsilon(1e-5));
    }
    CHECK_THROWS_CONTAINS(Normalize({0.5, 0.5, 0.5}, {1, 1, 1})(f, gen), "3 mean/std values for an image with 2 channels");
    CHECK_THROWS_CONTAINS(Normalize({0.5}, {0.0}), "std evaluated to zero");
    CHECK_THROWS_CONTAINS(Normalize({0.5}, {1.0})(x, gen), "apply ToFloat first");
    CHECK_THROWS_CONTAINS(ToFloat()(zeros({1, 1, 1}, kInt64), gen), "expected a uint8 or float32 tensor");
    const Compose all({std::make_shared<ToFloat>(), std::make_shared<Normalize>(std::vector<double>{0.5},
                                                                                std::vector<double>{2.0})});
    CHECK(all(x, gen).to_vector<float>()[23] == doctest::Approx((v[23] / 255.0 - 0.5) / 2.0).epsilon(1e-5));
  }
}

TEST_CASE("samplers") {
  const RandomSampler rs(50, 7);
  auto e0 = rs.indices(0), e1 = rs.indices(1);
  CHECK(e0 == rs.indices(0));
  CHECK(e0 != e1);
  CHECK(e0 != SequentialSampler(50).indices(0));
  std::sort(e0.begin(), e0.end());
  CHECK(e0 == SequentialSampler(50).indices(0));
  CHECK(RandomSampler(50, 8).indices(0) != rs.indices(0));

  for (bool drop_last : {false, true}) {
    std::vector<int> count(10, 0);
    int64_t total = 0;
    for (int64_t rank = 0; rank < 3; ++rank) {
      const DistributedSampler ds(10, 3, rank, true, 5, drop_last);
      CHECK(ds.size() == (drop_last ? 3 : 4));
      const auto idx = ds.indices(2);
      CHECK(static_cast<int64_t>(idx.size()) == ds.size());
      for (int64_t i : idx) ++count[static_cast<size_t>(i)], ++total;
    }
    CHECK(total == (drop_last ? 9 : 12));
    for (int c : count) CHECK(c <= 2);
    CHECK(std::count(count.begin(), count.end(), 0) == (drop_last ? 1 : 0));
  }
  CHECK_THROWS_CONTAINS(DistributedSampler(10, 2, 2), "Invalid rank 2");
}

TEST_CASE("Subset picks samples of another dataset by index") {
  auto base = std::make_shared<IndexDataset>(25);  // sample i: data [i], target i % 10
  const std::vector<int64_t> indices = {17, 2, 2, 24};
  const Subset picked(base, indices);
  CHECK(picked.size() == 4);
  CHECK(picked.indices() == indices);
  CHECK(picked.dataset() == base);
  for (int64_t i = 0; i < picked.size(); ++i) {
    const Example e = picked.get(i);
    const int64_t want = indices[static_cast<size_t>(i)];
    CHECK(e.data.to_vector<float>() == std::vector<float>{static_cast<float>(want)});
    CHECK(e.target == want % 10);
  }
  CHECK(Subset(base, {}).size() == 0);

  CHECK_THROWS_CONTAINS(Subset(base, {3, 25}), "Subset: index 25 (position 1) is out of range for a dataset of size 25");
  CHECK_THROWS_CONTAINS(Subset(base, {-1}), "Subset: index -1 (position 0) is out of range for a dataset of size 25");
  CHECK_THROWS_CONTAINS(picked.get(4), "Subset: index 4 is out of range for a dataset of size 4");
  CHECK_THROWS_CONTAINS(picked.get(-1), "Subset: index -1 is out of range");

  const Subset head = Subset::first(base, 3);
  CHECK(head.indices() == std::vector<int64_t>{0, 1, 2});
  CHECK(head.get(2).target == 2);
  const Subset all = Subset::first(base, 1000);  // n beyond the end: the whole dataset
  CHECK(all.size() == 25);
  CHECK(all.get(24).data.to_vector<float>() == std::vector<float>{24.0f});
  CHECK(Subset::first(base, 0).size() == 0);
  CHECK_THROWS_CONTAINS(Subset::first(base, -1), "n must be non-negative, got -1");
}

TEST_CASE("DataLoader covers every sample once per epoch") {
  const int64_t n = 100;
  auto ds = std::make_shared<IndexDataset>(n);
  for (int workers : {0, 1, 3})
    for (int64_t bs : {1, 7, 64})
      for (bool drop_last : {false, true}) {
        CAPTURE(workers);
        CAPTURE(bs);
        CAPTURE(drop_last);
        DataLoader loader(ds, {.batch_size = bs, .shuffle = true, .drop_last = drop_last, .num_workers = workers,
                               .seed = 3});
        for (int epoch = 0; epoch < 2; ++epoch) {
          std::vector<int> seen(n, 0);
          int64_t batches = 0;
          for (Batch& b : loader) {
            ++batches;
            const int64_t m = b.data.size(0);
            CHECK(b.data.shape() == Shape{m, 1});
            CHECK(b.targets.dtype() == kInt64);
            CHECK((m == bs || (!drop_last && batches == loader.size())));
            const auto d = b.data.to_vector<float>();
            const auto t = b.targets.to_vector<int64_t>();
            for (int64_t i = 0; i < m; ++i) {
              const auto idx = static_cast<int64_t>(d[static_cast<size_t>(i)]);
              CHECK(idx == b.indices[static_cast<size_t>(i)]);
              CHECK(t[static_cast<size_t>(i)] == idx % 10);
              ++seen[static_cast<size_t>(idx)];
            }
          }
          CHECK(batches == loader.size());
          const int64_t covered = drop_last ? n / bs * bs : n;
          CHECK(std::count(seen.begin(), seen.end(), 1) == covered);
          CHECK(std::count(seen.begin(), seen.end(), 0) == n - covered);
        }
        CHECK(loader.epoch() == 2);
      }
}

TEST_CASE("DataLoader is deterministic whatever the worker count") {
  auto ds = std::make_shared<CIFAR10>(CIFAR10::from_files({kCifarDir + "/data_batch_5.bin"}));
  auto transform = std::make_shared<Compose>(std::vector<TransformPtr>{
      std::make_shared<RandomCrop>(32, 4), std::make_shared<RandomHorizontalFlip>(), std::make_shared<ToFloat>(),
      std::make_shared<Normalize>(std::vector<double>{0.49, 0.48, 0.45}, std::vector<double>{0.25, 0.24, 0.26})});
  auto run = [&](int workers, uint64_t seed, int64_t epoch) {
    DataLoader loader(ds, {.batch_size = 64, .shuffle = true, .num_workers = workers, .prefetch_factor = 2,
                           .seed = seed, .transform = transform});
    loader.set_epoch(epoch);
    std::vector<Batch> out;
    for (Batch& b : loader) out.push_back(b);
    return out;
  };
  const auto a = run(0, 11, 0), b = run(3, 11, 0), c = run(3, 12, 0), d = run(3, 11, 1);
  REQUIRE(a.size() == 16);
  REQUIRE(b.size() == a.size());
  CHECK(a[0].data.shape() == Shape{64, 3, 32, 32});
  CHECK(a[0].data.dtype() == kFloat32);
  CHECK(a.back().data.size(0) == 1017 - 15 * 64);
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].indices == b[i].indices);
    CHECK(bytes_of(a[i].data) == bytes_of(b[i].data));
    CHECK(a[i].targets.to_vector<int64_t>() == b[i].targets.to_vector<int64_t>());
  }
  CHECK(a[0].indices != c[0].indices);
  CHECK(a[0].indices != d[0].indices);

  // The augmentation really ran: most samples differ from plain ToFloat + Normalize.
  const Normalize normalize({0.49, 0.48, 0.45}, {0.25, 0.24, 0.26});
  Generator unused(0);
  int differ = 0;
  for (int64_t i = 0; i < 64; ++i) {
    const Tensor plain = normalize(ToFloat()(ds->get(a[0].indices[static_cast<size_t>(i)]).data, unused), unused);
    differ += bytes_of(plain) != bytes_of(a[0].data.select(0, i));
  }
  CHECK(differ >= 48);
}

TEST_CASE("DataLoader early break, reuse and worker errors") {
  auto ds = std::make_shared<IndexDataset>(1000);
  {
    DataLoader loader(ds, {.batch_size = 2, .num_workers = 3, .prefetch_factor = 2});
    for (Batch& b : loader) {
      CHECK(b.indices == std::vector<int64_t>{0, 1});
      break;
    }
    // A new pass after the break starts from the beginning and runs to the end.
    int64_t batches = 0;
    for (Batch& b : loader) {
      CHECK(b.indices[0] == 2 * batches);
      if (++batches == 3) break;
    }
    CHECK(batches == 3);
  }  // destructor joins the waiting workers

  for (int workers : {0, 3}) {
    CAPTURE(workers);
    auto broken = std::make_shared<IndexDataset>(100, /*bad=*/13);
    DataLoader loader(broken, {.batch_size = 5, .num_workers = workers});
    auto it = loader.begin();
    CHECK(it->indices[0] == 0);
    ++it;
    CHECK(it->indices[0] == 5);
    CHECK_THROWS_CONTAINS(++it, "loading sample 13 (batch 2) failed: IndexDataset: sample 13 is broken");
  }

  CHECK_THROWS_CONTAINS(DataLoader(ds, {.batch_size = 0}), "batch_size should be a positive integer value");
  CHECK_THROWS_CONTAINS(DataLoader(ds, {.shuffle = true, .sampler = std::make_shared<SequentialSampler>(1000)}),
                        "mutually exclusive");
  // A sampler built for a bigger dataset.
  DataLoader wrong(ds, {.sampler = std::make_shared<SequentialSampler>(1001)});
  CHECK_THROWS_CONTAINS(wrong.begin(), "the sampler produced index 1000");
  // Samples that cannot be stacked.
  class Ragged : public Dataset {
    int64_t size() const override { return 2; }
    Example get(int64_t i) const override { return {zeros({i + 1}), 0}; }
  };
  DataLoader ragged(std::make_shared<Ragged>(), {.batch_size = 2});
  CHECK_THROWS_CONTAINS(ragged.begin(), "cannot batch sample 1");
}
