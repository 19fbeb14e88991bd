// SyncBatchNorm's building blocks. The oracle: split one batch into uneven
// chunks (one of them empty, as a rank with no data), run the chunks through
// batch_norm_stats -> batch_norm_gather_stats_with_counts -> batch_norm_elemt,
// and backward_reduce -> (sum over chunks, what the all-reduce does) ->
// batch_norm_backward_elemt; everything must equal plain batch_norm on the
// whole batch: outputs, input/weight/bias gradients and running stats.
#include <cmath>
#include <vector>

#include "ops/batch_norm.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::allclose;
using minidl::testing::max_abs_diff;

namespace {

struct ChunkedResult {
  Tensor y, dx, grad_weight, grad_bias, running_mean, running_var;
};

// Runs the SyncBN pipeline over chunks of x along dim 0 (sizes `split`).
ChunkedResult run_chunked(const Tensor& x, const Tensor& dy, const Tensor& w, const Tensor& b,
                          const std::vector<int64_t>& split, Tensor running_mean, Tensor running_var,
                          double momentum, double eps, DType count_dtype) {
  std::vector<Tensor> xs, dys, means, invstds;
  std::vector<double> counts;
  int64_t offset = 0;
  for (int64_t n : split) {
    xs.push_back(x.narrow(0, offset, n));
    dys.push_back(dy.narrow(0, offset, n));
    offset += n;
    const BatchNormStats s = batch_norm_stats(xs.back(), eps);
    CHECK(s.count == xs.back().numel() / x.size(1));
    means.push_back(s.mean);
    invstds.push_back(s.invstd);
    counts.push_back(static_cast<double>(s.count));
  }
  REQUIRE(offset == x.size(0));
  const Tensor count_tensor = tensor(counts, {static_cast<int64_t>(counts.size())}, kFloat64).to(count_dtype);
  auto [mean, invstd] = batch_norm_gather_stats_with_counts(x, stack(means), stack(invstds), running_mean,
                                                            running_var, momentum, eps, count_tensor);
  ChunkedResult r{Tensor(), Tensor(), Tensor(), Tensor(), running_mean, running_var};
  std::vector<Tensor> ys;
  for (const Tensor& xk : xs) ys.push_back(batch_norm_elemt(xk, w, b, mean, invstd, eps));
  r.y = cat(ys);

  // backward: local reductions, then their sums (the all-reduce), then dx per chunk
  Tensor sum_dy = zeros({x.size(1)}, x.dtype()), sum_dy_xmu = zeros({x.size(1)}, x.dtype());
  r.grad_weight = zeros({x.size(1)}, x.dtype());
  r.grad_bias = zeros({x.size(1)}, x.dtype());
  for (size_t k = 0; k < xs.size(); ++k) {
    const BatchNormBackwardReduce red = batch_norm_backward_reduce(dys[k], xs[k], mean, invstd, w, true, true, true);
    sum_dy = sum_dy + red.sum_dy;
    sum_dy_xmu = sum_dy_xmu + red.sum_dy_xmu;
    r.grad_weight = r.grad_weight + red.grad_weight;
    r.grad_bias = r.grad_bias + red.grad_bias;
  }
  std::vector<Tensor> dxs;
  for (size_t k = 0; k < xs.size(); ++k)
    dxs.push_back(batch_norm_backward_elemt(dys[k], xs[k], mean, invstd, w, sum_dy, sum_dy_xmu, count_tensor));
  r.dx = cat(dxs);
  return r;
}

void check_equivalence(const Shape& shape, const std::vector<int64_t>& split, DType dtype, DType count_dtype,
                       double momentum) {
  const double eps = 1e-5;
  const bool f64 = dtype == kFloat64;
  const double rtol = f64 ? 1e-10 : 2e-4, atol = f64 ? 1e-11 : 2e-5;
  const int64_t C = shape[1];
  Tensor x = (randn(shape, dtype) * 2.0 + 0.7).detach();
  const Tensor dy = randn(shape, dtype);
  Tensor w = (randn({C}, dtype) + 1.0).detach(), b = randn({C}, dtype).detach();
  const Tensor rm0 = randn({C}, dtype), rv0 = rand({C}, dtype) + 0.5;

  // plain batch_norm on the whole batch
  Tensor xr = x.clone().detach(), wr = w.clone().detach(), br = b.clone().detach();
  xr.requires_grad_();
  wr.requires_grad_();
  br.requires_grad_();
  Tensor rm_ref = rm0.clone(), rv_ref = rv0.clone();
  Tensor y_ref = batch_norm(xr, rm_ref, rv_ref, wr, br, true, momentum, eps);
  y_ref.backward(dy);

  const ChunkedResult r = run_chunked(x, dy, w, b, split, rm0.clone(), rv0.clone(), momentum, eps, count_dtype);
  CHECK_MESSAGE(allclose(r.y, y_ref, rtol, atol), "output ", max_abs_diff(r.y, y_ref));
  CHECK_MESSAGE(allclose(r.dx, xr.grad(), rtol, atol), "dx ", max_abs_diff(r.dx, xr.grad()));
  CHECK_MESSAGE(allclose(r.grad_weight, wr.grad(), rtol, f64 ? atol : 1e-3), "dw ", max_abs_diff(r.grad_weight, wr.grad()));
  CHECK_MESSAGE(allclose(r.grad_bias, br.grad(), rtol, f64 ? atol : 1e-3), "db ", max_abs_diff(r.grad_bias, br.grad()));
  CHECK_MESSAGE(allclose(r.running_mean, rm_ref, rtol, atol), "running_mean ", max_abs_diff(r.running_mean, rm_ref));
  CHECK_MESSAGE(allclose(r.running_var, rv_ref, rtol, atol), "running_var ", max_abs_diff(r.running_var, rv_ref));
}

}  // namespace

TEST_CASE("chunked SyncBN pipeline equals batch_norm: uneven chunks with an empty one") {
  manual_seed(1);
  SUBCASE("4-D, float64, int64 counts") { check_equivalence({7, 3, 4, 5}, {3, 0, 1, 3}, kFloat64, kInt64, 0.1); }
  SUBCASE("4-D, float64, float counts, momentum 1") {
    check_equivalence({7, 3, 4, 5}, {0, 5, 2}, kFloat64, kFloat64, 1.0);
  }
  SUBCASE("3-D, float32") { check_equivalence({9, 4, 6}, {2, 0, 7}, kFloat32, kFloat32, 0.1); }
  SUBCASE("large 4-D, float32 (parallel paths)") {
    check_equivalence({12, 8, 20, 20}, {5, 0, 4, 3}, kFloat32, kInt64, 0.1);
  }
}

TEST_CASE("chunked SyncBN pipeline equals batch_norm when one chunk has a single value per channel") {
  manual_seed(2);
  // (N, C) input: the chunk of size 1 holds one value per channel (allowed
  // with several ranks; its variance is 0 and its invstd 1/sqrt(eps)).
  check_equivalence({6, 5}, {1, 0, 5}, kFloat64, kInt64, 0.1);
  check_equivalence({4, 3, 1, 1}, {1, 3}, kFloat64, kFloat64, 0.1);
  // large (N, C) chunks: the column schedule, multithreaded
  check_equivalence({400, 120}, {1, 150, 0, 249}, kFloat64, kInt64, 0.1);
}

TEST_CASE("batch_norm_stats: per-channel mean and invstd, count, empty input") {
  const Tensor x = tensor({1.0, 2.0, 10.0, 20.0, 3.0, 4.0, 30.0, 40.0}, {2, 2, 2}, kFloat64);
  const BatchNormStats s = batch_norm_stats(x, 0.5);
  CHECK(s.count == 4);
  CHECK(allclose(s.mean, tensor({2.5, 25.0}, {2}, kFloat64)));
  // biased variances: 1.25 and 125
  CHECK(allclose(s.invstd, tensor({1.0 / std::sqrt(1.75), 1.0 / std::sqrt(125.5)}, {2}, kFloat64)));
  const BatchNormStats e = batch_norm_stats(zeros({0, 3, 4}), 1e-5);
  CHECK(e.count == 0);
  CHECK(e.mean.shape() == Shape{3});
  CHECK(max_abs_diff(e.mean, zeros({3})) == 0.0);
}

TEST_CASE("batch_norm_gather_stats_with_counts: Chan's merge, dropped empty ranks, global unbiased running var") {
  // two ranks: {1, 3} (mean 2, var 1) and {5, 7, 9} (mean 7, var 8/3); eps 0
  const Tensor means = tensor({2.0, 7.0, 0.0}, {3, 1}, kFloat64);
  const Tensor invstds = tensor({1.0, 1.0 / std::sqrt(8.0 / 3.0), 0.0}, {3, 1}, kFloat64);
  const Tensor counts = tensor(std::vector<int64_t>{2, 3, 0}, {3});
  Tensor rm = zeros({1}, kFloat64), rv = ones({1}, kFloat64);
  auto [mean, invstd] =
      batch_norm_gather_stats_with_counts(zeros({1}, kFloat64), means, invstds, rm, rv, 0.5, 0.0, counts);
  // all five values {1, 3, 5, 7, 9}: mean 5, biased var 8, unbiased var 10
  CHECK(mean.item() == doctest::Approx(5.0));
  CHECK(invstd.item() == doctest::Approx(1.0 / std::sqrt(8.0)));
  CHECK(rm.item() == doctest::Approx(2.5));
  CHECK(rv.item() == doctest::Approx(0.5 + 0.5 * 10.0));
  // nobody has data: nothing to learn, running stats untouched
  Tensor rm2 = full({1}, 3.0, kFloat64), rv2 = full({1}, 4.0, kFloat64);
  (void)batch_norm_gather_stats_with_counts(zeros({1}, kFloat64), means, invstds, rm2, rv2, 0.5, 1e-5,
                                            tensor(std::vector<int64_t>{0, 0, 0}, {3}));
  CHECK(rm2.item() == 3.0);
  CHECK(rv2.item() == 4.0);
  // the result takes the dtype of the input it is given
  auto [m32, i32] = batch_norm_gather_stats_with_counts(zeros({1}), means.to(kFloat32), invstds.to(kFloat32), Tensor(),
                                                        Tensor(), 0.1, 0.0, counts);
  CHECK(m32.dtype() == kFloat32);
  CHECK(i32.dtype() == kFloat32);
}

TEST_CASE("batch_norm_backward_reduce computes only what is asked for") {
  manual_seed(3);
  const Tensor x = randn({4, 3, 5}, kFloat64), dy = randn({4, 3, 5}, kFloat64);
  const BatchNormStats s = batch_norm_stats(x, 1e-5);
  const BatchNormBackwardReduce all = batch_norm_backward_reduce(dy, x, s.mean, s.invstd, ones({3}, kFloat64), true, true, true);
  // grad_weight = sum_dy_xmu * invstd, grad_bias = sum_dy
  CHECK(allclose(all.grad_weight, all.sum_dy_xmu * s.invstd, 1e-12, 1e-14));
  CHECK(allclose(all.grad_bias, all.sum_dy, 1e-12, 1e-14));
  CHECK(allclose(all.sum_dy, dy.sum({0, 2}), 1e-12, 1e-14));
  const BatchNormBackwardReduce some = batch_norm_backward_reduce(dy, x, s.mean, s.invstd, Tensor(), false, true, false);
  CHECK_FALSE(some.sum_dy.defined());
  CHECK_FALSE(some.sum_dy_xmu.defined());
  CHECK_FALSE(some.grad_bias.defined());
  CHECK(allclose(some.grad_weight, all.grad_weight, 1e-12, 1e-14));
}

TEST_CASE("SyncBN building blocks: errors") {
  const Tensor x = randn({4, 3, 5});
  const BatchNormStats s = batch_norm_stats(x, 1e-5);
  CHECK_THROWS_CONTAINS(batch_norm_stats(randn({3}), 1e-5), "batch_norm_stats: expected input of shape (N, C, *)");
  CHECK_THROWS_CONTAINS(batch_norm_stats(Tensor(), 1e-5), "batch_norm_stats: the input tensor is undefined");
  CHECK_THROWS_CONTAINS(batch_norm_gather_stats_with_counts(x, s.mean, s.invstd, Tensor(), Tensor(), 0.1, 1e-5, ones({1})),
                        "expected mean and invstd of shape (world_size, C)");
  CHECK_THROWS_CONTAINS(batch_norm_gather_stats_with_counts(x, stack({s.mean, s.mean}), stack({s.invstd, s.invstd}),
                                                            Tensor(), Tensor(), 0.1, 1e-5, ones({3})),
                        "expected one count per rank (2)");
  CHECK_THROWS_CONTAINS(batch_norm_gather_stats_with_counts(x, stack({s.mean}), stack({s.invstd}), zeros({4}), ones({4}),
                                                            0.1, 1e-5, ones({1})),
                        "running_mean should contain 3 elements not 4");
  CHECK_THROWS_CONTAINS(batch_norm_elemt(x, ones({4}), Tensor(), s.mean, s.invstd, 1e-5), "weight should contain 3 elements not 4");
  CHECK_THROWS_CONTAINS(batch_norm_elemt(x, Tensor(), Tensor(), zeros({2}), s.invstd, 1e-5),
                        "batch_norm_elemt: expected mean with 3 elements (one per channel), got [2]");
  CHECK_THROWS_CONTAINS(batch_norm_backward_reduce(randn({4, 3}), x, s.mean, s.invstd, Tensor(), true, true, true),
                        "batch_norm_backward_reduce: expected grad_out like the input");
  CHECK_THROWS_CONTAINS(batch_norm_backward_elemt(x, x, s.mean, s.invstd, Tensor(), s.mean, s.mean, zeros({2})),
                        "batch_norm_backward_elemt: the counts sum to 0");
  CHECK_THROWS_CONTAINS(batch_norm_backward_elemt(x, x, s.mean, s.invstd, Tensor(), s.mean, s.mean, Tensor()),
                        "batch_norm_backward_elemt: count is undefined");
}
