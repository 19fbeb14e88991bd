// DistributedSampler and DistributedEvalSampler: exact indices against PyTorch
// for shuffle=False (tests/goldens/distributed_sampler.json, written by
// scripts/make_sampler_fixture.py), the shuffle=True semantics (one shared
// permutation, padded with its own head or truncated), the eval sampler's
// exactly-once coverage, argument errors, and a DataLoader driven by them.
#include <algorithm>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "minidl/data/data.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::data;

namespace {

const std::vector<int64_t> kLengths = {0, 1, 5, 7, 10, 11, 16, 17};
const std::vector<int64_t> kWorlds = {1, 2, 3, 4, 8};

// Per-rank count, computed the way PyTorch writes it.
int64_t expected_num_samples(int64_t n, int64_t world, bool drop_last) {
  if (drop_last && n % world != 0) {
    const int64_t num = n - world;  // ceil(num / world) for a possibly negative num
    return num <= 0 ? 0 : (num + world - 1) / world;
  }
  return (n + world - 1) / world;
}

// Undoes the strided split: order[k * world + r] = ranks[r][k].
std::vector<int64_t> interleave(const std::vector<std::vector<int64_t>>& ranks) {
  std::vector<int64_t> order;
  const size_t per = ranks.empty() ? 0 : ranks[0].size();
  for (size_t k = 0; k < per; ++k)
    for (const auto& r : ranks) order.push_back(r.at(k));
  return order;
}

std::vector<std::vector<int64_t>> all_ranks(int64_t n, int64_t world, bool shuffle, uint64_t seed, bool drop_last,
                                            int64_t epoch) {
  std::vector<std::vector<int64_t>> ranks;
  for (int64_t r = 0; r < world; ++r) ranks.push_back(DistributedSampler(n, world, r, shuffle, seed, drop_last).indices(epoch));
  return ranks;
}

bool is_permutation_of_range(std::vector<int64_t> v, int64_t n) {
  if (static_cast<int64_t>(v.size()) != n) return false;
  std::sort(v.begin(), v.end());
  for (int64_t i = 0; i < n; ++i)
    if (v[static_cast<size_t>(i)] != i) return false;
  return true;
}

// A dataset whose sample i is the scalar i, so batches show which samples they hold.
class IdDataset : public Dataset {
 public:
  explicit IdDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Example get(int64_t i) const override { return {tensor(std::vector<float>{static_cast<float>(i)}, {1}), i % 3}; }

 private:
  int64_t n_;
};

// The indices (and the sample values) a loader yields in one pass.
std::vector<int64_t> drain(DataLoader& loader, int64_t* batches) {
  std::vector<int64_t> seen;
  *batches = 0;
  for (Batch& b : loader) {
    ++*batches;
    const auto values = b.data.to_vector<float>();
    REQUIRE(values.size() == b.indices.size());
    for (size_t i = 0; i < values.size(); ++i) CHECK(values[i] == static_cast<float>(b.indices[i]));
    seen.insert(seen.end(), b.indices.begin(), b.indices.end());
  }
  return seen;
}

}  // namespace

TEST_CASE("DistributedSampler matches PyTorch's indices without shuffle") {
  std::ifstream in(std::string(MINIDL_GOLDENS_DIR) + "/distributed_sampler.json");
  REQUIRE(in.good());
  const nlohmann::json fixture = nlohmann::json::parse(in);
  const auto& cases = fixture.at("cases");
  REQUIRE(cases.size() == kLengths.size() * kWorlds.size() * 2);
  for (const auto& c : cases) {
    const auto n = c.at("n").get<int64_t>(), world = c.at("world").get<int64_t>();
    const bool drop_last = c.at("drop_last").get<bool>();
    CAPTURE(n);
    CAPTURE(world);
    CAPTURE(drop_last);
    const auto& ranks = c.at("ranks");
    REQUIRE(static_cast<int64_t>(ranks.size()) == world);
    CHECK(c.at("num_samples").get<int64_t>() == expected_num_samples(n, world, drop_last));
    for (int64_t r = 0; r < world; ++r) {
      CAPTURE(r);
      const DistributedSampler s(n, world, r, /*shuffle=*/false, /*seed=*/0, drop_last);
      CHECK(s.size() == c.at("num_samples").get<int64_t>());
      CHECK(s.indices(0) == ranks[static_cast<size_t>(r)].get<std::vector<int64_t>>());
      CHECK(s.indices(5) == s.indices(0));  // no shuffle: the epoch does not matter
    }
  }
}

TEST_CASE("DistributedSampler with shuffle: one permutation, padded with its head or truncated") {
  for (int64_t n : kLengths)
    for (int64_t world : kWorlds)
      for (uint64_t seed : {0ULL, 42ULL}) {
        CAPTURE(n);
        CAPTURE(world);
        CAPTURE(seed);
        const auto padded = interleave(all_ranks(n, world, true, seed, false, 3));
        const auto dropped = interleave(all_ranks(n, world, true, seed, true, 3));
        for (bool drop_last : {false, true})
          for (int64_t r = 0; r < world; ++r) {
            const DistributedSampler s(n, world, r, true, seed, drop_last);
            CHECK(s.size() == expected_num_samples(n, world, drop_last));
            CHECK(static_cast<int64_t>(s.indices(3).size()) == s.size());
          }

        // Without drop_last: a permutation of 0..n-1, then its own leading elements (cycling if padding > n).
        const int64_t total = expected_num_samples(n, world, false) * world;
        REQUIRE(static_cast<int64_t>(padded.size()) == total);
        const std::vector<int64_t> perm(padded.begin(), padded.begin() + n);
        CHECK(is_permutation_of_range(perm, n));
        for (int64_t j = n; j < total; ++j) CHECK(padded[static_cast<size_t>(j)] == perm[static_cast<size_t>((j - n) % n)]);

        // With drop_last: the same permutation, truncated to a multiple of world.
        const int64_t kept = expected_num_samples(n, world, true) * world;
        REQUIRE(static_cast<int64_t>(dropped.size()) == kept);
        CHECK(kept <= n);
        CHECK(std::equal(dropped.begin(), dropped.end(), perm.begin()));

        // Ranks are disjoint whenever nothing is padded.
        for (bool drop_last : {false, true}) {
          if (!drop_last && n % world != 0) continue;
          std::set<int64_t> seen;
          size_t count = 0;
          for (const auto& idx : all_ranks(n, world, true, seed, drop_last, 3)) {
            seen.insert(idx.begin(), idx.end());
            count += idx.size();
          }
          CHECK(seen.size() == count);
        }
      }
}

TEST_CASE("DistributedSampler shuffle is a function of (seed, epoch)") {
  for (int64_t n : {5, 10, 17})
    for (int64_t world : {1, 3, 4}) {
      CAPTURE(n);
      CAPTURE(world);
      for (int64_t r = 0; r < world; ++r) {
        // A fresh sampler (another process) agrees; set_epoch + indices() == indices(epoch).
        DistributedSampler a(n, world, r, true, 7), b(n, world, r, true, 7);
        CHECK(a.indices(2) == b.indices(2));
        b.set_epoch(2);
        CHECK(b.epoch() == 2);
        CHECK(b.indices() == a.indices(2));
        CHECK(a.indices() == a.indices(0));  // default epoch 0
      }
      const auto e0 = interleave(all_ranks(n, world, true, 7, false, 0));
      const auto e1 = interleave(all_ranks(n, world, true, 7, false, 1));
      const auto other_seed = interleave(all_ranks(n, world, true, 8, false, 0));
      CHECK(e0 != e1);
      CHECK(e0 != other_seed);
      std::vector<int64_t> identity = interleave(all_ranks(n, world, false, 7, false, 0));
      CHECK(e0 != identity);
    }
}

TEST_CASE("DistributedSampler with more replicas than samples") {
  // n = 3, world = 8: padding 5 > n cycles through the dataset: 0 1 2 0 1 2 0 1.
  for (int64_t r = 0; r < 8; ++r) {
    const DistributedSampler s(3, 8, r, false);
    CHECK(s.size() == 1);
    CHECK(s.indices(0) == std::vector<int64_t>{r % 3});
    const DistributedSampler dropped(3, 8, r, true, 0, /*drop_last=*/true);
    CHECK(dropped.size() == 0);
    CHECK(dropped.indices(4).empty());
  }
  // Shuffled: every rank still gets one index, and each sample appears ceil(8 / 3) or floor(8 / 3) times.
  std::vector<int> count(3, 0);
  for (const auto& idx : all_ranks(3, 8, true, 1, false, 0)) {
    REQUIRE(idx.size() == 1);
    ++count[static_cast<size_t>(idx[0])];
  }
  std::sort(count.begin(), count.end());
  CHECK(count == std::vector<int>{2, 3, 3});
}

TEST_CASE("DistributedEvalSampler visits every sample exactly once") {
  for (int64_t n = 0; n <= 40; ++n)
    for (int64_t world = 1; world <= 9; ++world)
      for (bool shuffle : {false, true}) {
        CAPTURE(n);
        CAPTURE(world);
        CAPTURE(shuffle);
        std::vector<int> count(static_cast<size_t>(n), 0);
        std::vector<std::vector<int64_t>> ranks;
        int64_t smallest = n, largest = 0;
        for (int64_t r = 0; r < world; ++r) {
          const DistributedEvalSampler s(n, world, r, shuffle, 11);
          const auto idx = s.indices(4);
          CHECK(static_cast<int64_t>(idx.size()) == s.size());
          smallest = std::min(smallest, s.size());
          largest = std::max(largest, s.size());
          if (r >= n) CHECK(idx.empty());  // n < world: the last ranks get nothing
          for (int64_t i : idx) {
            REQUIRE(i >= 0);
            REQUIRE(i < n);
            ++count[static_cast<size_t>(i)];
          }
          if (!shuffle) {
            std::vector<int64_t> expected;
            for (int64_t i = r; i < n; i += world) expected.push_back(i);
            CHECK(idx == expected);
          }
          ranks.push_back(idx);
        }
        for (int c : count) CHECK(c == 1);
        CHECK(largest - smallest <= 1);
        // Shuffled with n % world == 0 it is the training sampler's split (same permutation, nothing padded).
        if (shuffle && n % world == 0)
          for (int64_t r = 0; r < world; ++r)
            CHECK(ranks[static_cast<size_t>(r)] == DistributedSampler(n, world, r, true, 11).indices(4));
      }

  // Shuffle follows the epoch; the default is the fixed order.
  const DistributedEvalSampler s(30, 4, 1, true, 3);
  CHECK(s.indices(0) != s.indices(1));
  CHECK(s.indices(1) == DistributedEvalSampler(30, 4, 1, true, 3).indices(1));
  CHECK(DistributedEvalSampler(30, 4, 1).indices(7) == DistributedEvalSampler(30, 4, 1).indices(0));
}

TEST_CASE("distributed samplers reject bad arguments") {
  CHECK_THROWS_CONTAINS(DistributedSampler(4, 4, 5), "Invalid rank 5, rank should be in the interval [0, 3]");
  CHECK_THROWS_CONTAINS(DistributedSampler(4, 4, -1), "Invalid rank -1, rank should be in the interval [0, 3]");
  CHECK_THROWS_CONTAINS(DistributedSampler(4, 1, 1), "Invalid rank 1, rank should be in the interval [0, 0]");
  CHECK_THROWS_CONTAINS(DistributedSampler(4, 0, 0), "num_replicas must be >= 1, got 0");
  CHECK_THROWS_CONTAINS(DistributedSampler(4, -2, 0), "num_replicas must be >= 1, got -2");
  CHECK_THROWS_CONTAINS(DistributedSampler(-1, 2, 0), "DistributedSampler: expected a non-negative dataset size, got -1");
  CHECK_THROWS_CONTAINS(DistributedEvalSampler(4, 4, 4), "Invalid rank 4, rank should be in the interval [0, 3]");
  CHECK_THROWS_CONTAINS(DistributedEvalSampler(4, 0, 0), "DistributedEvalSampler: num_replicas must be >= 1, got 0");
  CHECK_THROWS_CONTAINS(DistributedEvalSampler(-3, 2, 0), "expected a non-negative dataset size, got -3");
  // Sizes near int64's limit: ceil(n / R) without n + R - 1 (signed overflow before).
  CHECK(DistributedSampler(INT64_MAX, 3, 0).size() == INT64_MAX / 3 + 1);
  CHECK(DistributedSampler(INT64_MAX, 3, 0, true, 0, /*drop_last=*/true).size() == INT64_MAX / 3);
}

TEST_CASE("DataLoader yields exactly a distributed sampler's indices") {
  const int64_t n = 23;
  auto ds = std::make_shared<IdDataset>(n);
  for (int workers : {0, 2})
    for (int64_t bs : {1, 4, 7})
      for (int64_t r = 0; r < 4; ++r) {
        CAPTURE(workers);
        CAPTURE(bs);
        CAPTURE(r);
        auto train = std::make_shared<DistributedSampler>(n, 4, r, true, 9);
        DataLoader loader(ds, {.batch_size = bs, .sampler = train, .num_workers = workers});
        CHECK(loader.size() == (train->size() + bs - 1) / bs);
        loader.set_epoch(3);
        int64_t batches = 0;
        CHECK(drain(loader, &batches) == train->indices(3));
        CHECK(batches == loader.size());
        // The loader advanced to epoch 4 by itself and reshuffles.
        CHECK(drain(loader, &batches) == train->indices(4));
        CHECK(train->indices(4) != train->indices(3));

        auto eval = std::make_shared<DistributedEvalSampler>(n, 4, r);
        DataLoader eval_loader(ds, {.batch_size = bs, .sampler = eval, .num_workers = workers});
        CHECK(drain(eval_loader, &batches) == eval->indices(0));
        CHECK(batches == (eval->size() + bs - 1) / bs);
      }
}

TEST_CASE("DataLoader follows the sampler's set_epoch, PyTorch's way to reshuffle and resume") {
  auto ds = std::make_shared<IdDataset>(23);
  auto train = std::make_shared<DistributedSampler>(23, 2, 1, true, 9);
  DataLoader loader(ds, {.batch_size = 4, .sampler = train, .num_workers = 2});
  int64_t batches = 0;
  CHECK(drain(loader, &batches) == train->indices(0));  // never set: the loader's own epoch
  for (int64_t epoch : {3, 4, 4, 1}) {  // a resumed run; the same epoch twice gives the same order
    CAPTURE(epoch);
    train->set_epoch(epoch);
    CHECK(drain(loader, &batches) == train->indices(epoch));  // gave the loader's epochs 1, 2, ...
    CHECK(loader.epoch() == epoch + 1);
  }
  CHECK(drain(loader, &batches) == train->indices(1));  // not moved by the loader, as PyTorch's
}

TEST_CASE("DataLoader::size with a batch_size past the sample count") {
  auto ds = std::make_shared<IdDataset>(5);
  for (int64_t bs : {int64_t{6}, std::numeric_limits<int64_t>::max() - 1, std::numeric_limits<int64_t>::max()}) {
    DataLoader loader(ds, {.batch_size = bs});
    CHECK(loader.size() == 1);  // (n + bs - 1) / bs overflowed: 0 and -1
    int64_t batches = 0;
    CHECK(drain(loader, &batches).size() == 5);
    CHECK(batches == 1);
    DataLoader dropping(ds, {.batch_size = bs, .drop_last = true});
    CHECK(dropping.size() == 0);
  }
}
