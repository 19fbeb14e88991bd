// nn::Module: the module tree (names, order), apply, train/eval, zero_grad,
// to(), state_dict / load_state_dict (in memory and through a file, strict and
// non-strict, with PyTorch's error messages), registration errors, printing.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::allclose;

namespace {

// A residual-free block with its own parameter and buffer registered after a child,
// to check that own entries come before children's (PyTorch's order).
class BlockImpl : public nn::Module {
 public:
  explicit BlockImpl(int64_t c) : Module("Block") {
    conv1 = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(c, c, 3).padding(1).bias(false)));
    scale = register_parameter("scale", ones({c}));
    steps = register_buffer("steps", zeros({}, kInt64));
  }
  Tensor forward(const Tensor& x) override { return conv1(x) * scale.reshape({1, -1, 1, 1}); }
  nn::Conv2d conv1{nullptr};
  Tensor scale, steps;
};
MINIDL_MODULE(Block);

class NetImpl : public nn::Module {
 public:
  NetImpl() : Module("Net") {
    layer1 = register_module("layer1", nn::Sequential(Block(2), Block(2)));
    fc = register_module("fc", nn::Linear(2 * 3 * 3, 3));
  }
  Tensor forward(const Tensor& x) override { return fc(layer1(x).flatten(1)); }
  nn::Sequential layer1{nullptr};
  nn::Linear fc{nullptr};
};
MINIDL_MODULE(Net);

std::vector<std::string> names_of(const nn::NamedTensors& named) {
  std::vector<std::string> out;
  for (const auto& [name, t] : named) out.push_back(name);
  return out;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("minidl_test_module_" + name)).string();
}

std::string repr(const nn::Module& m) {
  std::ostringstream os;
  os << m;
  return os.str();
}

}  // namespace

TEST_CASE("named_parameters, named_buffers and state_dict use PyTorch's dotted names and order") {
  Net net;
  CHECK(names_of(net->named_parameters()) ==
        std::vector<std::string>{"layer1.0.scale", "layer1.0.conv1.weight", "layer1.1.scale",
                                 "layer1.1.conv1.weight", "fc.weight", "fc.bias"});
  CHECK(names_of(net->named_buffers()) == std::vector<std::string>{"layer1.0.steps", "layer1.1.steps"});
  CHECK(names_of(net->state_dict()) ==
        std::vector<std::string>{"layer1.0.scale", "layer1.0.steps", "layer1.0.conv1.weight", "layer1.1.scale",
                                 "layer1.1.steps", "layer1.1.conv1.weight", "fc.weight", "fc.bias"});
  CHECK(names_of(net->named_parameters(/*recurse=*/false)).empty());
  CHECK(names_of(net->fc->named_parameters(false)) == std::vector<std::string>{"weight", "bias"});
  CHECK(net->parameters().size() == 6);
  CHECK(net->parameters()[4].is_same(net->fc->weight));
  CHECK(net->buffers().size() == 2);
  // state_dict tensors are detached but share the data.
  auto sd = net->state_dict();
  CHECK_FALSE(sd[6].second.requires_grad());
  CHECK(sd[6].second.raw_data() == net->fc->weight.raw_data());
}

TEST_CASE("children, modules and named_modules are in preorder, self first") {
  Net net;
  auto children = net->named_children();
  REQUIRE(children.size() == 2);
  CHECK(children[0].first == "layer1");
  CHECK(children[1].first == "fc");
  CHECK(net->children()[1] == std::static_pointer_cast<nn::Module>(net->fc.ptr()));

  std::vector<std::string> names, kinds;
  for (const auto& [name, m] : net->named_modules()) {
    names.push_back(name);
    kinds.push_back(m->name());
  }
  CHECK(names == std::vector<std::string>{"", "layer1", "layer1.0", "layer1.0.conv1", "layer1.1",
                                          "layer1.1.conv1", "fc"});
  CHECK(kinds == std::vector<std::string>{"Net", "Sequential", "Block", "Conv2d", "Block", "Conv2d", "Linear"});
  auto mods = net->modules();
  CHECK(mods.size() == 7);
  CHECK(mods[0].get() == net.get());
  CHECK(net->modules(/*include_self=*/false).size() == 6);
  CHECK(net->child("fc").get() == net->fc.get());
  CHECK_THROWS_CONTAINS(net->child("fc2"), "'Net' object has no child module 'fc2'");
}

TEST_CASE("modules() needs a module owned by a shared_ptr") {
  nn::LinearImpl on_stack(2, 3);
  CHECK_THROWS_CONTAINS(on_stack.modules(), "is not owned by a std::shared_ptr");
  CHECK(on_stack.modules(/*include_self=*/false).empty());
  CHECK(on_stack.parameters().size() == 2);  // the rest works without a shared_ptr
}

TEST_CASE("apply visits children first, then self") {
  Net net;
  std::vector<std::string> order;
  net->apply([&](nn::Module& m) { order.push_back(m.name()); });
  CHECK(order == std::vector<std::string>{"Conv2d", "Block", "Conv2d", "Block", "Sequential", "Linear", "Net"});
}

TEST_CASE("train and eval recurse through the tree") {
  Net net;
  for (auto& m : net->modules()) CHECK(m->is_training());
  net->eval();
  for (auto& m : net->modules()) CHECK_FALSE(m->is_training());
  net->layer1->train();
  CHECK_FALSE(net->is_training());
  CHECK(net->layer1[0]->is_training());
  CHECK_FALSE(net->fc->is_training());
  net->train(true);
  for (auto& m : net->modules()) CHECK(m->is_training());
}

TEST_CASE("zero_grad sets grads to none or zeroes them in place") {
  manual_seed(1);
  Net net;
  net->forward(randn({2, 2, 3, 3})).sum().backward();
  for (const Tensor& p : net->parameters()) REQUIRE(p.grad().defined());
  Tensor g = net->fc->weight.grad();
  net->zero_grad(/*set_to_none=*/false);
  CHECK(net->fc->weight.grad().is_same(g));
  for (const Tensor& p : net->parameters()) {
    CHECK(p.grad().defined());
    CHECK(p.grad().abs().sum().item() == 0.0);
  }
  net->zero_grad();
  for (const Tensor& p : net->parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("to(kFloat64) converts floating tensors in place and keeps every handle") {
  manual_seed(2);
  Net net;
  Tensor x = randn({2, 2, 3, 3});
  net->forward(x).sum().backward();
  std::vector<Tensor> params = net->parameters();
  Tensor w = net->fc->weight;
  const std::vector<float> before = w.to_vector<float>();
  const std::vector<float> grad_before = w.grad().to_vector<float>();
  Tensor y32 = net->forward(x);

  net->to(kFloat64);
  CHECK(w.dtype() == kFloat64);
  CHECK(w.requires_grad());
  CHECK(w.is_leaf());
  for (size_t i = 0; i < params.size(); ++i) {
    CHECK(params[i].is_same(net->parameters()[i]));
    CHECK(params[i].dtype() == kFloat64);
    CHECK(params[i].grad().dtype() == kFloat64);
  }
  const std::vector<double> after = w.to_vector<double>();
  const std::vector<double> grad_after = w.grad().to_vector<double>();
  for (size_t i = 0; i < before.size(); ++i) {
    CHECK(after[i] == static_cast<double>(before[i]));
    CHECK(grad_after[i] == static_cast<double>(grad_before[i]));
  }
  // The int64 buffer stays int64, as PyTorch's module.to(dtype).
  CHECK(net->layer1->at<BlockImpl>(0).steps.dtype() == kInt64);
  Tensor y64 = net->forward(x.to(kFloat64));
  CHECK(y64.dtype() == kFloat64);
  CHECK(allclose(y64.to(kFloat32), y32, 1e-5, 1e-5));
  net->zero_grad();
  y64.sum().backward();  // autograd reaches the converted leaves
  CHECK(w.grad().dtype() == kFloat64);
  CHECK(allclose(w.grad().to(kFloat32), tensor(grad_before, w.shape(), kFloat32), 1e-5, 1e-5));
  // An optimizer-style update through an old handle reaches the module.
  {
    NoGradGuard no_grad;
    params[5].fill_(0.25);
  }
  CHECK(net->fc->bias.to_vector<double>() == std::vector<double>(3, 0.25));
  CHECK_THROWS_CONTAINS(net->to(kInt64), "nn.Module.to only accepts floating point dtypes");
  net->to(kCPU);  // same device: nothing changes
  CHECK(w.dtype() == kFloat64);
}

TEST_CASE("state_dict round trip through a safetensors file updates existing handles") {
  manual_seed(3);
  Net a;
  {
    NoGradGuard no_grad;
    a->layer1->at<BlockImpl>(1).steps.fill_(7);
  }
  const std::string path = temp_path("roundtrip.safetensors");
  nn::save_state_dict(*a, path);

  manual_seed(4);
  Net b;
  Tensor w = b->fc->weight;  // a handle taken before loading
  CHECK_FALSE(allclose(w, a->fc->weight));
  auto result = nn::load_state_dict_file(*b, path);
  CHECK(result.missing_keys.empty());
  CHECK(result.unexpected_keys.empty());
  auto sa = a->state_dict(), sb = b->state_dict();
  REQUIRE(sa.size() == sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    CHECK(sa[i].first == sb[i].first);
    CHECK(sa[i].second.dtype() == sb[i].second.dtype());
    CHECK(sa[i].second.to_vector<double>() == sb[i].second.to_vector<double>());
  }
  CHECK(w.is_same(b->fc->weight));
  CHECK(w.to_vector<float>() == a->fc->weight.to_vector<float>());
  CHECK(b->layer1->at<BlockImpl>(1).steps.item<int64_t>() == 7);
  CHECK(w.requires_grad());
  CHECK(w.is_leaf());
  Tensor x = randn({1, 2, 3, 3});
  CHECK(allclose(a->forward(x), b->forward(x)));
  std::remove(path.c_str());
}

namespace {
class SmallImpl : public nn::Module {
 public:
  SmallImpl() : Module("Net") { fc = register_module("fc", nn::Linear(5, 10)); }
  nn::Linear fc{nullptr};
};
MINIDL_MODULE(Small);
}  // namespace

TEST_CASE("load_state_dict: strict and non-strict, with PyTorch's messages") {
  Small m;
  const std::vector<float> bias_before = m->fc->bias.to_vector<float>();
  Tensor new_weight = full({10, 5}, 0.5);

  SUBCASE("missing and unexpected keys") {
    nn::NamedTensors state{{"fc.weight", new_weight}, {"fc.b", zeros({10})}};
    CHECK_THROWS_CONTAINS(m->load_state_dict(state),
                          "Error(s) in loading state_dict for Net:\n\tMissing key(s) in state_dict: \"fc.bias\". "
                          "\n\tUnexpected key(s) in state_dict: \"fc.b\". ");
    CHECK(m->fc->weight.max().item() < 0.5);  // strict failure copies nothing

    auto result = m->load_state_dict(state, /*strict=*/false);
    CHECK(result.missing_keys == std::vector<std::string>{"fc.bias"});
    CHECK(result.unexpected_keys == std::vector<std::string>{"fc.b"});
    CHECK(m->fc->weight.to_vector<float>() == std::vector<float>(50, 0.5f));
    CHECK(m->fc->bias.to_vector<float>() == bias_before);
  }
  SUBCASE("several keys are listed with commas") {
    CHECK_THROWS_CONTAINS(m->load_state_dict({}),
                          "Missing key(s) in state_dict: \"fc.weight\", \"fc.bias\". ");
  }
  SUBCASE("size mismatch throws in either mode and copies nothing") {
    nn::NamedTensors state{{"fc.weight", zeros({10, 4})}, {"fc.bias", zeros({10})}};
    const std::string msg =
        "Error(s) in loading state_dict for Net:\n\tsize mismatch for fc.weight: copying a param with shape "
        "torch.Size([10, 4]) from checkpoint, the shape in current model is torch.Size([10, 5]).";
    CHECK_THROWS_CONTAINS(m->load_state_dict(state), msg);
    CHECK_THROWS_CONTAINS(m->load_state_dict(state, false), msg);
    CHECK(m->fc->bias.to_vector<float>() == bias_before);
  }
  SUBCASE("values are converted to the model's dtype") {
    nn::NamedTensors state{{"fc.weight", full({10, 5}, 0.25, kFloat64)}, {"fc.bias", zeros({10}, kFloat64)}};
    m->load_state_dict(state);
    CHECK(m->fc->weight.dtype() == kFloat32);
    CHECK(m->fc->weight.to_vector<float>() == std::vector<float>(50, 0.25f));
  }
}

TEST_CASE("load_state_dict: PyTorch's 1-element 1-D tensor for a 0-d entry, and its unexpected-key order") {
  // PyTorch: m = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3)); sd = m.state_dict(); then as below.
  nn::Sequential m(nn::Linear(2, 3), nn::BatchNorm1d(3));
  const Tensor& tracked = m->at<nn::BatchNorm1dImpl>(1).num_batches_tracked;
  auto with = [&](const std::string& key, const Tensor& value) {
    nn::NamedTensors state = m->state_dict();
    for (auto& [name, t] : state)
      if (name == key) t = value;
    return state;
  };
  // sd["1.num_batches_tracked"] = torch.tensor([7]) loads as 7 (0.3-era checkpoints); any 0-d entry does.
  m->load_state_dict(with("1.num_batches_tracked", tensor(std::vector<int64_t>{7}, {1})));
  CHECK(tracked.shape() == Shape{});
  CHECK(tracked.item<int64_t>() == 7);
  m->load_state_dict(with("1.num_batches_tracked", tensor({9.5}, {1})));
  CHECK(tracked.item<int64_t>() == 9);
  // Only that: [7, 8], [[0]], or a 0-d tensor for a 1-element parameter are size mismatches.
  CHECK_THROWS_CONTAINS(m->load_state_dict(with("1.num_batches_tracked", zeros({2}, kInt64))),
                        "size mismatch for 1.num_batches_tracked: copying a param with shape torch.Size([2]) from "
                        "checkpoint, the shape in current model is torch.Size([]).");
  CHECK_THROWS_CONTAINS(m->load_state_dict(with("1.num_batches_tracked", zeros({1, 1}, kInt64))),
                        "copying a param with shape torch.Size([1, 1]) from checkpoint");
  nn::Linear one(1, 1);
  CHECK_THROWS_CONTAINS(one->load_state_dict({{"weight", zeros({1, 1})}, {"bias", scalar_tensor(3.0)}}),
                        "size mismatch for bias: copying a param with shape torch.Size([]) from checkpoint, the "
                        "shape in current model is torch.Size([1]).");
  // Unexpected keys come module by module in preorder (PyTorch's _load_from_state_dict per module):
  // sd["zz"], sd["0.b"], sd["5.x"], sd["0.weight.q"] -> ['zz', '5.x', '0.b', '0.weight.q'].
  nn::NamedTensors state = m->state_dict();
  for (const char* key : {"zz", "0.b", "5.x", "0.weight.q"}) state.emplace_back(key, zeros({1}));
  CHECK(m->load_state_dict(state, false).unexpected_keys == std::vector<std::string>{"zz", "5.x", "0.b", "0.weight.q"});
  CHECK_THROWS_CONTAINS(m->load_state_dict(state), "Unexpected key(s) in state_dict: \"zz\", \"5.x\", \"0.b\", "
                                                   "\"0.weight.q\". ");
}

TEST_CASE("Module::requires_grad_ sets every parameter (recursively) and returns the module") {
  nn::Sequential m(nn::Linear(2, 3), nn::BatchNorm1d(3));
  nn::Module& same = m->at<nn::LinearImpl>(0).requires_grad_(false);
  CHECK(&same == m[0].get());
  CHECK_FALSE(m->at<nn::LinearImpl>(0).weight.requires_grad());
  CHECK_FALSE(m->at<nn::LinearImpl>(0).bias.requires_grad());
  CHECK(m->at<nn::BatchNorm1dImpl>(1).weight.requires_grad());  // a sibling is left alone
  m->requires_grad_(false);
  for (const Tensor& p : m->parameters()) CHECK_FALSE(p.requires_grad());
  for (const Tensor& b : m->buffers()) CHECK_FALSE(b.requires_grad());
  const Tensor y = m(randn({4, 2}));
  CHECK_FALSE(y.requires_grad());
  m->requires_grad_();
  for (const Tensor& p : m->parameters()) CHECK(p.requires_grad());
}

TEST_CASE("load_state_dict_file refuses a truncated or missing file cleanly") {
  manual_seed(5);
  Small a;
  const std::string path = temp_path("truncated.safetensors");
  nn::save_state_dict(*a, path);
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 7);
  Small b;
  const std::vector<float> before = b->fc->weight.to_vector<float>();
  CHECK_THROWS_CONTAINS(nn::load_state_dict_file(*b, path), path);
  CHECK(b->fc->weight.to_vector<float>() == before);
  std::remove(path.c_str());
  CHECK_THROWS_CONTAINS(nn::load_state_dict_file(*b, path), "load_safetensors");
}

TEST_CASE("registration: names, leaves, undefined tensors, shared tensors") {
  auto m = std::make_shared<nn::Module>("Custom");
  m->register_parameter("w", zeros({2}));
  CHECK_THROWS_CONTAINS(m->register_parameter("w", zeros({2})), "attribute 'w' already exists");
  CHECK_THROWS_CONTAINS(m->register_buffer("w", zeros({2})), "attribute 'w' already exists");
  CHECK_THROWS_CONTAINS(m->register_module("w", nn::ReLU()), "attribute 'w' already exists");
  CHECK_THROWS_CONTAINS(m->register_parameter("a.b", zeros({2})), "parameter name can't contain \".\"");
  CHECK_THROWS_CONTAINS(m->register_buffer("", zeros({2})), "buffer name can't be empty string");
  CHECK_THROWS_CONTAINS(m->register_module("", nn::ReLU()), "module name can't be empty string");
  CHECK_THROWS_CONTAINS(m->register_module("x", std::shared_ptr<nn::Module>()), "is empty (nullptr)");

  Tensor leaf = ones({2}).requires_grad_();
  CHECK_THROWS_CONTAINS(m->register_parameter("v", leaf * 2.0), "Cannot assign non-leaf Tensor to parameter 'v'");

  // requires_grad is set on the registered handle; false keeps it frozen.
  Tensor frozen = ones({3});
  Tensor& ref = m->register_parameter("frozen", frozen, /*requires_grad=*/false);
  CHECK(ref.is_same(frozen));
  CHECK_FALSE(frozen.requires_grad());
  CHECK(m->parameters().size() == 2);

  // Undefined: reserved name, invisible everywhere, fillable later.
  m->register_parameter("bias", Tensor());
  m->register_buffer("running_mean", Tensor());
  CHECK(names_of(m->named_parameters()) == std::vector<std::string>{"w", "frozen"});
  CHECK(m->buffers().empty());
  CHECK(names_of(m->state_dict()) == std::vector<std::string>{"w", "frozen"});
  CHECK_THROWS_CONTAINS(m->register_buffer("bias", zeros({2})), "attribute 'bias' already exists");
  m->register_parameter("bias", zeros({2}));
  CHECK(names_of(m->named_parameters()) == std::vector<std::string>{"w", "frozen", "bias"});
  m->load_state_dict({{"w", ones({2})}, {"frozen", ones({3})}, {"bias", ones({2})}});

  // A tensor shared by two modules is one parameter but two state_dict entries (as PyTorch).
  nn::Linear l1(3, 3);
  auto tied2 = std::make_shared<nn::Module>("Tied2");
  tied2->register_parameter("x", l1->weight);
  tied2->register_module("l1", l1);
  CHECK(tied2->parameters()[0].is_same(l1->weight));
  CHECK(names_of(tied2->named_parameters()) == std::vector<std::string>{"x", "l1.bias"});
  CHECK(names_of(tied2->state_dict()) == std::vector<std::string>{"x", "l1.weight", "l1.bias"});
}

TEST_CASE("forward(): the default throws, holders forward their arguments") {
  auto m = std::make_shared<nn::Module>("Custom");
  CHECK_THROWS_CONTAINS(m->forward(zeros({1})),
                        "Module Custom has no single-tensor forward(); call its own forward");
  nn::ModuleList list{nn::ReLU()};
  CHECK_THROWS_CONTAINS(list->forward(zeros({1})), "Module ModuleList has no single-tensor forward()");
  nn::Linear empty{nullptr};
  CHECK(empty.is_empty());
  CHECK_THROWS_CONTAINS(empty->forward(zeros({1})), "Accessing an empty ModuleHolder");
  nn::Linear a(2, 2);
  nn::Linear b = a;  // copies alias the module
  CHECK(b.get() == a.get());
}

TEST_CASE("replace_module swaps a child; Sequential's forward uses the new one") {
  nn::Sequential seq(nn::Linear(2, 2), nn::ReLU());
  Tensor x = tensor({-1.0, 3.0}).reshape({1, 2});
  auto old = seq->replace_module("1", nn::Identity().ptr());
  CHECK(old->name() == "ReLU");
  CHECK(seq[1]->name() == "Identity");
  CHECK(allclose(seq(x), seq[0]->forward(x)));
  CHECK_THROWS_CONTAINS(seq->replace_module("2", nn::ReLU().ptr()), "'Sequential' object has no child module '2'");
  CHECK(names_of(seq->named_parameters()) == std::vector<std::string>{"0.weight", "0.bias"});
}

TEST_CASE("printing follows PyTorch's repr") {
  nn::Sequential seq(nn::Conv2d(nn::Conv2dOptions(3, 64, 3).padding(1).bias(false)), nn::ReLU());
  CHECK(repr(*seq) ==
        "Sequential(\n"
        "  (0): Conv2d(3, 64, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False)\n"
        "  (1): ReLU()\n"
        ")");
  Net net;
  std::ostringstream os;
  os << net;  // holders print too
  CHECK(os.str() ==
        "Net(\n"
        "  (layer1): Sequential(\n"
        "    (0): Block(\n"
        "      (conv1): Conv2d(2, 2, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False)\n"
        "    )\n"
        "    (1): Block(\n"
        "      (conv1): Conv2d(2, 2, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False)\n"
        "    )\n"
        "  )\n"
        "  (fc): Linear(in_features=18, out_features=3, bias=True)\n"
        ")");
  CHECK(repr(nn::Module()) == "Module()");
  CHECK(repr(*nn::MaxPool2d(2)) == "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)");
  CHECK(repr(*nn::AvgPool2d(nn::AvgPool2dOptions({2, 3}).stride(1))) ==
        "AvgPool2d(kernel_size=(2, 3), stride=1, padding=0)");
  CHECK(repr(*nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({1, 1}))) == "AdaptiveAvgPool2d(output_size=(1, 1))");
  CHECK(repr(*nn::Dropout(0.2)) == "Dropout(p=0.2, inplace=False)");
  CHECK(repr(*nn::LeakyReLU()) == "LeakyReLU(negative_slope=0.01)");
  CHECK(repr(*nn::GELU()) == "GELU(approximate='none')");
  CHECK(repr(*nn::Flatten()) == "Flatten(start_dim=1, end_dim=-1)");
  CHECK(repr(*nn::Conv2d(nn::Conv2dOptions(4, 8, {1, 3}).stride(2).dilation(2).groups(4))) ==
        "Conv2d(4, 8, kernel_size=(1, 3), stride=(2, 2), dilation=(2, 2), groups=4)");
  CHECK(repr(*nn::Linear(nn::LinearOptions(3, 1).bias(false))) == "Linear(in_features=3, out_features=1, bias=False)");
}
