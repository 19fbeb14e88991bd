// The group object a rank outside a new_group holds (dist/non_group_member.h).
#include "minidl/dist/non_group_member.h"

#include <iostream>
#include <mutex>
#include <set>
#include <string>

namespace minidl::dist {

namespace {

class CompletedWork final : public Work {
 public:
  CompletedWork() { finish(); }
};

class NonGroupMember final : public ProcessGroup {
 public:
  explicit NonGroupMember(int global_rank) : ProcessGroup(-1, -1), global_rank_(global_rank) {}
  std::string backend_name() const override { return "none (not a member)"; }
  WorkPtr all_reduce(Tensor&, ReduceOp) override { return skip("all_reduce"); }
  WorkPtr broadcast(Tensor&, int) override { return skip("broadcast"); }
  WorkPtr all_gather(std::vector<Tensor>&, const Tensor&) override { return skip("all_gather"); }
  WorkPtr all_gather_into_tensor(Tensor&, const Tensor&) override { return skip("all_gather_into_tensor"); }
  WorkPtr reduce_scatter(Tensor&, const std::vector<Tensor>&, ReduceOp) override { return skip("reduce_scatter"); }
  WorkPtr barrier() override { return skip("barrier"); }
  Milliseconds timeout() const override { return kDefaultTimeout; }

 private:
  WorkPtr skip(const std::string& op) const {
    static std::mutex mutex;
    static std::set<std::string> warned;
    std::lock_guard<std::mutex> lock(mutex);
    if (warned.insert(op).second)
      std::cerr << "UserWarning: Running " << op << " on global rank " << global_rank_
                << " which does not belong to the given group.\n";
    return std::make_shared<CompletedWork>();
  }
  int global_rank_;
};

}  // namespace

ProcessGroupPtr make_non_group_member(int global_rank) { return std::make_shared<NonGroupMember>(global_rank); }

bool is_non_group_member(const ProcessGroupPtr& group) {
  return dynamic_cast<const NonGroupMember*>(group.get()) != nullptr;
}

}  // namespace minidl::dist
