// The API above the ops used as a PyTorch user would (a second ASan/UBSan
// probe, issue 18): backward passes on several threads meeting at one leaf,
// nested loops over one DataLoader, a module registered inside itself, a
// crop padding near int64's limit. Each was a crash or a wrong answer.
#include <memory>
#include <thread>
#include <vector>

#include "minidl/minidl.h"
#include "tests/test_util.h"

using namespace minidl;

TEST_CASE("backward passes on several threads accumulate into a shared leaf without losing updates") {
  // Unlocked: a use-after-free creating the leaf's accumulator, lost .grad additions.
  Tensor w = zeros({4}).requires_grad_();
  auto passes = [&w] {
    for (int k = 0; k < 300; ++k) sum(mul(w, 1.0)).backward();
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(passes);
  for (auto& t : threads) t.join();
  CHECK(w.grad().to_vector<float>() == std::vector<float>(4, 1200.0f));
}

namespace {
std::shared_ptr<data::TensorDataset> numbers(int64_t n) {
  return std::make_shared<data::TensorDataset>(arange(static_cast<double>(n)).reshape({n, 1}),
                                               arange(static_cast<double>(n), TensorOptions(kInt64)));
}
}  // namespace

TEST_CASE("nested loops over one DataLoader each get their own pass, as PyTorch's") {
  // The inner begin() freed the pass the outer iterator was reading (heap-use-after-free).
  for (const int workers : {0, 2}) {
    CAPTURE(workers);
    data::DataLoader loader(numbers(6), {.batch_size = 2, .num_workers = workers});
    int pairs = 0;
    std::vector<float> outer_seen;
    for (auto& outer : loader) {
      outer_seen.push_back(outer.data.to_vector<float>()[0]);
      for (auto& inner : loader) pairs += inner.data.size(0) == 2 ? 1 : 0;
    }
    CHECK(pairs == 9);
    CHECK(outer_seen == std::vector<float>{0, 2, 4});
  }
  data::DataLoader::Iterator kept;
  {
    data::DataLoader loader(numbers(4), {.batch_size = 2, .num_workers = 1});
    kept = loader.begin();
  }  // the iterator outlives its loader
  CHECK(kept->data.to_vector<float>() == std::vector<float>{0, 1});
  ++kept;
  CHECK(kept->data.to_vector<float>() == std::vector<float>{2, 3});
}

namespace {
class BoxImpl : public nn::Module {
 public:
  BoxImpl() : Module("Box") {}
  Tensor forward(const Tensor& x) override { return x; }
};
MINIDL_MODULE(Box);
}  // namespace

TEST_CASE("a module cannot be registered inside its own subtree") {
  // state_dict(), train() and printing recursed until the stack overflowed.
  Box a, b;
  CHECK_THROWS_CONTAINS(a->register_module("me", a.ptr()), "register_module: module 'me' contains this module");
  b->register_module("a", a.ptr());
  CHECK_THROWS_CONTAINS(a->register_module("b", b.ptr()), "register_module: module 'b' contains this module");
  Box c;
  a->register_module("c", c.ptr());
  CHECK_THROWS_CONTAINS(a->replace_module("c", b.ptr()), "replace_module: the new module for 'c' contains this module");
  Box shared;  // the same module under two names is no cycle
  c->register_module("x", shared.ptr());
  c->register_module("y", shared.ptr());
  CHECK(b->state_dict().size() == 0);
}

TEST_CASE("RandomCrop refuses a padding whose padded size overflows") {
  Generator gen(1);
  CHECK_THROWS_CONTAINS(data::RandomCrop(4, 4, int64_t{1} << 62)(zeros({1, 4, 4}), gen),
                        "RandomCrop: padding 4611686018427387904 makes the padded image size overflow int64");
}
