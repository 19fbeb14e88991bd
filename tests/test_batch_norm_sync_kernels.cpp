// SyncBatchNorm's building blocks. The oracle: split one batch into uneven
// chunks (one of them empty, as a rank with no data), run the chunks through
// batch_norm_stats -> batch_norm_gather_stats_with_counts -> batch_norm_elemt,
// and backward_reduce -> (sum over chunks, what the all-reduce does) ->
// batch_norm_backward_elemt; everything must equal plain batch_norm on the
// whole batch: outputs, input/weight/bias gradients and running stats. Then
// the same pipeline on the test device: the CPU's results bit for bit, with no
// CPU storage made (so no host read of device values).
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "tests/device_test_util.h"
#include "minidl/ops/batch_norm.h"
#include "minidl/ops/batch_norm_sync.h"
#include "minidl/ops/cuda/norm_math.h"
#include "minidl/ops/norm_core.h"
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

  // backward: local reductions, then their sums (the all-reduce), then dx per
  // chunk; sums in the statistics' dtype, parameter gradients in the weight's
  Tensor sum_dy = zeros({x.size(1)}, mean.dtype()), sum_dy_xmu = zeros({x.size(1)}, mean.dtype());
  r.grad_weight = zeros({x.size(1)}, w.dtype());
  r.grad_bias = zeros({x.size(1)}, w.dtype());
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

// Same value, NaN-ness and zero sign, as float32.
bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const std::vector<float> x = a.to(kFloat32).to_vector<float>(), y = b.to(kFloat32).to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i)
    if (std::memcmp(&x[i], &y[i], sizeof(float)) != 0) return false;
  return true;
}

// PyTorch's combinations (batch_norm_elemt's mixed type, the gather's dispatch
// on running_mean's dtype): a float16/bfloat16 input with float32 or
// same-dtype weight, bias and running statistics. The 16-bit pipeline must be
// the float32 pipeline on the same values with each output rounded once.
TEST_CASE("chunked SyncBN pipeline on float16/bfloat16 input, float32 or 16-bit parameters: float32's, rounded once") {
  for (DType dtype : {kBFloat16, kFloat16})
    for (bool params16 : {false, true}) {
      const DType P = params16 ? dtype : kFloat32;
      INFO(std::string(dtype_name(dtype)), " input, ", std::string(dtype_name(P)), " parameters");
      manual_seed(5);
      const Shape shape{7, 3, 4, 5};
      const std::vector<int64_t> split{3, 0, 1, 3};
      const Tensor x = (randn(shape) * 2.0 + 0.7).to(dtype), dy = randn(shape).to(dtype);
      const Tensor w = (randn({3}) + 1.0).to(P), b = randn({3}).to(P);
      const Tensor rm0 = randn({3}).to(P), rv0 = (rand({3}) + 0.5).to(P);
      const ChunkedResult r = run_chunked(x, dy, w, b, split, rm0.clone(), rv0.clone(), 0.1, 1e-5, kInt64);
      const ChunkedResult ref = run_chunked(x.to(kFloat32), dy.to(kFloat32), w.to(kFloat32), b.to(kFloat32), split,
                                            rm0.to(kFloat32), rv0.to(kFloat32), 0.1, 1e-5, kInt64);
      CHECK(batch_norm_stats(x, 1e-5).mean.dtype() == kFloat32);  // PyTorch's accumulate type
      CHECK(r.y.dtype() == dtype);
      CHECK(r.dx.dtype() == dtype);
      CHECK(r.running_mean.dtype() == P);
      CHECK(r.grad_weight.dtype() == P);
      CHECK(same_bits(r.y, ref.y.to(dtype)));
      CHECK(same_bits(r.dx, ref.dx.to(dtype)));
      CHECK(same_bits(r.running_mean, ref.running_mean.to(P)));
      CHECK(same_bits(r.running_var, ref.running_var.to(P)));
      if (!params16) {  // float32 gradients, summed over the chunks in float32 as the reference's
        CHECK(same_bits(r.grad_weight, ref.grad_weight));
        CHECK(same_bits(r.grad_bias, ref.grad_bias));
      } else {  // each chunk's rounded to 16 bits, then summed in 16 bits
        CHECK_MESSAGE(allclose(r.grad_weight.to(kFloat32), ref.grad_weight, 3e-2, 3e-2), "dw ",
                      max_abs_diff(r.grad_weight.to(kFloat32), ref.grad_weight));
        CHECK_MESSAGE(allclose(r.grad_bias.to(kFloat32), ref.grad_bias, 3e-2, 3e-2), "db ",
                      max_abs_diff(r.grad_bias.to(kFloat32), ref.grad_bias));
      }
    }
  // A float32 input takes float32 parameters only (PyTorch's mixed-type rule).
  const Tensor x = randn({4, 3, 2, 2});
  const Tensor m = zeros({3}), is = ones({3});
  CHECK_THROWS_CONTAINS(batch_norm_elemt(x, ones({3}, kBFloat16), Tensor(), m, is, 1e-5), "mixed dtype");
}

// The CUDA kernels' per-channel math (ops/cuda/norm_math.h, compiled into the
// CUDA kernels; not run on a GPU here) on the CPU, against the CPU kernel, for
// every running-statistics / weight dtype the kernels now dispatch.
TEST_CASE("sync_gather_channel and sync_weighted_sum (the CUDA kernels' math) equal the CPU kernels, 16-bit included") {
  manual_seed(6);
  const int64_t W = 3, C = 5;
  const Tensor means = randn({W, C}, kFloat64), invstds = rand({W, C}, kFloat64) + 0.5;
  const Tensor counts = tensor({4.0, 0.0, 7.0}, {W}, kFloat64);
  const Tensor sum_dy = randn({C}, kFloat64), sum_dy_xmu = randn({C}, kFloat64);
  for (DType P : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    INFO(std::string(dtype_name(P)));
    const Tensor rm0 = randn({C}).to(P), rv0 = (rand({C}) + 0.5).to(P), w = randn({C}).to(P);
    Tensor rm = rm0.clone(), rv = rv0.clone();
    auto [mean, invstd] = batch_norm_gather_stats_with_counts(zeros({1, C, 1}, kFloat64), means, invstds, rm, rv,
                                                              0.3, 1e-5, counts);
    std::vector<double> m(C), is(C);
    Tensor rm_d = rm0.clone(), rv_d = rv0.clone();
    MINIDL_DISPATCH_ALL_AND_HALF(P, "test", [&] {
      if constexpr (std::is_floating_point_v<scalar_t> || is_half_v<scalar_t>) {
        auto* prm = static_cast<scalar_t*>(rm_d.raw_data());
        auto* prv = static_cast<scalar_t*>(rv_d.raw_data());
        for (int64_t c = 0; c < C; ++c)
          cuda_math::sync_gather_channel(counts.data_ptr<double>(), means.data_ptr<double>(),
                                         invstds.data_ptr<double>(), W, C, c, 1e-5, 0.3, m.data(), is.data(), prm, prv);
        const auto* pw = static_cast<const scalar_t*>(w.raw_data());
        BatchNormBackwardSumsArgs a;
        a.sum_dy = sum_dy, a.sum_dy_xmu = sum_dy_xmu, a.weight = w, a.counts = counts;
        a.weighted_sum_dy = empty({C}, kFloat64), a.weighted_sum_dy_xmu = empty({C}, kFloat64);
        a.total = empty({1}, kFloat64);
        batch_norm_backward_sums_stub(DeviceType::CPU)(a);
        for (int64_t c = 0; c < C; ++c) {
          CHECK(cuda_math::sync_weighted_sum(sum_dy.data_ptr<double>()[c], pw, c) ==
                a.weighted_sum_dy.data_ptr<double>()[c]);
          CHECK(cuda_math::sync_weighted_sum(sum_dy_xmu.data_ptr<double>()[c], pw, c) ==
                a.weighted_sum_dy_xmu.data_ptr<double>()[c]);
        }
      }
    });
    CHECK(mean.to(kFloat64).to_vector<double>() == m);
    CHECK(invstd.to(kFloat64).to_vector<double>() == is);
    CHECK(same_bits(rm_d, rm));
    CHECK(same_bits(rv_d, rv));
    CHECK_FALSE(same_bits(rm, rm0));  // the statistics were updated
  }
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

// ---- the same pipeline on the test device (core/test_device.h) --------------
// Its kernels are the CPU ones on separate memory, so every result must equal
// the CPU's bit for bit, and the device calls must create no CPU storage: no
// host read of the gathered statistics, the sums or the counts.

namespace {

using minidl::testing::cpu_storages;

// Same dtype, shape and bytes (a CPU copy of each).
bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor ha = a.to(kCPU).contiguous(), hb = b.to(kCPU).contiguous();
  return ha.dtype() == hb.dtype() && ha.shape() == hb.shape() &&
         std::memcmp(ha.raw_data(), hb.raw_data(), ha.nbytes()) == 0;
}

struct PipelineInputs {
  Tensor x, dy, w, b, running_mean, running_var, counts;
  PipelineInputs to(Device d) const {
    auto move = [d](const Tensor& t) { return t.defined() ? t.to(d) : t; };
    return {move(x), move(dy), move(w), move(b), move(running_mean), move(running_var), move(counts)};
  }
};

struct PipelineOutputs {
  std::vector<Tensor> all;  // stats, merged stats, y, sums, dx, grads, running stats
};

// The chunked pipeline (as run_chunked), the gathered statistics in float64
// as SyncBatchNorm packs them; every tensor already on its device.
PipelineOutputs run_pipeline(const PipelineInputs& in, const std::vector<int64_t>& split, double momentum,
                             double eps) {
  PipelineOutputs out;
  std::vector<Tensor> xs, dys, means, invstds;
  int64_t offset = 0;
  for (int64_t n : split) {
    xs.push_back(in.x.narrow(0, offset, n));
    dys.push_back(in.dy.narrow(0, offset, n));
    offset += n;
    const BatchNormStats s = batch_norm_stats(xs.back(), eps);
    means.push_back(s.mean.to(kFloat64));
    invstds.push_back(s.invstd.to(kFloat64));
    out.all.insert(out.all.end(), {s.mean, s.invstd});
  }
  auto [mean, invstd] = batch_norm_gather_stats_with_counts(in.x, stack(means), stack(invstds), in.running_mean,
                                                            in.running_var, momentum, eps, in.counts);
  out.all.insert(out.all.end(), {mean, invstd});
  std::vector<Tensor> ys, dxs;
  for (const Tensor& xk : xs) ys.push_back(batch_norm_elemt(xk, in.w, in.b, mean, invstd, eps));
  out.all.push_back(cat(ys));
  const int64_t C = in.x.size(1);
  Tensor sum_dy = zeros({C}, in.x.options()), sum_dy_xmu = zeros({C}, in.x.options());
  for (size_t k = 0; k < xs.size(); ++k) {
    const BatchNormBackwardReduce red =
        batch_norm_backward_reduce(dys[k], xs[k], mean, invstd, in.w, true, in.w.defined(), true);
    sum_dy = sum_dy + red.sum_dy;
    sum_dy_xmu = sum_dy_xmu + red.sum_dy_xmu;
    out.all.insert(out.all.end(), {red.sum_dy, red.sum_dy_xmu, red.grad_bias});
    if (red.grad_weight.defined()) out.all.push_back(red.grad_weight);
  }
  for (size_t k = 0; k < xs.size(); ++k)
    dxs.push_back(batch_norm_backward_elemt(dys[k], xs[k], mean, invstd, in.w, sum_dy, sum_dy_xmu, in.counts));
  out.all.push_back(cat(dxs));
  if (in.running_mean.defined()) out.all.insert(out.all.end(), {in.running_mean, in.running_var});
  return out;
}

void check_device_pipeline(const Shape& shape, const std::vector<int64_t>& split, DType dtype, DType count_dtype,
                           double momentum, bool affine, bool running) {
  const double eps = 1e-5;
  const int64_t C = shape[1];
  PipelineInputs host{(randn(shape, dtype) * 2.0 + 0.7).detach(), randn(shape, dtype)};
  if (affine) host.w = (randn({C}, dtype) + 1.0).detach(), host.b = randn({C}, dtype);
  if (running) host.running_mean = randn({C}, dtype), host.running_var = rand({C}, dtype) + 0.5;
  std::vector<double> counts;
  for (int64_t n : split) counts.push_back(static_cast<double>(n * (host.x.numel() / shape[0] / C)));
  host.counts = tensor(counts, {static_cast<int64_t>(counts.size())}, kFloat64).to(count_dtype);
  const PipelineInputs dev = host.to(kTestDevice);  // made before counting

  const PipelineOutputs ref = run_pipeline(host, split, momentum, eps);
  const int64_t before = cpu_storages();
  const PipelineOutputs got = run_pipeline(dev, split, momentum, eps);
  CHECK(cpu_storages() - before == 0);
  REQUIRE(got.all.size() == ref.all.size());
  for (size_t i = 0; i < ref.all.size(); ++i) {
    CAPTURE(i);
    CHECK(got.all[i].device() == kTestDevice);
    CHECK(same_bits(got.all[i], ref.all[i]));
  }
}

}  // namespace

TEST_CASE("SyncBN building blocks on the test device: the CPU's results bit for bit, no CPU storage") {
  manual_seed(4);
  SUBCASE("float64, uneven chunks with an empty one, int64 counts") {
    check_device_pipeline({7, 3, 4, 5}, {3, 0, 1, 3}, kFloat64, kInt64, 0.1, true, true);
  }
  SUBCASE("float64, empty first chunk, float counts, momentum 1, no affine") {
    check_device_pipeline({7, 3, 4, 5}, {0, 5, 2}, kFloat64, kFloat64, 1.0, false, true);
  }
  SUBCASE("float32, (N, C), one value per channel in a chunk, no running stats") {
    check_device_pipeline({9, 4}, {1, 0, 8}, kFloat32, kFloat32, 0.1, true, false);
  }
  SUBCASE("float32, large (parallel paths), cumulative momentum") {
    check_device_pipeline({12, 8, 20, 20}, {5, 0, 4, 3}, kFloat32, kInt64, 1.0 / 3.0, true, true);
  }
}

TEST_CASE("batch_norm_gather_stats_with_counts on the test device: all ranks empty, device checks") {
  const Tensor means = zeros({2, 3}, kFloat64).to(kTestDevice), invstds = zeros({2, 3}, kFloat64).to(kTestDevice);
  const Tensor counts = zeros({2}, kInt64).to(kTestDevice);
  Tensor rm = full({3}, 3.0, kFloat64).to(kTestDevice), rv = full({3}, 4.0, kFloat64).to(kTestDevice);
  const Tensor x = zeros({0, 3}, kFloat64).to(kTestDevice);
  const int64_t before = cpu_storages();
  auto [mean, invstd] = batch_norm_gather_stats_with_counts(x, means, invstds, rm, rv, 0.5, 1e-5, counts);
  CHECK(cpu_storages() - before == 0);
  // nothing to learn: the running stats stay; mean and invstd are 0
  CHECK(rm.to_vector<double>() == std::vector<double>(3, 3.0));
  CHECK(rv.to_vector<double>() == std::vector<double>(3, 4.0));
  CHECK(mean.to_vector<double>() == std::vector<double>(3, 0.0));
  CHECK(invstd.to_vector<double>() == std::vector<double>(3, 0.0));
  // every tensor must be on the input's device: host counts are refused, not read
  CHECK_THROWS_CONTAINS(
      batch_norm_gather_stats_with_counts(x, means, invstds, rm, rv, 0.5, 1e-5, zeros({2}, kFloat64)),
      "batch_norm_gather_stats_with_counts: expected all tensors to be on the same device");
  const Tensor xs = randn({4, 3}, kFloat64).to(kTestDevice);
  CHECK_THROWS_CONTAINS(batch_norm_backward_elemt(xs, xs, mean, invstd, Tensor(), mean, mean, ones({2}, kFloat64)),
                        "batch_norm_backward_elemt_sums: expected all tensors to be on the same device");
}

TEST_CASE("the device merge and backward_elemt equal the former host computation bit for bit (float64)") {
  // The host loops the kernels replaced (ops/batch_norm_sync.cpp before the
  // merge kernel): same formulas, same order, so the same bits.
  manual_seed(5);
  const int64_t W = 4, C = 3;
  const double eps = 1e-5, momentum = 0.1;
  const Tensor x = randn({6, C, 2, 2}, kFloat64), dy = randn({6, C, 2, 2}, kFloat64);
  const Tensor w = randn({C}, kFloat64) + 1.0;
  const Tensor means = randn({W, C}, kFloat64), invstds = rand({W, C}, kFloat64) + 0.5;
  const std::vector<double> cnt{3, 0, 17, 4};
  const Tensor counts = tensor(cnt, {W}, kFloat64);
  const std::vector<double> m = means.to_vector<double>(), is = invstds.to_vector<double>();
  const Tensor rm0 = randn({C}, kFloat64), rv0 = rand({C}, kFloat64) + 0.5;
  std::vector<double> mean(C), invstd(C), rm = rm0.to_vector<double>(), rv = rv0.to_vector<double>();
  for (int64_t c = 0; c < C; ++c) {
    double n = 0, avg = 0, var_n = 0;
    for (int64_t k = 0; k < W; ++k) {
      const double nk = cnt[k];
      if (nk < 1) continue;
      const double mk = m[k * C + c];
      const double sd = 1.0 / is[k * C + c];
      const double vk = (sd * sd - eps) * nk;
      const double factor = 1.0 / (n + nk);
      var_n += vk + (avg - mk) * (avg - mk) * n * nk * factor;
      avg = n * factor * avg + nk * factor * mk;
      n += nk;
    }
    mean[c] = avg;
    invstd[c] = 1.0 / std::sqrt(var_n / n + eps);
    rm[c] = (1.0 - momentum) * rm[c] + momentum * avg;
    rv[c] = (1.0 - momentum) * rv[c] + momentum * (var_n / (n - 1));
  }
  for (Device d : {kCPU, kTestDevice}) {
    CAPTURE(d);
    Tensor drm = rm0.clone().to(d), drv = rv0.clone().to(d);  // fresh copies: updated in place
    auto [gm, gi] = batch_norm_gather_stats_with_counts(x.to(d), means.to(d), invstds.to(d), drm, drv, momentum, eps,
                                                        counts.to(d));
    CHECK(gm.to_vector<double>() == mean);
    CHECK(gi.to_vector<double>() == invstd);
    CHECK(drm.to_vector<double>() == rm);
    CHECK(drv.to_vector<double>() == rv);
  }

  // backward_elemt: the host weighted the sums and added the counts, and the
  // core's backward took them with a double count.
  const Tensor mt = tensor(mean, {C}, kFloat64), it = tensor(invstd, {C}, kFloat64);
  const Tensor s1 = randn({C}, kFloat64), s2 = randn({C}, kFloat64);
  std::vector<double> ws1 = s1.to_vector<double>(), ws2 = s2.to_vector<double>();
  const std::vector<double> wv = w.to_vector<double>();
  for (int64_t c = 0; c < C; ++c) ws1[c] *= wv[c], ws2[c] *= wv[c];
  double total = 0;
  for (double c : cnt) total += c;
  norm::NormBackwardArgs args;
  args.grad_out = dy;
  args.input = x;
  args.weight = w;
  args.geo = {6, C, 1, 4, C};
  args.mean = mt;
  args.invstd = it;
  args.given_sum_dy = tensor(ws1, {C}, kFloat64);
  args.given_sum_dy_xmu = tensor(ws2, {C}, kFloat64);
  args.given_count = total;
  args.grad_input = empty(x.shape(), kFloat64);
  norm::norm_backward_stub(kCPU)(args);
  for (Device d : {kCPU, kTestDevice}) {
    CAPTURE(d);
    const Tensor dx =
        batch_norm_backward_elemt(dy.to(d), x.to(d), mt.to(d), it.to(d), w.to(d), s1.to(d), s2.to(d), counts.to(d));
    CHECK(dx.to_vector<double>() == args.grad_input.to_vector<double>());
  }
}

// The parameters' dtype the CUDA norm kernels are instantiated with
// (ops/cuda/norm_core.cu with_param_type): batch_norm_backward_reduce passes
// the core no weight (its sums are unweighted), so a float32 grad_weight
// without grad_bias must decide; it once fell to grad_bias, undefined, and the
// CUDA kernel took the 16-bit input's dtype and refused the float32 gradient.
TEST_CASE("NormBackwardArgs::param_dtype_source: the weight, else grad_weight, else grad_bias") {
  norm::NormBackwardArgs a;
  a.input = zeros({2, 3}, kBFloat16);
  CHECK_FALSE(a.param_dtype_source().defined());
  a.grad_bias = zeros({3}, kFloat32);
  CHECK(a.param_dtype_source().is_same(a.grad_bias));
  a.grad_bias = Tensor();
  a.grad_weight = zeros({3}, kFloat32);  // batch_norm_backward_reduce with weight_g alone
  CHECK(a.param_dtype_source().is_same(a.grad_weight));
  a.grad_bias = zeros({3}, kFloat32);
  CHECK(a.param_dtype_source().is_same(a.grad_weight));
  a.weight = zeros({3}, kFloat32);
  CHECK(a.param_dtype_source().is_same(a.weight));
  norm::NormForwardArgs f;
  CHECK_FALSE(f.param_dtype_source().defined());
  f.bias = zeros({3}, kFloat32);
  CHECK(f.param_dtype_source().is_same(f.bias));
  f.weight = zeros({3}, kBFloat16);
  CHECK(f.param_dtype_source().is_same(f.weight));
  // The CPU kernels take the combination (each parameter by its own dtype):
  // the weight's gradient alone equals the one computed with the bias's.
  const Tensor x = randn({4, 3, 5}).to(kBFloat16), dy = randn({4, 3, 5}).to(kBFloat16);
  const Tensor mean = randn({3}), invstd = rand({3}) + 0.5, w = randn({3});
  const BatchNormBackwardReduce alone = batch_norm_backward_reduce(dy, x, mean, invstd, w, false, true, false);
  const BatchNormBackwardReduce both = batch_norm_backward_reduce(dy, x, mean, invstd, w, true, true, true);
  REQUIRE(alone.grad_weight.dtype() == kFloat32);
  CHECK(alone.grad_weight.to_vector<float>() == both.grad_weight.to_vector<float>());
}
