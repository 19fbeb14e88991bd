// DataLoader. Batches are numbered 0..B-1 by the epoch's plan; workers claim
// the next unclaimed number (never more than `window` ahead of the consumer),
// build it, and file it in `ready`; the consumer takes them strictly in
// order. Ordering and augmentation therefore never depend on thread timing.
#include "minidl/data/dataloader.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <iostream>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#include "minidl/core/allocator.h"
#include "minidl/core/check.h"

namespace minidl::data {

namespace {

Batch collate(std::vector<Example>& samples, std::vector<int64_t> indices, bool pin_memory) {
  const Tensor& first = samples.front().data;
  MINIDL_CHECK(first.defined(), "DataLoader: sample ", indices.front(), " has undefined data");
  Shape shape = first.shape();
  shape.insert(shape.begin(), static_cast<int64_t>(samples.size()));
  Batch batch;
  batch.data = empty(shape, TensorOptions(first.dtype()).pinned_memory(pin_memory));
  batch.targets = empty({static_cast<int64_t>(samples.size())}, TensorOptions(kInt64).pinned_memory(pin_memory));
  const size_t bytes = first.nbytes();
  auto* dst = static_cast<char*>(batch.data.raw_data());
  auto* targets = batch.targets.data_ptr<int64_t>();
  for (size_t i = 0; i < samples.size(); ++i) {
    const Tensor x = samples[i].data.contiguous();
    MINIDL_CHECK(x.shape() == first.shape() && x.dtype() == first.dtype(), "DataLoader: cannot batch sample ",
                 indices[i], " (", dtype_name(x.dtype()), " ", shape_str(x.shape()), ") with sample ",
                 indices.front(), " (", dtype_name(first.dtype()), " ", shape_str(first.shape()),
                 "): samples in a batch must have the same shape and dtype");
    MINIDL_CHECK(x.device().is_cpu(), "DataLoader: expected CPU samples, got one on ", x.device().str(),
                 " (move batches to the device after loading)");
    std::memcpy(dst + i * bytes, x.raw_data(), bytes);
    targets[i] = samples[i].target;
  }
  batch.indices = std::move(indices);
  return batch;
}

}  // namespace

class DataLoader::EpochRun {
 public:
  EpochRun(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options, const std::vector<int64_t>& order,
           int64_t epoch)
      : dataset_(std::move(dataset)), options_(options), epoch_(epoch) {
    const auto n = static_cast<int64_t>(order.size());
    for (int64_t start = 0; start < n; start += options.batch_size) {
      const int64_t end = std::min(n, start + options.batch_size);
      if (options.drop_last && end - start < options.batch_size) break;
      plan_.emplace_back(order.begin() + start, order.begin() + end);
    }
    window_ = static_cast<int64_t>(options.num_workers) * options.prefetch_factor;
    // More threads than batches would only wait. A thread the system refuses
    // (num_workers = 100000) must not leave the started ones joinable: that
    // is std::terminate when the half-built run is destroyed.
    const int64_t threads = std::min<int64_t>(options.num_workers, static_cast<int64_t>(plan_.size()));
    try {
      for (int64_t w = 0; w < threads; ++w) threads_.emplace_back([this] { work(); });
    } catch (const std::system_error& e) {
      const size_t started = threads_.size();
      stop_and_join();
      MINIDL_FAIL("DataLoader: cannot start worker thread ", started + 1, " of num_workers=", options.num_workers,
                  ": ", e.what(), " (use fewer workers)");
    }
  }

  ~EpochRun() { stop_and_join(); }

  // The next batch in order; false when the epoch is over.
  bool next(Batch& out) {
    if (consumed_ >= static_cast<int64_t>(plan_.size())) return false;
    if (threads_.empty()) {
      out = build(consumed_++);
      return true;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    to_consumer_.wait(lock, [&] { return ready_.count(consumed_) != 0; });
    auto node = ready_.extract(consumed_);
    ++consumed_;
    lock.unlock();
    to_workers_.notify_all();  // the window moved
    if (node.mapped().error) std::rethrow_exception(node.mapped().error);
    out = std::move(node.mapped().batch);
    return true;
  }

 private:
  void stop_and_join() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    to_workers_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

  struct Result {
    Batch batch;
    std::exception_ptr error;
  };

  Batch build(int64_t k) const {
    const auto& indices = plan_[static_cast<size_t>(k)];
    std::vector<Example> samples;
    samples.reserve(indices.size());
    for (int64_t i : indices) {
      try {
        Example ex = dataset_->get(i);
        if (options_.transform) {
          Generator gen(detail::mix_seed(options_.seed, static_cast<uint64_t>(epoch_), static_cast<uint64_t>(i)));
          ex.data = (*options_.transform)(ex.data, gen);
        }
        samples.push_back(std::move(ex));
      } catch (const std::exception& e) {
        MINIDL_FAIL("DataLoader: loading sample ", i, " (batch ", k, ") failed: ", e.what());
      }
    }
    return collate(samples, indices, options_.pin_memory);
  }

  void work() {
    const auto batches = static_cast<int64_t>(plan_.size());
    for (;;) {
      int64_t k;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        to_workers_.wait(lock, [&] { return stop_ || claimed_ >= batches || claimed_ < consumed_ + window_; });
        if (stop_ || claimed_ >= batches) return;
        k = claimed_++;
      }
      Result r;
      try {
        r.batch = build(k);
      } catch (...) {
        r.error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ready_.emplace(k, std::move(r));
      }
      to_consumer_.notify_one();
    }
  }

  const std::shared_ptr<const Dataset> dataset_;  // owned: a run lives as long as its iterators
  const DataLoaderOptions options_;
  const int64_t epoch_;
  std::vector<std::vector<int64_t>> plan_;
  int64_t window_ = 0;

  std::mutex mutex_;
  std::condition_variable to_workers_, to_consumer_;
  bool stop_ = false;
  int64_t claimed_ = 0;   // next batch a worker will take (guarded)
  int64_t consumed_ = 0;  // next batch the consumer will take (guarded when workers run)
  std::map<int64_t, Result> ready_;
  std::vector<std::thread> threads_;
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  MINIDL_CHECK(dataset_ != nullptr, "DataLoader: dataset must not be null");
  MINIDL_CHECK(options_.batch_size >= 1, "DataLoader: batch_size should be a positive integer value, but got batch_size=",
               options_.batch_size);
  MINIDL_CHECK(options_.num_workers >= 0,
               "DataLoader: num_workers option should be non-negative; use num_workers=0 to disable multiprocessing.");
  MINIDL_CHECK(options_.prefetch_factor >= 1, "DataLoader: prefetch_factor must be at least 1, got ",
               options_.prefetch_factor);
  if (options_.pin_memory && pinned_host_allocator() == nullptr)  // PyTorch's warning
    std::cerr << "UserWarning: 'pin_memory' argument is set as true but no accelerator is found, then device "
                 "pinned memory won't be used.\n";
  MINIDL_CHECK(!(options_.sampler && options_.shuffle), "DataLoader: sampler option is mutually exclusive with shuffle");
  if (!options_.sampler) {
    const int64_t n = dataset_->size();
    options_.sampler = options_.shuffle ? std::shared_ptr<const Sampler>(std::make_shared<RandomSampler>(n, options_.seed))
                                        : std::make_shared<SequentialSampler>(n);
  }
}

DataLoader::~DataLoader() = default;

int64_t DataLoader::size() const {
  const int64_t n = options_.sampler->size(), b = options_.batch_size;
  return n / b + (!options_.drop_last && n % b != 0);  // (n + b - 1) / b overflowed for a huge batch_size
}

DataLoader::Iterator DataLoader::begin() {
  // The sampler's own epoch once its set_epoch() was called (it was ignored:
  // a run resumed the PyTorch way replayed epoch 0's order).
  if (options_.sampler->epoch_was_set()) epoch_ = options_.sampler->epoch();
  const std::vector<int64_t> order = options_.sampler->indices(epoch_);
  for (int64_t i : order)
    MINIDL_CHECK(i >= 0 && i < dataset_->size(), "DataLoader: the sampler produced index ", i,
                 " for a dataset of size ", dataset_->size());
  auto run = std::make_shared<EpochRun>(dataset_, options_, order, epoch_);
  ++epoch_;
  return Iterator(std::move(run));
}

DataLoader::Iterator DataLoader::end() { return Iterator(); }

DataLoader::Iterator::Iterator(std::shared_ptr<EpochRun> run) : run_(std::move(run)) { ++*this; }

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  MINIDL_CHECK(run_ != nullptr, "DataLoader: increment past the end");
  if (!run_->next(batch_)) run_ = nullptr;
  return *this;
}

}  // namespace minidl::data
