// ProcessGroupNCCL's host-side rules (see nccl_checks.h).
#include "minidl/dist/nccl_host/nccl_checks.h"

#include <vector>

#include "minidl/core/check.h"
#include "minidl/core/dtype.h"

namespace minidl::dist::nccl {

std::string unavailable_in_cpu_build_message() {
  return "init_process_group: the nccl backend needs a CUDA build of minidl: configure with -DMINIDL_CUDA=ON; "
         "use backend gloo on CPU";
}

bool is_supported_dtype(DType d) {
  return d == kFloat32 || d == kFloat64 || d == DType::Float16 || d == DType::BFloat16 || d == kInt64;
}

void check_tensor(const char* op, const Tensor& t, Device device, const char* what) {
  MINIDL_CHECK(t.defined(), op, ": the ", what, " is undefined");
  MINIDL_CHECK(t.device() == device, op, ": ProcessGroupNCCL works on tensors of its device ", device.str(),
               " but the ", what, " is on ", t.device().str(), " (use backend gloo for CPU tensors)");
  MINIDL_CHECK(t.is_contiguous(), op, ": Tensors must be contiguous (the ", what, " is not)");
  MINIDL_CHECK(is_supported_dtype(t.dtype()), op, ": ProcessGroupNCCL expects a float32, float64, float16, ",
               "bfloat16 or int64 ", what, ", got ", dtype_name(t.dtype()));
}

void check_reduce_op(const char* op, ReduceOp reduce_op, DType dtype) {
  MINIDL_CHECK(reduce_op != ReduceOp::AVG || dtype != kInt64, op,
               ": ReduceOp.AVG needs a floating-point tensor, got ", dtype_name(dtype));
}

int pick_device(const std::optional<std::string>& local_rank_env, int rank, int device_count) {
  MINIDL_CHECK(device_count > 0, "ProcessGroupNCCL: no CUDA device is visible to rank ", rank,
               "; use backend gloo on CPU");
  if (!local_rank_env) return rank % device_count;
  int local_rank = -1;
  try {
    size_t used = 0;
    local_rank = std::stoi(*local_rank_env, &used);
    if (used != local_rank_env->size()) local_rank = -1;
  } catch (const std::exception&) {
  }
  MINIDL_CHECK(local_rank >= 0, "ProcessGroupNCCL: LOCAL_RANK must be a non-negative integer, got '",
               *local_rank_env, "'");
  MINIDL_CHECK(local_rank < device_count, "ProcessGroupNCCL: LOCAL_RANK ", local_rank, " picks cuda:", local_rank,
               " but only ", device_count, " CUDA device", device_count == 1 ? " is" : "s are",
               " visible: NCCL needs one GPU per process, so start at most ", device_count,
               " processes per node (minidl-launch --nproc-per-node ", device_count,
               "), or use backend gloo, which lets several processes share one GPU");
  return local_rank;
}

void check_one_device_per_rank(Store& store, int rank, int size, const std::string& device_identity,
                               const std::string& device_name, Milliseconds timeout) {
  auto key = [](int r) { return "nccl_device/" + std::to_string(r); };
  store.set(key(rank), device_identity);
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(key(r));
  try {
    store.wait(keys, timeout);
  } catch (const std::exception& e) {
    MINIDL_FAIL("ProcessGroupNCCL: rank ", rank, " timed out waiting for the other ranks to name their CUDA ",
                "devices: ", e.what());
  }
  for (int r = 0; r < size; ++r) {
    if (r == rank || store.get(key(r)) != device_identity) continue;
    const int a = std::min(r, rank), b = std::max(r, rank);
    MINIDL_FAIL("ProcessGroupNCCL: rank ", b, " and rank ", a, " both use CUDA device ", device_name, " (",
                device_identity, "). NCCL needs one GPU per rank (it refuses two ranks of a communicator on ",
                "one GPU: 'Duplicate GPU detected'). Run one process per GPU (minidl-launch --nproc-per-node ",
                "<number of GPUs>; LOCAL_RANK picks each process's device), or use backend gloo, which stages ",
                "CUDA tensors through host memory so several ranks can share one GPU");
  }
}

std::string unique_id_key(int device_index) { return "nccl_unique_id/cuda:" + std::to_string(device_index); }

std::string exchange_unique_id(Store& store, int rank, int device_index, const std::function<std::string()>& make_id,
                               Milliseconds timeout) {
  const std::string key = unique_id_key(device_index);
  if (rank == 0) {
    std::string id = make_id();
    store.set(key, id);
    return id;
  }
  try {
    store.wait({key}, timeout);
  } catch (const std::exception& e) {
    MINIDL_FAIL("ProcessGroupNCCL: rank ", rank, " timed out waiting for rank 0's NCCL unique id (store key '",
                key, "'): is rank 0 running and using the nccl backend? ", e.what());
  }
  return store.get(key);
}

}  // namespace minidl::dist::nccl
