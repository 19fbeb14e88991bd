// CollectiveWatchdog: the failure diagnosis every process-group backend shares
// (Gloo now, NCCL next); nothing in it knows how a collective runs.
//
// A collective that hangs or fails should say which ranks never reached it.
// The backend tells the watchdog which collective (by its sequence number in
// the group) it is waiting on; once that one has been running for a short
// delay, the watchdog's thread writes "arrived/<seq>/<rank>" into the store.
// When the collective fails, describe_failure() marks this rank, gives the
// peers' watchdogs time to mark theirs, and names the ranks whose mark is
// missing. The fast path (collectives that finish within the delay) never
// touches the store.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "minidl/dist/store.h"

namespace minidl::dist {

class CollectiveWatchdog {
 public:
  // timeout: the group's; the marking delay is min(1 s, timeout / 4).
  CollectiveWatchdog(std::shared_ptr<Store> store, int rank, int size, Milliseconds timeout);
  ~CollectiveWatchdog();  // stops the thread
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // The collective the group waits on now: a worker thread's current one
  // (Gloo), or the oldest unfinished one (a stream-ordered backend).
  void set_running(uint64_t seq);
  void set_idle();

  // The error message for collective `name` #seq that failed with `what`:
  // names it, this rank, and the ranks that never reached it (or that the
  // store is unreachable). Blocks up to about the marking delay + 1 s.
  std::string describe_failure(const std::string& name, uint64_t seq, const std::string& what);

 private:
  using Clock = std::chrono::steady_clock;
  void loop();
  Milliseconds mark_after() const;
  std::string arrival_key(uint64_t seq, int rank) const;

  std::shared_ptr<Store> store_;
  int rank_, size_;
  Milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool running_ = false;
  uint64_t running_seq_ = 0;
  Clock::time_point running_since_;
  std::thread thread_;
};

}  // namespace minidl::dist
