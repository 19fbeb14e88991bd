// The API above the ops used as a PyTorch user would (a second ASan/UBSan
// probe, issue 18): backward passes on several threads meeting at one leaf,
// nested loops over one DataLoader, a module registered inside itself, a
// crop padding near int64's limit; an optimizer group that fails its checks
// after others stepped, state left float32 by Module::to(kFloat64), duplicate
// state_dict keys, fractional class targets, a custom backward that restarts
// its own graph. Each was a crash, a wrong answer or a half-done step.
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

TEST_CASE("nested loops over one DataLoader each get their own pass, as PyTorch's") {
  // The inner begin() freed the pass the outer iterator was reading (heap-use-after-free).
  for (const int workers : {0, 2}) {
    CAPTURE(workers);
    data::DataLoader loader(testing::numbers_dataset(6), {.batch_size = 2, .num_workers = workers});
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
    data::DataLoader loader(testing::numbers_dataset(4), {.batch_size = 2, .num_workers = 1});
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

TEST_CASE("an optimizer step checks every group before it changes any") {
  // A bad later group used to leave the earlier groups stepped (and Adam's step counts advanced).
  Tensor a = ones({2}).requires_grad_(), b = ones({2}).requires_grad_();
  optim::SGD sgd({optim::ParamGroup({a}), optim::ParamGroup({b})}, optim::SGDOptions(0.5));
  a.set_grad(ones({2}));
  b.set_grad(ones({2}));
  sgd.param_groups()[1].set_lr(-1.0);
  CHECK_THROWS_CONTAINS(sgd.step(), "Invalid learning rate: -1");
  CHECK(a.to_vector<float>() == std::vector<float>{1, 1});
  sgd.param_groups()[1].set_lr(0.5);
  sgd.step();
  CHECK(a.to_vector<float>() == std::vector<float>{0.5f, 0.5f});

  Tensor c = ones({2}).requires_grad_(), d = ones({3}).requires_grad_();
  optim::Adam adam({optim::ParamGroup({c}), optim::ParamGroup({d})}, optim::AdamOptions(0.1));
  c.set_grad(ones({2}));
  d.set_grad(ones({3}));
  adam.step();
  adam.param_groups()[1].options_as<optim::AdamOptions>().beta2 = 1.0;
  CHECK_THROWS_CONTAINS(adam.step(), "Invalid beta parameter at index 1: 1");
  CHECK(adam.state(c).at("step").item<float>() == 1.0f);
  adam.param_groups()[1].options_as<optim::AdamOptions>().beta2 = 0.999;
  // A state of another shape (a state_dict of another model) is named before anything moves.
  adam.state(d)["exp_avg"] = zeros({4});
  const std::vector<float> c_before = c.to_vector<float>();
  CHECK_THROWS_CONTAINS(adam.step(), "Adam: the state \"exp_avg\" of a parameter of shape [3] on cpu is [4] on cpu");
  CHECK(c.to_vector<float>() == c_before);
  CHECK(adam.state(c).at("step").item<float>() == 1.0f);
  // An integer state is refused by the same check (step_group's own check was dropped as redundant).
  adam.state(d)["exp_avg"] = zeros({3}, kInt64);
  CHECK_THROWS_CONTAINS(adam.step(), "Adam: the state \"exp_avg\" of a parameter is int64, expected a floating dtype");
  CHECK(c.to_vector<float>() == c_before);
}

TEST_CASE("an optimizer's state follows the parameters to float64 after Module::to") {
  // The step kernels refused the float32 state, blaming its strides; PyTorch's in-place updates cast it.
  manual_seed(3);
  nn::Linear lin(3, 2);
  optim::SGD sgd(lin->parameters(), 0.1, /*momentum=*/0.9);
  optim::Adam adam(lin->parameters(), 0.01);
  const Tensor x = randn({4, 3});
  lin->forward(x).sum().backward();
  sgd.step();
  adam.step();
  const Tensor buffer = sgd.state(lin->weight).at("momentum_buffer").clone();
  lin->to(kFloat64);
  sgd.zero_grad();
  lin->forward(x.to(kFloat64)).sum().backward();
  const Tensor g = lin->weight.grad();
  sgd.step();
  adam.step();
  const Tensor& now = sgd.state(lin->weight).at("momentum_buffer");
  CHECK(now.dtype() == kFloat64);
  CHECK(testing::allclose(now, buffer.to(kFloat64) * 0.9 + g, 1e-6, 1e-7));
  CHECK(adam.state(lin->weight).at("exp_avg_sq").dtype() == kFloat64);
}

TEST_CASE("load_state_dict refuses a key given twice; TensorDataset refuses fractional targets") {
  nn::Linear lin(2, 2);
  nn::NamedTensors state = lin->state_dict();
  state.push_back(state.front());
  CHECK_THROWS_CONTAINS(lin->load_state_dict(state), "load_state_dict: the key 'weight' appears more than once");
  // Targets are class indices: 0.5 was truncated to 0 without a word.
  const Tensor data = zeros({3, 2});
  CHECK_THROWS_CONTAINS(data::TensorDataset(data, tensor({0.0, 0.5, 2.0}, {}, kFloat64)),
                        "TensorDataset: targets are class indices, got 0.5 at index 1 of a float64 tensor");
  CHECK_THROWS_CONTAINS(data::TensorDataset(data, tensor({0.0, 1.0, std::nan("")}, {}, kFloat64)), "got nan at index 2");
  CHECK(data::TensorDataset(data, tensor({0.0, 1.0, 2.0})).get(2).target == 2);
}

namespace {
Tensor g_restarted_loss;  // the graph RestartsItself's backward runs again
struct RestartsItself : autograd::Function<RestartsItself> {
  static Tensor forward(AutogradContext*, const Tensor& x) { return x * 2.0; }
  static variable_list backward(AutogradContext*, variable_list grads) {
    g_restarted_loss.backward(Tensor(), /*retain_graph=*/true);
    return {grads[0] * 2.0};
  }
};
int g_nested_left = 0;  // NestsTwice starts a backward of a fresh graph this many levels deep
struct NestsTwice : autograd::Function<NestsTwice> {
  static Tensor forward(AutogradContext*, const Tensor& x) { return x * 3.0; }
  static variable_list backward(AutogradContext*, variable_list grads) {
    if (g_nested_left-- > 0) {
      autograd::AutoGradMode enable(true);  // as torch.enable_grad() in checkpointing's backward
      apply(ones({1}).requires_grad_()).sum().backward();
    }
    return {grads[0] * 3.0};
  }
};
}  // namespace

TEST_CASE("a backward that restarts itself from inside fails instead of overflowing the stack") {
  // Each level called backward() again: the stack overflowed (SIGSEGV).
  Tensor x = ones({2}).requires_grad_();
  g_restarted_loss = RestartsItself::apply(x).sum();
  CHECK_THROWS_CONTAINS(g_restarted_loss.backward(Tensor(), true), "backward: backward passes nested 200 deep");
  g_restarted_loss = Tensor();
  // Reentrant passes that end (activation checkpointing's kind) still work, also after that error.
  g_nested_left = 3;
  Tensor y = ones({2}).requires_grad_();
  NestsTwice::apply(y).sum().backward();
  CHECK(y.grad().to_vector<float>() == std::vector<float>{3, 3});
}
