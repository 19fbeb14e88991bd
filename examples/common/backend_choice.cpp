// See backend_choice.h.
#include "examples/common/backend_choice.h"

#include <cstdlib>

#include "minidl/core/check.h"
#include "minidl/core/cuda.h"

namespace minidl::examples {

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

// Two local ranks on one GPU: more ranks than GPUs, or every rank told the same cuda:N.
bool ranks_share_a_gpu(const std::string& device_spec, const BackendFacts& f) {
  return f.local_world_size > 1 &&
         (f.local_world_size > f.cuda_devices || device_spec.find(':') != std::string::npos);
}

std::string sharing(Device device, const std::string& device_spec, const BackendFacts& f) {
  const std::string gpus = std::to_string(f.cuda_devices) + " CUDA device" + (f.cuda_devices == 1 ? "" : "s");
  if (device_spec.find(':') != std::string::npos)
    return std::to_string(f.local_world_size) + " processes on this node all use " + device.str() + " (--device " +
           device_spec + ")";
  return std::to_string(f.local_world_size) + " processes on this node share " + gpus;
}

// " (a; b)" from the non-empty parts, or "".
std::string note(const std::string& a, const std::string& b) {
  if (a.empty() && b.empty()) return "";
  if (a.empty() || b.empty()) return " (" + a + b + ")";
  return " (" + a + (a == "auto" ? ": " : "; ") + b + ")";
}

}  // namespace

BackendFacts backend_facts() {
  BackendFacts f;
  f.nccl_built = cuda::is_built();
  f.cuda_devices = cuda::is_available() ? cuda::device_count() : 0;
  f.local_world_size = env_int("LOCAL_WORLD_SIZE", env_int("WORLD_SIZE", 1));
  f.local_rank = env_int("LOCAL_RANK", 0);
  return f;
}

ChosenBackend choose_backend(const std::string& spec, bool distributed, Device device, const std::string& device_spec,
                             const BackendFacts& facts) {
  MINIDL_CHECK(spec == "auto" || spec == "gloo" || spec == "nccl", "--backend: expected auto, gloo or nccl, got '",
               spec, "'");
  const std::string one_process = distributed ? "" : "unused: one process, no process group";
  if (spec == "gloo") return {"gloo", note(device.is_cuda() ? "CUDA tensors staged through host memory" : "", one_process)};
  if (spec == "nccl") {
    MINIDL_CHECK(facts.nccl_built, "--backend nccl: this build of minidl has no NCCL: configure with -DMINIDL_CUDA=ON ",
                 "(make build-cuda) on a machine with CUDA and NCCL, or use --backend gloo");
    MINIDL_CHECK(device.is_cuda(), "--backend nccl: NCCL communicates CUDA tensors only, and this run trains on ",
                 device.str(), "; use --device cuda (one GPU per process), or --backend gloo");
    MINIDL_CHECK(!distributed || !ranks_share_a_gpu(device_spec, facts), "--backend nccl: ",
                 sharing(device, device_spec, facts),
                 ", and NCCL refuses two ranks on one GPU ('Duplicate GPU detected'); use --backend gloo, which "
                 "stages CUDA tensors through host memory so ranks can share a GPU, or start one process per GPU "
                 "(minidl-launch --nproc-per-node ", facts.cuda_devices, " with --device cuda)");
    MINIDL_CHECK(!distributed || device.index == facts.local_rank, "--backend nccl: NCCL drives cuda:",
                 facts.local_rank, " in this process (LOCAL_RANK ", facts.local_rank, "), but --device ", device_spec,
                 " puts the model on ", device.str(), "; use --device cuda (cuda:LOCAL_RANK), or --backend gloo");
    return {"nccl", note("", one_process)};
  }
  // auto
  if (!distributed) return {"gloo", note("auto", one_process)};
  if (!device.is_cuda()) return {"gloo", " (auto: " + device.str() + " tensors)"};
  if (!facts.nccl_built) return {"gloo", " (auto: this build has no NCCL; CUDA tensors staged through host memory)"};
  if (ranks_share_a_gpu(device_spec, facts))
    return {"gloo", " (auto: " + sharing(device, device_spec, facts) +
                        ", which NCCL refuses; CUDA tensors staged through host memory)"};
  if (device.index != facts.local_rank)
    return {"gloo", " (auto: NCCL would drive cuda:" + std::to_string(facts.local_rank) + " (LOCAL_RANK), not " +
                        device.str() + "; CUDA tensors staged through host memory)"};
  return {"nccl", " (auto: a distributed run on CUDA devices, one GPU per process)"};
}

}  // namespace minidl::examples
