// Views (shared storage), copies, and their gradients.
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::check_gradients;

namespace {
Tensor seq(const Shape& shape, DType dtype = kFloat32) { return arange(static_cast<double>(numel_of(shape)), dtype).reshape(shape); }
Tensor rnd(const Shape& shape) { return randn(shape, kFloat64).requires_grad_(); }
}  // namespace

TEST_CASE("reshape and view share storage; -1 is inferred") {
  Tensor a = seq({2, 3, 4});
  Tensor b = a.reshape({6, -1});
  CHECK(b.shape() == Shape{6, 4});
  CHECK(b.raw_data() == a.raw_data());
  CHECK(a.view({4, 6}).strides() == Shape{6, 1});
  CHECK(a.flatten().shape() == Shape{24});
  CHECK(a.flatten(1).shape() == Shape{2, 12});
  CHECK_THROWS_CONTAINS(a.reshape({5, -1}), "shape '[5, -1]' is invalid for input of size 24");
  CHECK_THROWS_CONTAINS(a.reshape({-1, -1}), "only one dimension can be inferred");
}

TEST_CASE("view of a non-contiguous tensor refuses what it cannot express; reshape copies") {
  Tensor a = seq({3, 4}).t();  // (4, 3), strides (1, 4)
  CHECK_FALSE(a.is_contiguous());
  CHECK_THROWS_CONTAINS(a.view({12}), "view size is not compatible");
  Tensor r = a.reshape({12});
  CHECK(r.to_vector<float>() == std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  CHECK(a.view({4, 3, 1}).shape() == Shape{4, 3, 1});  // splitting in place is fine
}

TEST_CASE("permute, transpose, select, narrow") {
  Tensor a = seq({2, 3, 4});
  Tensor p = a.permute({2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.strides() == Shape{1, 12, 4});
  CHECK(p.contiguous().to_vector<float>()[1] == 4.0f);
  CHECK(a.transpose(0, 2).shape() == Shape{4, 3, 2});
  CHECK(a.select(1, 2).to_vector<float>() == std::vector<float>{8, 9, 10, 11, 20, 21, 22, 23});
  CHECK(a[1].shape() == Shape{3, 4});
  CHECK(a.select(-1, -1).to_vector<float>() == std::vector<float>{3, 7, 11, 15, 19, 23});
  Tensor n = a.narrow(2, 1, 2);
  CHECK(n.shape() == Shape{2, 3, 2});
  CHECK(n.to_vector<float>()[0] == 1.0f);
  CHECK(a.unsqueeze(0).shape() == Shape{1, 2, 3, 4});
  CHECK(a.unsqueeze(-1).shape() == Shape{2, 3, 4, 1});
  CHECK(a.unsqueeze(0).squeeze(0).shape() == Shape{2, 3, 4});
  CHECK(a.squeeze(1).shape() == Shape{2, 3, 4});  // size 3: unchanged
  CHECK_THROWS_CONTAINS(a.permute({0, 1}), "does not match the length of the desired ordering");
  CHECK_THROWS_CONTAINS(a.permute({0, 1, 1}), "duplicate dims");
  CHECK_THROWS_CONTAINS(a.select(1, 3), "out of range");
  CHECK_THROWS_CONTAINS(a.narrow(2, 3, 2), "exceeds dimension size");
  CHECK_THROWS_CONTAINS(a.transpose(0, 3), "Dimension out of range (expected to be in range of [-3, 2], but got 3)");
}

TEST_CASE("writes through a view reach the base") {
  Tensor a = zeros({3, 4});
  {
    NoGradGuard g;
    a.narrow(1, 1, 2).fill_(1.0);
    a.select(0, 2).copy_(full({4}, 5.0));
  }
  CHECK(a.to_vector<float>() == std::vector<float>{0, 1, 1, 0, 0, 1, 1, 0, 5, 5, 5, 5});
}

TEST_CASE("expand uses stride 0 and sums gradients back") {
  Tensor a = seq({3, 1});
  Tensor e = a.expand({2, 3, 4});
  CHECK(e.strides() == Shape{0, 1, 0});
  CHECK(e.contiguous().to_vector<float>()[5] == 1.0f);
  CHECK(a.expand({-1, 2}).shape() == Shape{3, 2});
  CHECK_THROWS_CONTAINS(a.expand({4, 2}), "must match the existing size (3) at non-singleton dimension 0");
  check_gradients([](const std::vector<Tensor>& in) { return in[0].expand({2, 3, 4}); }, {rnd({3, 1})});
}

TEST_CASE("cat, stack and index_select") {
  Tensor a = seq({2, 3}), b = seq({1, 3}) + 10.0;
  Tensor c = cat({a, b}, 0);
  CHECK(c.shape() == Shape{3, 3});
  CHECK(c.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5, 10, 11, 12});
  CHECK(cat({a, a}, -1).shape() == Shape{2, 6});
  CHECK(stack({a, a, a}, 1).shape() == Shape{2, 3, 3});
  Tensor batch = seq({5, 2});
  Tensor picked = batch.index_select(0, tensor(std::vector<int64_t>{4, 0, 4}));
  CHECK(picked.to_vector<float>() == std::vector<float>{8, 9, 0, 1, 8, 9});
  CHECK_THROWS_CONTAINS(cat({a, seq({2, 2})}, 0), "Sizes of tensors must match except in dimension 0");
  CHECK_THROWS_CONTAINS(cat({a, a.to(kFloat64)}, 0), "same dtype");
  CHECK_THROWS_CONTAINS(cat({}, 0), "non-empty list");
  CHECK_THROWS_CONTAINS(stack({a, b}), "stack expects each tensor to be equal size");
  CHECK_THROWS_CONTAINS(batch.index_select(0, tensor(std::vector<int64_t>{5})), "index out of range in self");
  CHECK_THROWS_CONTAINS(batch.index_select(0, tensor({1.0})), "Expected dtype int64 for index");
}

TEST_CASE("gradients of views and copies") {
  auto g = [](auto f, std::vector<Tensor> in) { check_gradients(f, std::move(in)); };
  g([](const std::vector<Tensor>& in) { return in[0].reshape({5, 6}); }, {rnd({3, 10})});
  g([](const std::vector<Tensor>& in) { return in[0].t().reshape({-1}); }, {rnd({3, 5})});
  g([](const std::vector<Tensor>& in) { return in[0].permute({2, 0, 1}); }, {rnd({3, 5, 2})});
  g([](const std::vector<Tensor>& in) { return in[0].narrow(1, 1, 3); }, {rnd({3, 5, 2})});
  g([](const std::vector<Tensor>& in) { return in[0].select(2, 1); }, {rnd({3, 5, 2})});
  g([](const std::vector<Tensor>& in) { return in[0].unsqueeze(1).squeeze(1); }, {rnd({3, 5})});
  g([](const std::vector<Tensor>& in) { return cat({in[0], in[1], in[0]}, 1); }, {rnd({3, 2}), rnd({3, 4})});
  g([](const std::vector<Tensor>& in) { return stack({in[0], in[1]}, 2); }, {rnd({3, 2}), rnd({3, 2})});
  g([](const std::vector<Tensor>& in) { return in[0].index_select(1, tensor(std::vector<int64_t>{2, 0, 2, 2})); },
    {rnd({3, 5, 2})});
  g([](const std::vector<Tensor>& in) { return in[0].clone().contiguous(); }, {rnd({7})});
}

TEST_CASE("cat skips legacy empty 1-D tensors, as PyTorch (they were refused)") {
  const Tensor x = arange(24.0).reshape({2, 3, 4});
  const Tensor e = empty({0});
  CHECK(cat({x, e}, 0).shape() == Shape{2, 3, 4});
  CHECK(cat({e, x}, 0).sum().item<double>() == 276.0);
  CHECK(cat({e, x}, -1).shape() == Shape{2, 3, 4});
  CHECK(cat({e, x, e, x}, 1).shape() == Shape{2, 6, 4});
  CHECK(cat({e, x, e, x}, 1).sum().item<double>() == 552.0);
  CHECK(cat({e, arange(3.0)}).to_vector<float>() == std::vector<float>{0, 1, 2});
  CHECK(cat({e, zeros({0, 3})}).shape() == Shape{0, 3});
  // Only legacy empty tensors: an empty result; dim is not checked (PyTorch's).
  CHECK(cat({e, e}, 5).shape() == Shape{0});
  CHECK(cat({e}, 0).shape() == Shape{0});
  // The dim is wrapped against the first tensor that is not skipped.
  CHECK_THROWS_CONTAINS(cat({e, x}, 3), "Dimension out of range (expected to be in range of [-3, 2], but got 3)");
  CHECK_THROWS_CONTAINS(cat({zeros({0, 3}), x}), "Tensors must have same number of dimensions: got 2 and 3");
  CHECK_THROWS_CONTAINS(cat({e, scalar_tensor(1.0)}), "zero-dimensional tensor (at position 1) cannot be concatenated");
  // minidl does not promote: a skipped tensor of another dtype is still refused.
  CHECK_THROWS_CONTAINS(cat({x, empty({0}, kFloat64)}), "cat: expected all tensors to have the same dtype");
  // acc = cat({acc, batch}) from an empty start.
  Tensor acc = empty({0});
  for (int i = 0; i < 3; ++i) acc = cat({acc, full({2, 2}, i)});
  CHECK(acc.shape() == Shape{6, 2});
}

TEST_CASE("cat gives a skipped legacy empty tensor a zero-size gradient") {
  const Tensor a = arange(24.0, kFloat64).reshape({2, 3, 4}).requires_grad_();
  const Tensor b = empty({0}, kFloat64).requires_grad_();
  cat({b, a, b}, 1).sum().backward();
  CHECK(b.grad().shape() == Shape{0});
  CHECK(a.grad().sum().item<double>() == 24.0);
  const Tensor c = empty({0}, kFloat64).requires_grad_();
  cat({c, c}).sum().backward();
  CHECK(c.grad().shape() == Shape{0});
  minidl::testing::check_gradients(
      [](const std::vector<Tensor>& in) { return cat({in[1], in[0], in[1]}, 0); },
      {arange(6.0, kFloat64).reshape({3, 2}).requires_grad_(), empty({0}, kFloat64).requires_grad_()});
}

TEST_CASE("narrow names the start as given when it is out of range (PyTorch's message)") {
  // It printed the wrapped start: "but got -1".
  CHECK_THROWS_CONTAINS(zeros({5}).narrow(0, -6, 1),
                        "start out of range (expected to be in range of [-5, 5], but got -6)");
  CHECK_THROWS_CONTAINS(zeros({5}).narrow(0, 6, 1), "(expected to be in range of [-5, 5], but got 6)");
  CHECK(zeros({5}).narrow(0, -5, 2).shape() == Shape{2});
}
