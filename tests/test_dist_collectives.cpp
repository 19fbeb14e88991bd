// Gloo process groups as real processes over loopback: every collective for 2,
// 3 and 4 ranks, several sizes and dtypes, against values each rank computes
// itself; async Work; a rank that never arrives; init_process_group's
// init methods and errors; new_group.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "minidl/core/cuda.h"
#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "tests/dist_test_util.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::dist;
using namespace minidl::testing;
using namespace std::chrono_literals;

namespace {

// Rank r's input: value(r, i) = (r + 1) * 0.5 + i % 7 (exact in float32).
Tensor rank_input(int rank, int64_t n, DType dtype) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = (rank + 1) * (dtype == kInt64 ? 1.0 : 0.5) + double(i % 7);
  return tensor(v).to(dtype);
}

double reduce_expected(ReduceOp op, int world, int64_t i, DType dtype) {
  double acc = 0;
  for (int r = 0; r < world; ++r) {
    double x = (r + 1) * (dtype == kInt64 ? 1.0 : 0.5) + double(i % 7);
    if (r == 0) acc = x;
    else if (op == ReduceOp::SUM || op == ReduceOp::AVG) acc += x;
    else if (op == ReduceOp::PRODUCT) acc *= x;
    else if (op == ReduceOp::MAX) acc = std::max(acc, x);
    else acc = std::min(acc, x);
  }
  return op == ReduceOp::AVG ? acc / world : acc;
}

void require_values(const Tensor& t, const std::function<double(int64_t)>& expected, const char* what) {
  auto got = t.to(kFloat64).to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i)
    DIST_REQUIRE(std::abs(got[i] - expected(int64_t(i))) <= 1e-5 * std::abs(expected(int64_t(i))),
                 << what << " element " << i << ": got " << got[i] << ", expected " << expected(int64_t(i)));
}

}  // namespace

TEST_CASE("all_reduce: every op, dtype and world size, sizes 1 to 1M") {
  for (int world : {2, 3, 4}) {
    CAPTURE(world);
    auto failures = run_ranks(world, [](int rank, int world) {
      DIST_REQUIRE(get_rank() == rank && get_world_size() == world);
      DIST_REQUIRE(default_group()->backend_name() == "gloo");
      for (DType dtype : {kFloat32, kFloat64, kInt64})
        for (ReduceOp op : {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::PRODUCT, ReduceOp::MIN, ReduceOp::MAX})
          for (int64_t n : {1, 7, 1000, 1 << 20}) {
            if (dtype == kInt64 && op == ReduceOp::AVG) continue;
            if (n == (1 << 20) && op != ReduceOp::SUM) continue;  // large sizes: one op is enough
            Tensor t = rank_input(rank, n, dtype);
            all_reduce(t, op);
            require_values(t, [&](int64_t i) { return reduce_expected(op, world, i, dtype); }, reduce_op_name(op));
          }
    });
    CHECK_MESSAGE(failures.empty(), failures);
  }
}

TEST_CASE("broadcast, all_gather (equal and unequal sizes), reduce_scatter, barrier") {
  for (int world : {2, 3, 4}) {
    CAPTURE(world);
    auto failures = run_ranks(world, [](int rank, int world) {
      auto group = default_group();
      for (DType dtype : {kFloat32, kFloat64, kInt64}) {
        for (int root = 0; root < world; ++root) {
          Tensor t = rank_input(rank, 1000, dtype);
          broadcast(t, root);
          require_values(t, [&](int64_t i) { return rank_input(root, 1000, dtype).to(kFloat64).to_vector<double>()[i]; },
                         "broadcast");
        }
        // Equal sizes.
        std::vector<Tensor> outs;
        for (int r = 0; r < world; ++r) outs.push_back(zeros({3, 5}, dtype));
        all_gather(outs, rank_input(rank, 15, dtype).reshape({3, 5}));
        for (int r = 0; r < world; ++r)
          DIST_REQUIRE(allclose(outs[r], rank_input(r, 15, dtype).reshape({3, 5}), 0, 0), << "all_gather from " << r);
        // Unequal sizes: rank r sends r + 2 elements (rank 0 also tests 0).
        auto count = [](int r) { return int64_t(r == 0 ? 0 : r + 2); };
        std::vector<Tensor> uneven;
        for (int r = 0; r < world; ++r) uneven.push_back(zeros({count(r)}, dtype));
        all_gather(uneven, rank_input(rank, count(rank), dtype));
        for (int r = 0; r < world; ++r)
          DIST_REQUIRE(allclose(uneven[r], rank_input(r, count(r), dtype), 0, 0), << "uneven all_gather from " << r);
        // Into one tensor.
        Tensor gathered = zeros({world * 4}, dtype);
        group->all_gather_into_tensor(gathered, rank_input(rank, 4, dtype))->wait();
        for (int r = 0; r < world; ++r)
          DIST_REQUIRE(allclose(gathered.narrow(0, r * 4, 4), rank_input(r, 4, dtype), 0, 0));
        // reduce_scatter: inputs[r] = rank_input(rank, 6) + r; rank r gets sum over ranks.
        std::vector<Tensor> ins;
        for (int r = 0; r < world; ++r) ins.push_back(rank_input(rank, 6, dtype) + Tensor(full({6}, double(r), dtype)));
        Tensor out = zeros({6}, dtype);
        group->reduce_scatter(out, ins, ReduceOp::SUM)->wait();
        require_values(out, [&](int64_t i) { return reduce_expected(ReduceOp::SUM, world, i, dtype) + world * rank; },
                       "reduce_scatter");
      }
      barrier();
    });
    CHECK_MESSAGE(failures.empty(), failures);
  }
}

TEST_CASE("strided tensors (transposes, column slices) in every collective, on the CPU and the test device") {
  // They were refused ("Tensors must be contiguous"); PyTorch's Gloo takes them.
  auto failures = run_ranks(2, [](int rank, int) {
    for (Device device : {kCPU, kTestDevice}) {
      // base[i][j] = 4 i + j + 10 rank; all_reduce through its transpose.
      Tensor base = (arange(12.0).reshape({3, 4}) + 10.0 * rank).to(device);
      Tensor view = base.t();
      all_reduce(view);
      require_values(base, [](int64_t i) { return 2.0 * double(i) + 10.0; }, "all_reduce through a transpose");
      // broadcast into two columns of rank 1's matrix (not dense).
      Tensor grid = full({3, 4}, double(rank), kFloat32).to(device);
      Tensor cols = grid.narrow(1, 1, 2);
      broadcast(cols, 0);
      require_values(grid, [&](int64_t i) { return rank == 0 || i % 4 == 1 || i % 4 == 2 ? 0.0 : 1.0; },
                     "broadcast into columns");
      // all_gather: a strided input, outputs that are transposes.
      std::vector<Tensor> outs{zeros({3, 4}).to(device).t(), zeros({3, 4}).to(device).t()};
      all_gather(outs, base.t() + 0.0 * rank);
      for (int r = 0; r < 2; ++r)
        require_values(outs[r].contiguous().reshape({12}),
                       [&](int64_t k) { return 2.0 * double((k % 3) * 4 + k / 3) + 10.0; }, "all_gather");
      // reduce_scatter into a strided output.
      Tensor out_base = zeros({2, 2}).to(device);
      Tensor out = out_base.t();
      std::vector<Tensor> ins{full({2, 2}, 1.0 + rank).to(device).t(), full({2, 2}, 3.0 + rank).to(device).t()};
      default_group()->reduce_scatter(out, ins)->wait();
      require_values(out_base, [&](int64_t) { return rank == 0 ? 3.0 : 7.0; }, "reduce_scatter");
    }
  });
  CHECK_MESSAGE(failures.empty(), failures);
}

TEST_CASE("async collectives run in issue order and complete on wait or synchronize") {
  auto failures = run_ranks(3, [](int rank, int world) {
    std::vector<Tensor> ts;
    std::vector<WorkPtr> works;
    for (int k = 0; k < 8; ++k) {
      ts.push_back(full({4096}, double(rank + k), kFloat64));
      works.push_back(all_reduce(ts.back(), ReduceOp::SUM, nullptr, /*async_op=*/true));
    }
    for (int k = 7; k >= 0; --k) {  // waiting out of order is fine
      if (k % 2) works[k]->wait();
      else works[k]->synchronize();  // the host-blocking form
      DIST_REQUIRE(works[k]->is_completed());
      double expected = 0 + 1 + 2 + 3 * k;  // sum over ranks of (rank + k)
      DIST_REQUIRE(ts[k].max().item<double>() == expected && ts[k].min().item<double>() == expected);
    }
  });
  CHECK_MESSAGE(failures.empty(), failures);
}

TEST_CASE("a rank that never arrives: the others fail within the timeout, naming the collective and the rank") {
  auto failures = run_ranks(
      3,
      [](int rank, int world) {
        if (rank == 2) {
          std::this_thread::sleep_for(12s);  // never joins the all_reduce in time
          return;
        }
        Tensor t = ones({10});
        auto start = std::chrono::steady_clock::now();
        bool threw = false;
        try {
          all_reduce(t);
        } catch (const Error& e) {
          threw = true;
          std::string msg = e.what();
          DIST_REQUIRE(msg.find("all_reduce(SUM)") != std::string::npos, << msg);
          DIST_REQUIRE(msg.find("never reached it: [2]") != std::string::npos, << msg);
        }
        DIST_REQUIRE(threw);
        auto elapsed = std::chrono::steady_clock::now() - start;
        // Timeout 1.5 s plus the look-up of who arrived (~1.4 s); generous for
        // a loaded machine, but far below rank 2's 12 s.
        DIST_REQUIRE(elapsed < 10s, << "took " << std::chrono::duration<double>(elapsed).count() << " s");
        // The group stays failed rather than hanging.
        DIST_REQUIRE_THROWS_CONTAINS(all_reduce(t), "unusable after an earlier collective failed");
      },
      60s, true, /*collective_timeout=*/1500ms);
  CHECK_MESSAGE(failures.empty(), failures);
}

TEST_CASE("init methods: tcp:// with the query, env://, new_group") {
  // A free port for the TCP rendezvous.
  int port;
  {
    TCPStore probe("127.0.0.1", 0, true, 1s);
    port = probe.port();
  }
  auto failures = run_ranks(
      3,
      [port](int rank, int world) {
        init_process_group("gloo", "tcp://127.0.0.1:" + std::to_string(port) + "?rank=" + std::to_string(rank) +
                                       "&world_size=3",
                           -1, -1, 20s);
        DIST_REQUIRE(get_rank() == rank && get_world_size() == 3);
        DIST_REQUIRE_THROWS_CONTAINS(init_process_group("gloo", "env://"), "twice");
        // Sub-groups: {0, 2} and {1}; each rank calls new_group for both.
        auto g02 = new_group({0, 2}, 20s);
        auto g1 = new_group({1}, 20s);
        // Outside a group, a rank holds the non-member group (PyTorch's
        // GroupMember.NON_GROUP_MEMBER): rank and size -1, collectives that do
        // nothing. It was nullptr, which collectives took for the default group.
        const auto& outside = rank == 1 ? g02 : g1;
        const auto& inside = rank == 1 ? g1 : g02;
        DIST_REQUIRE(outside != nullptr && is_non_group_member(outside) && !is_non_group_member(inside));
        DIST_REQUIRE(get_rank(outside) == -1 && get_world_size(outside) == -1);
        DIST_REQUIRE(inside->size() == (rank == 1 ? 1 : 2) && get_rank(inside) == rank / 2);
        for (const auto& g : {g02, g1}) {  // every rank calls both: members reduce, the others skip
          Tensor t = full({5}, double(rank), kFloat32);
          all_reduce(t, ReduceOp::SUM, g);
          const double expect = g == outside ? rank : rank == 1 ? 1.0 : 2.0;
          DIST_REQUIRE(t.min().item<double>() == expect && t.max().item<double>() == expect);
          broadcast(t, rank == 1 ? 1 : 0, g);
          barrier(g);
        }
        DIST_REQUIRE_THROWS_CONTAINS(dist::DistributedDataParallel(nn::Linear(2, 2), {}, outside),
                                     "is not a member of the given process group");
        barrier();
        destroy_process_group();
        DIST_REQUIRE(!is_initialized() && get_rank() == -1);
      },
      60s, /*init=*/false);
  CHECK_MESSAGE(failures.empty(), failures);

  {
    TCPStore probe("127.0.0.1", 0, true, 1s);
    port = probe.port();
  }
  failures = run_ranks(
      2,
      [port](int rank, int world) {
        setenv("MASTER_ADDR", "127.0.0.1", 1);
        setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
        setenv("RANK", std::to_string(rank).c_str(), 1);
        setenv("WORLD_SIZE", "2", 1);
        init_process_group("gloo", "env://", -1, -1, 20s);
        Tensor t = full({3}, double(rank + 1), kFloat64);
        all_reduce(t, ReduceOp::MAX);
        DIST_REQUIRE(t.min().item<double>() == 2.0);
        destroy_process_group();
      },
      60s, /*init=*/false);
  CHECK_MESSAGE(failures.empty(), failures);
}

TEST_CASE("init methods over IPv6 loopback: tcp://[::1]:port and MASTER_ADDR=::1") {
  // A free port on ::1 (where the machine has no IPv6 loopback, nothing to test).
  auto free_v6_port = [] {
    TCPStore probe("::1", 0, true, 1s);
    return probe.port();
  };
  int tcp_port = 0, env_port = 0;
  try {
    tcp_port = free_v6_port();
    env_port = free_v6_port();
  } catch (const Error& e) {
    MESSAGE("skipped: no IPv6 loopback here (", e.what(), ")");
    return;
  }
  auto failures = run_ranks(
      2,
      [tcp_port, env_port](int rank, int) {
        init_process_group("gloo", "tcp://[::1]:" + std::to_string(tcp_port), 2, rank, 20s);
        Tensor t = full({4}, double(rank + 1), kFloat32);
        all_reduce(t);
        DIST_REQUIRE(t.min().item<double>() == 3.0 && t.max().item<double>() == 3.0);
        destroy_process_group();
        setenv("MASTER_ADDR", rank == 0 ? "::1" : "[::1]", 1);  // the bracketed form too
        setenv("MASTER_PORT", std::to_string(env_port).c_str(), 1);
        setenv("RANK", std::to_string(rank).c_str(), 1);
        setenv("WORLD_SIZE", "2", 1);
        init_process_group("gloo", "env://", -1, -1, 20s);
        all_reduce(t, ReduceOp::MAX);
        DIST_REQUIRE(t.min().item<double>() == 3.0);
        destroy_process_group();
      },
      60s, /*init=*/false);
  CHECK_MESSAGE(failures.empty(), failures);
}

TEST_CASE("init_process_group and collectives: errors") {
  // Run in a child so the parent's process state stays clean.
  auto failures = run_ranks(
      1,
      [](int, int) {
        unsetenv("RANK");
        DIST_REQUIRE_THROWS_CONTAINS(init_process_group("gloo", "env://"), "environment variable RANK expected, but not set");
        setenv("RANK", "0", 1);
        setenv("WORLD_SIZE", "1", 1);
        unsetenv("MASTER_ADDR");
        DIST_REQUIRE_THROWS_CONTAINS(init_process_group("gloo", "env://"), "MASTER_ADDR expected, but not set");
        setenv("RANK", "-1", 1);
        DIST_REQUIRE_THROWS_CONTAINS(init_process_group("gloo", "env://"), "init_process_group: RANK must be >= 0, got -1");
        setenv("RANK", "0", 1);
        DIST_REQUIRE_THROWS_CONTAINS(init_process_group("gloo", "tcp://127.0.0.1?rank=0&world_size=1"), "port number missing");
        DIST_REQUIRE_THROWS_CONTAINS(init_process_group("gloo", "tcp://127.0.0.1:1234?world_size=1"), "rank parameter missing");
        DIST_REQUIRE_THROWS_CONTAINS(init_process_group("gloo", "tcp://[::1]?rank=0&world_size=1"),
                                     "port number missing");
        DIST_REQUIRE_THROWS_CONTAINS(init_process_group("gloo", "tcp://[::1:1234?rank=0&world_size=1"),
                                     "no ']' after the IPv6 address in 'tcp://[::1:1234?rank=0&world_size=1'");
        DIST_REQUIRE_THROWS_CONTAINS(init_process_group("gloo", "tcp://::1:1234?rank=0&world_size=1"),
                                     "an IPv6 address needs brackets, as tcp://[::1]:29500");
        DIST_REQUIRE_THROWS_CONTAINS(init_process_group("gloo", "tcp://:1234?rank=0&world_size=1"), "host missing");
        DIST_REQUIRE_THROWS_CONTAINS(init_process_group("gloo", "tcp://[::1]:x?rank=0&world_size=1"),
                                     "port must be an integer, got 'x'");
        // Given but out of range: said so (was "parameter missing").
        DIST_REQUIRE_THROWS_CONTAINS(init_process_group("gloo", "tcp://127.0.0.1:1234?world_size=0&rank=0"),
                                     "init_process_group: world_size must be >= 1, got 0");
        DIST_REQUIRE_THROWS_CONTAINS(init_process_group("gloo", "tcp://127.0.0.1:1234", 0, 0),
                                     "init_process_group: world_size must be >= 1, got 0");
        DIST_REQUIRE_THROWS_CONTAINS(init_process_group("gloo", "tcp://127.0.0.1:1234?world_size=2&rank=-1"),
                                     "init_process_group: rank must be >= 0, got -1");
        DIST_REQUIRE_THROWS_CONTAINS(init_process_group("gloo", "file:///tmp/x", 2, 2), "rank 2 must be below world_size 2");
        DIST_REQUIRE_THROWS_CONTAINS(init_process_group("mpi", "env://"), "unknown backend 'mpi'");
        if (!cuda::is_built())
          DIST_REQUIRE_THROWS_CONTAINS(init_process_group("nccl", "env://"), "the nccl backend needs a CUDA build");
        DIST_REQUIRE_THROWS_CONTAINS(init_process_group("gloo", "udp://x"), "unknown init_method");
        Tensor t = ones({2});
        DIST_REQUIRE_THROWS_CONTAINS(all_reduce(t), "Default process group has not been initialized");
        DIST_REQUIRE(!is_initialized() && get_world_size() == -1);

        init_process_group("gloo", "file://" + fresh_rendezvous_path(), 1, 0, 5s);
        auto g = default_group();
        Tensor i64 = ones({2}, kInt64);
        DIST_REQUIRE_THROWS_CONTAINS(all_reduce(i64, ReduceOp::AVG), "AVG needs a floating-point tensor");
        Tensor u8 = ones({2}, kUInt8);
        DIST_REQUIRE_THROWS_CONTAINS(all_reduce(u8), "expected a float16, bfloat16, float32, float64 or int64 tensor, got uint8");
        std::vector<Tensor> outs{ones({2}), ones({2})};
        DIST_REQUIRE_THROWS_CONTAINS(all_gather(outs, ones({2})), "expected 1 output tensors");
        std::vector<Tensor> one{ones({3})};
        DIST_REQUIRE_THROWS_CONTAINS(all_gather(one, ones({2})), "has 3 elements but the input has 2");
        Tensor big = ones({3});
        DIST_REQUIRE_THROWS_CONTAINS(g->all_gather_into_tensor(big, ones({2})), "world_size times input tensor size");
        DIST_REQUIRE_THROWS_CONTAINS(broadcast(t, 1), "root must be in [0, 0]");
        // World size 1 works: collectives are identities.
        Tensor w = full({4}, 3.0);
        all_reduce(w, ReduceOp::AVG);
        DIST_REQUIRE(w.max().item<double>() == 3.0);
        destroy_process_group();
      },
      60s, /*init=*/false);
  CHECK_MESSAGE(failures.empty(), failures);
}
