// CUDA builds only (tests/CMakeLists.txt adds it under MINIDL_CUDA): every
// kernel table (DispatchStub) with a CPU kernel has a CUDA kernel, or is on
// the skip list below with the reason. Registration touches no device, so
// this runs without a GPU. A skip entry whose op got a CUDA kernel fails the
// test (delete the entry), except entries another branch fills (kOtherBranch),
// and an entry naming no stub fails too (a renamed op).
#include <map>
#include <set>
#include <string>

#include "minidl/core/dispatch.h"
#include "tests/test_util.h"

using namespace minidl;

namespace {

// kNotYet: a kernel nobody has written yet (none today); kOtherBranch: another
// branch of issue 13 registers it, so its kernel may already be there.
enum class Owner { kOtherBranch, kNotYet };

struct Skip {
  Owner owner;
  const char* reason;
};

// op name (DispatchStub's) -> why it has no CUDA kernel here.
const std::map<std::string, Skip>& skip_list() {
  static const std::map<std::string, Skip> skips = {
      {"copy_", {Owner::kOtherBranch, "the CUDA copy kernel (all directions, dtype conversion) is the runtime branch's"}},
      {"fill_", {Owner::kOtherBranch, "fill_ on CUDA is the runtime branch's, beside copy_"}},
      {"matmul", {Owner::kOtherBranch, "cuBLAS(Lt) GEMM, the cuBLAS branch"}},
      {"linear", {Owner::kOtherBranch, "cuBLAS(Lt) GEMM, the cuBLAS branch"}},
      {"linear_backward", {Owner::kOtherBranch, "cuBLAS(Lt) GEMM, the cuBLAS branch"}},
      {"conv2d", {Owner::kOtherBranch, "cuDNN, the cuDNN branch"}},
      {"conv2d_backward", {Owner::kOtherBranch, "cuDNN, the cuDNN branch"}},
      {"conv3d", {Owner::kOtherBranch, "cuDNN, the cuDNN branch"}},
      {"conv3d_backward", {Owner::kOtherBranch, "cuDNN, the cuDNN branch"}},
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
      CHECK_MESSAGE((skip == skip_list().end() || skip->second.owner == Owner::kOtherBranch),
                    "op ", name, " has a CUDA kernel now: delete its skip entry");
    } else {
      CHECK_MESSAGE(skip != skip_list().end(), "op ", name,
                    " has a CPU kernel but no CUDA kernel: write one or add a skip entry with the reason");
    }
  }
  // The kernels this suite was written against (ops/cuda/register.cu).
  CHECK(with_cuda >= 47);
  for (const auto& [name, skip] : skip_list()) {
    CAPTURE(name);
    CHECK_MESSAGE(names.count(name) == 1, "skip entry ", name, " names no stub (renamed?)");
    CHECK(std::string(skip.reason).size() > 10);
  }
}
