// CollectiveWatchdog: arrival marks in the store for slow collectives, and
// the failure message built from them (see watchdog.h).
#include "minidl/dist/watchdog.h"

#include <algorithm>

namespace minidl::dist {

CollectiveWatchdog::CollectiveWatchdog(std::shared_ptr<Store> store, int rank, int size, Milliseconds timeout)
    : store_(std::move(store)), rank_(rank), size_(size), timeout_(timeout) {
  thread_ = std::thread([this] { loop(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

// No notify: waking the watchdog's thread for every collective costs a
// context switch each time, on cores another job may be using; the thread
// looks again within mark_after() (loop()).
void CollectiveWatchdog::set_running(uint64_t seq) {
  std::lock_guard<std::mutex> lock(mutex_);
  running_ = true;
  running_seq_ = seq;
  running_since_ = Clock::now();
}

void CollectiveWatchdog::set_idle() {
  std::lock_guard<std::mutex> lock(mutex_);
  running_ = false;
}

Milliseconds CollectiveWatchdog::mark_after() const { return std::min(Milliseconds(1000), timeout_ / 4); }

std::string CollectiveWatchdog::arrival_key(uint64_t seq, int rank) const {
  return "arrived/" + std::to_string(seq) + "/" + std::to_string(rank);
}

// Marks "this rank reached collective #seq" once it has run for mark_after().
void CollectiveWatchdog::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  uint64_t marked = UINT64_MAX;
  for (;;) {
    if (stopping_) return;
    if (running_ && running_seq_ != marked) {
      const auto due = running_since_ + mark_after();
      if (Clock::now() >= due) {
        marked = running_seq_;
        const uint64_t seq = running_seq_;
        lock.unlock();
        try {
          store_->set(arrival_key(seq, rank_), "1");
        } catch (const std::exception&) {
          // The store may be gone (rank 0 exited); the failure message says so.
        }
        lock.lock();
        continue;
      }
      cv_.wait_until(lock, due);
    } else {
      // Idle (or this collective is marked): look again soon enough that a
      // collective is marked within 2 * mark_after() of its start.
      cv_.wait_for(lock, std::min(Milliseconds(200), mark_after()));
    }
  }
}

std::string CollectiveWatchdog::describe_failure(const std::string& name, uint64_t seq, const std::string& what) {
  std::string msg = name + " (collective #" + std::to_string(seq) + " of this group) failed on rank " +
                    std::to_string(rank_) + " of " + std::to_string(size_) + ": " + what;
  // Give the other ranks' watchdogs time to mark their arrival, then look.
  std::string missing;
  try {
    store_->set(arrival_key(seq, rank_), "1");
    const auto deadline = Clock::now() + mark_after() + Milliseconds(1000);
    for (;;) {
      missing.clear();
      for (int r = 0; r < size_; ++r)
        if (!store_->check({arrival_key(seq, r)})) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      if (missing.empty() || Clock::now() > deadline) break;
      std::this_thread::sleep_for(Milliseconds(50));
    }
    if (!missing.empty())
      msg += " (ranks that never reached it: [" + missing + "])";
    else
      msg += " (every rank reached it; a peer's connection failed)";
  } catch (const std::exception&) {
    msg += " (the store is unreachable: rank 0 may have exited or crashed)";
  }
  return msg;
}

}  // namespace minidl::dist
