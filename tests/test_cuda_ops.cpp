// The cross-backend suite, in the shape of ggml's test-backend-ops: every op
// with a CUDA kernel runs on the CPU and on CUDA with the same inputs (several
// shapes, non-contiguous views, broadcasting, empty tensors), and the forward
// outputs and the input/parameter gradients are compared with a tolerance per
// dtype: float32 rtol 1.3e-6 / atol 1e-5 (PyTorch's) with TF32 off for
// cuBLAS and cuDNN (main() holds a BackendSettingsGuard), float64 1e-7 / 1e-7,
// integers exactly (tests/cuda_ops_compare.h; float16/bfloat16 cases:
// tests/test_cuda_ops_half.cpp). tests/cuda_ops_coverage.h maps every DispatchStub to the
// case that exercises it; the last TEST_CASE fails when a stub with a CUDA
// kernel is in no entry (tests/test_cuda_registry.cpp checks the same table
// without a GPU). matmul/linear/conv, copy_/fill_, the multi-tensor optimizer
// kernels and the GradScaler kernels are compared in their own GPU tests.
//
// Without a CUDA device it prints why and exits 77 before doctest runs, which
// CTest reports as skipped (SKIP_RETURN_CODE, tests/CMakeLists.txt), in every
// build. MINIDL_CUDA_OPS_DRY_RUN=1 runs the cases with the CPU as the second
// backend instead: it checks that every case is a valid program (shapes, CPU
// support, dtypes), never that CUDA is right.
//
// Ran on an H100 (2026-11-26, 2026-11-27): all cases pass, also under compute-sanitizer
// memcheck and racecheck (scripts/gpu-check.sh run); the contiguous elementwise
// cases (vector tail, unaligned views) came after and have not run there. Its first run there
// found the norm layers' weight/bias gradients swapped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "minidl/core/backend_settings.h"
#include "minidl/core/cuda.h"
#include "minidl/minidl.h"
#include "minidl/ops/fused_optim.h"
#include "tests/cuda_ops_compare.h"
#include "tests/cuda_ops_coverage.h"
#include "tests/test_util.h"

using namespace minidl;

using namespace minidl::testing::cross_backend;

namespace {

const DType kDTypes[] = {kFloat32, kFloat64};

}  // namespace

TEST_CASE("elementwise ops: shapes, views, broadcasting, empty; float32, float64") {
  for (const DType dt : kDTypes) {
    CAPTURE(dt);
    for (const Shape& shape : {Shape{7}, Shape{3, 5}, Shape{2, 3, 4}, Shape{0, 3}, Shape{}}) {
      auto x = [&] { return leaf(shape, dt); };
      compare("relu", [](auto& v) { return relu(v[0]); }, {x()});
      compare("leaky_relu", [](auto& v) { return leaky_relu(v[0], 0.2); }, {x()});
      compare("gelu", [](auto& v) { return gelu(v[0]); }, {x()});
      compare("gelu tanh", [](auto& v) { return gelu(v[0], "tanh"); }, {x()});
      compare("sigmoid", [](auto& v) { return sigmoid(v[0]); }, {x()});
      compare("tanh", [](auto& v) { return tanh(v[0]); }, {x()});
      compare("exp", [](auto& v) { return exp(v[0]); }, {x()});
      compare("neg abs", [](auto& v) { return abs(neg(v[0])); }, {x()});
      compare("pow 3", [](auto& v) { return pow(v[0], 3.0); }, {x()});
      compare("clamp", [](auto& v) { return clamp(v[0], -0.5, 0.7); }, {x()});
      const Tensor p = positive(shape, dt).requires_grad_(true);
      compare("log sqrt rsqrt", [](auto& v) { return add(log(v[0]), mul(sqrt(v[0]), rsqrt(v[0]))); }, {p});
      compare("add alpha", [](auto& v) { return add(v[0], v[1], 0.5); }, {x(), x()});
      compare("sub", [](auto& v) { return sub(v[0], v[1], 2.0); }, {x(), x()});
      compare("mul", [](auto& v) { return mul(v[0], v[1]); }, {x(), x()});
      compare("div", [](auto& v) { return div(v[0], v[1]); }, {x(), positive(shape, dt).requires_grad_(true)});
      compare("minimum", [](auto& v) { return minimum(v[0], v[1]); }, {x(), x()});
      compare("scalars", [](auto& v) { return rdiv(rsub(mul(add(div(v[0], 3.0), 1.5), 2.0), 9.0), 4.0); }, {x()});
    }
    // Broadcasting (bias-like, outer product, 0-d) and non-contiguous views.
    compare("add broadcast", [](auto& v) { return add(v[0], v[1]); }, {leaf({4, 3}, dt), leaf({3}, dt)});
    compare("mul outer", [](auto& v) { return mul(v[0], v[1]); }, {leaf({4, 1}, dt), leaf({1, 5}, dt)});
    compare("sub 0-d", [](auto& v) { return sub(v[0], v[1]); }, {leaf({2, 3}, dt), leaf({}, dt)});
    compare("mul broadcast empty", [](auto& v) { return mul(v[0], v[1]); }, {leaf({0, 1}, dt), leaf({3}, dt)});
    compare("maximum transposed", [](auto& v) { return maximum(transpose(v[0], 0, 1), v[1]); },
            {leaf({4, 3}, dt), leaf({3, 4}, dt)});
    compare("exp narrow", [](auto& v) { return exp(narrow(v[0], 1, 1, 3)); }, {leaf({4, 5}, dt)});
    // Contiguous operands take 16-byte vectors (cuda_kernels::launch_contiguous_map)
    // with a scalar tail; a contiguous view one element in is unaligned: the strided path.
    compare("relu mul contiguous (vectors + tail)", [](auto& v) { return mul(relu(v[0]), v[1]); },
            {leaf({1001}, dt), leaf({1001}, dt)});
    compare("add contiguous unaligned views", [](auto& v) { return add(narrow(v[0], 0, 1, 999), narrow(v[1], 0, 1, 999)); },
            {leaf({1000}, dt), leaf({1000}, dt)});
    compare("mul permuted expanded", [](auto& v) { return mul(permute(v[0], {2, 0, 1}), expand(v[1], {4, 2, 3})); },
            {leaf({2, 3, 4}, dt), leaf({1, 1, 3}, dt)});
  }
}

TEST_CASE("reductions and softmax; float32, float64") {
  for (const DType dt : kDTypes) {
    CAPTURE(dt);
    compare("sum dims", [](auto& v) { return sum(v[0], {0, 2}); }, {leaf({3, 4, 5}, dt)});
    compare("sum leading (columns)", [](auto& v) { return sum(v[0], {0}); }, {leaf({50, 7}, dt)});
    compare("sum keepdim transposed", [](auto& v) { return sum(transpose(v[0], 0, 1), {1}, true); },
            {leaf({6, 4}, dt)});
    compare("sum empty", [](auto& v) { return sum(v[0], {0}); }, {leaf({0, 4}, dt)});
    // Reduced dims apart from the segment's: 12 and 20 segments, their offsets computed on the device.
    compare("sum NCHW over {0, 2, 3}", [](auto& v) { return sum(v[0], {0, 2, 3}); }, {leaf({12, 3, 4, 5}, dt)});
    compare("var and amax over {0, 2}", [](auto& v) { return add(var(v[0], {0, 2}), amax(v[0], {0, 2})); },
            {leaf({20, 3, 17}, dt)});
    compare("mean all", [](auto& v) { return mean(v[0]); }, {leaf({100, 33}, dt)});
    compare("var", [](auto& v) { return var(v[0], {1}); }, {leaf({6, 300}, dt)});
    compare("var all biased", [](auto& v) { return var(v[0], false); }, {leaf({5, 9}, dt)});
    compare("amax", [](auto& v) { return amax(v[0], {1}); }, {leaf({5, 7}, dt)});
    compare("amin keepdim", [](auto& v) { return amin(v[0], {0}, true); }, {leaf({5, 7}, dt)});
    compare("max dim", [](auto& v) { return max(v[0], 1).values; }, {leaf({5, 7}, dt)});
    compare("max all", [](auto& v) { return max(v[0]); }, {leaf({4, 6}, dt)});
    compare("min all ties", [](auto& v) { return min(v[0]); }, {tensor({1, -2, 3, -2}, {4}, dt).requires_grad_(true)});
    compare("softmax last", [](auto& v) { return softmax(v[0], -1); }, {leaf({4, 10}, dt)});
    compare("softmax wide", [](auto& v) { return softmax(v[0], 1); }, {leaf({3, 2000}, dt)});
    compare("log_softmax inner", [](auto& v) { return log_softmax(v[0], 1); }, {leaf({2, 5, 3}, dt)});
    compare("log_softmax permuted", [](auto& v) { return log_softmax(permute(v[0], {1, 0, 2}), 2); },
            {leaf({3, 2, 6}, dt)});
    compare("softmax empty", [](auto& v) { return softmax(v[0], 1); }, {leaf({0, 4}, dt)});
  }
}

TEST_CASE("int64 pass") {
  for (const Shape& shape : {Shape{9}, Shape{3, 4}, Shape{0, 2}}) {
    auto x = [&] { return randint(-50, 50, shape); };
    compare("add int64", [](auto& v) { return add(v[0], v[1]); }, {x(), x()});
    compare("sub mul int64", [](auto& v) { return mul(sub(v[0], v[1]), v[1]); }, {x(), x()});
    compare("maximum int64", [](auto& v) { return maximum(v[0], v[1]); }, {x(), x()});
    compare("neg abs int64", [](auto& v) { return abs(neg(v[0])); }, {x()});
    compare("scalar int64", [](auto& v) { return add(mul(v[0], 3.0), 2.0); }, {x()});
    compare("sum int64", [](auto& v) { return sum(v[0]); }, {x()});
  }
  compare("add broadcast int64", [](auto& v) { return add(v[0], v[1]); }, {randint(0, 9, {4, 3}), randint(0, 9, {3})});
  compare("sum dim int64", [](auto& v) { return sum(v[0], {1}); }, {randint(-9, 9, {5, 6})});
  compare("amax int64", [](auto& v) { return amax(v[0], {0}); }, {randint(-9, 9, {5, 6})});
  compare("transposed int64", [](auto& v) { return mul(transpose(v[0], 0, 1), 2.0); }, {randint(-9, 9, {5, 6})});
  const Tensor index = tensor(std::vector<int64_t>{3, 0, 3}, {3});
  compare("index_select int64", [](auto& v) { return index_select(v[0], 1, v[1]); }, {randint(-9, 9, {2, 4}), index});
}

TEST_CASE("normalization with running statistics; float32, float64") {
  for (const DType dt : kDTypes) {
    CAPTURE(dt);
    compare("layer_norm", [](auto& v) { return layer_norm(v[0], {8}, v[1], v[2]); },
            {leaf({4, 8}, dt), leaf({8}, dt), leaf({8}, dt)});
    compare("layer_norm 2-D shape, no affine", [](auto& v) { return layer_norm(v[0], {3, 5}); }, {leaf({2, 3, 5}, dt)});
    compare("layer_norm transposed", [](auto& v) { return layer_norm(transpose(v[0], 0, 1), {6}); }, {leaf({6, 4}, dt)});
    compare("group_norm", [](auto& v) { return group_norm(v[0], 2, v[1], v[2]); },
            {leaf({2, 4, 3, 3}, dt), leaf({4}, dt), leaf({4}, dt)});
    compare("instance_norm", [](auto& v) { return instance_norm(v[0]); }, {leaf({2, 3, 4, 4}, dt)});
    // The fused single-pass kernels (ops/cuda/norm_fused.cuh): a group of
    // 3200 values (13 per thread, a ragged last item), one of exactly 4096
    // (the limit), and 4097 (falls back to the two-pass kernels).
    compare("group_norm fused 3200", [](auto& v) { return group_norm(v[0], 2, v[1], v[2]); },
            {leaf({2, 4, 40, 40}, dt), leaf({4}, dt), leaf({4}, dt)});
    // Planes of a multiple of 256 values: the fused backward also sums each
    // channel's part of its group for the parameter gradients
    // (fused_param_sums_apply): GroupNorm with 2 channels a group on 16x16
    // and 32x32 planes, affine InstanceNorm on 16x16 (3 samples: the sums
    // over the samples in order).
    compare("group_norm fused parameter sums 16x16", [](auto& v) { return group_norm(v[0], 4, v[1], v[2]); },
            {leaf({3, 8, 16, 16}, dt), leaf({8}, dt), leaf({8}, dt)});
    compare("group_norm fused parameter sums 32x32", [](auto& v) { return group_norm(v[0], 2, v[1], v[2]); },
            {leaf({2, 4, 32, 32}, dt), leaf({4}, dt), leaf({4}, dt)});
    compare("instance_norm affine fused parameter sums", [](auto& v) {
      return instance_norm(v[0], Tensor(), Tensor(), v[1], v[2]);
    }, {leaf({3, 5, 16, 16}, dt), leaf({5}, dt), leaf({5}, dt)});
    compare("layer_norm fused 4096", [](auto& v) { return layer_norm(v[0], {4096}, v[1], v[2]); },
            {leaf({3, 4096}, dt), leaf({4096}, dt), leaf({4096}, dt)});
    compare("layer_norm two-pass 4097", [](auto& v) { return layer_norm(v[0], {4097}); }, {leaf({2, 4097}, dt)});
    // LayerNorm's weight/bias gradients by the tiled column reduction
    // (ops/cuda/column_reduce.cuh: 32 channels x 16 row slices, 128-row chunks).
    auto ln = [](auto& v) { return layer_norm(v[0], {v[0].size(-1)}, v[1], v[2]); };
    for (const Shape& s : {Shape{1, 45}, Shape{129, 45}, Shape{300, 64}, Shape{17, 3, 33}, Shape{4200, 40}}) {
      CAPTURE(s);  // 1 row; rows past a chunk; 3 chunks; channels not a multiple of 32; 33 chunks (block order)
      const int64_t C = s.back();
      compare("layer_norm parameter gradients", ln, {leaf(s, dt), leaf({C}, dt), leaf({C}, dt)});
    }
    // Groups too large for the fused kernel: group sums, then the column
    // pass, which writes dx too (with MINIDL_CUDA_NORM_KERNELS=separate-dx,
    // which scripts/gpu-check.sh runs, a dx pass); (2, 4100) as (C, H, W)-like rows.
    compare("layer_norm two-pass affine", ln, {leaf({5, 4100}, dt), leaf({4100}, dt), leaf({4100}, dt)});
    compare("layer_norm two-pass affine 2-D shape",
            [](auto& v) { return layer_norm(v[0], {2, 4100}, v[1], v[2]); },
            {leaf({3, 2, 4100}, dt), leaf({2, 4100}, dt), leaf({2, 4100}, dt)});
    compare("layer_norm parameter gradients only", ln, {randn({130, 70}, dt), leaf({70}, dt), leaf({70}, dt)});
    compare("layer_norm weight only", [](auto& v) { return layer_norm(v[0], {70}, v[1]); },
            {leaf({130, 70}, dt), leaf({70}, dt)});
    // 16-byte vectorized normalize / dx (ops/cuda/vectorized.cuh): a tail of
    // numel % 4 (float) or % 2 (double) elements; an offset view (20 or 40
    // bytes in: not 16-byte aligned) takes the scalar path.
    compare("layer_norm vector tail", [](auto& v) { return layer_norm(v[0], {7}, v[1], v[2]); },
            {leaf({3, 7}, dt), leaf({7}, dt), leaf({7}, dt)});
    compare("layer_norm unaligned view", [](auto& v) { return layer_norm(narrow(v[0], 0, 1, 3), {5}, v[1], v[2]); },
            {leaf({4, 5}, dt), leaf({5}, dt), leaf({5}, dt)});
    compare("batch_norm unaligned view", [](auto& v) {
      return batch_norm(narrow(v[0], 0, 1, 3), Tensor(), Tensor(), v[1], v[2], true);
    }, {leaf({4, 5, 1}, dt), leaf({5}, dt), leaf({5}, dt)});
    compare("batch_norm train, no running stats", [](auto& v) {
      return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true);
    }, {leaf({4, 3, 5, 5}, dt), leaf({3}, dt), leaf({3}, dt)});
    // Training updates the running statistics in place (update running
    // statistics); evaluation normalizes with them (statistics from running ...).
    const Tensor rm = randn({3}, dt), rv = positive({3}, dt);
    const std::vector<Tensor> cpu = {leaf({6, 3, 4}, dt), leaf({3}, dt), leaf({3}, dt), rm.clone(), rv.clone()};
    const std::vector<Tensor> gpu = compare("batch_norm train, running stats", [](auto& v) {
      return batch_norm(v[0], v[3], v[4], v[1], v[2], true, 0.3);
    }, cpu);
    CHECK(close(gpu[3], cpu[3]));
    CHECK(close(gpu[4], cpu[4]));
    compare("batch_norm eval", [](auto& v) { return batch_norm(v[0], v[3], v[4], v[1], v[2], false); },
            {leaf({5, 3, 2, 2}, dt), leaf({3}, dt), leaf({3}, dt), rm, rv});
    // InstanceNorm from running statistics: N * C groups of one channel each
    // (the per-group factors read channel g % C), with and without affine.
    compare("instance_norm eval, affine", [](auto& v) {
      return instance_norm(v[0], v[3], v[4], v[1], v[2], false);
    }, {leaf({4, 3, 5, 5}, dt), leaf({3}, dt), leaf({3}, dt), rm, rv});
    compare("instance_norm eval", [](auto& v) { return instance_norm(v[0], v[1], v[2], Tensor(), Tensor(), false); },
            {leaf({2, 3, 7}, dt), rm, rv});
    // Groups that are channels: one reduction gives the group sums and the
    // parameter gradients (ops/cuda/norm_core.cu, one_pass); its edges.
    compare("batch_norm weight only", [](auto& v) { return batch_norm(v[0], Tensor(), Tensor(), v[1], Tensor(), true); },
            {leaf({4, 3, 5}, dt), leaf({3}, dt)});
    compare("batch_norm zero weight", [](auto& v) { return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true); },
            {leaf({4, 3, 5}, dt), tensor({0.0, 1.5, -2.0}, {3}, dt).requires_grad_(true), leaf({3}, dt)});
    compare("batch_norm parameter gradients only", [](auto& v) {
      return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true);
    }, {randn({4, 3, 5}, dt), leaf({3}, dt), leaf({3}, dt)});
    for (const Shape& s : {Shape{7, 5}, Shape{300, 40}}) {  // (N, C): the tiled column reduction, 1 and 3 chunks
      CAPTURE(s);
      compare("batch_norm1d (N, C)", [](auto& v) { return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true); },
              {leaf(s, dt), leaf({s[1]}, dt), leaf({s[1]}, dt)});
    }
    compare("batch_norm N=1 (fused dx, channel pass)", [](auto& v) {
      return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true);
    }, {leaf({1, 3, 6, 6}, dt), leaf({3}, dt), leaf({3}, dt)});
    compare("batch_norm chunked channels", [](auto& v) {  // 40960 values a channel: chunk partials
      return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true);
    }, {leaf({40, 2, 32, 32}, dt), leaf({2}, dt), leaf({2}, dt)});
    compare("batch_norm empty spatial", [](auto& v) { return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true); },
            {leaf({0, 3, 4}, dt), leaf({3}, dt), leaf({3}, dt)});
    // Parameter gradients of channels spread over several groups per sample
    // (P = 2 groups of K = 3) with S == 1: the tiled column reduction over
    // channel_offset, 2 chunks; InstanceNorm with N = 1, parameter gradients
    // only: groups are channels (the one-reduction sums, GroupParamStore).
    compare("group_norm (N, C) parameter gradients", [](auto& v) { return group_norm(v[0], 2, v[1], v[2]); },
            {leaf({130, 6}, dt), leaf({6}, dt), leaf({6}, dt)});
    compare("instance_norm N=1 parameter gradients", [](auto& v) {
      return instance_norm(v[0], Tensor(), Tensor(), v[1], v[2]);
    }, {randn({1, 3, 4, 4}, dt), leaf({3}, dt), leaf({3}, dt)});
    // dx from the group sums' store (factors::SumsStore), outside the fused
    // kernels: one weight a group (K == 1) folded into the factors, as
    // BatchNorm whose weight and bias need no gradient, and affine
    // InstanceNorm of N > 1 on groups past the fused kernels' 4096 values
    // (channel g % C); GroupNorm's groups of two channels (the weight per
    // element, by plane); LayerNorm over more than 128 x 128 rows (longer
    // column chunks, dx inside the column pass).
    compare("batch_norm frozen weight and bias", [](auto& v) {
      return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true);
    }, {leaf({4, 3, 5, 5}, dt), randn({3}, dt), randn({3}, dt)});
    compare("instance_norm affine, groups past the fused kernels", [](auto& v) {
      return instance_norm(v[0], Tensor(), Tensor(), v[1], v[2]);
    }, {leaf({2, 3, 70, 70}, dt), leaf({3}, dt), leaf({3}, dt)});
    compare("group_norm two channels a group past the fused kernels", [](auto& v) {
      return group_norm(v[0], 2, v[1], v[2]);
    }, {leaf({2, 4, 48, 48}, dt), leaf({4}, dt), leaf({4}, dt)});
    compare("layer_norm 20001 rows (long column chunks)", ln, {leaf({20001, 40}, dt), leaf({40}, dt), leaf({40}, dt)});
  }
}

namespace {

// got (on the target) agrees with want where want is finite (the suite's
// tolerance), and is NaN or the same infinity where want is.
bool close_with_nans(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.device() != g_target || got.shape() != want.shape()) return false;
  const std::vector<double> a = to_cpu(got).to_vector<double>(), b = want.to_vector<double>();
  const double rtol = rtol_of(want.dtype()), atol = atol_of(want.dtype());
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i]) || std::isinf(a[i]) || std::isinf(b[i])) {
      if (!(std::isnan(a[i]) && std::isnan(b[i])) && a[i] != b[i]) return false;
    } else if (!(std::abs(a[i] - b[i]) <= atol + rtol * std::abs(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

// A NaN or infinite value makes its group's variance NaN on the CPU (two
// passes) and must on CUDA: the shifted-sum statistics (ops/cuda/norm_math.h
// welford_from_shifted) once clamped that NaN M2 to 0, giving a finite
// invstd and running_var. Through the thread-per-row (20 values a channel)
// and block-per-row (200) statistics and the fused single-pass kernel
// (InstanceNorm's running statistics).
TEST_CASE("normalization statistics of a NaN or infinite value are NaN, as on the CPU") {
  for (const DType dt : kDTypes) {
    CAPTURE(dt);
    for (const double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
      CAPTURE(bad);
      for (const Shape& s : {Shape{4, 3, 5}, Shape{4, 3, 50}}) {
        CAPTURE(s);
        std::vector<double> v = randn(s, kFloat64).to_vector<double>();
        v[static_cast<size_t>(s[2] + 1)] = bad;  // sample 0, channel 1
        const Tensor x = tensor(v, s, dt);
        const BatchNormStats c = batch_norm_stats(x, 1e-5), g = batch_norm_stats(on_target(x), 1e-5);
        REQUIRE(std::isnan(c.invstd.to_vector<double>()[1]));
        CHECK(close_with_nans(g.invstd, c.invstd));
        Tensor rm_c = zeros({3}, dt), rv_c = ones({3}, dt), rm_g = on_target(rm_c), rv_g = on_target(rv_c);
        batch_norm(x, rm_c, rv_c, Tensor(), Tensor(), true);
        batch_norm(on_target(x), rm_g, rv_g, Tensor(), Tensor(), true);
        // An infinite value's mean is inf on the CPU and with the shifted sums,
        // NaN with the legacy Welford merge (inf - inf; gpu-check also runs this
        // suite with MINIDL_CUDA_NORM_KERNELS=legacy): the mean only with NaN.
        if (std::isnan(bad)) CHECK(close_with_nans(rm_g, rm_c));
        CHECK(close_with_nans(rv_g, rv_c));
      }
      std::vector<double> v = randn({2, 3, 4, 4}, kFloat64).to_vector<double>();
      v[20] = bad;  // sample 0, channel 1
      const Tensor x = tensor(v, {2, 3, 4, 4}, dt);
      Tensor rm_c = zeros({3}, dt), rv_c = ones({3}, dt), rm_g = on_target(rm_c), rv_g = on_target(rv_c);
      instance_norm(x, rm_c, rv_c);
      instance_norm(on_target(x), rm_g, rv_g);
      REQUIRE(std::isnan(rv_c.to_vector<double>()[1]));
      CHECK(close_with_nans(rv_g, rv_c));
    }
  }
}

TEST_CASE("SyncBN building blocks") {
  for (const DType dt : kDTypes) {
    CAPTURE(dt);
    const int64_t C = 3;
    const Tensor x = randn({4, C, 5}, dt), dy = randn({4, C, 5}, dt);
    const Tensor means = randn({3, C}, dt), invstds = positive({3, C}, dt);
    const Tensor counts = tensor({20, 0, 7}, {3}, dt);  // the middle rank is empty (weight 0)
    const Tensor rm = randn({C}, dt), rv = positive({C}, dt);
    Tensor rm_c = rm.clone(), rv_c = rv.clone(), rm_g = on_target(rm), rv_g = on_target(rv);
    const auto [mean_c, invstd_c] =
        batch_norm_gather_stats_with_counts(x, means, invstds, rm_c, rv_c, 0.1, 1e-5, counts);
    const auto [mean_g, invstd_g] = batch_norm_gather_stats_with_counts(
        on_target(x), on_target(means), on_target(invstds), rm_g, rv_g, 0.1, 1e-5, on_target(counts));
    CHECK(close(mean_g, mean_c));
    CHECK(close(invstd_g, invstd_c));
    CHECK(close(rm_g, rm_c));
    CHECK(close(rv_g, rv_c));

    const Tensor weight = randn({C}, dt), sum_dy = randn({C}, dt), sum_dy_xmu = randn({C}, dt);
    const Tensor counts64 = tensor(std::vector<int64_t>{20, 0, 7}, {3});
    for (const bool with_weight : {true, false}) {
      CAPTURE(with_weight);
      const Tensor w = with_weight ? weight : Tensor();
      const Tensor dx_c = batch_norm_backward_elemt(dy, x, mean_c, invstd_c, w, sum_dy, sum_dy_xmu, counts64);
      const Tensor dx_g = batch_norm_backward_elemt(on_target(dy), on_target(x), mean_g, invstd_g, on_target(w),
                                                    on_target(sum_dy), on_target(sum_dy_xmu), on_target(counts64));
      CHECK(close(dx_g, dx_c));
    }
    // batch_norm_backward_reduce: the local sums and the parameter gradients
    // from one reduction on CUDA (groups are channels), each output alone too.
    const Tensor mean_l = randn({C}, dt), invstd_l = positive({C}, dt);
    for (const bool with_weight : {true, false})
      for (const int wanted : {7, 4, 2, 1, 3}) {  // bits: input, weight, bias
        const bool input_g = wanted & 4, weight_g = wanted & 2, bias_g = wanted & 1;
        CAPTURE(with_weight);
        CAPTURE(wanted);
        const Tensor w = with_weight ? weight : Tensor();
        const BatchNormBackwardReduce c = batch_norm_backward_reduce(dy, x, mean_l, invstd_l, w, input_g, weight_g, bias_g);
        const BatchNormBackwardReduce g = batch_norm_backward_reduce(
            on_target(dy), on_target(x), on_target(mean_l), on_target(invstd_l), on_target(w), input_g, weight_g, bias_g);
        for (auto [got, want] : {std::pair{g.sum_dy, c.sum_dy}, {g.sum_dy_xmu, c.sum_dy_xmu},
                                 {g.grad_weight, c.grad_weight}, {g.grad_bias, c.grad_bias}}) {
          REQUIRE(got.defined() == want.defined());
          if (want.defined()) CHECK(close(got, want));
        }
      }
  }
}

TEST_CASE("losses: weights, smoothing, ignore_index, reductions; float32, float64") {
  const Tensor target = tensor(std::vector<int64_t>{1, -100, 3, 2, 0, 2}, {2, 3});  // (N=2, S=3)
  const Tensor target1 = tensor(std::vector<int64_t>{1, 0, 3, 2, 2}, {5});
  for (const DType dt : kDTypes) {
    CAPTURE(dt);
    const Tensor w = rand({4}, dt);
    compare("cross_entropy", [](auto& v) { return cross_entropy(v[0], v[1]); }, {leaf({5, 4}, dt), target1});
    compare("cross_entropy weighted smoothed", [](auto& v) {
      return cross_entropy(v[0], v[1], v[2], Reduction::Mean, -100, 0.1);
    }, {leaf({2, 4, 3}, dt), target, w});
    compare("cross_entropy sum, ignore 2", [](auto& v) { return cross_entropy(v[0], v[1], Reduction::Sum, 2); },
            {leaf({5, 4}, dt), target1});
    compare("cross_entropy empty batch", [](auto& v) { return cross_entropy(v[0], v[1], Reduction::Sum); },
            {leaf({0, 4}, dt), tensor(std::vector<int64_t>{}, {0})});
    compare("nll_loss weighted none", [](auto& v) {
      return nll_loss(log_softmax(v[0], 1), v[1], v[2], Reduction::None);
    }, {leaf({2, 4, 3}, dt), target, w});
    compare("nll_loss mean", [](auto& v) { return nll_loss(v[0], v[1]); }, {leaf({5, 4}, dt), target1});
    for (const Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
      compare("mse_loss", [r](auto& v) { return mse_loss(v[0], v[1], r); }, {leaf({3, 4}, dt), leaf({3, 4}, dt)});
      compare("binary_cross_entropy", [r](auto& v) { return binary_cross_entropy(sigmoid(v[0]), v[1], v[2], r); },
              {leaf({3, 4}, dt), rand({3, 4}, dt), rand({4}, dt)});
      compare("bce_with_logits pos_weight", [r](auto& v) {
        return binary_cross_entropy_with_logits(v[0], v[1], v[2], r, v[3]);
      }, {leaf({3, 4}, dt), rand({3, 4}, dt), rand({3, 4}, dt), rand({4}, dt)});
    }
    compare("mse_loss transposed target", [](auto& v) { return mse_loss(v[0], transpose(v[1], 0, 1)); },
            {leaf({3, 4}, dt), leaf({4, 3}, dt)});
  }
}

TEST_CASE("pooling 2-D and 3-D, adaptive, empty batch; float32, float64") {
  for (const DType dt : kDTypes) {
    CAPTURE(dt);
    compare("max_pool2d", [](auto& v) { return max_pool2d(v[0], {2, 2}); }, {leaf({2, 3, 6, 6}, dt)});
    compare("max_pool2d stride pad dilation ceil", [](auto& v) {
      return max_pool2d(v[0], {3, 2}, {2, 1}, {1, 1}, {2, 1}, true);
    }, {leaf({1, 2, 9, 7}, dt)});
    compare("max_pool2d indices", [](auto& v) { return std::get<1>(max_pool2d_with_indices(v[0], {3, 3}, {2, 2})); },
            {randn({2, 2, 7, 7}, dt)});
    compare("max_pool2d empty batch", [](auto& v) { return max_pool2d(v[0], {2, 2}); }, {leaf({0, 3, 5, 5}, dt)});
    // Disjoint windows take the scatter backward (MaxPoolScatter): padding and
    // ceil_mode's partial windows, stride past the window, adaptive bins that
    // divide the input, a global max; the cases above with overlap gather.
    compare("max_pool2d disjoint pad ceil", [](auto& v) { return max_pool2d(v[0], {2, 2}, {2, 3}, {1, 1}, {1, 1}, true); },
            {leaf({2, 3, 7, 8}, dt)});
    // Windows with no tap inside the input (dilation 2 over a 1-wide plane):
    // -inf, an index naming another row's element, and no gradient; gathered
    // (overlapping rows) and scattered (disjoint).
    compare("max_pool2d windows with no tap, overlapping", [](auto& v) {
      return max_pool2d(v[0], {2, 2}, {1, 1}, {1, 1}, {1, 2});
    }, {leaf({2, 3, 3, 1}, dt)});
    compare("max_pool2d windows with no tap, disjoint", [](auto& v) {
      return max_pool2d(v[0], {1, 2}, {1, 3}, {0, 1}, {1, 2});
    }, {leaf({2, 3, 3, 1}, dt)});
    compare("adaptive_max_pool2d dividing, global", [](auto& v) {
      return add(sum(adaptive_max_pool2d(v[0], {2, 3})), sum(adaptive_max_pool2d(v[0], {1, 1})));
    }, {leaf({2, 3, 4, 9}, dt)});
    compare("avg_pool2d pad", [](auto& v) { return avg_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}); }, {leaf({1, 2, 7, 7}, dt)});
    compare("avg_pool2d exclude pad ceil divisor", [](auto& v) {
      const Tensor ceil_exclude = avg_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}, true, false);
      return add(ceil_exclude, avg_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}, true, true, 4));
    }, {leaf({2, 1, 8, 6}, dt)});
    compare("avg_pool2d transposed", [](auto& v) { return avg_pool2d(transpose(v[0], 2, 3), {2, 2}); },
            {leaf({1, 2, 6, 4}, dt)});
    compare("adaptive_avg_pool2d", [](auto& v) { return adaptive_avg_pool2d(v[0], {1, 1}); }, {leaf({2, 3, 5, 5}, dt)});
    compare("adaptive_avg_pool2d uneven", [](auto& v) { return adaptive_avg_pool2d(v[0], {3, 4}); }, {leaf({1, 2, 7, 5}, dt)});
    compare("adaptive_max_pool2d", [](auto& v) { return adaptive_max_pool2d(v[0], {3, 2}); }, {leaf({2, 3, 7, 5}, dt)});
    compare("adaptive_max_pool2d indices", [](auto& v) { return std::get<1>(adaptive_max_pool2d_with_indices(v[0], {2, 3})); },
            {randn({1, 2, 5, 7}, dt)});
    compare("adaptive_max_pool2d empty", [](auto& v) { return adaptive_max_pool2d(v[0], {3, 3}); }, {leaf({0, 3, 5, 5}, dt)});
    compare("max_pool3d", [](auto& v) { return max_pool3d(v[0], {2, 2, 2}); }, {leaf({2, 2, 4, 6, 6}, dt)});
    compare("max_pool3d stride pad dilation", [](auto& v) {
      return max_pool3d(v[0], {3, 2, 2}, {1, 2, 2}, {1, 1, 0}, {1, 1, 2}, true);
    }, {leaf({1, 2, 5, 6, 7}, dt)});
    compare("max_pool3d indices", [](auto& v) { return std::get<1>(max_pool3d_with_indices(v[0], {2, 3, 2})); },
            {randn({1, 2, 4, 6, 5}, dt)});
    compare("avg_pool3d pad", [](auto& v) { return avg_pool3d(v[0], {3, 3, 3}, {2, 2, 2}, {1, 1, 1}); },
            {leaf({1, 2, 5, 5, 5}, dt)});
    compare("avg_pool3d exclude pad",
            [](auto& v) { return avg_pool3d(v[0], {2, 2, 2}, {1, 2, 2}, {1, 1, 1}, false, false); },
            {leaf({2, 1, 3, 4, 5}, dt)});
    compare("adaptive_avg_pool3d", [](auto& v) { return adaptive_avg_pool3d(v[0], {2, 3, 1}); }, {leaf({1, 2, 5, 7, 4}, dt)});
    compare("adaptive_max_pool3d", [](auto& v) { return adaptive_max_pool3d(v[0], {2, 2, 3}); }, {leaf({2, 2, 5, 4, 7}, dt)});
    compare("adaptive_max_pool3d indices", [](auto& v) { return std::get<1>(adaptive_max_pool3d_with_indices(v[0], {1, 2, 2})); },
            {randn({1, 1, 3, 5, 4}, dt)});
    compare("max_pool3d empty batch", [](auto& v) { return max_pool3d(v[0], {2, 2, 2}); }, {leaf({0, 2, 4, 4, 4}, dt)});
  }
}

TEST_CASE("pad, interpolate, index_select") {
  for (const DType dt : kDTypes) {
    CAPTURE(dt);
    compare("pad constant", [](auto& v) { return pad(v[0], {1, 2, 0, 3}, "constant", 1.5); }, {leaf({2, 3, 4}, dt)});
    compare("pad constant negative (crop)", [](auto& v) { return pad(v[0], {-1, 2, 1, -2}); }, {leaf({2, 5, 6}, dt)});
    compare("pad reflect", [](auto& v) { return pad(v[0], {2, 1, 1, 2}, "reflect"); }, {leaf({2, 3, 4, 5}, dt)});
    compare("pad replicate 3-D", [](auto& v) { return pad(v[0], {1, 2, 2, 0, 1, 1}, "replicate"); },
            {leaf({1, 2, 3, 4, 3}, dt)});
    compare("pad circular", [](auto& v) { return pad(v[0], {1, 1}, "circular"); }, {leaf({2, 3, 5}, dt)});
    compare("pad transposed", [](auto& v) { return pad(transpose(v[0], 1, 2), {1, 1, 2, 2}, "reflect"); },
            {leaf({1, 4, 3}, dt)});
    compare("pad empty batch", [](auto& v) { return pad(v[0], {1, 1}); }, {leaf({0, 2, 3}, dt)});
    struct Mode {
      Shape shape;
      InterpolateOptions o;
    };
    const std::vector<Mode> modes = {
        {{1, 2, 4, 5}, {.size = {7, 9}, .mode = "bilinear", .align_corners = false}},
        {{1, 2, 4, 5}, {.size = {3, 8}, .mode = "bilinear", .align_corners = true}},
        {{2, 3, 6}, {.scale_factor = {1.5}, .mode = "linear"}},
        {{1, 2, 3, 4, 3}, {.size = {5, 6, 7}, .mode = "trilinear", .align_corners = false}},
        {{1, 2, 4, 5}, {.size = {7, 9}, .mode = "nearest"}},
        {{1, 2, 6, 7}, {.size = {4, 3}, .mode = "nearest"}},  // downsampling
        {{1, 2, 4, 5}, {.size = {7, 9}, .mode = "nearest-exact"}},
        {{2, 3, 5}, {.scale_factor = {2.5}, .mode = "nearest"}},
        {{1, 1, 2, 3, 4}, {.scale_factor = {2.0}, .mode = "nearest-exact"}},
        {{1, 2, 3, 4, 2}, {.size = {5, 5, 5}, .mode = "nearest"}},
        {{0, 2, 4, 5}, {.size = {7, 9}, .mode = "bilinear", .align_corners = false}},  // empty batch
    };
    for (const Mode& m : modes) {
      CAPTURE(m.o.mode);
      compare("interpolate", [&](auto& v) { return interpolate(v[0], m.o); }, {leaf(m.shape, dt)});
    }
    const Tensor index = tensor(std::vector<int64_t>{2, 0, 2, 1}, {4});
    compare("index_select repeated", [](auto& v) { return index_select(v[0], 0, v[1]); }, {leaf({3, 5}, dt), index});
    compare("index_select dim 1 transposed", [](auto& v) { return index_select(transpose(v[0], 0, 1), 1, v[1]); },
            {leaf({4, 3}, dt), index});
    compare("index_select empty index", [](auto& v) { return index_select(v[0], 1, v[1]); },
            {leaf({3, 5}, dt), tensor(std::vector<int64_t>{}, {0})});
  }
}

// The single-tensor kernels (the multi-tensor ones: tests/test_cuda_multi_tensor.cpp).
TEST_CASE("single-tensor optimizer kernels: sgd_step, adam_step, vector_norm, clip_grad_scale") {
  for (const DType dt : kDTypes) {
    CAPTURE(dt);
    for (const int64_t n : {int64_t{37}, int64_t{5000}, int64_t{0}}) {
      CAPTURE(n);
      const Tensor p = randn({n}, dt), g = randn({n}, dt), b = randn({n}, dt);
      for (const bool nesterov : {false, true}) {
        CAPTURE(nesterov);
        SgdStepArgs cpu{.param = p.clone(), .grad = g, .momentum_buffer = b.clone(), .lr = 0.1, .momentum = 0.9,
                        .dampening = nesterov ? 0.0 : 0.2, .weight_decay = 1e-2, .nesterov = nesterov,
                        .first_step = true};
        SgdStepArgs gpu = cpu;
        gpu.param = on_target(p), gpu.grad = on_target(g), gpu.momentum_buffer = on_target(b);
        for (int step = 0; step < 2; ++step) {  // the first step copies g into the buffer, the second blends
          cpu.first_step = gpu.first_step = step == 0;
          sgd_step_stub(Device(kCPU))(cpu);
          sgd_step_stub(g_target)(gpu);
          CHECK(close(gpu.param, cpu.param));
          CHECK(close(gpu.momentum_buffer, cpu.momentum_buffer));
        }
      }
      const Tensor m = randn({n}, dt), v = rand({n}, dt), vmax = rand({n}, dt);
      for (const bool amsgrad : {false, true}) {
        CAPTURE(amsgrad);
        const int t = 3;
        AdamStepArgs cpu{.param = p.clone(), .grad = g, .exp_avg = m.clone(), .exp_avg_sq = v.clone(),
                         .max_exp_avg_sq = amsgrad ? vmax.clone() : Tensor(), .lr = 1e-3, .beta1 = 0.9,
                         .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-2, .decoupled_weight_decay = amsgrad,
                         .step_size = 1e-3 / (1 - std::pow(0.9, t)),
                         .bias_correction2_sqrt = std::sqrt(1 - std::pow(0.999, t))};
        AdamStepArgs gpu = cpu;
        gpu.param = on_target(p), gpu.grad = on_target(g), gpu.exp_avg = on_target(m), gpu.exp_avg_sq = on_target(v);
        gpu.max_exp_avg_sq = on_target(cpu.max_exp_avg_sq);
        adam_step_stub(Device(kCPU))(cpu);
        adam_step_stub(g_target)(gpu);
        CHECK(close(gpu.param, cpu.param));
        CHECK(close(gpu.exp_avg, cpu.exp_avg));
        CHECK(close(gpu.exp_avg_sq, cpu.exp_avg_sq));
        if (amsgrad) CHECK(close(gpu.max_exp_avg_sq, cpu.max_exp_avg_sq));
      }
      for (const double norm_type : {2.0, 1.0, 3.0, std::numeric_limits<double>::infinity()}) {
        CAPTURE(norm_type);
        const Tensor out_c = zeros({}, kFloat64), out_g = zeros({}, TensorOptions(kFloat64).device(g_target));
        vector_norm_stub(Device(kCPU))(out_c, g, norm_type);
        vector_norm_stub(g_target)(out_g, on_target(g), norm_type);
        CHECK(close(out_g, out_c));
      }
      for (const double max_norm : {1.0, 1e6}) {  // scales down; the factor clamps to 1
        CAPTURE(max_norm);
        const Tensor total = full({}, 7.5, kFloat64);
        const Tensor grad_c = g.clone(), grad_g = on_target(g);
        clip_grad_scale_stub(Device(kCPU))(grad_c, total, max_norm);
        clip_grad_scale_stub(g_target)(grad_g, on_target(total), max_norm);
        CHECK(close(grad_g, grad_c));
      }
    }
  }
}

// Masks come from each backend's generator, so the values cannot be compared
// with the CPU's: the same seed must repeat the mask, and backward must apply it.
TEST_CASE("dropout: the same seed gives the same mask, about 1 - p kept, backward") {
  for (const DType dt : kDTypes) {
    CAPTURE(dt);
    const Tensor x = ones({100000}, TensorOptions(dt).device(g_target)).requires_grad_(true);
    manual_seed(5);
    const Tensor y = dropout(x, 0.3);
    manual_seed(5);
    const std::vector<double> a = to_cpu(y).to_vector<double>();
    const std::vector<double> b = to_cpu(dropout(x.detach(), 0.3)).to_vector<double>();
    CHECK(a == b);
    int64_t kept = 0;
    for (double v : a) kept += v != 0.0;
    CHECK(std::abs(static_cast<double>(kept) - 70000.0) < 1000.0);  // about 7 sd of Binomial(1e5, 0.7)
    sum(y).backward();  // x = 1, so dx = mask / (1 - p) = y
    CHECK(close(x.grad(), to_cpu(y.detach())));
  }
}

TEST_CASE("every op with a CUDA kernel is covered by a cross-backend case") {
  int covered = 0;
  for (const std::string& problem : minidl::testing::cuda_ops_coverage_problems(&covered)) FAIL_CHECK(problem);
  if (g_target.type == DeviceType::CUDA) CHECK(covered >= 60);  // a guard against an empty registry
}

int main(int argc, char** argv) { return cross_backend_main(argc, argv); }
