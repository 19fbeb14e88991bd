// Samplers. Permutations come from minidl::Generator (mt19937_64), so the
// same seed gives the same order on every platform.
#include "data/sampler.h"

#include <numeric>
#include <utility>

#include "core/check.h"
#include "core/generator.h"

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

DistributedSampler::DistributedSampler(int64_t n, int64_t num_replicas, int64_t rank, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : n_(n), num_replicas_(num_replicas), rank_(rank), shuffle_(shuffle), seed_(seed), drop_last_(drop_last) {
  MINIDL_CHECK(n >= 0, "DistributedSampler: expected a non-negative dataset size, got ", n);
  MINIDL_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas must be at least 1, got ", num_replicas);
  MINIDL_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: Invalid rank ", rank,
               ", rank should be in the interval [0, ", num_replicas - 1, "]");
  per_replica_ = drop_last ? n / num_replicas : (n + num_replicas - 1) / num_replicas;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> all;
  if (shuffle_) {
    all = detail::permutation(n_, detail::mix_seed(seed_, static_cast<uint64_t>(epoch)));
  } else {
    all.resize(static_cast<size_t>(n_));
    std::iota(all.begin(), all.end(), int64_t{0});
  }
  const auto total = static_cast<size_t>(per_replica_ * num_replicas_);
  if (all.size() > total) {
    all.resize(total);  // drop_last
  } else {
    for (size_t i = 0; all.size() < total && n_ > 0; ++i) all.push_back(all[i % static_cast<size_t>(n_)]);
  }
  std::vector<int64_t> mine;
  for (size_t i = static_cast<size_t>(rank_); i < all.size(); i += static_cast<size_t>(num_replicas_))
    mine.push_back(all[i]);
  return mine;
}

}  // namespace minidl::data
