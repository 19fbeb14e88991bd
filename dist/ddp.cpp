// DistributedDataParallel: construction checks, the rank-0 broadcast of the
// model state, bucket layout, and the per-forward steps (see ddp.h). The
// gradient all-reduces live in reducer.cpp.
#include "minidl/dist/ddp.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/dist/distributed.h"

namespace minidl::dist {
namespace {

// PyTorch's _DEFAULT_BUCKET_CAP_MB and broadcast_bucket_size.
constexpr double kDefaultBucketCapMb = 25.0;
constexpr int64_t kBroadcastBucketBytes = 250LL * 1024 * 1024;

// ---- the model signature that verify_params_across_processes compares ----
struct TensorSig {
  std::string name;
  int64_t dtype = 0;
  int64_t requires_grad = 0;
  Shape shape;
};
struct ModelSig {
  std::vector<TensorSig> params, buffers;
};

void encode(const nn::NamedTensors& tensors, std::vector<int64_t>& out) {
  for (const auto& [name, t] : tensors) {
    out.push_back(static_cast<int64_t>(t.dtype()));
    out.push_back(t.requires_grad() ? 1 : 0);
    out.push_back(t.dim());
    out.insert(out.end(), t.shape().begin(), t.shape().end());
    out.push_back(static_cast<int64_t>(name.size()));
    for (char c : name) out.push_back(static_cast<unsigned char>(c));
  }
}

ModelSig decode(const std::vector<int64_t>& v) {
  ModelSig sig;
  size_t pos = 0;
  auto next = [&] {
    MINIDL_ASSERT(pos < v.size(), "truncated model signature");
    return v[pos++];
  };
  const int64_t num_params = next(), num_buffers = next();
  auto read = [&](int64_t count, std::vector<TensorSig>& list) {
    for (int64_t k = 0; k < count; ++k) {
      TensorSig t;
      t.dtype = next();
      t.requires_grad = next();
      const int64_t ndim = next();
      for (int64_t d = 0; d < ndim; ++d) t.shape.push_back(next());
      const int64_t len = next();
      for (int64_t c = 0; c < len; ++c) t.name.push_back(static_cast<char>(next()));
      list.push_back(std::move(t));
    }
  };
  read(num_params, sig.params);
  read(num_buffers, sig.buffers);
  return sig;
}

std::string describe(const TensorSig& t) {
  return shape_str(t.shape) + " (" + dtype_name(static_cast<DType>(t.dtype)) +
         (t.requires_grad ? ", requires_grad" : "") + ")";
}

// Throws when rank r's params (or buffers) differ from rank 0's.
void compare(const std::vector<TensorSig>& ref, const std::vector<TensorSig>& other, int r, const char* kind) {
  MINIDL_CHECK(ref.size() == other.size(), "DistributedDataParallel: DDP expects same model across all ranks, but Rank 0 has ",
               ref.size(), " ", kind, "s, while rank ", r, " has inconsistent ", other.size(), " ", kind, "s.");
  for (size_t i = 0; i < ref.size(); ++i) {
    const TensorSig& a = ref[i];
    const TensorSig& b = other[i];
    if (a.shape == b.shape && a.dtype == b.dtype && a.requires_grad == b.requires_grad) continue;
    MINIDL_FAIL("DistributedDataParallel: DDP expects same model across all ranks, but ", kind, "s[", i, "] (\"",
                a.name, "\" on rank 0, \"", b.name, "\" on rank ", r, ") is ", describe(a), " on rank 0 and ",
                describe(b), " on rank ", r, ": it appears not to match sizes of the same ", kind,
                " in process 0.");
  }
}

// Where a model's metadata collectives run: its first parameter's (or
// buffer's) device; the CPU for a model without tensors.
Device module_device(const nn::Module& module) {
  for (const Tensor& p : module.parameters()) return p.device();
  for (const Tensor& b : module.buffers()) return b.device();
  return kCPU;
}

}  // namespace

void verify_params_across_processes(ProcessGroup& group, const nn::Module& module) {
  const nn::NamedTensors params = module.named_parameters();
  const nn::NamedTensors buffers = module.named_buffers();
  std::vector<int64_t> local{static_cast<int64_t>(params.size()), static_cast<int64_t>(buffers.size())};
  encode(params, local);
  encode(buffers, local);

  // Lengths first, then the signatures themselves (sizes may differ by rank),
  // on the model's device as PyTorch's (a device backend needs device tensors).
  const int world = group.size();
  const TensorOptions meta = TensorOptions(kInt64).device(module_device(module));
  Tensor length = tensor(std::vector<int64_t>{static_cast<int64_t>(local.size())}, {1}, meta);
  Tensor lengths = empty({world}, meta);
  group.all_gather_into_tensor(lengths, length)->wait();
  const std::vector<int64_t> sizes = lengths.to_vector<int64_t>();
  std::vector<Tensor> gathered;
  for (int64_t n : sizes) gathered.push_back(empty({n}, meta));
  group.all_gather(gathered, tensor(local, {static_cast<int64_t>(local.size())}, meta))->wait();

  // Every rank compares every rank with rank 0, so all throw the same error.
  const ModelSig ref = decode(gathered[0].to_vector<int64_t>());
  for (int r = 1; r < world; ++r) {
    const ModelSig other = decode(gathered[r].to_vector<int64_t>());
    compare(ref.params, other.params, r, "param");
    compare(ref.buffers, other.buffers, r, "buffer");
  }
}

void broadcast_coalesced(ProcessGroup& group, const std::vector<Tensor>& tensors, int64_t buffer_bytes, int src) {
  // Group by (dtype, device), keeping the order inside each group.
  std::map<std::pair<int, std::string>, std::vector<Tensor>> groups;
  for (const Tensor& t : tensors)
    if (t.defined() && t.numel() > 0) groups[{static_cast<int>(t.dtype()), t.device().str()}].push_back(t);

  NoGradGuard no_grad;  // parameters are written in place
  auto flush = [&](const std::vector<Tensor>& chunk) {
    if (chunk.empty()) return;
    int64_t total = 0;
    for (const Tensor& t : chunk) total += t.numel();
    Tensor flat = empty({total}, TensorOptions(group.wire_dtype(chunk[0].dtype())).device(chunk[0].device()));
    int64_t offset = 0;
    for (const Tensor& t : chunk) {
      flat.narrow(0, offset, t.numel()).view(t.shape()).copy_(t);
      offset += t.numel();
    }
    group.broadcast(flat, src)->wait();
    if (group.rank() == src) return;
    offset = 0;
    for (const Tensor& t : chunk) {
      Tensor(t).copy_(flat.narrow(0, offset, t.numel()).view(t.shape()));
      offset += t.numel();
    }
  };
  for (const auto& [key, list] : groups) {
    std::vector<Tensor> chunk;
    int64_t bytes = 0;
    for (const Tensor& t : list) {
      const int64_t size = static_cast<int64_t>(t.numel() * element_size(group.wire_dtype(t.dtype())));
      if (!chunk.empty() && bytes + size > buffer_bytes) {
        flush(chunk);
        chunk.clear();
        bytes = 0;
      }
      chunk.push_back(t);
      bytes += size;
    }
    flush(chunk);
  }
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, DDPOptions options,
                                                 ProcessGroupPtr group)
    : module_(std::move(module)), options_(std::move(options)), group_(std::move(group)) {
  MINIDL_CHECK(module_ != nullptr, "DistributedDataParallel: expected a module, got null");
  if (!group_) {
    MINIDL_CHECK(is_initialized(),
                 "Default process group has not been initialized, please make sure to call init_process_group.");
    group_ = default_group();
  }
  MINIDL_CHECK(!is_non_group_member(group_), "DistributedDataParallel: global rank ", get_rank(),
               " is not a member of the given process group (new_group gave it the non-member group)");
  const std::optional<double>& cap_mb = options_.bucket_cap_mb();
  MINIDL_CHECK(!cap_mb || *cap_mb > 0, "DistributedDataParallel: bucket_cap_mb must be positive, got ", *cap_mb);

  std::vector<Tensor> params;
  std::vector<std::string> names;
  for (const auto& [name, p] : module_->named_parameters()) {
    if (!p.requires_grad()) continue;
    params.push_back(p);
    names.push_back(name);
  }
  MINIDL_CHECK(!params.empty(),
               "DistributedDataParallel is not needed when a module doesn't have any parameter that requires a "
               "gradient.");
  for (const Tensor& p : module_->parameters())
    MINIDL_CHECK(p.device().type == params[0].device().type,
                 "DistributedDataParallel's input module must be on the same type of devices, but input module "
                 "parameters locate in ",
                 params[0].device(), " and ", p.device(), ".");

  // Same model everywhere, then rank 0's values everywhere.
  verify_params_across_processes(*group_, *module_);
  std::vector<Tensor> state = module_->parameters();
  for (const Tensor& b : module_->buffers()) state.push_back(b);
  broadcast_coalesced(*group_, state, kBroadcastBucketBytes, 0);

  // Buckets over the parameters in reverse registration order.
  const int64_t mib = 1024 * 1024;
  const int64_t cap = static_cast<int64_t>(cap_mb.value_or(kDefaultBucketCapMb) * static_cast<double>(mib));
  std::vector<int64_t> limits{std::max<int64_t>(cap, 1)};
  if (!cap_mb && kDefaultFirstBucketBytes < cap) limits.insert(limits.begin(), kDefaultFirstBucketBytes);
  const std::vector<Tensor> reversed(params.rbegin(), params.rend());
  std::vector<std::vector<size_t>> buckets = compute_bucket_assignment_by_size(reversed, limits);
  for (auto& bucket : buckets)
    for (size_t& position : bucket) position = params.size() - 1 - position;
  reducer_ = std::make_unique<Reducer>(std::move(params), std::move(names), std::move(buckets), group_,
                                       options_.find_unused_parameters(), options_.gradient_as_bucket_view());
}

void DistributedDataParallel::sync_buffers() {
  broadcast_coalesced(*group_, module_->buffers(), kBroadcastBucketBytes, 0);
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  MINIDL_CHECK(reducer_ != nullptr, "DistributedDataParallel: forward on a moved-from object");
  const bool grad_enabled = autograd::GradMode::is_enabled();
  if (grad_enabled) reducer_->ensure_prior_reduction_finished();
  if (options_.broadcast_buffers() && grad_enabled && module_->is_training()) sync_buffers();
  Tensor output = module_->forward(input);
  if (grad_enabled && require_backward_grad_sync_) reducer_->prepare_for_backward({output});
  return output;
}

Tensor reduce_tensor(const Tensor& tensor, const ProcessGroupPtr& group) {
  MINIDL_CHECK(tensor.defined(), "reduce_tensor: expected a defined tensor");
  ProcessGroupPtr pg = group;
  if (!pg) {
    MINIDL_CHECK(is_initialized(),
                 "Default process group has not been initialized, please make sure to call init_process_group.");
    pg = default_group();
  }
  NoGradGuard no_grad;
  Tensor out = is_floating(tensor.dtype()) ? tensor.detach().clone().contiguous()
                                           : tensor.detach().to(kFloat64).contiguous();
  pg->all_reduce(out, ReduceOp::SUM)->wait();
  out.div_(static_cast<double>(pg->size()));
  return out;
}

}  // namespace minidl::dist
