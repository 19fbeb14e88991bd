// The kernel registry (core/dispatch.h): every DispatchStub of the library has
// a unique op name, a CPU kernel and the test device's mirror of it, and a call
// through a stub checks that its tensors are on the stub's device.
#include <set>
#include <string>

#include "minidl/core/dispatch.h"
#include "minidl/ops/binary.h"
#include "minidl/ops/norm_core.h"
#include "tests/test_util.h"

using namespace minidl;

namespace {

// The message of the minidl::Error that f throws ("" if none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("every stub has a unique name, a CPU kernel and a test-device kernel") {
  ensure_kernels_registered();
  const std::vector<DispatchStubBase*>& stubs = dispatch_stubs();
  CHECK(stubs.size() >= 35);
  std::set<std::string> names;
  for (const DispatchStubBase* stub : stubs) {
    const std::string name = stub->op() != nullptr ? stub->op() : "";
    CAPTURE(name);
    CHECK_FALSE(name.empty());
    CHECK_MESSAGE(names.insert(name).second, "two stubs share the op name ", name);
    CHECK(stub->has_kernel(DeviceType::CPU));
    CHECK(stub->has_kernel(DeviceType::Test));
  }
}

TEST_CASE("a call through a stub with a tensor on another device names the op") {
  const Tensor a = ones({2, 3}), b = ones({2, 3}), out = empty({2, 3});
  const std::string msg =
      error_of([&] { binary_stub(Device("test"))(BinaryOp::Add, 1.0, out, a, b); });
  CAPTURE(msg);
  CHECK(msg.find(binary_stub.op()) != std::string::npos);
  CHECK(msg.find("same device") != std::string::npos);
  CHECK(msg.find("test:0") != std::string::npos);
  CHECK(msg.find("cpu") != std::string::npos);

  // On its own device the same call runs.
  CHECK_NOTHROW(binary_stub(kCPU)(BinaryOp::Add, 1.0, out, a, b));
  CHECK(out.to_vector<float>() == std::vector<float>(6, 2.0f));
}

TEST_CASE("the device check sees the tensors inside an argument struct") {
  norm::NormForwardArgs args;
  args.input = ones({2, 3});  // on the CPU
  args.geo = {1, 2, 1, 3, 1};
  const std::string msg = error_of([&] { norm::norm_forward_stub(Device("test"))(args); });
  CAPTURE(msg);
  CHECK(msg.find(norm::norm_forward_stub.op()) != std::string::npos);
  CHECK(msg.find("same device") != std::string::npos);
}
