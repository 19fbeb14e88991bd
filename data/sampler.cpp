// Samplers. Permutations come from minidl::Generator (mt19937_64), so the
// same seed gives the same order on every platform.
#include "minidl/data/sampler.h"

#include <numeric>
#include <utility>

#include "minidl/core/check.h"
#include "minidl/core/generator.h"

namespace minidl::data {

uint64_t detail::mix_seed(uint64_t seed, uint64_t a, uint64_t b) {
  auto splitmix = [](uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
  };
  return splitmix(splitmix(splitmix(seed) ^ a) ^ b);
}

std::vector<int64_t> detail::permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  Generator gen(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(gen.randint(0, i + 1))]);
  return p;
}

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  MINIDL_CHECK(n >= 0, "SequentialSampler: expected a non-negative dataset size, got ", n);
}

std::vector<int64_t> SequentialSampler::indices(int64_t) const {
  std::vector<int64_t> out(static_cast<size_t>(n_));
  std::iota(out.begin(), out.end(), int64_t{0});
  return out;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  MINIDL_CHECK(n >= 0, "RandomSampler: expected a non-negative dataset size, got ", n);
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const {
  return detail::permutation(n_, detail::mix_seed(seed_, static_cast<uint64_t>(epoch)));
}

namespace {

// Argument checks shared by the distributed samplers, in PyTorch's wording.
void check_distributed_args(const char* name, int64_t n, int64_t num_replicas, int64_t rank) {
  MINIDL_CHECK(n >= 0, name, ": expected a non-negative dataset size, got ", n);
  MINIDL_CHECK(num_replicas >= 1, name, ": num_replicas must be >= 1, got ", num_replicas);
  MINIDL_CHECK(rank >= 0 && rank < num_replicas, name, ": Invalid rank ", rank,
               ", rank should be in the interval [0, ", num_replicas - 1, "]");
}

// The order every rank agrees on for this epoch, before it is split.
std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch) {
  if (shuffle) return detail::permutation(n, detail::mix_seed(seed, static_cast<uint64_t>(epoch)));
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  return order;
}

// Positions rank, rank + step, ... of `order`.
std::vector<int64_t> strided(const std::vector<int64_t>& order, int64_t rank, int64_t step) {
  std::vector<int64_t> out;
  out.reserve(order.size() / static_cast<size_t>(step) + 1);
  for (size_t i = static_cast<size_t>(rank); i < order.size(); i += static_cast<size_t>(step)) out.push_back(order[i]);
  return out;
}

}  // namespace

DistributedSampler::DistributedSampler(int64_t n, int64_t num_replicas, int64_t rank, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : n_(n), num_replicas_(num_replicas), rank_(rank), shuffle_(shuffle), seed_(seed), drop_last_(drop_last) {
  check_distributed_args("DistributedSampler", n, num_replicas, rank);
  // PyTorch: ceil((n - R) / R) with drop_last and n % R != 0 (0 when n < R), else ceil(n / R).
  per_replica_ = drop_last ? n / num_replicas : n / num_replicas + (n % num_replicas != 0);  // n + R - 1 may overflow
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> all = epoch_order(n_, shuffle_, seed_, epoch);
  const size_t total = static_cast<size_t>(per_replica_) * static_cast<size_t>(num_replicas_);
  if (all.size() > total) {
    all.resize(total);  // drop_last
  } else {
    // Pad with the leading indices, cycling when the padding exceeds n (only n > 0 can need padding).
    all.reserve(total);
    for (size_t i = 0; all.size() < total; ++i) all.push_back(all[i % static_cast<size_t>(n_)]);
  }
  return strided(all, rank_, num_replicas_);
}

DistributedEvalSampler::DistributedEvalSampler(int64_t n, int64_t num_replicas, int64_t rank, bool shuffle,
                                               uint64_t seed)
    : n_(n), num_replicas_(num_replicas), rank_(rank), shuffle_(shuffle), seed_(seed) {
  check_distributed_args("DistributedEvalSampler", n, num_replicas, rank);
  count_ = n / num_replicas + (rank < n % num_replicas ? 1 : 0);
}

std::vector<int64_t> DistributedEvalSampler::indices(int64_t epoch) const {
  return strided(epoch_order(n_, shuffle_, seed_, epoch), rank_, num_replicas_);
}

}  // namespace minidl::data
