// The host-side logic of the cuBLAS/cuDNN kernels, checked on the CPU in
// every build (no CUDA needed):
//   - ops/cuda/gemm_args.h: each row-major product (matmul batches with
//     transposes, padded leading dims, strided / broadcast / irregular /
//     accumulating batches; linear forward, bias, dx, dW, dbias) is turned
//     into cuBLAS's column-major arguments, run here through a reference
//     column-major GEMM with cuBLAS's exact semantics, and compared with the
//     row-major product computed directly;
//   - ops/cudnn/conv_key.h: conv shapes from 2-D/3-D geometries, key
//     equality and hashing (every field matters), the algorithm cache;
//   - ops/cudnn/conv_graph_policy.h: the graph API's engine filter by
//     numerical notes (PyTorch's) and the choice of the fastest timed plan;
//   - core/backend_settings.h: PyTorch's defaults, setters, the guard.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "minidl/core/backend_settings.h"
#include "minidl/ops/cuda/gemm_args.h"
#include "minidl/ops/cudnn/conv_graph_policy.h"
#include "minidl/ops/cudnn/conv_key.h"

using namespace minidl;
using cuda_gemm::ColumnMajorGemm;
using cuda_gemm::RowMajorGemm;

namespace {

std::vector<double> random_vec(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<double> v(n);
  for (double& e : v) e = dist(gen);
  return v;
}

// cublasGemmEx with alpha = 1: C (m x n, column-major, ldc) = op(F) op(S) + beta C,
// F read column-major with ld_first (m x k after op), S with ld_second (k x n after op).
void colmajor_gemm(const ColumnMajorGemm& g, const double* f, const double* s, double* c, double beta) {
  REQUIRE(g.ld_first >= std::max(1, g.trans_first ? g.k : g.m));
  REQUIRE(g.ld_second >= std::max(1, g.trans_second ? g.n : g.k));
  REQUIRE(g.ldc >= std::max(1, g.m));
  for (int j = 0; j < g.n; ++j)
    for (int i = 0; i < g.m; ++i) {
      double acc = 0;
      for (int l = 0; l < g.k; ++l) {
        const double fv =
            g.trans_first ? f[l + static_cast<size_t>(i) * g.ld_first] : f[i + static_cast<size_t>(l) * g.ld_first];
        const double sv =
            g.trans_second ? s[j + static_cast<size_t>(l) * g.ld_second] : s[l + static_cast<size_t>(j) * g.ld_second];
        acc += fv * sv;
      }
      double& out = c[i + static_cast<size_t>(j) * g.ldc];
      out = acc + beta * out;
    }
}

// The row-major product straight from its definition.
void rowmajor_gemm(const RowMajorGemm& g, const double* a, const double* b, double* c, bool accumulate) {
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      double acc = 0;
      for (int64_t l = 0; l < g.k; ++l) {
        const double av = g.trans_a ? a[l * g.lda + i] : a[i * g.lda + l];
        const double bv = g.trans_b ? b[j * g.ldb + l] : b[l * g.ldb + j];
        acc += av * bv;
      }
      c[i * g.ldc + j] = acc + (accumulate ? c[i * g.ldc + j] : 0.0);
    }
}

// What ops/cuda/matmul.cu does with a plan, with colmajor_gemm for cuBLAS.
void run_plan(const GemmBatch& g, const double* a, const double* b, double* c) {
  const cuda_gemm::GemmBatchPlan p = cuda_gemm::plan_batch(g);
  const double beta = p.accumulate ? 1.0 : 0.0;
  if (p.strided) {
    for (int i = 0; i < p.count; ++i)
      colmajor_gemm(p.gemm, b + p.b_first + i * p.b_stride, a + p.a_first + i * p.a_stride,
                    c + p.c_first + i * p.c_stride, beta);
  } else {
    for (size_t i = 0; i < g.c_offset.size(); ++i)
      colmajor_gemm(p.gemm, b + g.b_offset[i], a + g.a_offset[i], c + g.c_offset[i], beta);
  }
}

void run_reference(const GemmBatch& g, const double* a, const double* b, double* c) {
  const RowMajorGemm one{g.trans_a, g.trans_b, g.m, g.n, g.k, g.lda, g.ldb, g.ldc};
  for (size_t i = 0; i < g.c_offset.size(); ++i)
    rowmajor_gemm(one, a + g.a_offset[i], b + g.b_offset[i], c + g.c_offset[i], g.accumulate);
}

// Buffers big enough for every matrix the offsets touch, random a, b, c.
void check_batch(const GemmBatch& g, bool expect_strided) {
  CAPTURE(g.trans_a);
  CAPTURE(g.trans_b);
  auto extent = [](const std::vector<int64_t>& off, int64_t rows, int64_t ld) {
    int64_t mx = 0;
    for (int64_t o : off) mx = std::max(mx, o);
    return static_cast<size_t>(mx + rows * ld);
  };
  const size_t na = extent(g.a_offset, g.trans_a ? g.k : g.m, g.lda);
  const size_t nb = extent(g.b_offset, g.trans_b ? g.n : g.k, g.ldb);
  const size_t nc = extent(g.c_offset, g.m, g.ldc);
  const auto a = random_vec(na, 1), b = random_vec(nb, 2), c0 = random_vec(nc, 3);
  std::vector<double> want = c0, got = c0;
  run_reference(g, a.data(), b.data(), want.data());
  run_plan(g, a.data(), b.data(), got.data());
  CHECK(cuda_gemm::plan_batch(g).strided == expect_strided);
  double worst = 0;
  for (size_t i = 0; i < nc; ++i) worst = std::max(worst, std::abs(want[i] - got[i]));
  CHECK(worst < 1e-12);
}

GemmBatch dense_batch(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t count, int64_t pad = 0) {
  GemmBatch g;
  g.trans_a = ta, g.trans_b = tb, g.m = m, g.n = n, g.k = k;
  g.lda = (ta ? m : k) + pad, g.ldb = (tb ? k : n) + pad, g.ldc = n + pad;
  const int64_t sa = (ta ? k : m) * g.lda, sb = (tb ? n : k) * g.ldb, sc = m * g.ldc;
  for (int64_t i = 0; i < count; ++i) {
    g.a_offset.push_back(i * sa), g.b_offset.push_back(i * sb), g.c_offset.push_back(i * sc);
  }
  return g;
}

}  // namespace

TEST_CASE("cuBLAS argument mapping: the transpose identity swaps operands and m/n, keeps the flags") {
  const ColumnMajorGemm c = cuda_gemm::to_column_major({true, false, 3, 5, 7, 3, 5, 5});
  CHECK(c.trans_first == false);  // our B, not transposed
  CHECK(c.trans_second == true);  // our A, transposed
  CHECK(c.m == 5);
  CHECK(c.n == 3);
  CHECK(c.k == 7);
  CHECK(c.ld_first == 5);
  CHECK(c.ld_second == 3);
  CHECK(c.ldc == 5);
  CHECK_THROWS_WITH_AS(cuda_gemm::to_column_major({false, false, int64_t{1} << 31, 2, 2, 2, 2, 2}),
                       doctest::Contains("does not fit cuBLAS's 32-bit int"), Error);
}

TEST_CASE("cuBLAS argument mapping: single products, every transpose combination, padded leading dims") {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t pad : {0, 3}) {
        check_batch(dense_batch(ta, tb, 4, 6, 5, 1, pad), true);
        check_batch(dense_batch(ta, tb, 1, 7, 3, 1, pad), true);  // a row vector
        check_batch(dense_batch(ta, tb, 5, 1, 2, 1, pad), true);  // a column
      }
}

TEST_CASE("cuBLAS argument mapping: strided batches, broadcast operands, irregular and accumulating batches") {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_batch(dense_batch(ta, tb, 3, 4, 5, 6), true);  // evenly strided: one strided-batched call
      GemmBatch bcast = dense_batch(ta, tb, 3, 4, 5, 4);
      for (int64_t& o : bcast.b_offset) o = 0;  // B broadcast over the batch: stride 0
      check_batch(bcast, true);
      CHECK(cuda_gemm::plan_batch(bcast).b_stride == 0);
      // A (2, 1, 3, 5) times B (2, 2, 5, 4): A's matrices repeat in pairs.
      GemmBatch irregular = dense_batch(ta, tb, 3, 4, 5, 4);
      irregular.a_offset = {0, 0, 15, 15};
      check_batch(irregular, false);  // offsets not arithmetic: one call per product
      GemmBatch reversed = dense_batch(ta, tb, 3, 4, 5, 3);  // C matrices in reverse order: negative stride
      reversed.c_offset = {reversed.c_offset[2], reversed.c_offset[1], reversed.c_offset[0]};
      check_batch(reversed, false);
      GemmBatch acc = dense_batch(ta, tb, 3, 4, 5, 4);  // dB of a broadcast B: four products into one C
      for (int64_t& o : acc.c_offset) o = 0;
      acc.accumulate = true;
      check_batch(acc, false);  // never one concurrent call
      acc.accumulate = false;    // (not what ops/matmul.cpp asks, but) one C written twice: still in order
      check_batch(acc, false);
    }
  GemmBatch none;
  none.m = none.n = none.k = 2, none.lda = none.ldb = none.ldc = 2;
  CHECK(cuda_gemm::plan_batch(none).count == 0);
}

TEST_CASE("cuBLAS argument mapping: linear forward (+ bias as a rank-1 product) and backward") {
  const int64_t rows = 5, in = 4, out = 3;
  const auto x = random_vec(rows * in, 11), w = random_vec(out * in, 12), bias = random_vec(out, 13);
  const auto dy = random_vec(rows * out, 14);
  const std::vector<double> ones_rows(rows, 1.0);
  // y = ones * bias, then y += x W^T, as the CUDA kernel does.
  std::vector<double> y(rows * out, 42.0);
  colmajor_gemm(cuda_gemm::to_column_major(cuda_gemm::linear_bias_gemm(rows, out)), bias.data(), ones_rows.data(),
                y.data(), 0.0);
  colmajor_gemm(cuda_gemm::to_column_major(cuda_gemm::linear_forward_gemm(rows, in, out)), w.data(), x.data(),
                y.data(), 1.0);
  std::vector<double> dx(rows * in, 7.0), dw(out * in, 7.0), db(out, 7.0);
  colmajor_gemm(cuda_gemm::to_column_major(cuda_gemm::linear_dx_gemm(rows, in, out)), w.data(), dy.data(),
                dx.data(), 0.0);
  colmajor_gemm(cuda_gemm::to_column_major(cuda_gemm::linear_dw_gemm(rows, in, out)), x.data(), dy.data(),
                dw.data(), 0.0);
  colmajor_gemm(cuda_gemm::to_column_major(cuda_gemm::linear_dbias_gemm(rows, out)), dy.data(), ones_rows.data(),
                db.data(), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < out; ++j) {
      double want = bias[j];
      for (int64_t c = 0; c < in; ++c) want += x[r * in + c] * w[j * in + c];
      CHECK(std::abs(y[r * out + j] - want) < 1e-12);
    }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < in; ++c) {
      double want = 0;
      for (int64_t j = 0; j < out; ++j) want += dy[r * out + j] * w[j * in + c];
      CHECK(std::abs(dx[r * in + c] - want) < 1e-12);
    }
  for (int64_t j = 0; j < out; ++j) {
    double want_b = 0;
    for (int64_t r = 0; r < rows; ++r) want_b += dy[r * out + j];
    CHECK(std::abs(db[j] - want_b) < 1e-12);
    for (int64_t c = 0; c < in; ++c) {
      double want = 0;
      for (int64_t r = 0; r < rows; ++r) want += dy[r * out + j] * x[r * in + c];
      CHECK(std::abs(dw[j * in + c] - want) < 1e-12);
    }
  }
}

TEST_CASE("cuDNN conv shape from 2-D and 3-D geometries") {
  Conv2dGeometry g;
  g.batch = 2, g.in_channels = 6, g.in_h = 9, g.in_w = 7, g.out_channels = 4, g.kernel_h = 3, g.kernel_w = 2;
  g.stride_h = 2, g.stride_w = 1, g.pad_h = 1, g.pad_w = 0, g.dilation_h = 1, g.dilation_w = 2, g.groups = 2;
  conv2d_set_output_size(g);
  const cudnn_conv::ConvShape s = cudnn_conv::conv_shape(g);
  CHECK(s.nd() == 4);
  CHECK(s.x_sizes() == std::array<int64_t, 5>{2, 6, 9, 7, 0});
  CHECK(s.w_sizes() == std::array<int64_t, 5>{4, 3, 3, 2, 0});  // C_in / groups
  CHECK(s.y_sizes() == std::array<int64_t, 5>{2, 4, g.out_h, g.out_w, 0});
  CHECK(cudnn_conv::contiguous_strides(s.x_sizes(), 4) == std::array<int64_t, 5>{378, 63, 7, 1, 0});
  CHECK(s.x_strides() == std::array<int64_t, 5>{378, 63, 7, 1, 0});
  // Channels-last: the strides the descriptors get are the ones a channels-last tensor has (core/memory_format.h).
  g.channels_last = true;
  const cudnn_conv::ConvShape cl = cudnn_conv::conv_shape(g);
  CHECK(cl.x_strides() == std::array<int64_t, 5>{378, 1, 42, 6, 0});
  CHECK(cl.w_strides() == std::array<int64_t, 5>{18, 1, 6, 3, 0});
  const std::array<int64_t, 5> y = cl.y_sizes(), ys = cl.y_strides();
  CHECK(Shape(ys.begin(), ys.begin() + 4) == channels_last_strides(Shape(y.begin(), y.begin() + 4)));
  CHECK(cudnn_conv::layout_strides({2, 6, 5, 9, 7}, 5, true) == std::array<int64_t, 5>{1890, 1, 378, 42, 6});
  g.channels_last = false;
  Conv3dGeometry g3;
  g3.hw = g;
  g3.in_d = 5, g3.kernel_d = 2, g3.stride_d = 3, g3.pad_d = 1, g3.dilation_d = 2;
  conv3d_set_output_size(g3);
  const cudnn_conv::ConvShape s3 = cudnn_conv::conv_shape(g3);
  CHECK(s3.nd() == 5);
  CHECK(s3.x_sizes() == std::array<int64_t, 5>{2, 6, 5, 9, 7});
  CHECK(s3.w_sizes() == std::array<int64_t, 5>{4, 3, 2, 3, 2});
  CHECK(s3.y_sizes() == std::array<int64_t, 5>{2, 4, g3.out_d, g3.hw.out_h, g3.hw.out_w});
  CHECK(s3.stride == std::array<int64_t, 3>{3, 2, 1});
  CHECK(s3.pad == std::array<int64_t, 3>{1, 1, 0});
  CHECK(s3.dilation == std::array<int64_t, 3>{2, 1, 2});
}

TEST_CASE("cuDNN algorithm cache key: equal keys hash equally, every field separates keys") {
  using namespace cudnn_conv;
  Conv2dGeometry g;
  g.batch = 8, g.in_channels = 16, g.in_h = 32, g.in_w = 32, g.out_channels = 16, g.kernel_h = 3, g.kernel_w = 3;
  g.pad_h = g.pad_w = 1;
  conv2d_set_output_size(g);
  const ConvShape s = conv_shape(g);
  const ConvKey base = make_conv_key(ConvDirection::Forward, s, kFloat32, 0, ConvSwitches{});
  const ConvKeyHash hash;
  CHECK(base == make_conv_key(ConvDirection::Forward, s, kFloat32, 0, ConvSwitches{}));
  CHECK(hash(base) == hash(make_conv_key(ConvDirection::Forward, s, kFloat32, 0, ConvSwitches{})));
  std::vector<ConvKey> variants;
  variants.push_back(make_conv_key(ConvDirection::BackwardData, s, kFloat32, 0, {}));
  variants.push_back(make_conv_key(ConvDirection::BackwardFilter, s, kFloat32, 0, {}));
  variants.push_back(make_conv_key(ConvDirection::Forward, s, kFloat64, 0, {}));
  variants.push_back(make_conv_key(ConvDirection::Forward, s, kFloat32, 1, {}));
  variants.push_back(make_conv_key(ConvDirection::Forward, s, kFloat32, 0, {true, true, false}));
  variants.push_back(make_conv_key(ConvDirection::Forward, s, kFloat32, 0, {false, false, false}));
  variants.push_back(make_conv_key(ConvDirection::Forward, s, kFloat32, 0, {false, true, true}));
  auto with = [&](auto edit) {
    Conv2dGeometry h = g;
    edit(h);
    conv2d_set_output_size(h);
    return make_conv_key(ConvDirection::Forward, conv_shape(h), kFloat32, 0, {});
  };
  variants.push_back(with([](Conv2dGeometry& h) { h.batch = 4; }));
  variants.push_back(with([](Conv2dGeometry& h) { h.in_w = 31; }));
  variants.push_back(with([](Conv2dGeometry& h) { h.in_channels = h.groups = 16; }));  // depthwise
  variants.push_back(with([](Conv2dGeometry& h) { h.out_channels = 8; }));
  variants.push_back(with([](Conv2dGeometry& h) { h.kernel_w = 1; }));
  variants.push_back(with([](Conv2dGeometry& h) { h.stride_h = 2; }));
  variants.push_back(with([](Conv2dGeometry& h) { h.pad_w = 0; }));
  variants.push_back(with([](Conv2dGeometry& h) { h.dilation_h = 2; }));
  variants.push_back(with([](Conv2dGeometry& h) { h.channels_last = true; }));
  Conv3dGeometry g3;
  g3.hw = g, g3.in_d = 1;
  conv3d_set_output_size(g3);
  variants.push_back(make_conv_key(ConvDirection::Forward, conv_shape(g3), kFloat32, 0, {}));
  for (size_t i = 0; i < variants.size(); ++i) {
    CAPTURE(i);
    CHECK_FALSE(variants[i] == base);
    CHECK(hash(variants[i]) != hash(base));
    for (size_t j = 0; j < i; ++j) CHECK_FALSE(variants[i] == variants[j]);
  }
}

TEST_CASE("cuDNN algorithm cache: find, first insert wins, clear") {
  using namespace cudnn_conv;
  Conv2dGeometry g;
  g.in_channels = g.out_channels = 2, g.in_h = g.in_w = 5, g.kernel_h = g.kernel_w = 3;
  conv2d_set_output_size(g);
  const ConvKey k = make_conv_key(ConvDirection::Forward, conv_shape(g), kFloat32, 0, {});
  ConvAlgoCache<int> cache;
  CHECK_FALSE(cache.find(k).has_value());
  CHECK(cache.insert(k, 3) == 3);
  CHECK(cache.insert(k, 5) == 3);  // a second search of the same key keeps the first result
  CHECK(cache.find(k).value() == 3);
  ConvKey other = k;
  other.deterministic = true;
  CHECK_FALSE(cache.find(other).has_value());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      ConvKey mine = k;
      mine.device = t + 1;
      for (int i = 0; i < 200; ++i) cache.insert(mine, t);
    });
  for (auto& th : threads) th.join();
  CHECK(cache.size() == 5);
  cache.clear();
  CHECK(cache.size() == 0);
}

TEST_CASE("backend settings: PyTorch's defaults, setters, scoped guard") {
  using namespace backends;
  const BackendSettings d = backend_settings();  // nothing in this test binary changed them before
  CHECK(d.matmul_allow_tf32 == false);           // torch.backends.cuda.matmul.allow_tf32
  CHECK(d.cudnn_allow_tf32 == true);             // torch.backends.cudnn.allow_tf32
  CHECK(d.cudnn_benchmark == false);             // torch.backends.cudnn.benchmark
  CHECK(d.cudnn_deterministic == false);         // torch.backends.cudnn.deterministic
  {
    BackendSettingsGuard guard({.matmul_allow_tf32 = true, .cudnn_allow_tf32 = false, .cudnn_benchmark = true,
                                .cudnn_deterministic = true});
    CHECK(cuda::matmul::allow_tf32());
    CHECK_FALSE(cudnn::allow_tf32());
    CHECK(cudnn::benchmark());
    CHECK(cudnn::deterministic());
    cudnn::set_benchmark(false);
    CHECK_FALSE(backend_settings().cudnn_benchmark);
  }
  const BackendSettings after = backend_settings();
  CHECK(after.matmul_allow_tf32 == d.matmul_allow_tf32);
  CHECK(after.cudnn_allow_tf32 == d.cudnn_allow_tf32);
  CHECK(after.cudnn_benchmark == d.cudnn_benchmark);
  CHECK(after.cudnn_deterministic == d.cudnn_deterministic);
  // Set from another thread, seen here (process-wide, not thread-local).
  std::thread([] { cudnn::set_deterministic(true); }).join();
  CHECK(cudnn::deterministic());
  cudnn::set_deterministic(false);
}

TEST_CASE("cuDNN graph API engine filter: PyTorch's rules by numerical note, dtype and switches") {
  using namespace cudnn_conv;
  Conv2dGeometry g;
  g.in_channels = g.out_channels = 2, g.in_h = g.in_w = 5, g.kernel_h = g.kernel_w = 3;
  conv2d_set_output_size(g);
  const ConvShape s = conv_shape(g);
  auto key = [&](DType d, ConvSwitches sw) { return make_conv_key(ConvDirection::Forward, s, d, 0, sw); };
  const ConvSwitches dflt{}, det{true, true, false}, no_tf32{false, false, false};
  const EngineNotes plain{}, nondet{true, false, false}, down{false, true, false}, tc{false, false, true};
  for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(d));
    CHECK_FALSE(engine_excluded(plain, key(d, dflt)));
    CHECK_FALSE(engine_excluded(plain, key(d, det)));
    CHECK_FALSE(engine_excluded(nondet, key(d, dflt)));  // allowed unless deterministic
    CHECK(engine_excluded(nondet, key(d, det)));
    CHECK(engine_excluded(down, key(d, dflt)));  // always refused
    CHECK_FALSE(engine_excluded(tc, key(d, dflt)));  // allow_tf32 defaults to true
  }
  // Tensor cores are TF32 only for float32 data: refused there without allow_tf32.
  CHECK(engine_excluded(tc, key(kFloat32, no_tf32)));
  CHECK_FALSE(engine_excluded(tc, key(kFloat64, no_tf32)));
  CHECK_FALSE(engine_excluded(tc, key(kFloat16, no_tf32)));
  CHECK_FALSE(engine_excluded(tc, key(kBFloat16, no_tf32)));
}

TEST_CASE("cuDNN graph API benchmark: the fastest plan that ran, the first on ties, none when none ran") {
  using cudnn_conv::fastest_plan;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  CHECK_FALSE(fastest_plan({}).has_value());
  CHECK_FALSE(fastest_plan({inf, inf}).has_value());
  CHECK_FALSE(fastest_plan({nan}).has_value());
  CHECK(fastest_plan({0.5f}).value() == 0);
  CHECK(fastest_plan({inf, 0.7f, 0.3f, nan, 0.9f}).value() == 2);
  CHECK(fastest_plan({0.4f, 0.2f, 0.2f}).value() == 1);
  CHECK(fastest_plan({nan, 0.0f}).value() == 1);
}
