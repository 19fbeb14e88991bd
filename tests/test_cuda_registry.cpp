// CUDA builds only (tests/CMakeLists.txt adds it under MINIDL_CUDA): every
// kernel table (DispatchStub) with a CPU kernel has a CUDA kernel, or is on
// the skip list below with the reason. Registration touches no device, so
// this runs without a GPU. A skip entry whose op got a CUDA kernel fails the
// test (delete the entry), and an entry naming no stub fails too (a renamed op).
// The second case: every op with a CUDA kernel has a cross-backend test
// (tests/cuda_ops_coverage.h, the table tests/test_cuda_ops.cpp checks too,
// where it runs only on a GPU).
#include <map>
#include <set>
#include <string>

#include "minidl/core/dispatch.h"
#include "tests/cuda_ops_coverage.h"
#include "tests/test_util.h"

using namespace minidl;

namespace {

// op name (DispatchStub's) -> why it has no CUDA kernel. Empty: every op with
// a CPU kernel has a CUDA one. An entry is a promise with a reason, e.g.
//   {"some_op", "CPU-only by design: reads host files"},
const std::map<std::string, const char*>& skip_list() {
  static const std::map<std::string, const char*> skips = {
      {"cross_entropy_probs", "CUDA runs the composed log_softmax * target sum (ops/loss.cpp's fallback)"},
      {"cross_entropy_probs_backward", "CUDA runs the composed log_softmax * target sum (autograd's backward)"},
  };
  return skips;
}

}  // namespace

TEST_CASE("every op with a CPU kernel has a CUDA kernel or a reasoned skip entry") {
  ensure_kernels_registered();
  std::set<std::string> names;
  int with_cuda = 0;
  for (const DispatchStubBase* stub : dispatch_stubs()) {
    const std::string name = stub->op();
    names.insert(name);
    CAPTURE(name);
    if (!stub->has_kernel(DeviceType::CPU)) continue;
    const auto skip = skip_list().find(name);
    if (stub->has_kernel(DeviceType::CUDA)) {
      ++with_cuda;
      CHECK_MESSAGE(skip == skip_list().end(), "op ", name, " has a CUDA kernel now: delete its skip entry");
    } else {
      CHECK_MESSAGE(skip != skip_list().end(), "op ", name,
                    " has a CPU kernel but no CUDA kernel: write one or add a skip entry with the reason");
    }
  }
  // The kernels this suite was written against (ops/cuda/register.cu).
  CHECK(with_cuda >= 56);
  for (const auto& [name, skip] : skip_list()) {
    CAPTURE(name);
    CHECK_MESSAGE(names.count(name) == 1, "skip entry ", name, " names no stub (renamed?)");
    CHECK(std::string(skip).size() > 10);
  }
}

TEST_CASE("every op with a CUDA kernel is covered by a cross-backend GPU test (tests/cuda_ops_coverage.h)") {
  int covered = 0;
  for (const std::string& problem : minidl::testing::cuda_ops_coverage_problems(&covered)) FAIL_CHECK(problem);
  CHECK(covered >= 60);  // every entry of the table today; fewer means the registry lost kernels
}
