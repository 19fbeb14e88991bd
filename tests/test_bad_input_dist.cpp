// The dist API used as a PyTorch user would misuse it (an ASan/UBSan probe
// against PyTorch 2.15's torch.distributed over Gloo): integer all-reduces
// that overflow, new_group ranks listed in different orders and broadcast's
// src on a sub-group, a store host that stops answering, DDP on a bfloat16
// model, a teardown without a group. Each was undefined behaviour, a wrong
// answer, a hang past the timeout, a refusal where PyTorch works or silence.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "tests/dist_test_util.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::dist;
using namespace minidl::testing;
using namespace std::chrono_literals;

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

TEST_CASE("destroy_process_group without init_process_group raises instead of doing nothing") {
  // Was a silent no-op; PyTorch raises (a teardown without a group is a mistake to see).
  REQUIRE(!is_initialized());
  CHECK_THROWS_CONTAINS(destroy_process_group(), "destroy_process_group: Default process group has not been "
                                                 "initialized, please make sure to call init_process_group.");
  CHECK(!is_initialized());
}

TEST_CASE("all_reduce of int64 wraps around on overflow, as PyTorch's, with every algorithm") {
  // The reduce loops added in int64_t: signed overflow (UBSan: "signed integer
  // overflow" in gloo_all_reduce.cpp). PyTorch's Gloo gives the wrapped value.
  const std::string failures = run_ranks(2, [](int rank, int) {
    for (const char* algo : {"exchange", "ring", "rsag"}) {
      setenv("MINIDL_GLOO_ALLREDUCE", algo, 1);
      Tensor s = tensor(std::vector<int64_t>{INT64_MAX, INT64_MIN, rank == 0 ? INT64_MAX : 1}, {3});
      all_reduce(s, ReduceOp::SUM);
      const auto sum = s.to_vector<int64_t>();
      DIST_REQUIRE(sum[0] == -2 && sum[1] == 0 && sum[2] == INT64_MIN, << algo << " SUM");
      Tensor p = tensor(std::vector<int64_t>{INT64_MAX, int64_t(1) << 62}, {2});
      all_reduce(p, ReduceOp::PRODUCT);
      const auto prod = p.to_vector<int64_t>();
      DIST_REQUIRE(prod[0] == 1 && prod[1] == 0, << algo << " PRODUCT");
      std::vector<Tensor> ins{tensor(std::vector<int64_t>{INT64_MAX}, {1}), tensor(std::vector<int64_t>{INT64_MAX}, {1})};
      Tensor out = zeros({1}, kInt64);
      default_group()->reduce_scatter(out, ins, ReduceOp::SUM)->wait();
      DIST_REQUIRE(out.to_vector<int64_t>()[0] == -2, << algo << " reduce_scatter");
    }
    unsetenv("MINIDL_GLOO_ALLREDUCE");
  });
  CHECK_MESSAGE(failures.empty(), failures);
}

TEST_CASE("new_group: ranks in any order give PyTorch's sorted group ranks; broadcast's src is a global rank") {
  // The group ranks followed each caller's list: ranks listing {1, 2} and
  // {2, 1} both became group rank 0 and the rendezvous timed out. And src
  // was taken as a group rank: broadcast(t, 2, g) on g = {1, 2} sent from
  // group rank 2 (refused) where PyTorch sends from global rank 2.
  const std::string failures = run_ranks(
      3,
      [](int rank, int) {
        const std::vector<int> ranks = rank == 1 ? std::vector<int>{1, 2} : std::vector<int>{2, 1};
        auto g = new_group(ranks, 10s);
        auto whole = new_group({}, 10s);  // every rank, in order
        DIST_REQUIRE(whole && whole->rank() == rank);
        if (rank == 0) {
          DIST_REQUIRE(is_non_group_member(g) && get_rank(g) == -1);
        } else {
          DIST_REQUIRE(g && g->size() == 2 && g->rank() == rank - 1 && get_rank(g) == rank - 1);
          Tensor t = full({3}, static_cast<double>(rank));
          broadcast(t, 2, g);
          DIST_REQUIRE(t.min().item<double>() == 2.0 && t.max().item<double>() == 2.0);
          t.fill_(static_cast<double>(rank));
          broadcast(t, 1, g);
          DIST_REQUIRE(t.min().item<double>() == 1.0 && t.max().item<double>() == 1.0);
          DIST_REQUIRE_THROWS_CONTAINS(broadcast(t, 0, g), "Global rank 0 is not part of group");
          // The group's own broadcast takes the group rank.
          t.fill_(static_cast<double>(rank));
          g->broadcast(t, 0)->wait();
          DIST_REQUIRE(t.min().item<double>() == 1.0);
        }
        Tensor u = full({2}, static_cast<double>(rank));
        broadcast(u, 2, whole);
        DIST_REQUIRE(u.min().item<double>() == 2.0);
        barrier();
      },
      60s, /*init=*/true, 10000ms);
  CHECK_MESSAGE(failures.empty(), failures);
}

TEST_CASE("TCPStore: a store that never answers fails the round trip within the timeout") {
  // A listener that never accepts: the kernel completes the handshake, no
  // reply ever comes. The client blocked in recv() forever.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::listen(fd, 8) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const int port = ntohs(addr.sin_port);
  const std::string failures = run_ranks(
      1,
      [port](int, int) {
        TCPStore store("127.0.0.1", port, /*is_master=*/false, 500ms);
        const auto t0 = Clock::now();
        DIST_REQUIRE_THROWS_CONTAINS(store.get("key"), "TCPStore::get('key'): no reply from the store at 127.0.0.1");
        DIST_REQUIRE(seconds_since(t0) < 5.0, << "took " << seconds_since(t0) << " s");
        // The connection is out of step (a late reply would answer the next request).
        DIST_REQUIRE_THROWS_CONTAINS(store.set("k", "v"), "was lost earlier");
      },
      20s, /*init=*/false);
  ::close(fd);
  CHECK_MESSAGE(failures.empty(), failures);
}

TEST_CASE("a collective fails within its timeout's bound when rank 0, the store host, is stopped") {
  // Gloo's collective timed out, then the failure message asked the store
  // (on the stopped rank 0) which ranks never arrived: rank 1 hung forever.
  int port;
  {
    TCPStore probe("127.0.0.1", 0, true, 1s);
    port = probe.port();
  }
  const std::string failures = run_ranks(
      2,
      [port](int rank, int) {
        init_process_group("gloo", "tcp://127.0.0.1:" + std::to_string(port), 2, rank, 1000ms);
        if (rank == 0) default_store()->set("pid0", std::to_string(getpid()));
        const pid_t pid0 = static_cast<pid_t>(std::stol(default_store()->get("pid0")));
        barrier();
        if (rank == 0) {
          ::raise(SIGSTOP);  // rank 1 resumes us once it has its error
          _exit(0);          // the group is broken; skip its teardown
        }
        Tensor t = ones({4});
        const auto t0 = Clock::now();
        DIST_REQUIRE_THROWS_CONTAINS(all_reduce(t), "all_reduce(SUM) (collective #1 of this group) failed on rank 1");
        const double took = seconds_since(t0);
        ::kill(pid0, SIGCONT);
        DIST_REQUIRE(took < 10.0, << "took " << took << " s");
        destroy_process_group();
      },
      60s, /*init=*/false);
  CHECK_MESSAGE(failures.empty(), failures);
}

TEST_CASE("float16 and bfloat16 all-reduce through float32, so DDP trains a bfloat16 model over Gloo") {
  // Refused before ("expected a float32, float64 or int64 tensor, got bfloat16"),
  // DDP's gradient buckets included; PyTorch's Gloo reduces both.
  const std::string failures = run_ranks(2, [](int rank, int) {
    for (const DType d : {kFloat16, kBFloat16}) {
      Tensor t = full({3}, 1.5 + rank, d);
      all_reduce(t, ReduceOp::SUM);
      DIST_REQUIRE(t.dtype() == d && t.to_vector<float>() == std::vector<float>(3, 4.0f), << dtype_name(d));
      all_reduce(t, ReduceOp::AVG);
      DIST_REQUIRE(t.to_vector<float>() == std::vector<float>(3, 4.0f), << dtype_name(d) << " AVG");
    }
    manual_seed(7);
    nn::Linear net(4, 2);
    net->to(kBFloat16);
    nn::Linear ref(4, 2);  // the same weights in float32, both ranks' inputs
    ref->weight.detach().copy_(net->weight.detach().to(kFloat32));
    ref->bias.detach().copy_(net->bias.detach().to(kFloat32));
    const Tensor xs = randn({2, 3, 4}).to(kBFloat16);
    dist::DistributedDataParallel ddp(net);
    ddp(xs.select(0, rank)).sum().backward();
    (ref->forward(xs.to(kFloat32).reshape({6, 4})).sum() * 0.5).backward();
    DIST_REQUIRE(allclose(net->weight.grad().to(kFloat32), ref->weight.grad(), 1e-2, 1e-2), << "weight grad");
    DIST_REQUIRE(allclose(net->bias.grad().to(kFloat32), ref->bias.grad(), 1e-2, 1e-2), << "bias grad");
  });
  CHECK_MESSAGE(failures.empty(), failures);
}
