// ProcessGroupNCCL's host-side rules, in every build (no CUDA, no NCCL):
// which tensors and ops NCCL takes, which device a rank uses, the one-GPU-
// per-rank rule, and how the ncclUniqueId travels through the Store. Unit-
// tested on the CPU (tests/test_nccl_logic.cpp).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "minidl/core/tensor.h"
#include "minidl/dist/process_group.h"
#include "minidl/dist/store.h"

namespace minidl::dist::nccl {

// "init_process_group: the nccl backend needs a CUDA build ..." (a CPU build
// asked for "nccl").
std::string unavailable_in_cpu_build_message();

// A tensor a collective `op` may hand to NCCL: defined, contiguous, on the
// group's `device`, of a dtype ProcessGroupNCCL supports (float32, float64,
// float16, bfloat16, int64).
void check_tensor(const char* op, const Tensor& t, Device device, const char* what = "tensor");
bool is_supported_dtype(DType dtype);
// AVG needs a floating-point dtype (as the Gloo backend).
void check_reduce_op(const char* op, ReduceOp reduce_op, DType dtype);

// The CUDA device this rank drives: LOCAL_RANK (minidl-launch and torchrun
// set it) when given, else rank % device_count (PyTorch's guess). Throws
// when there is no device or LOCAL_RANK names one that does not exist.
int pick_device(const std::optional<std::string>& local_rank_env, int rank, int device_count);

// NCCL refuses two ranks of one communicator on one GPU ("Duplicate GPU
// detected"). Each rank publishes `device_identity` (host name + PCI bus id
// in the real backend) under "nccl_device/<rank>" and reads the others'
// (store timeout); two ranks with the same identity get an error that says
// why and what to do. `device_name` ("cuda:0") is for the message.
void check_one_device_per_rank(Store& store, int rank, int size, const std::string& device_identity,
                               const std::string& device_name, Milliseconds timeout);

// The store key of the group's ncclUniqueId for `device_index` (the store is
// already the group's PrefixStore, so keys differ between groups).
std::string unique_id_key(int device_index);

// Rank 0 makes the id (make_id, ncclGetUniqueId) and sets it; the others get
// it, waiting up to `timeout`; a timeout says which rank waited for what.
std::string exchange_unique_id(Store& store, int rank, int device_index, const std::function<std::string()>& make_id,
                               Milliseconds timeout);

}  // namespace minidl::dist::nccl
