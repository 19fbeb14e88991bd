// ProcessGroupGloo's all-reduce algorithms (dist/gloo_all_reduce.h): Gloo's
// ring, the one-step exchange and rsag (also with small segments, through
// MINIDL_GLOO_RSAG_SEGMENT), each forced through MINIDL_GLOO_ALLREDUCE, and
// the size-based choice around its crossovers, against values each rank
// computes itself (every op and dtype, sizes that do not divide into the
// ring's segments or rsag's chunks), the rank-order sum of the exchange and
// rsag (the same bits on every rank), several outstanding Works (run in issue
// order by the worker), and a timeout on the ring.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "minidl/dist/distributed.h"
#include "minidl/dist/gloo_all_reduce.h"
#include "tests/dist_test_util.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::dist;
using namespace minidl::testing;
using namespace std::chrono_literals;

namespace {

// value(r, i) = (r + 1) * 0.5 + i % 7 (int64: (r + 1) + i % 7): exact in every dtype.
double value(int rank, int64_t i, DType dtype) { return (rank + 1) * (dtype == kInt64 ? 1.0 : 0.5) + double(i % 7); }

Tensor rank_input(int rank, int64_t n, DType dtype) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = value(rank, i, dtype);
  return tensor(v).to(dtype);
}

double expected(ReduceOp op, int world, int64_t i, DType dtype) {
  double acc = value(0, i, dtype);
  for (int r = 1; r < world; ++r) {
    double x = value(r, i, dtype);
    if (op == ReduceOp::SUM || op == ReduceOp::AVG) acc += x;
    else if (op == ReduceOp::PRODUCT) acc *= x;
    else if (op == ReduceOp::MAX) acc = std::max(acc, x);
    else acc = std::min(acc, x);
  }
  return op == ReduceOp::AVG ? acc / world : acc;
}

void require_expected(const Tensor& t, ReduceOp op, int world, DType dtype, const char* algo) {
  auto got = t.to(kFloat64).to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) {
    double e = expected(op, world, int64_t(i), dtype);
    DIST_REQUIRE(got[i] == e, << algo << " " << reduce_op_name(op) << " " << dtype_name(dtype) << " n=" << got.size()
                              << " element " << i << ": got " << got[i] << ", expected " << e);
  }
}

}  // namespace

TEST_CASE("every algorithm: every op and dtype, sizes not divisible by the segments, 2 and 3 ranks") {
  for (int world : {2, 3}) {
    CAPTURE(world);
    auto failures = run_ranks(world, [](int rank, int world) {
      // rsag@4000: segments of 4000 bytes (1000 float32, 500 float64 or int64 elements).
      for (const char* algo : {"ring", "exchange", "rsag", "rsag@4000", "auto"}) {
        const std::string name = algo;
        if (name == "auto") unsetenv("MINIDL_GLOO_ALLREDUCE");
        else setenv("MINIDL_GLOO_ALLREDUCE", name.substr(0, name.find('@')).c_str(), 1);
        if (name == "rsag@4000") setenv("MINIDL_GLOO_RSAG_SEGMENT", "4000", 1);
        else unsetenv("MINIDL_GLOO_RSAG_SEGMENT");
        for (DType dtype : {kFloat32, kFloat64, kInt64})
          for (ReduceOp op : {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::PRODUCT, ReduceOp::MIN, ReduceOp::MAX})
            // 65537 elements: 256 KiB + 4 bytes in float32, not a multiple of
            // the ring's 2 * world segments nor of rsag's world chunks; 1 and 5:
            // fewer elements than segments (rsag: empty chunks); 16384 / 16385
            // float32 and 32768 / 32769 float64: 64 KiB and 256 KiB, the
            // choice's crossovers, and one element more.
            for (int64_t n : {1, 5, 1001, 16384, 16385, 32768, 32769, 65536, 65537}) {
              if (dtype == kInt64 && op == ReduceOp::AVG) continue;
              if (n >= 16384 && op != ReduceOp::SUM && op != ReduceOp::MAX) continue;
              if (n >= 16384 && name != "auto" && n != 65537) continue;  // the crossovers: for the choice
              Tensor t = rank_input(rank, n, dtype);
              all_reduce(t, op);
              require_expected(t, op, world, dtype, algo);
            }
      }
      unsetenv("MINIDL_GLOO_ALLREDUCE");
      unsetenv("MINIDL_GLOO_RSAG_SEGMENT");
    });
    CHECK_MESSAGE(failures.empty(), failures);
  }
}

TEST_CASE("exchange and rsag: the sum in rank order, the same bits on every rank, 2 and 3 ranks") {
  for (int world : {2, 3}) {
    CAPTURE(world);
    auto failures = run_ranks(world, [](int rank, int world) {
      for (const char* segment : {"", "4000", "400"}) {  // "": exchange; else rsag with that segment
        CAPTURE(segment);
        setenv("MINIDL_GLOO_ALLREDUCE", *segment ? "rsag" : "exchange", 1);
        setenv("MINIDL_GLOO_RSAG_SEGMENT", segment, 1);
        const int64_t n = 2999;
        // Values whose float32 sums depend on the order they are added in.
        auto x = [](int r, int64_t i) { return float(0.1 * (r + 1) + 1e-3 * double(i) + 1e5 * double(i % 3 == r)); };
        std::vector<float> mine(n);
        for (int64_t i = 0; i < n; ++i) mine[i] = x(rank, i);
        Tensor t = tensor(mine);
        all_reduce(t);
        auto got = t.to_vector<float>();
        for (int64_t i = 0; i < n; ++i) {
          float acc = x(0, i);
          for (int r = 1; r < world; ++r) acc += x(r, i);
          DIST_REQUIRE(std::memcmp(&acc, &got[i], sizeof(float)) == 0,
                       << segment << " element " << i << ": got " << got[i] << ", rank-order sum " << acc);
        }
        // Every rank holds the same bits.
        Tensor all = zeros({world * n});
        default_group()->all_gather_into_tensor(all, t)->wait();
        auto v = all.to_vector<float>();
        for (int r = 1; r < world; ++r)
          DIST_REQUIRE(std::memcmp(v.data(), v.data() + r * n, n * sizeof(float)) == 0,
                       << segment << " rank " << r << " differs");
      }
      unsetenv("MINIDL_GLOO_ALLREDUCE");
      unsetenv("MINIDL_GLOO_RSAG_SEGMENT");
    });
    CHECK_MESSAGE(failures.empty(), failures);
  }
}

TEST_CASE("choose_gloo_all_reduce: the exchange for small tensors, rsag (2 ranks) or the ring above; "
          "MINIDL_GLOO_ALLREDUCE forces one") {
  unsetenv("MINIDL_GLOO_ALLREDUCE");
  CHECK(choose_gloo_all_reduce(4, 2) == GlooAllReduceAlgo::kExchange);
  CHECK(choose_gloo_all_reduce(256 << 10, 2) == GlooAllReduceAlgo::kExchange);
  CHECK(choose_gloo_all_reduce((256 << 10) + 4, 2) == GlooAllReduceAlgo::kRsag);
  CHECK(choose_gloo_all_reduce(64 << 20, 2) == GlooAllReduceAlgo::kRsag);
  CHECK(choose_gloo_all_reduce(64 << 10, 3) == GlooAllReduceAlgo::kExchange);
  CHECK(choose_gloo_all_reduce((64 << 10) + 4, 3) == GlooAllReduceAlgo::kRing);
  CHECK(choose_gloo_all_reduce((64 << 10) + 8, 4) == GlooAllReduceAlgo::kRing);
  setenv("MINIDL_GLOO_ALLREDUCE", "ring", 1);
  CHECK(choose_gloo_all_reduce(4, 2) == GlooAllReduceAlgo::kRing);
  setenv("MINIDL_GLOO_ALLREDUCE", "exchange", 1);
  CHECK(choose_gloo_all_reduce(1 << 30, 8) == GlooAllReduceAlgo::kExchange);
  setenv("MINIDL_GLOO_ALLREDUCE", "rsag", 1);
  CHECK(choose_gloo_all_reduce(4, 3) == GlooAllReduceAlgo::kRsag);
  setenv("MINIDL_GLOO_ALLREDUCE", "bcube", 1);
  CHECK_THROWS_WITH_AS(choose_gloo_all_reduce(4, 2), doctest::Contains("MINIDL_GLOO_ALLREDUCE must be ring, exchange or rsag"),
                       Error);
  unsetenv("MINIDL_GLOO_ALLREDUCE");
}

TEST_CASE("several outstanding Works of both algorithms, waited in any order and from several threads") {
  auto failures = run_ranks(2, [](int rank, int world) {
    for (int round = 0; round < 3; ++round) {
      std::vector<Tensor> ts;
      std::vector<WorkPtr> works;
      for (int k = 0; k < 8; ++k) {
        // Alternating ring (1 MiB + 4 bytes) and exchange (4 KiB) sized tensors.
        const int64_t n = k % 2 ? 1024 : (1 << 18) + 1;
        ts.push_back(full({n}, double(rank + k), kFloat32));
        works.push_back(all_reduce(ts.back(), ReduceOp::SUM, nullptr, /*async_op=*/true));
      }
      auto check = [&](int k) {
        const double e = 0 + 1 + 2 * k;  // sum over the 2 ranks of (rank + k)
        DIST_REQUIRE(works[k]->is_completed());
        DIST_REQUIRE(ts[k].max().item<double>() == e && ts[k].min().item<double>() == e, << "work " << k);
      };
      // Round 0: waited in issue order; 1: the last first; 2: from several threads.
      if (round == 0) {
        for (int k = 0; k < 8; ++k) works[k]->wait(), check(k);
      } else if (round == 1) {
        for (int k = 7; k >= 0; --k) works[k]->synchronize(), check(k);
      } else {
        std::vector<std::thread> waiters;
        for (int k = 0; k < 8; k += 2) waiters.emplace_back([&works, k] { works[k]->wait(); });
        for (int k = 1; k < 8; k += 2) works[k]->wait();
        for (auto& w : waiters) w.join();
        for (int k = 0; k < 8; ++k) check(k);
      }
    }
  });
  CHECK_MESSAGE(failures.empty(), failures);
}

TEST_CASE("the ring still times out when a rank never arrives") {
  auto failures = run_ranks(
      2,
      [](int rank, int) {
        setenv("MINIDL_GLOO_ALLREDUCE", "ring", 1);
        if (rank == 1) {
          std::this_thread::sleep_for(3s);  // misses the all_reduce
          return;
        }
        Tensor t = ones({100000});
        auto start = std::chrono::steady_clock::now();
        DIST_REQUIRE_THROWS_CONTAINS(all_reduce(t), "never reached it: [1]");
        DIST_REQUIRE(std::chrono::steady_clock::now() - start < 4500ms);
      },
      60s, true, /*collective_timeout=*/1000ms);
  CHECK_MESSAGE(failures.empty(), failures);
}
