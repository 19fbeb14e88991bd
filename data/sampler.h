// Samplers: which dataset indices an epoch visits, in which order. A sampler
// is a pure function of the epoch (indices(epoch)), so a run is reproducible
// and a resumed run can jump straight to epoch e; set_epoch()/indices() keep
// PyTorch's calling style on top of that.
#pragma once

#include <cstdint>
#include <vector>

namespace minidl::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // Number of indices one epoch yields.
  virtual int64_t size() const = 0;
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;

  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  std::vector<int64_t> indices() const { return indices(epoch_); }

 private:
  int64_t epoch_ = 0;
};

// 0, 1, ..., n-1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t n_;
};

// A permutation of 0..n-1 drawn from a Generator seeded by (seed, epoch):
// a new order every epoch, the same order for the same (seed, epoch).
class RandomSampler : public Sampler {
 public:
  explicit RandomSampler(int64_t n, uint64_t seed = 0);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t n_;
  uint64_t seed_;
};

// One replica's share of the dataset for data-parallel training (as PyTorch's
// DistributedSampler): every rank draws the same (seed, epoch) permutation
// (or 0..n-1 without shuffle), pads it by repeating its start to a multiple of
// num_replicas (or drops the tail with drop_last) and takes every
// num_replicas-th index starting at rank. num_replicas and rank are plain
// numbers; the caller gets them from its process group.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t n, int64_t num_replicas, int64_t rank, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);
  int64_t size() const override { return per_replica_; }
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t num_replicas() const { return num_replicas_; }
  int64_t rank() const { return rank_; }

 private:
  int64_t n_, num_replicas_, rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t per_replica_;
};

namespace detail {
// A well-mixed 64-bit seed from (seed, a, b) (splitmix64 rounds): used for
// per-epoch permutations and per-sample augmentation generators.
uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b = 0);
// A permutation of 0..n-1 (Fisher-Yates) from Generator(seed).
std::vector<int64_t> permutation(int64_t n, uint64_t seed);
}  // namespace detail

}  // namespace minidl::data
