// ProcessGroupNCCL's host logic on the CPU, in every build, with a fake
// communicator (dist/nccl_host/communicator.h): ranks are threads of this
// process meeting through a TCPStore on 127.0.0.1; the fake's collectives
// compute on CPU tensors once every rank has issued them, and its events
// complete then (or never, when the test stalls a rank). Checked: the
// ncclUniqueId exchange (2-4 ranks), lazy communicator creation, sequence
// numbers, Work's wait/synchronize/is_completed, the watchdog's timeout path
// (error on every waiting rank naming the collective, its sequence number and
// the missing ranks; abort; the group unusable afterwards), NCCL async errors,
// the two-ranks-one-GPU error, LOCAL_RANK, argument checks, and (CPU builds)
// init_process_group("nccl")'s error. No NCCL or CUDA call is made here.
#include <atomic>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include "minidl/core/cuda.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/nccl_host/nccl_checks.h"
#include "minidl/dist/nccl_host/process_group_nccl.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::dist;

namespace {

// The shared "network" of the fake communicators of one test.
struct FakeFabric {
  explicit FakeFabric(int size) : size(size) {}
  int size;
  std::mutex mutex;
  std::atomic<int> ids_made{0};
  std::atomic<int> aborts{0};
  std::atomic<int> stream_waits{0};
  std::map<int, std::string> id_seen;  // rank -> the unique id its communicator got
  std::set<int> stalled;               // ranks whose contributions never reach the others
  std::map<int, std::string> async_error;
  std::string refuse_launch;           // when set, every launch throws it (NCCL refusing to enqueue)
  struct Slot {
    std::vector<std::function<void(std::vector<Tensor>&)>> finish;  // per rank, in rank order of arrival
    std::map<int, std::vector<Tensor>> data;                         // rank -> its tensors
    std::vector<std::shared_ptr<std::atomic<bool>>> done;
  };
  std::map<uint64_t, Slot> slots;
};

class FakeEvent final : public CollectiveEvent {
 public:
  FakeEvent(std::shared_ptr<std::atomic<bool>> done, FakeFabric& f) : done_(std::move(done)), fabric_(f) {}
  bool query() override { return done_->load(); }
  void make_current_stream_wait() override { ++fabric_.stream_waits; }

 private:
  std::shared_ptr<std::atomic<bool>> done_;
  FakeFabric& fabric_;
};

double reduce(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::AVG: return a + b;
    case ReduceOp::PRODUCT: return a * b;
    case ReduceOp::MIN: return std::min(a, b);
    case ReduceOp::MAX: return std::max(a, b);
  }
  return 0;
}
std::vector<double> values(const Tensor& t) { return t.to(kFloat64).to_vector<double>(); }
void assign(const Tensor& t, const std::vector<double>& v) {
  Tensor(t).copy_(tensor(v, {static_cast<int64_t>(v.size())}).reshape(t.shape()));
}

// A communicator of the fabric: the k-th collective of every rank meets in
// slot k; the last rank to arrive computes every rank's result (the tensors
// are CPU tensors) and completes the events.
class FakeCommunicator final : public Communicator {
 public:
  FakeCommunicator(FakeFabric& f, int rank) : f_(f), rank_(rank) {}

  CollectiveEventPtr all_reduce(Tensor& t, ReduceOp op) override {
    return join({t}, [op, n = f_.size](std::map<int, std::vector<Tensor>>& d) {
      std::vector<double> acc = values(d.begin()->second[0]);
      for (auto it = std::next(d.begin()); it != d.end(); ++it) {
        auto v = values(it->second[0]);
        for (size_t i = 0; i < acc.size(); ++i) acc[i] = reduce(op, acc[i], v[i]);
      }
      if (op == ReduceOp::AVG)
        for (double& x : acc) x /= n;
      for (auto& [r, ts] : d) assign(ts[0], acc);
    });
  }
  CollectiveEventPtr broadcast(Tensor& t, int root) override {
    return join({t}, [root](std::map<int, std::vector<Tensor>>& d) {
      auto v = values(d.at(root)[0]);
      for (auto& [r, ts] : d) assign(ts[0], v);
    });
  }
  CollectiveEventPtr all_gather(const Tensor& in, Tensor& out) override {
    return join({in, out}, [](std::map<int, std::vector<Tensor>>& d) {
      std::vector<double> all;
      for (auto& [r, ts] : d) for (double x : values(ts[0])) all.push_back(x);
      for (auto& [r, ts] : d) assign(ts[1], all);
    });
  }
  CollectiveEventPtr all_gather_v(const Tensor& in, std::vector<Tensor>& outs) override {
    std::vector<Tensor> ts = {in};
    ts.insert(ts.end(), outs.begin(), outs.end());
    return join(ts, [](std::map<int, std::vector<Tensor>>& d) {
      for (auto& [r, mine] : d)
        for (auto& [src, theirs] : d) assign(mine[1 + src], values(theirs[0]));
    });
  }
  CollectiveEventPtr reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    return join({in, out}, [op](std::map<int, std::vector<Tensor>>& d) {
      std::vector<double> acc = values(d.begin()->second[0]);
      for (auto it = std::next(d.begin()); it != d.end(); ++it) {
        auto v = values(it->second[0]);
        for (size_t i = 0; i < acc.size(); ++i) acc[i] = reduce(op, acc[i], v[i]);
      }
      for (auto& [r, ts] : d) {
        const size_t n = static_cast<size_t>(ts[1].numel());
        assign(ts[1], std::vector<double>(acc.begin() + r * n, acc.begin() + (r + 1) * n));
      }
    });
  }
  std::string async_error() override {
    std::lock_guard<std::mutex> lock(f_.mutex);
    auto it = f_.async_error.find(rank_);
    return it == f_.async_error.end() ? "" : it->second;
  }
  void abort() noexcept override { ++f_.aborts; }

 private:
  using Compute = std::function<void(std::map<int, std::vector<Tensor>>&)>;
  CollectiveEventPtr join(std::vector<Tensor> ts, Compute compute) {
    auto done = std::make_shared<std::atomic<bool>>(false);
    std::lock_guard<std::mutex> lock(f_.mutex);
    if (!f_.refuse_launch.empty()) throw Error(f_.refuse_launch);
    auto& slot = f_.slots[launches_++];
    slot.done.push_back(done);
    if (!f_.stalled.count(rank_)) slot.data[rank_] = std::move(ts);
    if (static_cast<int>(slot.data.size()) == f_.size) {
      compute(slot.data);
      for (auto& d : slot.done) d->store(true);
    }
    return std::make_unique<FakeEvent>(done, f_);
  }
  FakeFabric& f_;
  int rank_;
  uint64_t launches_ = 0;
};

NcclBackend fake_backend(FakeFabric& f, const std::string& identity) {
  NcclBackend b;
  b.device = kCPU;
  b.device_identity = identity;
  b.make_unique_id = [&f] { return "fake-nccl-id-" + std::to_string(++f.ids_made); };
  b.make_communicator = [&f](const std::string& id, int rank, int size, Milliseconds) -> CommunicatorPtr {
    std::lock_guard<std::mutex> lock(f.mutex);
    f.id_seen[rank] = id;
    return std::make_unique<FakeCommunicator>(f, rank);
  };
  return b;
}

// Runs fn(rank, group) on `world` threads, each with its own TCPStore client
// (rank 0 hosts it), and rethrows the first rank's failure.
void run_ranks(int world, Milliseconds timeout, FakeFabric& fabric,
               const std::function<void(int, ProcessGroupNCCL&)>& fn,
               const std::function<std::string(int)>& identity = nullptr) {
  auto master = std::make_shared<TCPStore>("127.0.0.1", 0, true, Milliseconds(5000));
  std::vector<std::thread> threads;
  std::vector<std::string> errors(world);
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        std::shared_ptr<Store> base =
            r == 0 ? std::shared_ptr<Store>(master)
                   : std::make_shared<TCPStore>("127.0.0.1", master->port(), false, Milliseconds(5000));
        auto store = std::make_shared<PrefixStore>("default_pg", base);
        const std::string id = identity ? identity(r) : "testhost/gpu-" + std::to_string(r);
        ProcessGroupNCCL pg(store, r, world, timeout, fake_backend(fabric, id));
        fn(r, pg);
      } catch (const std::exception& e) {
        errors[r] = "rank " + std::to_string(r) + ": " + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) REQUIRE_MESSAGE(e.empty(), e);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("nccl logic: the unique id travels from rank 0 through the store; the communicator is made lazily") {
  for (int world : {2, 3, 4}) {
    CAPTURE(world);
    FakeFabric fabric(world);
    std::atomic<int> lazy_ok{0};
    run_ranks(world, Milliseconds(5000), fabric, [&](int rank, ProcessGroupNCCL& pg) {
      if (!pg.has_communicator() && pg.next_sequence_number() == 0) ++lazy_ok;
      Tensor t = full({3}, rank + 1.0);
      pg.all_reduce(t)->synchronize();
      if (pg.has_communicator() && values(t) == std::vector<double>(3, world * (world + 1) / 2.0)) ++lazy_ok;
    });
    CHECK(lazy_ok == 2 * world);
    CHECK(fabric.ids_made == 1);  // rank 0 only
    REQUIRE(static_cast<int>(fabric.id_seen.size()) == world);
    for (auto& [r, id] : fabric.id_seen) CHECK(id == "fake-nccl-id-1");
  }
  CHECK(nccl::unique_id_key(3) == "nccl_unique_id/cuda:3");
}

TEST_CASE("nccl logic: collectives, sequence numbers and Work") {
  FakeFabric fabric(2);
  std::atomic<bool> rank1_go{false};
  run_ranks(2, Milliseconds(5000), fabric, [&](int rank, ProcessGroupNCCL& pg) {
    // wait() orders the caller's stream after the collective and returns at
    // once: rank 1 has not issued it yet, so it cannot have completed.
    pg.barrier()->synchronize();  // #0: makes the communicators (a rendezvous of all ranks)
    Tensor a = tensor({1.0 + rank, 10.0 * (rank + 1)}, {2}, kFloat64);
    if (rank == 1)
      while (!rank1_go) std::this_thread::sleep_for(Milliseconds(1));
    auto w = pg.all_reduce(a, ReduceOp::MAX);
    if (rank == 0) {
      const int waits = fabric.stream_waits;
      w->wait();
      if (fabric.stream_waits != waits + 1) throw std::runtime_error("wait() did not make the stream wait");
      if (w->is_completed()) throw std::runtime_error("completed before rank 1 issued it");
      rank1_go = true;
    }
    w->synchronize();
    if (!w->is_completed() || values(a) != std::vector<double>{2, 20}) throw std::runtime_error("MAX wrong");
    Tensor s = full({2}, rank + 1.0);
    pg.all_reduce(s, ReduceOp::AVG)->synchronize();
    if (values(s) != std::vector<double>{1.5, 1.5}) throw std::runtime_error("AVG wrong");
    Tensor b = full({3}, rank == 1 ? 7.0 : 0.0, kInt64);
    pg.broadcast(b, 1)->synchronize();
    if (values(b) != std::vector<double>{7, 7, 7}) throw std::runtime_error("broadcast wrong");
    // Unequal all_gather: rank r contributes r + 1 elements.
    std::vector<Tensor> outs = {zeros({1}), zeros({2})};
    pg.all_gather(outs, full({rank + 1}, 5.0 + rank))->synchronize();
    if (values(outs[0]) != std::vector<double>{5} || values(outs[1]) != std::vector<double>{6, 6})
      throw std::runtime_error("all_gather wrong");
    Tensor flat = zeros({4});
    pg.all_gather_into_tensor(flat, tensor({1.0 * rank, 2.0 * rank}))->synchronize();
    if (values(flat) != std::vector<double>{0, 0, 1, 2}) throw std::runtime_error("all_gather_into_tensor wrong");
    Tensor out = zeros({2});
    pg.reduce_scatter(out, {full({2}, 1.0 + rank), full({2}, 10.0 + rank)})->synchronize();
    if (values(out) != std::vector<double>{rank ? 21.0 : 3.0, rank ? 21.0 : 3.0})
      throw std::runtime_error("reduce_scatter wrong");
    auto bw = pg.barrier();
    bw->synchronize();
    // 8 collectives so far, numbered 0..7; the last barrier was #7.
    auto* nw = dynamic_cast<ProcessGroupNCCL::WorkNCCL*>(bw.get());
    if (!nw || nw->sequence_number() != 7 || pg.next_sequence_number() != 8)
      throw std::runtime_error("sequence numbers wrong");
    // The watchdog retires finished collectives (and drops their tensors).
    for (int i = 0; i < 500 && pg.pending_collectives() > 0; ++i) std::this_thread::sleep_for(Milliseconds(2));
    if (pg.pending_collectives() != 0) throw std::runtime_error("finished collectives not retired");
  });
  CHECK(fabric.aborts == 0);
}

TEST_CASE("nccl logic: a rank that never issues a collective fails the others within the timeout") {
  FakeFabric fabric(3);
  std::vector<std::string> errors(3), later(3);
  std::atomic<int> failed{0};
  const auto start = std::chrono::steady_clock::now();
  // (1 s: collective #0 must still finish in time on a loaded machine.)
  run_ranks(3, Milliseconds(1000), fabric, [&](int rank, ProcessGroupNCCL& pg) {
    Tensor t = ones({2});
    pg.all_reduce(t)->synchronize();  // #0: everyone
    if (rank == 2) {  // skips #1 until the others have failed
      while (failed < 2) std::this_thread::sleep_for(Milliseconds(5));
      return;
    }
    auto w = pg.all_reduce(t);  // #1: never completes
    errors[rank] = error_of([&] { w->synchronize(); });
    ++failed;
    later[rank] = error_of([&] { pg.broadcast(t, 0); });
    CHECK(error_of([&] { w->wait(); }) == errors[rank]);  // every call throws it
  });
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(took < std::chrono::seconds(8));  // the timeout + ~1.3 s to name the missing rank
  for (int r : {0, 1}) {
    CAPTURE(errors[r]);
    CHECK(contains(errors[r], "all_reduce(SUM) (collective #1 of this group) failed on rank " + std::to_string(r)));
    CHECK(contains(errors[r], "Watchdog caught collective operation timeout"));
    CHECK(contains(errors[r], "ranks that never reached it: [2]"));
    CHECK(contains(later[r], "broadcast: the process group is unusable after an earlier collective failed"));
    CHECK(contains(later[r], "collective #1"));
  }
  CHECK(fabric.aborts == 2);  // ranks 0 and 1 aborted their communicators, once each
}

TEST_CASE("nccl logic: a collective that hangs on one rank fails every rank; NCCL async errors are passed on") {
  SUBCASE("hang") {
    FakeFabric fabric(2);
    fabric.stalled.insert(1);  // rank 1's contribution never arrives
    std::vector<std::string> errors(2);
    run_ranks(2, Milliseconds(500), fabric, [&](int rank, ProcessGroupNCCL& pg) {
      Tensor t = ones({2});
      errors[rank] = error_of([&] { pg.all_reduce(t, ReduceOp::MIN)->synchronize(); });
    });
    for (int r : {0, 1}) {
      CAPTURE(errors[r]);
      CHECK(contains(errors[r], "all_reduce(MIN) (collective #0 of this group) failed on rank"));
      CHECK(contains(errors[r], "timeout"));
      CHECK(contains(errors[r], "every rank reached it"));
    }
    CHECK(fabric.aborts == 2);
  }
  SUBCASE("async error") {
    FakeFabric fabric(2);
    std::string error;
    run_ranks(2, Milliseconds(3000), fabric, [&](int rank, ProcessGroupNCCL& pg) {
      pg.barrier()->synchronize();  // #0: both communicators exist
      if (rank != 1) return;        // rank 0 leaves: #1 cannot complete
      {
        std::lock_guard<std::mutex> lock(fabric.mutex);
        fabric.async_error[1] = "remote process exited or there was a network error (ncclRemoteError)";
      }
      Tensor t = ones({2});
      auto w = pg.all_reduce(t);
      const auto start = std::chrono::steady_clock::now();
      error = error_of([&] { w->synchronize(); });
      // Seen at the next poll, long before the 3 s timeout.
      if (std::chrono::steady_clock::now() - start > std::chrono::milliseconds(2500))
        throw std::runtime_error("the async error was not noticed before the timeout");
    });
    CAPTURE(error);
    CHECK(contains(error, "all_reduce(SUM) (collective #1 of this group) failed on rank 1 of 2: NCCL error: "
                          "remote process exited or there was a network error (ncclRemoteError)"));
    CHECK(fabric.aborts == 1);
  }
}

TEST_CASE("nccl logic: NCCL refusing to enqueue a collective breaks the group with NCCL's text") {
  FakeFabric fabric(1);
  std::string first, later;
  run_ranks(1, Milliseconds(2000), fabric, [&](int, ProcessGroupNCCL& pg) {
    Tensor t = ones({2});
    pg.all_reduce(t)->synchronize();  // #0 runs
    {
      std::lock_guard<std::mutex> lock(fabric.mutex);
      fabric.refuse_launch = "NCCL error in ncclBroadcast: invalid usage (run with NCCL_DEBUG=WARN for details)";
    }
    first = error_of([&] { pg.broadcast(t, 0); });
    later = error_of([&] { pg.all_reduce(t); });
  });
  CAPTURE(first);
  CHECK(contains(first, "broadcast (collective #1 of this group) failed on rank 0 of 1: NCCL error in ncclBroadcast: "
                        "invalid usage (run with NCCL_DEBUG=WARN for details)"));
  CHECK(contains(later, "all_reduce(SUM): the process group is unusable after an earlier collective failed: " +
                            first.substr(0, 40)));
  CHECK(fabric.aborts == 1);
}

TEST_CASE("nccl logic: two ranks on one GPU get an error that says why and what to do") {
  FakeFabric fabric(2);
  std::vector<std::string> errors(2);
  run_ranks(
      2, Milliseconds(3000), fabric,
      [&](int rank, ProcessGroupNCCL& pg) {
        Tensor t = ones({1});
        errors[rank] = error_of([&] { pg.all_reduce(t); });
        // The group stays unusable, with the same reason.
        if (!contains(error_of([&] { pg.barrier(); }), "both use CUDA device"))
          throw std::runtime_error("the group was usable after the device error");
      },
      [](int) { return std::string("node7/0000:1b:00.0"); });
  for (int r : {0, 1}) {
    CAPTURE(errors[r]);
    CHECK(contains(errors[r], "rank 1 and rank 0 both use CUDA device cpu (node7/0000:1b:00.0)"));
    CHECK(contains(errors[r], "Duplicate GPU detected"));
    CHECK(contains(errors[r], "one process per GPU"));
    CHECK(contains(errors[r], "backend gloo"));
  }
  CHECK(fabric.ids_made == 0);  // refused before any communicator
}

TEST_CASE("nccl logic: rank 0 that never comes makes the id exchange time out with a clear error") {
  auto master = std::make_shared<TCPStore>("127.0.0.1", 0, true, Milliseconds(2000));
  auto store = std::make_shared<PrefixStore>("g", master);
  const std::string e = error_of([&] {
    nccl::exchange_unique_id(*store, 1, 0, [] { return std::string("x"); }, Milliseconds(100));
  });
  CHECK(contains(e, "rank 1 timed out waiting for rank 0's NCCL unique id (store key 'nccl_unique_id/cuda:0')"));
}

TEST_CASE("nccl logic: LOCAL_RANK picks the device") {
  CHECK(nccl::pick_device(std::string("1"), 5, 2) == 1);
  CHECK(nccl::pick_device(std::nullopt, 5, 2) == 1);
  CHECK(nccl::pick_device(std::nullopt, 0, 1) == 0);
  CHECK(contains(error_of([] { nccl::pick_device(std::string("2"), 2, 2); }),
                 "LOCAL_RANK 2 picks cuda:2 but only 2 CUDA devices are visible"));
  CHECK(contains(error_of([] { nccl::pick_device(std::string("x"), 0, 2); }), "LOCAL_RANK must be"));
  CHECK(contains(error_of([] { nccl::pick_device(std::nullopt, 0, 0); }), "no CUDA device is visible"));
}

TEST_CASE("nccl logic: argument checks") {
  const Device gpu(DeviceType::CUDA, 0);
  CHECK(contains(error_of([] { nccl::check_tensor("all_reduce", ones({2}), Device(DeviceType::CUDA, 0)); }),
                 "all_reduce: ProcessGroupNCCL works on tensors of its device cuda:0 but the tensor is on cpu"));
  for (DType d : {kFloat32, kFloat64, DType::Float16, DType::BFloat16, kInt64}) CHECK(nccl::is_supported_dtype(d));
  CHECK_FALSE(nccl::is_supported_dtype(DType::UInt8));
  CHECK(contains(error_of([] { nccl::check_tensor("broadcast", zeros({2}, DType::UInt8), kCPU); }),
                 "expects a float32, float64, float16, bfloat16 or int64 tensor, got uint8"));
  CHECK(contains(error_of([] { nccl::check_reduce_op("all_reduce", ReduceOp::AVG, kInt64); }),
                 "ReduceOp.AVG needs a floating-point tensor"));
  FakeFabric fabric(1);
  run_ranks(1, Milliseconds(2000), fabric, [&](int, ProcessGroupNCCL& pg) {
    Tensor t = ones({2, 2}).transpose(0, 1);
    if (!contains(error_of([&] { pg.all_reduce(t); }), "Tensors must be contiguous"))
      throw std::runtime_error("non-contiguous accepted");
    Tensor o = zeros({3});
    if (!contains(error_of([&] { pg.all_gather_into_tensor(o, ones({2})); }), "world_size times input"))
      throw std::runtime_error("bad all_gather_into_tensor size accepted");
    if (pg.next_sequence_number() != 0) throw std::runtime_error("a refused call took a sequence number");
    Tensor x = tensor({1.0, 2.0, 3.0});
    pg.all_reduce(x, ReduceOp::PRODUCT)->synchronize();  // world 1: unchanged
    if (values(x) != std::vector<double>{1, 2, 3}) throw std::runtime_error("world 1 all_reduce changed the tensor");
  });
}

TEST_CASE("nccl logic: a CPU build refuses init_process_group(\"nccl\") and says what to do") {
  if (cuda::is_built()) return;  // a CUDA build makes the group (tests/test_cuda_nccl.cpp)
  const std::string e = error_of([] { init_process_group("nccl", "tcp://127.0.0.1:1?rank=0&world_size=1"); });
  CHECK(contains(e, "the nccl backend needs a CUDA build of minidl: configure with -DMINIDL_CUDA=ON; use backend "
                    "gloo on CPU"));
  CHECK_FALSE(is_initialized());
}
