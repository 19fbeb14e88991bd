// make_process_group_nccl: the host logic (ProcessGroupNCCL) wired to the
// real NCCL communicator and CUDA device. Run on an H100 at world size 1 (tests/test_cuda_nccl, 2026-11-26).
#include "minidl/dist/nccl/make_process_group_nccl.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <optional>

#include "minidl/core/cuda.h"
#include "minidl/core/cuda/runtime.h"
#include "minidl/dist/nccl/nccl_communicator.h"
#include "minidl/dist/nccl_host/nccl_checks.h"
#include "minidl/dist/nccl_host/process_group_nccl.h"

namespace minidl::dist {

namespace {

// One string per physical GPU: NCCL's own duplicate test compares bus ids
// of one host, and CUDA_VISIBLE_DEVICES may give two processes different
// indices for the same GPU.
std::string device_identity(int device) {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "unknown-host");
  char bus[64] = {};
  MINIDL_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), device));
  return std::string(host) + "/" + bus;
}

}  // namespace

ProcessGroupPtr make_process_group_nccl(std::shared_ptr<Store> store, int rank, int size, Milliseconds timeout) {
  MINIDL_CHECK(cuda::is_available(), "init_process_group: the nccl backend needs a CUDA device, and none is usable (",
               cuda::unavailable_reason(), "); use backend gloo on CPU");
  const char* local_rank = std::getenv("LOCAL_RANK");
  const int device = nccl::pick_device(local_rank && *local_rank ? std::optional<std::string>(local_rank)
                                                                 : std::nullopt,
                                       rank, cuda::device_count());
  cuda::set_device(device);  // this thread's current device, as torchrun users do
  NcclBackend backend;
  backend.device = Device(DeviceType::CUDA, device);
  backend.device_identity = device_identity(device);
  backend.make_unique_id = [] {
    ncclUniqueId id;
    nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    return encode_unique_id(id);
  };
  backend.make_communicator = [device](const std::string& id, int r, int n, Milliseconds t) -> CommunicatorPtr {
    return std::make_unique<NcclCommunicator>(id, r, n, device, t);
  };
  return std::make_shared<ProcessGroupNCCL>(std::move(store), rank, size, timeout, std::move(backend));
}

}  // namespace minidl::dist
