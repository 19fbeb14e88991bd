// Checked collectives (dist/collective_check.h, MINIDL_DISTRIBUTED_DEBUG=
// DETAIL): a collective that differs between ranks (size, dtype, operation,
// reduce op, root) is an error on every rank, naming both fingerprints,
// before anything is sent (unchecked, Gloo aborts the receiving rank); the
// group stays usable and matching collectives give the usual results; the
// store keys of old collectives are removed. Unchecked, the rank Gloo
// aborts says what most likely happened and how to find it.
#include <csignal>
#include <cstdlib>

#include "tests/dist_test_util.h"
#include "tests/test_util.h"

#include "minidl/dist/collective_check.h"
#include "minidl/dist/distributed.h"

using namespace minidl;
using namespace minidl::dist;

namespace {

// Sets an environment variable for the scope (before run_ranks forks).
class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~EnvGuard() { unsetenv(name_); }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

 private:
  const char* name_;
};

}  // namespace

TEST_CASE("collective checks are on with MINIDL_DISTRIBUTED_DEBUG or TORCH_DISTRIBUTED_DEBUG = DETAIL only") {
  unsetenv("MINIDL_DISTRIBUTED_DEBUG");
  unsetenv("TORCH_DISTRIBUTED_DEBUG");
  CHECK_FALSE(collective_checks_enabled());
  {
    EnvGuard on("MINIDL_DISTRIBUTED_DEBUG", "DETAIL");
    CHECK(collective_checks_enabled());
  }
  {
    EnvGuard on("TORCH_DISTRIBUTED_DEBUG", "DETAIL");
    CHECK(collective_checks_enabled());
  }
  EnvGuard info("MINIDL_DISTRIBUTED_DEBUG", "INFO");
  CHECK_FALSE(collective_checks_enabled());
}

TEST_CASE("DETAIL: mismatched collectives fail on every rank with both fingerprints; the group stays usable") {
  EnvGuard on("MINIDL_DISTRIBUTED_DEBUG", "DETAIL");
  const std::string failures = testing::run_ranks(2, [](int rank, int) {
    const char* kMismatch = "Detected mismatch between collectives on ranks";
    // Sizes: rank 0 has 3 elements, rank 1 has 4 (Gloo alone aborts rank 0 here).
    Tensor t = ones({rank == 0 ? 3 : 4});
    DIST_REQUIRE_THROWS_CONTAINS(all_reduce(t), kMismatch);
    std::string m;
    try {
      Tensor u = ones({rank == 0 ? 3 : 4});
      all_reduce(u);
    } catch (const std::exception& e) {
      m = e.what();
    }
    DIST_REQUIRE(m.find("TensorShape=[[3]]") != std::string::npos && m.find("TensorShape=[[4]]") != std::string::npos,
                 << "both shapes named: '" << m << "'");
    DIST_REQUIRE(m.find("OpType=ALLREDUCE(SUM)") != std::string::npos, << m);
    // dtype, reduce op, operation, root.
    Tensor d = ones({2}, rank == 0 ? kFloat32 : kFloat64);
    DIST_REQUIRE_THROWS_CONTAINS(all_reduce(d), "TensorDtypes=[float64]");
    Tensor s = ones({2});
    DIST_REQUIRE_THROWS_CONTAINS(all_reduce(s, rank == 0 ? ReduceOp::SUM : ReduceOp::MAX), "ALLREDUCE(MAX)");
    if (rank == 0) {
      DIST_REQUIRE_THROWS_CONTAINS(all_reduce(s), "OpType=BROADCAST(root=0)");
    } else {
      DIST_REQUIRE_THROWS_CONTAINS(broadcast(s, 0), "OpType=ALLREDUCE(SUM)");
    }
    Tensor b = ones({2});
    DIST_REQUIRE_THROWS_CONTAINS(broadcast(b, rank), "BROADCAST(root=1)");
    // Matching collectives after the errors (and past the key clean-up) work as usual.
    for (int i = 0; i < 5; ++i) {
      Tensor x = full({3}, static_cast<double>(rank + i));
      all_reduce(x);
      DIST_REQUIRE(x.to_vector<float>() == std::vector<float>(3, static_cast<float>(1 + 2 * i)));
    }
    std::vector<Tensor> outs{zeros({2}), zeros({2})};
    all_gather(outs, full({2}, static_cast<double>(rank)));
    DIST_REQUIRE(outs[1].to_vector<float>() == std::vector<float>(2, 1.0f));
    barrier();
  });
  CHECK_MESSAGE(failures.empty(), failures);
}

TEST_CASE("DETAIL: keys of finished collectives leave the store") {
  EnvGuard on("MINIDL_DISTRIBUTED_DEBUG", "DETAIL");
  const std::string failures = testing::run_ranks(2, [](int rank, int) {
    for (int i = 0; i < 20; ++i) {
      Tensor x = ones({4});
      all_reduce(x);
    }
    barrier();
    // Each rank keeps at most its last two fingerprints (plus the barrier's).
    auto store = std::make_shared<PrefixStore>("default_pg/collective_check", default_store());
    int64_t left = 0;
    for (int n = 0; n < 21; ++n)
      for (int r = 0; r < 2; ++r) left += store->check({std::to_string(n) + "/" + std::to_string(r)}) ? 1 : 0;
    DIST_REQUIRE(left <= 6, << left << " fingerprints left for rank " << rank);
  });
  CHECK_MESSAGE(failures.empty(), failures);
}

TEST_CASE("unchecked: the rank that Gloo aborts on a size mismatch says why and points at DETAIL") {
  unsetenv("MINIDL_DISTRIBUTED_DEBUG");
  unsetenv("TORCH_DISTRIBUTED_DEBUG");
  std::string failures;
  const std::string text = testing::capture_stderr([&] {
    failures = testing::run_ranks(
        2,
        [](int rank, int) {
          std::signal(SIGABRT, SIG_DFL);  // not doctest's crash report, inherited through fork
          Tensor t = ones({rank == 0 ? 3 : 4});
          try {
            all_reduce(t);
          } catch (const std::exception&) {  // the surviving rank may see the peer vanish
          }
        },
        std::chrono::seconds(60), true, Milliseconds(5000));
  });
  CHECK_MESSAGE(failures.find("killed by signal 6") != std::string::npos, failures);
  CHECK_MESSAGE(text.find("the ranks most likely ran different collectives") != std::string::npos, text);
  CHECK(text.find("MINIDL_DISTRIBUTED_DEBUG=DETAIL") != std::string::npos);
}
