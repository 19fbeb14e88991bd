// The real ProcessGroupNCCL (CUDA builds only): the host logic of
// dist/nccl_host/process_group_nccl.h over NCCL and the CUDA runtime
// (dist/nccl/nccl_communicator.cpp). Run on an H100 at world size 1 (tests/test_cuda_nccl, 2026-11-26).
#pragma once

#include <memory>

#include "minidl/dist/process_group.h"
#include "minidl/dist/store.h"

namespace minidl::dist {

// One NCCL group for `rank` of `size` on the device LOCAL_RANK picks (else
// rank % device_count; see nccl::pick_device), which becomes this thread's
// current device. The communicator is made lazily on the first collective.
ProcessGroupPtr make_process_group_nccl(std::shared_ptr<Store> store, int rank, int size, Milliseconds timeout);

}  // namespace minidl::dist
