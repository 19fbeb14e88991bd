// See dist/collective_check.h.
#include "minidl/dist/collective_check.h"

#include <cstdlib>
#include <sstream>
#include <utility>
#include <vector>

#include "minidl/core/check.h"

namespace minidl::dist {

namespace {

// PyTorch's CollectiveFingerPrint, as text: equal texts, same collective.
std::string fingerprint(int64_t seq, const std::string& op, const std::vector<const Tensor*>& tensors) {
  std::ostringstream s;
  s << "CollectiveFingerPrint(SequenceNumber=" << seq << ", OpType=" << op << ", TensorShape=[";
  for (size_t i = 0; i < tensors.size(); ++i) s << (i ? ", " : "") << shape_str(tensors[i]->shape());
  s << "], TensorDtypes=[";
  for (size_t i = 0; i < tensors.size(); ++i) s << (i ? ", " : "") << dtype_name(tensors[i]->dtype());
  s << "], TensorDeviceTypes=[";
  for (size_t i = 0; i < tensors.size(); ++i)
    s << (i ? ", " : "") << device_type_name(tensors[i]->device().type);
  s << "])";
  return s.str();
}

class CheckedProcessGroup final : public ProcessGroup {
 public:
  CheckedProcessGroup(ProcessGroupPtr inner, std::shared_ptr<Store> store)
      : ProcessGroup(inner->rank(), inner->size()), inner_(std::move(inner)), store_(std::move(store)) {}

  std::string backend_name() const override { return inner_->backend_name(); }
  Milliseconds timeout() const override { return inner_->timeout(); }
  DType wire_dtype(DType dtype) const override { return inner_->wire_dtype(dtype); }

  WorkPtr all_reduce(Tensor& tensor, ReduceOp op) override {
    check(std::string("ALLREDUCE(") + reduce_op_name(op) + ")", {&tensor});
    return inner_->all_reduce(tensor, op);
  }
  WorkPtr broadcast(Tensor& tensor, int root) override {
    check("BROADCAST(root=" + std::to_string(root) + ")", {&tensor});
    return inner_->broadcast(tensor, root);
  }
  // The outputs (every rank's size) must agree; each rank's own input is
  // checked against its output slot by the backend.
  WorkPtr all_gather(std::vector<Tensor>& outputs, const Tensor& input) override {
    std::vector<const Tensor*> list;
    for (const Tensor& t : outputs) list.push_back(&t);
    check("ALLGATHER", list);
    return inner_->all_gather(outputs, input);
  }
  WorkPtr all_gather_into_tensor(Tensor& output, const Tensor& input) override {
    check("ALLGATHER_INTO_TENSOR", {&output, &input});
    return inner_->all_gather_into_tensor(output, input);
  }
  WorkPtr reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) override {
    std::vector<const Tensor*> list{&output};
    for (const Tensor& t : inputs) list.push_back(&t);
    check(std::string("REDUCE_SCATTER(") + reduce_op_name(op) + ")", list);
    return inner_->reduce_scatter(output, inputs, op);
  }
  WorkPtr barrier() override {
    check("BARRIER", {});
    return inner_->barrier();
  }

 private:
  // Publishes this rank's fingerprint of collective number seq_ and compares
  // it with every other rank's (waiting for them up to the store's timeout).
  // A rank checking collective n has seen every rank publish n - 1, so every
  // rank is done reading n - 2: its key can go.
  void check(const std::string& op, const std::vector<const Tensor*>& tensors) {
    const int64_t seq = seq_++;
    const std::string mine = fingerprint(seq, op, tensors);
    auto key = [](int64_t n, int r) { return std::to_string(n) + "/" + std::to_string(r); };
    store_->set(key(seq, rank()), mine);
    if (seq >= 2) store_->delete_key(key(seq - 2, rank()));
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) continue;
      const std::string theirs = store_->get(key(seq, r));
      MINIDL_CHECK(theirs == mine, "Detected mismatch between collectives on ranks. Rank ", rank(),
                   " is running collective: ", mine, ", but Rank ", r, " is running collective: ", theirs,
                   " (every rank must issue the same collectives in the same order, on tensors of the same "
                   "shapes, dtypes and device types)");
    }
  }

  ProcessGroupPtr inner_;
  std::shared_ptr<Store> store_;
  int64_t seq_ = 0;
};

bool is_detail(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::string(v) == "DETAIL";
}

}  // namespace

bool collective_checks_enabled() {
  return is_detail("MINIDL_DISTRIBUTED_DEBUG") || is_detail("TORCH_DISTRIBUTED_DEBUG");
}

ProcessGroupPtr make_checked_group(ProcessGroupPtr inner, std::shared_ptr<Store> store) {
  MINIDL_CHECK(inner != nullptr && store != nullptr, "make_checked_group: expected a group and a store");
  return std::make_shared<CheckedProcessGroup>(std::move(inner), std::move(store));
}

}  // namespace minidl::dist
