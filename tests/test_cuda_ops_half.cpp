// The cross-backend suite for float16 and bfloat16 (tests/test_cuda_ops.cpp
// has float32/float64/int64): the CUDA kernels that autocast training reaches
// (elementwise and their backward, reductions, normalization with float32 or
// 16-bit parameters, pooling, pad, interpolate, index_select, dropout) run on
// the same 16-bit inputs as the CPU ops, which compute in float32 and round
// once, as the CUDA kernels do (ops/cuda/opmath.h). Tolerances
// (tests/cuda_ops_compare.h): rtol = atol = 1e-3 for float16, 1e-2 for
// bfloat16. The last case trains one step of SmallNet under autocast on both
// backends.
//
// Passed on an H100 (2026-11-27), also under compute-sanitizer memcheck; its
// first run there found the CPU max/min(dim) backward writing past its buffer
// in 16 bits (the CPU reference). Without a device it exits 77, and MINIDL_CUDA_OPS_DRY_RUN=1 runs it CPU against
// CPU (the cases are valid programs, not that CUDA is right).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "minidl/core/autocast.h"
#include "minidl/models/small_net.h"
#include "tests/cuda_ops_compare.h"

using namespace minidl;
using namespace minidl::testing::cross_backend;

namespace {

const DType kHalfTypes[] = {kFloat16, kBFloat16};

Tensor leaf16(const Shape& shape, DType dt) { return randn(shape, dt).requires_grad_(true); }

}  // namespace

TEST_CASE("float16/bfloat16 elementwise ops and their backward: shapes, views, broadcasting") {
  for (const DType dt : kHalfTypes) {
    CAPTURE(dt);
    for (const Shape& shape : {Shape{7}, Shape{3, 5}, Shape{0, 3}, Shape{}}) {
      auto x = [&] { return leaf16(shape, dt); };
      compare("relu", [](auto& v) { return relu(v[0]); }, {x()});
      compare("leaky_relu", [](auto& v) { return leaky_relu(v[0], 0.2); }, {x()});
      compare("gelu", [](auto& v) { return gelu(v[0]); }, {x()});
      compare("sigmoid tanh", [](auto& v) { return add(sigmoid(v[0]), tanh(v[0])); }, {x()});
      compare("neg abs clamp", [](auto& v) { return clamp(abs(neg(v[0])), 0.1, 0.9); }, {x()});
      compare("add alpha", [](auto& v) { return add(v[0], v[1], 0.5); }, {x(), x()});
      compare("sub mul", [](auto& v) { return mul(sub(v[0], v[1], 2.0), v[1]); }, {x(), x()});
      compare("div", [](auto& v) { return div(v[0], v[1]); }, {x(), positive(shape, dt).requires_grad_(true)});
      compare("maximum minimum", [](auto& v) { return add(maximum(v[0], v[1]), minimum(v[0], v[1])); },
              {x(), x()});
      compare("scalars", [](auto& v) { return rdiv(rsub(mul(add(div(v[0], 3.0), 1.5), 2.0), 9.0), 4.0); }, {x()});
    }
    compare("add broadcast (sum_to_shape)", [](auto& v) { return add(v[0], v[1]); }, {leaf16({4, 3}, dt), leaf16({3}, dt)});
    compare("mul outer", [](auto& v) { return mul(v[0], v[1]); }, {leaf16({4, 1}, dt), leaf16({1, 5}, dt)});
    compare("maximum transposed", [](auto& v) { return maximum(transpose(v[0], 0, 1), v[1]); },
            {leaf16({4, 3}, dt), leaf16({3, 4}, dt)});
    compare("relu narrow", [](auto& v) { return relu(narrow(v[0], 1, 1, 3)); }, {leaf16({4, 5}, dt)});
    compare("mul permuted expanded", [](auto& v) { return mul(permute(v[0], {2, 0, 1}), expand(v[1], {4, 2, 3})); },
            {leaf16({2, 3, 4}, dt), leaf16({1, 1, 3}, dt)});
  }
}

TEST_CASE("float16/bfloat16 reductions and softmax: sum, mean, var, max/min, argmax") {
  for (const DType dt : kHalfTypes) {
    CAPTURE(dt);
    compare("sum dims", [](auto& v) { return sum(v[0], {0, 2}); }, {leaf16({3, 4, 5}, dt)});
    compare("sum leading (columns)", [](auto& v) { return sum(v[0], {0}); }, {leaf16({50, 7}, dt)});
    compare("mean all", [](auto& v) { return mean(v[0]); }, {leaf16({100, 33}, dt)});
    compare("var", [](auto& v) { return var(v[0], {1}); }, {leaf16({6, 300}, dt)});
    compare("amax", [](auto& v) { return amax(v[0], {1}); }, {leaf16({5, 7}, dt)});
    compare("max dim", [](auto& v) { return max(v[0], 1).values; }, {leaf16({5, 7}, dt)});
    compare("min all ties", [](auto& v) { return min(v[0]); }, {tensor({1, -2, 3, -2}, {4}, dt).requires_grad_(true)});
    compare("argmax", [](auto& v) { return v[0].argmax(1); }, {randn({8, 10}, dt)});
    // Not 16-bit under CUDA autocast (its fp32 list), but the kernels take it.
    compare("softmax last", [](auto& v) { return softmax(v[0], -1); }, {leaf16({4, 10}, dt)});
    compare("log_softmax inner", [](auto& v) { return log_softmax(v[0], 1); }, {leaf16({2, 5, 3}, dt)});
  }
}

TEST_CASE("float16/bfloat16 normalization: float32 or 16-bit weight/bias, running statistics") {
  for (const DType dt : kHalfTypes) {
    CAPTURE(dt);
    for (const DType pdt : {kFloat32, dt}) {  // autocast's BatchNorm: float32 parameters and buffers
      CAPTURE(pdt);
      const Tensor rm = randn({3}, pdt), rv = positive({3}, pdt);
      const std::vector<Tensor> cpu = {leaf16({6, 3, 4}, dt), leaf({3}, pdt), leaf({3}, pdt), rm.clone(), rv.clone()};
      const std::vector<Tensor> gpu = compare("batch_norm train, running stats", [](auto& v) {
        return batch_norm(v[0], v[3], v[4], v[1], v[2], true, 0.3);
      }, cpu);
      CHECK(close(gpu[3], cpu[3]));
      CHECK(close(gpu[4], cpu[4]));
      compare("batch_norm eval", [](auto& v) { return batch_norm(v[0], v[3], v[4], v[1], v[2], false); },
              {leaf16({5, 3, 2, 2}, dt), leaf({3}, pdt), leaf({3}, pdt), rm, rv});
      compare("batch_norm parameter gradients only, chunked", [](auto& v) {  // one reduction for both (norm_core.cu)
        return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true);
      }, {randn({40, 2, 32, 32}, dt), leaf({2}, pdt), leaf({2}, pdt)});
      // Bias without weight: only in the input's dtype (ops/norm_core.cpp gives
      // grad_bias the input's dtype when there is no weight, which autograd
      // refuses for a float32 bias on the CPU too; not a CUDA kernel matter).
      if (pdt == dt)
        compare("batch_norm bias only", [](auto& v) { return batch_norm(v[0], Tensor(), Tensor(), Tensor(), v[1], true); },
                {leaf16({4, 3, 5}, dt), leaf({3}, pdt)});
    }
    compare("layer_norm", [](auto& v) { return layer_norm(v[0], {8}, v[1], v[2]); },
            {leaf16({4, 8}, dt), leaf16({8}, dt), leaf16({8}, dt)});
    // A 16-bit input with float32 weight and bias (each norm takes them, as
    // autocast's BatchNorm): the fused single-pass kernels and the tiled column
    // reduction (130 rows: 2 chunks) with float32 as the parameter type.
    compare("layer_norm float32 parameters", [](auto& v) { return layer_norm(v[0], {45}, v[1], v[2]); },
            {leaf16({130, 45}, dt), leaf({45}), leaf({45})});
    compare("group_norm float32 parameters", [](auto& v) { return group_norm(v[0], 2, v[1], v[2]); },
            {leaf16({2, 4, 3, 3}, dt), leaf({4}), leaf({4})});
    // 16x16 planes: the fused backward's per-channel parameter sums.
    compare("group_norm fused parameter sums", [](auto& v) { return group_norm(v[0], 2, v[1], v[2]); },
            {leaf16({3, 4, 16, 16}, dt), leaf({4}), leaf({4})});
    // Weight and bias of two dtypes: refused before any kernel (norm::check_param_dtypes),
    // as on the CPU; the kernels take one parameter type.
    CHECK_THROWS_WITH_AS(layer_norm(on_target(randn({4, 8}, dt)), {8}, on_target(ones({8}, dt)), on_target(zeros({8}))),
                         doctest::Contains("layer_norm: mixed dtype"), Error);
    compare("group_norm", [](auto& v) { return group_norm(v[0], 2, v[1], v[2]); },
            {leaf16({2, 4, 3, 3}, dt), leaf16({4}, dt), leaf16({4}, dt)});
    // The tiled column reduction of the weight/bias gradients: rows past a
    // 128-row chunk, channels not a multiple of 32, 1 row.
    // 8 values a 16-byte vector: 3 x 45 leaves a tail of 7 (ops/cuda/vectorized.cuh).
    for (const Shape& s : {Shape{129, 45}, Shape{1, 45}, Shape{3, 45}})
      compare("layer_norm tiled parameter gradients", [](auto& v) { return layer_norm(v[0], {45}, v[1], v[2]); },
              {leaf16(s, dt), leaf16({45}, dt), leaf16({45}, dt)});
  }
}

// SyncBatchNorm's building blocks on a 16-bit input (ops/batch_norm_sync.cpp,
// ops/cuda/batch_norm_sync.cu) with float32 or 16-bit weight and running
// statistics: the statistics, the ranks' merge with the running-statistics
// update, the normalization, the local backward sums with each parameter
// gradient alone, and the elementwise backward. batch_norm_backward_reduce
// passes the core no weight, so the parameters' dtype comes from grad_weight
// (ops/norm_core.h param_dtype_source; a float32 grad_weight without
// grad_bias once took the input's dtype on CUDA and failed).
TEST_CASE("float16/bfloat16 SyncBN building blocks: float32 or 16-bit parameters") {
  for (const DType dt : kHalfTypes) {
    for (const DType pdt : {kFloat32, dt}) {
      CAPTURE(dt);
      CAPTURE(pdt);
      const int64_t C = 3;
      const Tensor x = randn({4, C, 5}, dt), dy = randn({4, C, 5}, dt);
      const BatchNormStats sc = batch_norm_stats(x, 1e-5), sg = batch_norm_stats(on_target(x), 1e-5);
      CHECK(close(sg.mean, sc.mean));
      CHECK(close(sg.invstd, sc.invstd));

      const Tensor means = randn({3, C}), invstds = positive({3, C}, kFloat32);
      const Tensor counts = tensor({20, 0, 7}, {3}, kFloat32);  // the middle rank is empty
      const Tensor rm = randn({C}, pdt), rv = positive({C}, pdt);
      Tensor rm_c = rm.clone(), rv_c = rv.clone(), rm_g = on_target(rm), rv_g = on_target(rv);
      const auto [mean_c, invstd_c] =
          batch_norm_gather_stats_with_counts(x, means, invstds, rm_c, rv_c, 0.1, 1e-5, counts);
      const auto [mean_g, invstd_g] = batch_norm_gather_stats_with_counts(
          on_target(x), on_target(means), on_target(invstds), rm_g, rv_g, 0.1, 1e-5, on_target(counts));
      CHECK(close(mean_g, mean_c));
      CHECK(close(invstd_g, invstd_c));
      CHECK(close(rm_g, rm_c));
      CHECK(close(rv_g, rv_c));

      const Tensor w = randn({C}, pdt), b = randn({C}, pdt);
      CHECK(close(batch_norm_elemt(on_target(x), on_target(w), on_target(b), on_target(mean_c), on_target(invstd_c), 1e-5),
                  batch_norm_elemt(x, w, b, mean_c, invstd_c, 1e-5)));

      const Tensor mean_l = randn({C}), invstd_l = positive({C}, kFloat32);
      const Tensor sum_dy = randn({C}), sum_dy_xmu = randn({C});
      const Tensor counts64 = tensor(std::vector<int64_t>{20, 0, 7}, {3});
      for (const bool with_weight : {true, false}) {
        CAPTURE(with_weight);
        const Tensor wt = with_weight ? w : Tensor();
        for (const int wanted : {7, 6, 4, 2, 1, 3}) {  // bits: input, weight, bias
          CAPTURE(wanted);
          const bool input_g = wanted & 4, weight_g = wanted & 2, bias_g = wanted & 1;
          const BatchNormBackwardReduce c =
              batch_norm_backward_reduce(dy, x, mean_l, invstd_l, wt, input_g, weight_g, bias_g);
          const BatchNormBackwardReduce g = batch_norm_backward_reduce(
              on_target(dy), on_target(x), on_target(mean_l), on_target(invstd_l), on_target(wt), input_g, weight_g,
              bias_g);
          for (auto [got, want] : {std::pair{g.sum_dy, c.sum_dy}, {g.sum_dy_xmu, c.sum_dy_xmu},
                                   {g.grad_weight, c.grad_weight}, {g.grad_bias, c.grad_bias}}) {
            REQUIRE(got.defined() == want.defined());
            if (want.defined()) CHECK(close(got, want));
          }
        }
        CHECK(close(batch_norm_backward_elemt(on_target(dy), on_target(x), on_target(mean_c), on_target(invstd_c),
                                              on_target(wt), on_target(sum_dy), on_target(sum_dy_xmu),
                                              on_target(counts64)),
                    batch_norm_backward_elemt(dy, x, mean_c, invstd_c, wt, sum_dy, sum_dy_xmu, counts64)));
      }
    }
  }
}

TEST_CASE("float16/bfloat16 pooling: max, avg, adaptive (global) and their backward") {
  for (const DType dt : kHalfTypes) {
    CAPTURE(dt);
    compare("max_pool2d", [](auto& v) { return max_pool2d(v[0], {2, 2}); }, {leaf16({2, 3, 6, 6}, dt)});
    compare("max_pool2d indices", [](auto& v) { return std::get<1>(max_pool2d_with_indices(v[0], {3, 3}, {2, 2})); },
            {randn({2, 2, 7, 7}, dt)});
    compare("avg_pool2d pad", [](auto& v) { return avg_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}); }, {leaf16({1, 2, 7, 7}, dt)});
    compare("adaptive_avg_pool2d global", [](auto& v) { return adaptive_avg_pool2d(v[0], {1, 1}); },
            {leaf16({2, 3, 5, 5}, dt)});
    compare("adaptive_avg_pool2d uneven", [](auto& v) { return adaptive_avg_pool2d(v[0], {3, 4}); },
            {leaf16({1, 2, 7, 5}, dt)});
    compare("adaptive_max_pool2d global", [](auto& v) { return adaptive_max_pool2d(v[0], {1, 1}); },
            {leaf16({2, 3, 5, 5}, dt)});
    compare("max_pool3d", [](auto& v) { return max_pool3d(v[0], {2, 2, 2}); }, {leaf16({1, 2, 4, 4, 4}, dt)});
  }
}

TEST_CASE("float16/bfloat16 pad, interpolate, index_select") {
  for (const DType dt : kHalfTypes) {
    CAPTURE(dt);
    compare("pad constant", [](auto& v) { return pad(v[0], {1, 2, 0, 3}, "constant", 1.5); }, {leaf16({2, 3, 4}, dt)});
    compare("pad reflect", [](auto& v) { return pad(v[0], {2, 1, 1, 2}, "reflect"); }, {leaf16({2, 3, 4, 5}, dt)});
    compare("interpolate bilinear", [](auto& v) {
      return interpolate(v[0], {.size = {7, 9}, .mode = "bilinear", .align_corners = false});
    }, {leaf16({1, 2, 4, 5}, dt)});
    compare("interpolate nearest", [](auto& v) { return interpolate(v[0], {.size = {7, 9}, .mode = "nearest"}); },
            {leaf16({1, 2, 4, 5}, dt)});
    // The CPU index_select takes no 16-bit tensors: the CUDA result against the
    // CPU's float32 one rounded (a gather is exact; its backward adds in float).
    if (g_target.type != DeviceType::CUDA) continue;
    const Tensor index = tensor(std::vector<int64_t>{2, 0, 2, 1}, {4});
    const Tensor x = randn({3, 5}, dt), up = randn({4, 5}, dt);
    const Tensor x32 = x.to(kFloat32).requires_grad_(true), xg = on_target(x).requires_grad_(true);
    const Tensor y32 = index_select(x32, 0, index), yg = index_select(xg, 0, on_target(index));
    CHECK(close(yg, y32.detach().to(dt)));
    sum(mul(y32, up.to(kFloat32))).backward();
    sum(mul(yg, on_target(up))).backward();
    CHECK(close(xg.grad(), x32.grad().to(dt)));
  }
}

TEST_CASE("float16/bfloat16 dropout: the same seed gives the same mask, backward") {
  for (const DType dt : kHalfTypes) {
    CAPTURE(dt);
    const Tensor x = ones({20000}, TensorOptions(dt).device(g_target)).requires_grad_(true);
    manual_seed(5);
    const Tensor y = dropout(x, 0.3);
    manual_seed(5);
    CHECK(to_cpu(y).to_vector<double>() == to_cpu(dropout(x.detach(), 0.3)).to_vector<double>());
    const double scale = full({}, 1.0 / 0.7, dt).item<double>();  // 1 / (1 - p) rounded once
    int64_t kept = 0, other = 0;
    for (double v : to_cpu(y).to_vector<double>()) {
      kept += v != 0.0;
      other += v != 0.0 && v != scale;
    }
    CHECK(other == 0);
    CHECK(std::abs(static_cast<double>(kept) - 14000.0) < 450.0);  // about 7 sd of Binomial(2e4, 0.7)
    sum(y).backward();
    CHECK(close(x.grad(), to_cpu(y.detach())));
  }
}

// End to end: one forward and backward of SmallNet under autocast (conv and
// linear in 16 bits, BatchNorm on 16-bit activations with float32 parameters,
// ReLU, max pools, the loss in float32) on both backends from the same
// weights. cuDNN's 16-bit convolutions and the CPU's differ by roundings and a
// max pool may then pick another element, so the loss and the gradient norms
// are compared loosely (5%), not elementwise.
TEST_CASE("float16/bfloat16 SmallNet forward and backward under autocast") {
  for (const DType dt : kHalfTypes) {
    CAPTURE(dt);
    const auto opts = models::ModelOptions().width(0.125);
    manual_seed(3);
    models::SmallNet cpu_net(opts);
    manual_seed(3);
    models::SmallNet gpu_net(opts);
    gpu_net->to(g_target);
    const Tensor x = randn({4, 3, 16, 16}), target = tensor(std::vector<int64_t>{1, 0, 7, 3}, {4});
    auto run = [&](models::SmallNet& net, Device device) {
      Tensor logits;
      {
        amp::autocast region(device.type, dt);
        logits = net->forward(x.to(device));
      }
      CHECK(logits.dtype() == dt);
      const Tensor loss = cross_entropy(logits.to(kFloat32), target.to(device));
      loss.backward();
      double sq = 0;
      for (const Tensor& p : net->parameters()) {
        REQUIRE(p.grad().defined());
        CHECK(p.grad().dtype() == kFloat32);
        sq += sum(pow(to_cpu(p.grad()).to(kFloat64), 2.0)).item<double>();
      }
      return std::vector<double>{loss.item<double>(), std::sqrt(sq)};
    };
    const std::vector<double> c = run(cpu_net, Device(kCPU)), g = run(gpu_net, g_target);
    CHECK(std::isfinite(g[0]));
    CHECK(std::isfinite(g[1]));
    CHECK(g[0] == doctest::Approx(c[0]).epsilon(0.05));
    CHECK(g[1] == doctest::Approx(c[1]).epsilon(0.05));
  }
}

int main(int argc, char** argv) { return cross_backend_main(argc, argv); }
