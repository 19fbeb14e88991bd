// Normalization ops: batch_norm, instance_norm, group_norm, layer_norm.
// Forward and backward against an independent double-loop reference
// (tests/norm_reference.h), float64 finite-difference gradient checks in train
// and eval mode, odd inputs, and every error message. Running-stat updates and
// a published PyTorch example: tests/test_norm_ops_running_stats.cpp.
#include <cmath>
#include <utility>
#include <vector>

#include "minidl/ops/batch_norm.h"
#include "minidl/ops/group_norm.h"
#include "minidl/ops/instance_norm.h"
#include "minidl/ops/layer_norm.h"
#include "tests/norm_reference.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::allclose;
using minidl::testing::bn_layout;
using minidl::testing::check_gradients;
using minidl::testing::close;
using minidl::testing::gn_layout;
using minidl::testing::in_layout;
using minidl::testing::Layout;
using minidl::testing::ln_layout;
using minidl::testing::max_abs_diff;
using minidl::testing::ref_backward;
using minidl::testing::ref_forward;
using minidl::testing::ref_stats;
using minidl::testing::RefGrads;
using minidl::testing::RefStats;
using minidl::testing::values;

namespace {

Tensor leaf(const Shape& shape, DType dtype = kFloat64, double scale = 1.0, double shift = 0.0) {
  Tensor t = (randn(shape, dtype) * scale + shift).detach();
  t.requires_grad_();
  return t;
}

}  // namespace

// ---------------------------------------------------------------------------------

TEST_CASE("batch_norm forward and backward match the reference on 2-D to 5-D input") {
  manual_seed(1);
  for (const Shape& shape : {Shape{3, 6}, Shape{3, 6, 5}, Shape{3, 6, 5, 7}, Shape{2, 6, 2, 3, 4}}) {
    CAPTURE(shape_str(shape));
    for (bool training : {true, false}) {
      CAPTURE(training);
      Tensor x = leaf(shape, kFloat64, 2.0, 0.5), w = leaf({6}), b = leaf({6});
      Tensor rm = randn({6}, kFloat64), rv = rand({6}, kFloat64) + 0.5;
      const Layout l = bn_layout(shape);
      RefStats st = training ? ref_stats(values(x), l) : RefStats{values(rm), values(rv), {}};
      if (!training) st.count.assign(6, 1.0);
      Tensor y = batch_norm(x, rm.clone(), rv.clone(), w, b, training, 0.1, 1e-5);
      CHECK(close(ref_forward(values(x), l, st, values(w), values(b), 1e-5), y, 1e-10, 1e-12));
      Tensor dy = randn(shape, kFloat64);
      y.backward(dy);
      const RefGrads g = ref_backward(values(x), values(dy), l, st, values(w), 1e-5, training);
      CHECK(close(g.dx, x.grad(), 1e-9, 1e-11));
      CHECK(close(g.dw, w.grad(), 1e-9, 1e-11));
      CHECK(close(g.db, b.grad(), 1e-9, 1e-11));
    }
  }
}

TEST_CASE("every norm matches the reference on large inputs (parallel paths, long rows) in float64 and float32") {
  manual_seed(2);
  const Shape shape{8, 16, 17, 19};  // 41344 elements: the multithreaded paths
  struct Case {
    const char* name;
    Layout layout;
    std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)> f;
    Shape param_shape;
  };
  const std::vector<Case> cases = {
      {"batch_norm", bn_layout(shape),
       [](const Tensor& x, const Tensor& w, const Tensor& b) { return batch_norm(x, Tensor(), Tensor(), w, b, true); },
       {16}},
      {"instance_norm", in_layout(shape),
       [](const Tensor& x, const Tensor& w, const Tensor& b) { return instance_norm(x, Tensor(), Tensor(), w, b); },
       {16}},
      {"group_norm(4)", gn_layout(shape, 4),
       [](const Tensor& x, const Tensor& w, const Tensor& b) { return group_norm(x, 4, w, b); },
       {16}},
      {"layer_norm(C,H,W)", ln_layout(shape, 3),  // rows of 5168 values: several chunks
       [](const Tensor& x, const Tensor& w, const Tensor& b) { return layer_norm(x, {16, 17, 19}, w, b); },
       {16, 17, 19}},
  };
  for (const Case& c : cases) {
    for (DType dtype : {kFloat64, kFloat32}) {
      CAPTURE(c.name);
      CAPTURE(dtype_name(dtype));
      const bool f64 = dtype == kFloat64;
      Tensor x = leaf(shape, dtype, 3.0, 1.0), w = leaf(c.param_shape, dtype), b = leaf(c.param_shape, dtype);
      Tensor dy = randn(shape, dtype);
      Tensor y = c.f(x, w, b);
      y.backward(dy);
      const RefStats st = ref_stats(values(x), c.layout);
      CHECK(close(ref_forward(values(x), c.layout, st, values(w), values(b), 1e-5), y, f64 ? 1e-10 : 1e-4,
                  f64 ? 1e-11 : 2e-5));
      const RefGrads g = ref_backward(values(x), values(dy), c.layout, st, values(w), 1e-5, true);
      CHECK(close(g.dx, x.grad(), f64 ? 1e-9 : 1e-3, f64 ? 1e-10 : 2e-4));
      CHECK(close(g.dw, w.grad().reshape({-1}), f64 ? 1e-9 : 1e-3, f64 ? 1e-9 : 2e-3));
      CHECK(close(g.db, b.grad().reshape({-1}), f64 ? 1e-9 : 1e-3, f64 ? 1e-9 : 2e-3));
    }
  }
}

TEST_CASE("batch_norm on large (N, C) input (column schedule, uneven row blocks) matches the reference") {
  manual_seed(21);
  const Shape shape{300, 150};  // 45000 elements: multithreaded; 300 rows = 4 blocks of 64 + 44
  for (DType dtype : {kFloat64, kFloat32}) {
    for (bool training : {true, false}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(training);
      const bool f64 = dtype == kFloat64;
      Tensor x = leaf(shape, dtype, 2.0, -1.0), w = leaf({150}, dtype), b = leaf({150}, dtype);
      Tensor rm = randn({150}, dtype), rv = rand({150}, dtype) + 0.5;
      Tensor dy = randn(shape, dtype);
      const Layout l = bn_layout(shape);
      RefStats st = training ? ref_stats(values(x), l) : RefStats{values(rm), values(rv), std::vector<double>(150, 1.0)};
      Tensor y = batch_norm(x, rm.clone(), rv.clone(), w, b, training);
      y.backward(dy);
      CHECK(close(ref_forward(values(x), l, st, values(w), values(b), 1e-5), y, f64 ? 1e-10 : 1e-4, f64 ? 1e-11 : 2e-5));
      const RefGrads g = ref_backward(values(x), values(dy), l, st, values(w), 1e-5, training);
      CHECK(close(g.dx, x.grad(), f64 ? 1e-9 : 1e-3, f64 ? 1e-10 : 2e-4));
      CHECK(close(g.dw, w.grad(), f64 ? 1e-9 : 1e-3, f64 ? 1e-9 : 2e-3));
      CHECK(close(g.db, b.grad(), f64 ? 1e-9 : 1e-3, f64 ? 1e-9 : 2e-3));
    }
  }
}

TEST_CASE("float32 statistics stay accurate for data far from zero") {
  // mean 1e4, std 1: a one-pass sum of squares in float would lose every digit.
  manual_seed(3);
  Tensor x64 = randn({4, 3, 50, 50}, kFloat64) + 1e4;
  Tensor x32 = x64.to(kFloat32);
  const Layout l = bn_layout(x64.shape());
  const RefStats st = ref_stats(values(x32), l);  // the float32 values, exactly, in double
  const Tensor y = batch_norm(x32, Tensor(), Tensor(), Tensor(), Tensor(), true);
  CHECK(close(ref_forward(values(x32), l, st, {}, {}, 1e-5), y, 1e-3, 1e-3));
  const Tensor z = layer_norm(x32, {3, 50, 50});
  CHECK(close(ref_forward(values(x32), ln_layout(x64.shape(), 3), ref_stats(values(x32), ln_layout(x64.shape(), 3)),
                          {}, {}, 1e-5),
              z, 1e-3, 1e-3));
}

TEST_CASE("instance_norm, group_norm and layer_norm match the reference") {
  manual_seed(4);
  const Shape shape{3, 6, 5, 7};
  Tensor x = leaf(shape, kFloat64, 1.5, -0.3), w = leaf({6}), b = leaf({6});
  SUBCASE("instance_norm") {
    const Layout l = in_layout(shape);
    const RefStats st = ref_stats(values(x), l);
    CHECK(close(ref_forward(values(x), l, st, values(w), values(b), 1e-5), instance_norm(x, {}, {}, w, b), 1e-10, 1e-12));
    CHECK(close(ref_forward(values(x), l, st, {}, {}, 1e-3), instance_norm(x, {}, {}, {}, {}, true, 0.1, 1e-3), 1e-10,
                1e-12));
  }
  SUBCASE("group_norm") {
    for (int64_t G : {1, 2, 3, 6}) {
      CAPTURE(G);
      const Layout l = gn_layout(shape, G);
      const RefStats st = ref_stats(values(x), l);
      CHECK(close(ref_forward(values(x), l, st, values(w), values(b), 1e-5), group_norm(x, G, w, b), 1e-10, 1e-12));
    }
    // GroupNorm(C, C) is InstanceNorm; GroupNorm(1, C) is LayerNorm over (C, *).
    CHECK(allclose(group_norm(x, 6), instance_norm(x), 1e-12, 1e-12));
    CHECK(allclose(group_norm(x, 1), layer_norm(x, {6, 5, 7}), 1e-12, 1e-12));
  }
  SUBCASE("layer_norm") {
    for (size_t trailing : {1, 2, 3}) {
      CAPTURE(trailing);
      const Shape ns(shape.end() - static_cast<int64_t>(trailing), shape.end());
      const Layout l = ln_layout(shape, trailing);
      const RefStats st = ref_stats(values(x), l);
      Tensor lw = randn(ns, kFloat64), lb = randn(ns, kFloat64);
      CHECK(close(ref_forward(values(x), l, st, values(lw), values(lb), 1e-5), layer_norm(x, ns, lw, lb), 1e-10, 1e-12));
      CHECK(close(ref_forward(values(x), l, st, values(lw), {}, 1e-5), layer_norm(x, ns, lw), 1e-10, 1e-12));
      CHECK(close(ref_forward(values(x), l, st, {}, {}, 1e-5), layer_norm(x, ns), 1e-10, 1e-12));
    }
  }
}

// ---- gradient checks (float64, odd shapes) -------------------------------------------

TEST_CASE("batch_norm gradcheck: train and eval, affine on and off, 2-D to 5-D") {
  manual_seed(5);
  for (const Shape& shape : {Shape{3, 6}, Shape{3, 6, 5}, Shape{3, 6, 5, 7}, Shape{2, 6, 2, 3, 3}}) {
    for (bool training : {true, false}) {
      for (bool affine : {true, false}) {
        CAPTURE(shape_str(shape));
        CAPTURE(training);
        CAPTURE(affine);
        const Tensor rm = randn({6}, kFloat64), rv = rand({6}, kFloat64) + 0.5;
        std::vector<Tensor> inputs = {leaf(shape)};
        if (affine) inputs.push_back(leaf({6})), inputs.push_back(leaf({6}));
        check_gradients(
            [&](const std::vector<Tensor>& in) {
              return batch_norm(in[0], rm.clone(), rv.clone(), affine ? in[1] : Tensor(), affine ? in[2] : Tensor(),
                                training, 0.1, 1e-5);
            },
            inputs);
      }
    }
  }
}

TEST_CASE("instance_norm gradcheck: train and eval, affine on and off") {
  manual_seed(6);
  for (const Shape& shape : {Shape{3, 6, 5}, Shape{3, 6, 5, 7}}) {
    for (bool use_input_stats : {true, false}) {
      for (bool affine : {true, false}) {
        CAPTURE(shape_str(shape));
        CAPTURE(use_input_stats);
        CAPTURE(affine);
        const Tensor rm = randn({6}, kFloat64), rv = rand({6}, kFloat64) + 0.5;
        std::vector<Tensor> inputs = {leaf(shape)};
        if (affine) inputs.push_back(leaf({6})), inputs.push_back(leaf({6}));
        check_gradients(
            [&](const std::vector<Tensor>& in) {
              return instance_norm(in[0], rm.clone(), rv.clone(), affine ? in[1] : Tensor(),
                                   affine ? in[2] : Tensor(), use_input_stats, 0.1, 1e-5);
            },
            inputs);
      }
    }
  }
}

TEST_CASE("group_norm gradcheck: 2 and 3 groups, affine on and off") {
  manual_seed(7);
  for (const Shape& shape : {Shape{3, 6}, Shape{3, 6, 5, 7}}) {
    for (int64_t groups : {2, 3}) {
      for (bool affine : {true, false}) {
        CAPTURE(shape_str(shape));
        CAPTURE(groups);
        CAPTURE(affine);
        std::vector<Tensor> inputs = {leaf(shape)};
        if (affine) inputs.push_back(leaf({6})), inputs.push_back(leaf({6}));
        check_gradients(
            [&](const std::vector<Tensor>& in) {
              return group_norm(in[0], groups, affine ? in[1] : Tensor(), affine ? in[2] : Tensor(), 1e-5);
            },
            inputs);
      }
    }
  }
}

TEST_CASE("layer_norm gradcheck: over 1, 2 and 3 trailing dims, affine on, weight only, off") {
  manual_seed(8);
  const Shape shape{3, 6, 5, 7};
  for (size_t trailing : {1, 2, 3}) {
    const Shape ns(shape.end() - static_cast<int64_t>(trailing), shape.end());
    for (int affine : {0, 1, 2}) {  // none, weight and bias, weight only
      CAPTURE(trailing);
      CAPTURE(affine);
      std::vector<Tensor> inputs = {leaf(shape)};
      if (affine >= 1) inputs.push_back(leaf(ns));
      if (affine == 1) inputs.push_back(leaf(ns));
      check_gradients(
          [&](const std::vector<Tensor>& in) {
            return layer_norm(in[0], ns, affine >= 1 ? in[1] : Tensor(), affine == 1 ? in[2] : Tensor(), 1e-5);
          },
          inputs);
    }
  }
}

TEST_CASE("only the gradients asked for are computed, and they match the full backward") {
  manual_seed(9);
  const Tensor x0 = randn({3, 6, 5, 7}, kFloat64), dy = randn({3, 6, 5, 7}, kFloat64);
  const Tensor b = randn({6}, kFloat64);
  Tensor w = leaf({6});
  Tensor x = x0.clone();  // does not require grad
  group_norm(x, 3, w, b).backward(dy);
  CHECK_FALSE(x.grad().defined());
  const Tensor w_grad_alone = w.grad();
  w.set_grad(Tensor());
  Tensor x_leaf = x0.clone();
  x_leaf.requires_grad_();
  group_norm(x_leaf, 3, w, b).backward(dy);
  CHECK(x_leaf.grad().defined());
  CHECK(allclose(w_grad_alone, w.grad(), 0, 0));
}

// ---- odd inputs -------------------------------------------------------------------

TEST_CASE("non-contiguous input gives the same result as its contiguous copy") {
  manual_seed(13);
  Tensor base = randn({6, 3, 5, 7}, kFloat64);
  Tensor x = base.transpose(0, 1);  // (3, 6, 5, 7), not contiguous
  REQUIRE_FALSE(x.is_contiguous());
  Tensor xc = x.contiguous();
  Tensor w = randn({6}, kFloat64), b = randn({6}, kFloat64);
  CHECK(allclose(batch_norm(x, {}, {}, w, b, true), batch_norm(xc, {}, {}, w, b, true), 0, 0));
  CHECK(allclose(instance_norm(x, {}, {}, w, b), instance_norm(xc, {}, {}, w, b), 0, 0));
  CHECK(allclose(group_norm(x, 3, w, b), group_norm(xc, 3, w, b), 0, 0));
  CHECK(allclose(layer_norm(x, {5, 7}), layer_norm(xc, {5, 7}), 0, 0));
  // and the gradient flows back to the view's base
  Tensor leaf_base = base.clone().detach();
  leaf_base.requires_grad_();
  Tensor dy = randn({3, 6, 5, 7}, kFloat64);
  group_norm(leaf_base.transpose(0, 1), 3, w, b).backward(dy);
  Tensor xc2 = xc.detach();
  xc2.requires_grad_();
  group_norm(xc2, 3, w, b).backward(dy);
  CHECK(allclose(leaf_base.grad(), xc2.grad().transpose(0, 1).contiguous(), 1e-12, 1e-14));
}

TEST_CASE("empty batches give empty outputs and leave running stats alone") {
  Tensor rm = randn({3}, kFloat64), rv = rand({3}, kFloat64) + 0.5;
  const Tensor rm0 = rm.clone(), rv0 = rv.clone();
  Tensor x = zeros({0, 3, 4}, kFloat64);
  x.requires_grad_();
  Tensor w = ones({3}, kFloat64), b = zeros({3}, kFloat64);
  w.requires_grad_();
  b.requires_grad_();
  Tensor y = batch_norm(x, rm, rv, w, b, true);
  CHECK(y.shape() == Shape{0, 3, 4});
  CHECK(max_abs_diff(rm, rm0) == 0.0);
  CHECK(max_abs_diff(rv, rv0) == 0.0);
  y.backward(zeros({0, 3, 4}, kFloat64));
  CHECK(values(w.grad()) == std::vector<double>{0, 0, 0});
  CHECK(values(b.grad()) == std::vector<double>{0, 0, 0});
  CHECK(group_norm(zeros({0, 6, 4}), 3).shape() == Shape{0, 6, 4});
  CHECK(layer_norm(zeros({0, 4}), {4}).shape() == Shape{0, 4});
  CHECK(instance_norm(zeros({0, 3, 4})).shape() == Shape{0, 3, 4});
}

TEST_CASE("eval batch_norm with one value per channel is allowed; gradient of modified saved input is refused") {
  Tensor rm = zeros({2}), rv = ones({2});
  CHECK(batch_norm(ones({1, 2}), rm, rv, Tensor(), Tensor(), false).shape() == Shape{1, 2});
  Tensor x = randn({4, 2});
  x.requires_grad_();
  Tensor h = x * 2.0;
  Tensor y = batch_norm(h, Tensor(), Tensor(), Tensor(), Tensor(), true);
  {
    NoGradGuard no_grad;
    h.add_(1.0);
  }
  CHECK_THROWS_CONTAINS(y.backward(ones({4, 2})), "modified by an inplace operation");
}

// ---- errors -----------------------------------------------------------------------

TEST_CASE("batch_norm errors use PyTorch's wording") {
  const Tensor x = randn({2, 3, 4});
  CHECK_THROWS_CONTAINS(batch_norm(Tensor(), {}, {}, {}, {}, true), "batch_norm: the input tensor is undefined");
  CHECK_THROWS_CONTAINS(batch_norm(randn({3}), {}, {}, {}, {}, true), "got input of size [3]");
  CHECK_THROWS_CONTAINS(batch_norm(zeros({2, 3}, kInt64), {}, {}, {}, {}, true),
                        "\"batch_norm\" not implemented for 'int64'");
  CHECK_THROWS_CONTAINS(batch_norm(x, Tensor(), Tensor(), {}, {}, false), "running_mean must be defined in evaluation mode");
  CHECK_THROWS_CONTAINS(batch_norm(x, zeros({3}), Tensor(), {}, {}, false), "running_var must be defined in evaluation mode");
  CHECK_THROWS_CONTAINS(batch_norm(x, zeros({3}), Tensor(), {}, {}, true),
                        "running_mean and running_var must either both be None or neither be None");
  CHECK_THROWS_CONTAINS(batch_norm(x, zeros({4}), ones({3}), {}, {}, false), "running_mean should contain 3 elements not 4");
  CHECK_THROWS_CONTAINS(batch_norm(x, zeros({3}), ones({4}), {}, {}, true), "running_var should contain 3 elements not 4");
  CHECK_THROWS_CONTAINS(batch_norm(x, {}, {}, ones({4}), {}, true), "weight should contain 3 elements not 4");
  CHECK_THROWS_CONTAINS(batch_norm(x, {}, {}, {}, ones({4}), true), "bias should contain 3 elements not 4");
  CHECK_THROWS_CONTAINS(batch_norm(x, zeros({3}, kFloat64), ones({3}, kFloat64), {}, {}, true),
                        "mixed dtype (CPU): expect parameter to have scalar type of float32");
  CHECK_THROWS_CONTAINS(batch_norm(randn({1, 2}), {}, {}, {}, {}, true),
                        "Expected more than 1 value per channel when training, got input size [1, 2]");
  CHECK_THROWS_CONTAINS(batch_norm(randn({1, 2, 1}), zeros({2}), ones({2}), {}, {}, true),
                        "Expected more than 1 value per channel when training, got input size [1, 2, 1]");
}

// Weight and bias in one dtype (PyTorch's mixed-type rule): a bfloat16 input
// with a bfloat16 weight and a float32 bias, each legal alone, ran forward on
// the CPU and then failed in autograd (grad_bias made in the weight's dtype),
// and the CUDA kernels (one parameter type) refused the bias with a data_ptr
// error; every norm now refuses the mix up front, naming both dtypes.
TEST_CASE("a 16-bit input with weight and bias of two dtypes is refused by every norm") {
  const Tensor x = randn({4, 6, 3}).to(kBFloat16), rows = randn({4, 6}).to(kBFloat16);
  const Tensor w16 = ones({6}, kBFloat16), b16 = zeros({6}, kBFloat16), w32 = ones({6}), b32 = zeros({6});
  CHECK_THROWS_CONTAINS(batch_norm(x, {}, {}, w16, b32, true),
                        "batch_norm: mixed dtype: expect weight and bias to have one scalar type, but weight is "
                        "bfloat16 and bias is float32");
  for (const auto& [w, b] : {std::pair{w16, b32}, std::pair{w32, b16}}) {
    CHECK_THROWS_CONTAINS(batch_norm(x, {}, {}, w, b, true), "batch_norm: mixed dtype");
    CHECK_THROWS_CONTAINS(instance_norm(x, {}, {}, w, b), "instance_norm: mixed dtype");
    CHECK_THROWS_CONTAINS(group_norm(x, 2, w, b), "group_norm: mixed dtype");
    CHECK_THROWS_CONTAINS(layer_norm(rows, {6}, w, b), "layer_norm: mixed dtype");
    CHECK_THROWS_CONTAINS(batch_norm_elemt(x, w, b, zeros({6}), ones({6}), 1e-5), "batch_norm_elemt: mixed dtype");
  }
  for (const auto& [w, b] : {std::pair{w16, b16}, std::pair{w32, b32}}) {  // one dtype, either: fine
    CHECK(batch_norm(x, {}, {}, w, b, true).dtype() == kBFloat16);
    CHECK(layer_norm(rows, {6}, w, b).dtype() == kBFloat16);
  }
  // The running statistics likewise (one CUDA kernel updates both): float32
  // mean with bfloat16 variance ran on the CPU and failed on CUDA.
  CHECK_THROWS_CONTAINS(batch_norm(x, zeros({6}), ones({6}, kBFloat16), {}, {}, true),
                        "batch_norm: mixed dtype: expect running_mean and running_var to have one scalar type, but "
                        "running_mean is float32 and running_var is bfloat16");
  CHECK_THROWS_CONTAINS(instance_norm(x, zeros({6}, kBFloat16), ones({6}), {}, {}, true), "instance_norm: mixed dtype");
  Tensor rm = zeros({6}), rv = ones({6});  // float32 statistics next to bfloat16 parameters: fine (CUDA dispatches each)
  CHECK(batch_norm(x, rm, rv, w16, b16, true).dtype() == kBFloat16);
}

TEST_CASE("instance_norm errors") {
  CHECK_THROWS_CONTAINS(instance_norm(randn({2, 3, 1})),
                        "Expected more than 1 spatial element when training, got input size [2, 3, 1]");
  CHECK_THROWS_CONTAINS(instance_norm(randn({2, 3})), "Expected more than 1 spatial element when training, got input size [2, 3]");
  CHECK_THROWS_CONTAINS(instance_norm(randn({2, 3, 4}), {}, {}, {}, {}, false),
                        "Expected running_mean and running_var to be defined when use_input_stats is false");
  CHECK_THROWS_CONTAINS(instance_norm(randn({2, 3, 4}), zeros({4}), ones({4})), "running_mean should contain 3 elements not 4");
  CHECK_THROWS_CONTAINS(instance_norm(randn({2, 3, 4}), {}, {}, ones({4})), "weight should contain 3 elements not 4");
  CHECK_THROWS_CONTAINS(instance_norm(randn({4})), "got input of size [4]");
  CHECK_THROWS_CONTAINS(instance_norm(Tensor()), "instance_norm: the input tensor is undefined");
  // One spatial element is fine when the running stats are used.
  CHECK(instance_norm(randn({2, 3, 1}), zeros({3}), ones({3}), {}, {}, false).shape() == Shape{2, 3, 1});
}

TEST_CASE("group_norm errors") {
  CHECK_THROWS_CONTAINS(group_norm(randn({2, 6, 4}), 4),
                        "Expected number of channels in input to be divisible by num_groups, but got input of shape "
                        "[2, 6, 4] and num_groups=4");
  CHECK_THROWS_CONTAINS(group_norm(randn({2, 6, 4}), 3, ones({5})),
                        "Expected weight to be a vector of size equal to the number of channels in input, but got "
                        "weight of shape [5] and input of shape [2, 6, 4]");
  CHECK_THROWS_CONTAINS(group_norm(randn({2, 6, 4}), 3, {}, ones({5})),
                        "Expected bias to be a vector of size equal to the number of channels in input, but got bias "
                        "of shape [5] and input of shape [2, 6, 4]");
  CHECK_THROWS_CONTAINS(group_norm(randn({6}), 3), "Expected at least 2 dimensions for input tensor but received 1");
  CHECK_THROWS_CONTAINS(group_norm(randn({2, 6, 4}), 0), "group_norm: expected num_groups to be positive, got 0");
  CHECK_THROWS_CONTAINS(group_norm(randn({2, 6, 4}), 3, ones({6}, kFloat64)), "mixed dtype (CPU)");
  CHECK_THROWS_CONTAINS(group_norm(Tensor(), 3), "group_norm: the input tensor is undefined");
}

TEST_CASE("layer_norm errors") {
  CHECK_THROWS_CONTAINS(layer_norm(randn({3, 4}), {5}),
                        "Given normalized_shape=[5], expected input with shape [*, 5], but got input of size[3, 4]");
  CHECK_THROWS_CONTAINS(layer_norm(randn({4}), {3, 4}),
                        "Given normalized_shape=[3, 4], expected input with shape [*, 3, 4], but got input of size[4]");
  CHECK_THROWS_CONTAINS(layer_norm(randn({3, 4}), {}),
                        "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one "
                        "element, but got normalized_shape = []");
  CHECK_THROWS_CONTAINS(layer_norm(randn({3, 4}), {4}, ones({5})),
                        "Expected weight to be of same shape as normalized_shape, but got weight of shape [5] and "
                        "normalized_shape = [4]");
  CHECK_THROWS_CONTAINS(layer_norm(randn({3, 4}), {4}, {}, ones({5})),
                        "Expected bias to be of same shape as normalized_shape, but got bias of shape [5] and "
                        "normalized_shape = [4]");
  CHECK_THROWS_CONTAINS(layer_norm(zeros({3, 4}, kInt64), {4}), "\"layer_norm\" not implemented for 'int64'");
  CHECK_THROWS_CONTAINS(layer_norm(Tensor(), {4}), "layer_norm: the input tensor is undefined");
}
