// Default data locations and accuracy counting for the example programs.
#include "examples/common/example_data.h"

#include "minidl/ops/binary.h"

#include "minidl/core/check.h"

namespace fs = std::filesystem;

namespace minidl::examples {

fs::path repo_root() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec)
    for (fs::path p = exe.parent_path(); !p.empty() && p != p.root_path(); p = p.parent_path())
      if (fs::exists(p / "minidl.h")) return p;
  return fs::current_path();
}

std::string default_data_dir(const std::string& dataset) {
  if (dataset == "fashion-mnist") return "/usr/share/datasets/fashion-mnist";
  const fs::path root = repo_root();
  for (const fs::path& p : {root / "data/cifar-10-batches-bin", root / "../shared/data/cifar10-subset"})
    if (fs::exists(p / "data_batch_1.bin")) return fs::weakly_canonical(p).string();
  return (root / "data/cifar-10-batches-bin").string();
}

std::string shared_cifar10_subset_dir() {
  return fs::weakly_canonical(repo_root() / "../shared/data/cifar10-subset").string();
}

int64_t count_correct(const Tensor& logits, const Tensor& targets) {
  Tensor pred = logits.argmax(1);
  MINIDL_CHECK(pred.numel() == targets.numel(), "count_correct: ", pred.numel(), " predictions but ",
               targets.numel(), " targets");
  // On the logits' device; one value comes back to the host.
  return minidl::eq(pred, targets.reshape(pred.shape())).sum().item<int64_t>();
}

}  // namespace minidl::examples
