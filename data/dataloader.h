// DataLoader: batches a Dataset, with worker threads that read, decode and
// augment batches ahead of the training loop.
//
//   DataLoader loader(dataset, {.batch_size = 64, .shuffle = true, .num_workers = 3,
//                               .seed = 1, .transform = train_transform});
//   for (int64_t epoch = 0; epoch < 10; ++epoch) {
//     loader.set_epoch(epoch);
//     for (Batch& b : loader) { ... b.data (N, C, H, W), b.targets (N) int64 ... }
//   }
//
// Determinism: the batch order comes from the sampler (a function of the
// epoch), and each sample's transform gets its own Generator seeded from
// (seed, epoch, dataset index). So the batches and their augmented pixels are
// the same for any num_workers, and batches are always yielded in order.
//
// Each pass over the loader (each begin()) uses epoch() and then advances it
// by one, so loops without set_epoch still reshuffle every epoch. A sampler
// whose own set_epoch() was called decides instead, as in PyTorch:
//   sampler->set_epoch(epoch);  // e.g. a DistributedSampler, resuming at epoch 3
//   for (Batch& b : loader) ...  // the sampler's epoch-3 order
//
// Workers: num_workers == 0 builds each batch on the calling thread when it is
// needed. Otherwise the workers keep at most prefetch_factor * num_workers
// batches built or in flight beyond the one being consumed (bounded memory).
// Each begin() starts a pass of its own, owned by its iterators (nested loops
// over one loader work, as PyTorch's): leaving a loop early is fine, the
// pass's workers stop and are joined when its last iterator is destroyed. An
// exception while loading sample i is rethrown to the consumer, in batch
// order, as a minidl::Error naming i.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "minidl/data/dataset.h"
#include "minidl/data/sampler.h"
#include "minidl/data/transforms.h"

namespace minidl::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;                    // RandomSampler(seed) when no sampler is given
  std::shared_ptr<const Sampler> sampler;  // overrides shuffle
  bool drop_last = false;                  // drop a last batch smaller than batch_size
  int num_workers = 0;                     // threads; 0 = load on the calling thread
  int prefetch_factor = 2;                 // batches ahead per worker
  uint64_t seed = 0;                       // shuffling and augmentation
  TransformPtr transform;                  // applied to each sample's data
  // Collate batches into page-locked host memory, so `batch.data.to(device,
  // /*non_blocking=*/true)` can overlap with compute. Without a backend that
  // pins (a CPU-only build) batches are plain host memory, with a warning.
  bool pin_memory = false;
};

// data: the samples stacked along a new dim 0, in the samples' dtype (float32
// when the transform ends with ToFloat/Normalize); targets: int64 (N);
// indices: the dataset indices of the samples, in order.
struct Batch {
  Tensor data;
  Tensor targets;
  std::vector<int64_t> indices;
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  class Iterator;
  Iterator begin();
  Iterator end();

  int64_t size() const;  // batches per epoch
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }  // of the next pass (unless the sampler's epoch was set)
  const Dataset& dataset() const { return *dataset_; }
  const DataLoaderOptions& options() const { return options_; }

  class EpochRun;  // one pass: the batch plan and, with workers, the threads

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  int64_t epoch_ = 0;
};

// An input iterator; it shares its pass (copies step through the same batches)
// and may outlive the loader.
class DataLoader::Iterator {
 public:
  Iterator() = default;
  Batch& operator*() { return batch_; }
  Batch* operator->() { return &batch_; }
  Iterator& operator++();
  bool operator==(const Iterator& other) const { return run_ == other.run_; }
  bool operator!=(const Iterator& other) const { return !(*this == other); }

 private:
  friend class DataLoader;
  explicit Iterator(std::shared_ptr<EpochRun> run);
  std::shared_ptr<EpochRun> run_;  // null once exhausted (== end())
  Batch batch_;
};

}  // namespace minidl::data
