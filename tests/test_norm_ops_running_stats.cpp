// Normalization ops' running statistics, against hand computation on the
// double-loop reference (tests/norm_reference.h): batch_norm's momentum update
// with the unbiased variance (eval leaves them alone), the cumulative factor
// 1/k of momentum=None, instance_norm's per-instance updates averaged over the
// batch and its use_input_stats=false path; and a published PyTorch example
// (a BatchNorm2d training step). The rest of the norm ops: tests/test_norm_ops.cpp.
#include <cmath>
#include <cstdint>
#include <vector>

#include "minidl/ops/batch_norm.h"
#include "minidl/ops/instance_norm.h"
#include "tests/norm_reference.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::allclose;
using minidl::testing::bn_layout;
using minidl::testing::close;
using minidl::testing::in_layout;
using minidl::testing::max_abs_diff;
using minidl::testing::ref_forward;
using minidl::testing::ref_stats;
using minidl::testing::RefStats;
using minidl::testing::values;

// ---- running statistics -----------------------------------------------------------

TEST_CASE("batch_norm updates running stats with momentum and the unbiased variance") {
  manual_seed(10);
  const Shape shape{3, 6, 5, 7};
  const int64_t n = 3 * 5 * 7;
  Tensor x = randn(shape, kFloat64) * 2.0 + 1.0;
  Tensor rm = randn({6}, kFloat64), rv = rand({6}, kFloat64) + 0.5;
  const std::vector<double> rm0 = values(rm), rv0 = values(rv);
  const uint64_t v0 = rm.version();
  (void)batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.1, 1e-5);
  CHECK(rm.version() > v0);
  const RefStats st = ref_stats(values(x), bn_layout(shape));
  std::vector<double> em(6), ev(6);
  for (int c = 0; c < 6; ++c) {
    em[c] = 0.9 * rm0[c] + 0.1 * st.mean[c];
    ev[c] = 0.9 * rv0[c] + 0.1 * st.var[c] * n / (n - 1);
  }
  CHECK(close(em, rm, 1e-12, 1e-14));
  CHECK(close(ev, rv, 1e-12, 1e-14));

  // Eval reads the running stats and leaves them alone.
  const Tensor rm_before = rm.clone(), rv_before = rv.clone();
  (void)batch_norm(x, rm, rv, Tensor(), Tensor(), false, 0.1, 1e-5);
  CHECK(max_abs_diff(rm, rm_before) == 0.0);
  CHECK(max_abs_diff(rv, rv_before) == 0.0);

  // float32 running stats with float32 input
  Tensor rm32 = zeros({6}), rv32 = ones({6});
  (void)batch_norm(x.to(kFloat32), rm32, rv32, Tensor(), Tensor(), true, 0.1, 1e-5);
  for (int c = 0; c < 6; ++c) em[c] = 0.1 * st.mean[c], ev[c] = 0.9 + 0.1 * st.var[c] * n / (n - 1);
  CHECK(close(em, rm32, 1e-5, 1e-6));
  CHECK(close(ev, rv32, 1e-5, 1e-6));
}

TEST_CASE("batch_norm with the cumulative factor 1/k averages the batch statistics") {
  // What BatchNorm(momentum=None) does: factor 1/num_batches_tracked.
  manual_seed(11);
  Tensor rm = full({4}, 7.0, kFloat64), rv = full({4}, 9.0, kFloat64);  // overwritten by batch 1 (factor 1)
  std::vector<double> sum_mean(4, 0.0), sum_var(4, 0.0);
  for (int k = 1; k <= 3; ++k) {
    const Shape shape{2 + k, 4, 3};  // batches of different sizes
    const int64_t n = (2 + k) * 3;
    Tensor x = randn(shape, kFloat64) * static_cast<double>(k) + static_cast<double>(k);
    (void)batch_norm(x, rm, rv, Tensor(), Tensor(), true, 1.0 / k, 1e-5);
    const RefStats st = ref_stats(values(x), bn_layout(shape));
    for (int c = 0; c < 4; ++c) sum_mean[c] += st.mean[c], sum_var[c] += st.var[c] * n / (n - 1);
  }
  std::vector<double> em(4), ev(4);
  for (int c = 0; c < 4; ++c) em[c] = sum_mean[c] / 3, ev[c] = sum_var[c] / 3;
  CHECK(close(em, rm, 1e-12, 1e-13));
  CHECK(close(ev, rv, 1e-12, 1e-13));
}

TEST_CASE("instance_norm averages the per-instance running-stat updates over the batch") {
  manual_seed(12);
  const Shape shape{3, 4, 5, 2};
  const int64_t S = 10;
  Tensor x = randn(shape, kFloat64) * 1.5 + 0.5;
  Tensor rm = randn({4}, kFloat64), rv = rand({4}, kFloat64) + 0.5;
  const std::vector<double> rm0 = values(rm), rv0 = values(rv);
  Tensor y = instance_norm(x, rm, rv, Tensor(), Tensor(), true, 0.2, 1e-5);
  const RefStats st = ref_stats(values(x), in_layout(shape));
  // PyTorch: repeat the running stats N times, update each copy with its
  // instance (unbiased variance), then average the copies.
  std::vector<double> em(4, 0.0), ev(4, 0.0);
  for (int64_t n = 0; n < 3; ++n)
    for (int64_t c = 0; c < 4; ++c) {
      em[c] += (0.8 * rm0[c] + 0.2 * st.mean[n * 4 + c]) / 3;
      ev[c] += (0.8 * rv0[c] + 0.2 * st.var[n * 4 + c] * S / (S - 1)) / 3;
    }
  CHECK(close(em, rm, 1e-12, 1e-14));
  CHECK(close(ev, rv, 1e-12, 1e-14));
  // Normalization itself used the instance statistics.
  CHECK(allclose(y, instance_norm(x), 1e-12, 1e-12));

  // use_input_stats=false normalizes every instance with the running stats.
  RefStats running{values(rm), values(rv), {}};
  running.mean.resize(0), running.var.resize(0);
  for (int64_t n = 0; n < 3; ++n)
    for (int64_t c = 0; c < 4; ++c) running.mean.push_back(values(rm)[c]), running.var.push_back(values(rv)[c]);
  const Tensor rm_before = rm.clone();
  CHECK(close(ref_forward(values(x), in_layout(shape), running, {}, {}, 1e-5),
              instance_norm(x, rm, rv, Tensor(), Tensor(), false), 1e-10, 1e-12));
  CHECK(max_abs_diff(rm, rm_before) == 0.0);
}

TEST_CASE("published example: BatchNorm2d(2) training step with running_mean 2, running_var 1") {
  // torch.manual_seed(42); x = torch.randn(1, 2, 2, 2), shown to 4 decimals as
  // [[[[0.3367, 0.1288], [0.2345, 0.2303]], [[-1.1229, -0.1863], [2.2082, -0.6380]]]];
  // these are those float32 values exactly.
  const std::vector<float> xv = {0.33669036626815796f,  0.12880940735340118f,  0.23446236550807953f,
                                 0.23033303022384644f,  -1.1228563785552979f,  -0.18632829189300537f,
                                 2.2082014083862305f,   -0.637997031211853f};
  Tensor x = tensor(xv, {1, 2, 2, 2});
  Tensor rm = tensor({2.0, 2.0}), rv = tensor({1.0, 1.0});
  Tensor y = batch_norm(x, rm, rv, ones({2}), zeros({2}), true, 0.1, 1e-5);
  const std::vector<double> expected = {1.4150, -1.4102, 0.0257, -0.0305, -0.9276, -0.1964, 1.6731, -0.5491};
  const std::vector<double> got = values(y);
  auto to_4_decimals = [](double got, double want) { return std::abs(got - want) <= 5e-5; };
  for (size_t i = 0; i < expected.size(); ++i) CHECK_MESSAGE(to_4_decimals(got[i], expected[i]), got[i]);
  const std::vector<double> mean = values(rm), var = values(rv);
  CHECK_MESSAGE(to_4_decimals(mean[0], 1.8233), mean[0]);
  CHECK_MESSAGE(to_4_decimals(mean[1], 1.8065), mean[1]);
  CHECK_MESSAGE(to_4_decimals(var[0], 0.9007), var[0]);
  CHECK_MESSAGE(to_4_decimals(var[1], 1.1187), var[1]);
}

TEST_CASE("batch_norm with inf and NaN inputs: eval gradients and the running mean as PyTorch's") {
  // Eval: dx = w invstd dy whatever x is (PyTorch 2.15: 1.4999925 everywhere);
  // (x - mean) * 0 made it NaN at the inf and NaN inputs.
  const Tensor x = tensor({std::nan(""), INFINITY, 1.0, 2.0}, {4, 1}).requires_grad_();
  batch_norm(x, zeros({1}), ones({1}), full({1}, 1.5), zeros({1}), false).backward(ones({4, 1}));
  for (double g : x.grad().to_vector<double>()) CHECK(g == doctest::Approx(1.4999925).epsilon(1e-7));
  const Tensor x4 = tensor({std::nan(""), INFINITY, 1.0, 2.0, -INFINITY, 0.0, 3.0, 4.0}, {1, 2, 2, 2}).requires_grad_();
  batch_norm(x4, zeros({2}), ones({2}), full({2}, 1.5), zeros({2}), false).backward(ones({1, 2, 2, 2}));
  for (double g : x4.grad().to_vector<double>()) CHECK(g == doctest::Approx(1.4999925).epsilon(1e-7));
  // Train: an inf in the first of several 2048-value chunks kept the running
  // mean inf only until a finite chunk was merged (inf - inf); PyTorch: inf, nan.
  Tensor big = randn({1, 1, 4096});
  big.narrow(2, 0, 1).fill_(INFINITY);
  Tensor rm = zeros({1}), rv = ones({1});
  batch_norm(big, rm, rv, Tensor(), Tensor(), true, 0.1);
  CHECK(std::isinf(rm.item<double>()));
  CHECK(std::isnan(rv.item<double>()));
}
