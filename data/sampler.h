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

  // Once called, this epoch drives a DataLoader over the sampler (PyTorch's
  // DistributedSampler style; the loader then reads it and never moves it).
  void set_epoch(int64_t epoch) {
    epoch_ = epoch;
    epoch_set_ = true;
  }
  int64_t epoch() const { return epoch_; }
  bool epoch_was_set() const { return epoch_set_; }
  std::vector<int64_t> indices() const { return indices(epoch_); }

 private:
  int64_t epoch_ = 0;
  bool epoch_set_ = false;
};

// 0, 1, ..., n-1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices(int64_t epoch) const override;
  using Sampler::indices;  // indices() at epoch()

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
  using Sampler::indices;  // indices() at epoch()

 private:
  int64_t n_;
  uint64_t seed_;
};

// One replica's share of the dataset for data-parallel training (as PyTorch's
// DistributedSampler): every rank draws the same (seed, epoch) permutation
// (or 0..n-1 without shuffle), pads it by repeating its leading indices to a
// multiple of num_replicas (cycling through them again when the padding is
// longer than the dataset, i.e. num_replicas > n), or with drop_last drops the
// tail down to a multiple, and takes every num_replicas-th index starting at
// rank. Every rank yields size() indices, so every rank runs the same number
// of steps (collectives stay in lock step); with drop_last and
// n < num_replicas that is 0. num_replicas and rank are plain numbers; the
// caller gets them from its process group.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t n, int64_t num_replicas, int64_t rank, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);
  int64_t size() const override { return per_replica_; }
  std::vector<int64_t> indices(int64_t epoch) const override;
  using Sampler::indices;  // indices() at epoch()
  int64_t num_replicas() const { return num_replicas_; }
  int64_t rank() const { return rank_; }

 private:
  int64_t n_, num_replicas_, rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t per_replica_;
};

// The evaluation counterpart of DistributedSampler: no padding, no dropping.
// Rank r gets positions r, r + W, r + 2W, ... of the epoch order (0..n-1, or
// the same (seed, epoch) permutation as DistributedSampler with shuffle), so
// over all ranks every sample is visited exactly once and ranks' sizes differ
// by at most one (size() is this rank's count, 0 when rank >= n).
//
// Why it exists: DistributedSampler's padding duplicates samples, so metrics
// summed over ranks count some samples twice, and drop_last silently skips
// some (PyTorch #25162). Use this one for validation and sum counts (not
// per-rank means) across ranks. Ranks run different numbers of batches, so do
// not run per-batch collectives (e.g. SyncBatchNorm in training mode) under it.
class DistributedEvalSampler : public Sampler {
 public:
  DistributedEvalSampler(int64_t n, int64_t num_replicas, int64_t rank, bool shuffle = false, uint64_t seed = 0);
  int64_t size() const override { return count_; }
  std::vector<int64_t> indices(int64_t epoch) const override;
  using Sampler::indices;  // indices() at epoch()
  int64_t num_replicas() const { return num_replicas_; }
  int64_t rank() const { return rank_; }

 private:
  int64_t n_, num_replicas_, rank_;
  bool shuffle_;
  uint64_t seed_;
  int64_t count_;
};

namespace detail {
// A well-mixed 64-bit seed from (seed, a, b) (splitmix64 rounds): used for
// per-epoch permutations and per-sample augmentation generators.
uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b = 0);
// A permutation of 0..n-1 (Fisher-Yates) from Generator(seed).
std::vector<int64_t> permutation(int64_t n, uint64_t seed);
}  // namespace detail

}  // namespace minidl::data
