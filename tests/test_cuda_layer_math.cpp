// The __host__ __device__ math of the CUDA layer kernels (ops/cuda/softmax_math.h,
// loss_math.h, pool_math.h, optim_math.h, norm_math.h's SyncBN merge, philox.h's dropout),
// run on the CPU in every build against the CPU ops and kernels, brute force
// and the Random123 known-answer vectors. The core math (offsets, reductions,
// Welford) is in tests/test_cuda_kernel_math.cpp, pad's and upsample's in
// tests/test_cuda_pad_upsample_math.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "minidl/ops/binary_cross_entropy.h"
#include "minidl/ops/cuda/loss_math.h"
#include "minidl/ops/cuda/norm_math.h"
#include "minidl/ops/cuda/optim_math.h"
#include "minidl/ops/cuda/philox.h"
#include "minidl/ops/cuda/pool_math.h"
#include "minidl/ops/cuda/softmax_math.h"
#include "minidl/ops/fused_optim.h"
#include "minidl/ops/loss.h"
#include "minidl/ops/pooling.h"
#include "minidl/ops/reduce.h"
#include "tests/norm_reference.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::cuda_math;
using minidl::testing::two_pass;
using minidl::testing::TwoPass;

TEST_CASE("pool windows: outputs_touching holds every output whose window has the input; disjoint windows") {
  std::mt19937 rng(13);
  int disjoint = 0, overlapping = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    PoolDim d;
    d.in = 1 + static_cast<int64_t>(rng() % 12);
    d.adaptive = trial % 3 == 0;
    if (d.adaptive) {
      d.out = 1 + static_cast<int64_t>(rng() % 8);
    } else {
      d.kernel = 1 + static_cast<int64_t>(rng() % 4);
      d.stride = 1 + static_cast<int64_t>(rng() % 3);
      d.dilation = 1 + static_cast<int64_t>(rng() % 2);
      d.padding = static_cast<int64_t>(rng() % (d.kernel / 2 + 1));
      const int64_t span = d.in + 2 * d.padding - d.dilation * (d.kernel - 1) - 1;
      if (span < 0) continue;
      d.out = span / d.stride + 1 + (rng() % 2);  // sometimes one more (ceil_mode)
    }
    // The kernels' path (precomputed dividers) must agree with 64-bit division everywhere.
    const PoolDim fast = d.with_dividers();
    REQUIRE(fast.fast);
    for (int64_t o = 0; o < d.out; ++o) {
      const Taps a = taps_of(d, o), b = taps_of(fast, o);
      CAPTURE(trial);
      CHECK((a.start == b.start && a.lo == b.lo && a.hi == b.hi && a.step == b.step && a.padded == b.padded));
    }
    for (int64_t i = 0; i < d.in; ++i) {
      int64_t first, last, first_fast, last_fast;
      outputs_touching(d, i, first, last);
      outputs_touching(fast, i, first_fast, last_fast);
      CHECK((first == first_fast && last == last_fast));
      int64_t holders = 0;
      for (int64_t o = 0; o < d.out; ++o) {
        if (!is_tap(taps_of(d, o), i)) continue;
        ++holders;
        CAPTURE(trial);
        CHECK((first <= o && o <= last));
      }
      overlapping += holders > 1;
      if (windows_disjoint(d)) CHECK(holders <= 1);  // max pooling's scatter backward relies on it
    }
    disjoint += windows_disjoint(d);
  }
  CHECK(disjoint > 300);  // both kinds were drawn
  CHECK(overlapping > 300);
  // Sizes past 31 bits keep the 64-bit path.
  CHECK_FALSE(PoolDim{int64_t{1} << 20, int64_t{1} << 12, 1, 1, 0, 1, true}.with_dividers().fast);
  CHECK(PoolDim{1 << 12, 1 << 12, 3, 2, 1, 1, false}.with_dividers().fast);
}

TEST_CASE("split_index: the dividers' path splits a flat index like / and %") {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t D = 1 + rng() % 5, H = 1 + rng() % 40, W = 1 + rng() % 40, planes = 1 + rng() % 7;
    const int64_t plane = D * H * W;
    const IntDivider by_plane(plane), by_h(H), by_w(W);
    for (int64_t f = 0; f < planes * plane; f += 1 + static_cast<int64_t>(rng() % 5)) {
      const Index4 a = split_index(f, plane, H, W, by_plane, by_h, by_w, false);
      const Index4 b = split_index(f, plane, H, W, by_plane, by_h, by_w, true);
      CHECK(((a.plane * D + a.d) * H + a.h) * W + a.w == f);
      CHECK((a.plane == b.plane && a.d == b.d && a.h == b.h && a.w == b.w));
    }
  }
}

TEST_CASE("split_channel + split_index find (n, c, h, w) of a channels-last tensor's memory index") {
  // The GPU pooling kernels' addressing of NHWC against the tensor's own strides.
  const Tensor t = arange(2.0 * 5 * 3 * 4).reshape({2, 5, 3, 4}).contiguous(MemoryFormat::ChannelsLast);
  const Shape st = t.strides();
  const int64_t C = 5, H = 3, W = 4, plane = H * W;
  const IntDivider by_c(C), by_plane(plane), by_h(H), by_w(W);
  for (bool fast : {false, true})
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t w = 0; w < W; ++w) {
            const int64_t m = n * st[0] + c * st[1] + h * st[2] + w * st[3];
            const ChannelSplit s = split_channel(m, C, by_c, fast);
            const Index4 i = split_index(s.rest, plane, H, W, by_plane, by_h, by_w, fast);
            CHECK((s.inner == c && i.plane == n && i.d == 0 && i.h == h && i.w == w));
            CHECK(s.rest * C + s.inner == m);
          }
  // Planar (step 1): the index unchanged, channel 0.
  const ChannelSplit p = split_channel(17, 1, IntDivider(1), true);
  CHECK((p.rest == 17 && p.inner == 0));
}

TEST_CASE("is_tap matches the definition (pos = start + k step, lo <= k < hi)") {
  for (int64_t step = 1; step <= 3; ++step)
    for (int64_t start = -4; start <= 4; ++start)
      for (int64_t lo = 0; lo <= 2; ++lo)
        for (int64_t hi = lo; hi <= 5; ++hi) {
          const Taps t{start, lo, hi, step, 0};
          for (int64_t i = -2; i < 20; ++i) {
            bool expected = false;
            for (int64_t k = lo; k < hi; ++k) expected = expected || start + k * step == i;
            CHECK(is_tap(t, i) == expected);
          }
        }
}

TEST_CASE("pool windows reproduce the CPU avg_pool2d (padding, ceil_mode, count_include_pad)") {
  const Tensor x = randn({1, 2, 7, 6}, kFloat64);
  const std::vector<double> xv = x.to_vector<double>();
  for (bool include_pad : {true, false}) {
    const Tensor y = avg_pool2d(x, {3, 2}, {2, 2}, {1, 1}, /*ceil_mode=*/true, include_pad);
    const std::vector<double> yv = y.to_vector<double>();
    const int64_t OH = y.shape()[2], OW = y.shape()[3];
    const PoolDim dd{1, 1, 1, 1, 0, 1, false};
    const PoolDim dh{7, OH, 3, 2, 1, 1, false}, dw{6, OW, 2, 2, 1, 1, false};
    for (int64_t p = 0; p < 2; ++p)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const Taps td = taps_of(dd, 0), th = taps_of(dh, oh), tw = taps_of(dw, ow);
          double s = 0;
          for (int64_t a = th.lo; a < th.hi; ++a)
            for (int64_t b = tw.lo; b < tw.hi; ++b) s += xv[p * 42 + (th.start + a) * 6 + tw.start + b];
          CHECK(s / pool_divisor(td, th, tw, include_pad, 0) == doctest::Approx(yv[(p * OH + oh) * OW + ow]));
        }
  }
}

TEST_CASE("loss math reproduces the CPU cross_entropy, nll and bce kernels") {
  // (N=3, C=4, S=2) with class weights, smoothing and an ignored position.
  const Tensor x = randn({3, 4, 2}, kFloat64);
  const Tensor target = tensor(std::vector<int64_t>{0, 3, 2, -100, 1, 1}, {3, 2});
  const Tensor w = tensor({0.5, 1.0, 2.0, 1.5}, {4}, kFloat64);
  const double eps = 0.1;
  const Tensor got = cross_entropy(x, target, w, Reduction::None, -100, eps);
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>(), gv = got.to_vector<double>();
  const std::vector<int64_t> tv = target.to_vector<int64_t>();
  for (int64_t i = 0; i < 6; ++i) {
    const double* xc = xv.data() + (i / 2) * 8 + i % 2;
    const double lse = log_sum_exp(xc, 4, 2);
    const double want = tv[i] == -100 ? 0.0 : cross_entropy_loss(xc, 4, 2, tv[i], lse, eps, wv.data());
    CHECK(want == doctest::Approx(gv[i]).epsilon(1e-12));
  }
  // The gradient formula against the autograd of the CPU op (sum reduction).
  const Tensor xr = x.detach().requires_grad_(true);
  cross_entropy(xr, target, w, Reduction::Sum, -100, eps).backward();
  const std::vector<double> gx = xr.grad().to_vector<double>();
  double wsum = 0;
  for (double e : wv) wsum += e;
  for (int64_t i = 0; i < 6; ++i) {
    if (tv[i] == -100) continue;
    const double* xc = xv.data() + (i / 2) * 8 + i % 2;
    const double lse = log_sum_exp(xc, 4, 2);
    for (int64_t c = 0; c < 4; ++c)
      CHECK(cross_entropy_grad(xc[c * 2], lse, c, tv[i], 1.0, eps, 4, wsum, wv.data()) ==
            doctest::Approx(gx[(i / 2) * 8 + c * 2 + i % 2]).epsilon(1e-12));
  }
  CHECK(position_weight(std::vector<double>{6.0}.data(), 3, 1, 4.0) == 1.5);

  const Tensor p = tensor({0.1, 0.5, 0.9, 1e-50}, {4}, kFloat64);
  const Tensor t = tensor({0.0, 1.0, 0.3, 1.0}, {4}, kFloat64);
  const std::vector<double> bce = binary_cross_entropy(p, t, Tensor(), Reduction::None).to_vector<double>();
  const Tensor logits = tensor({-30.0, -1.0, 0.5, 40.0}, {4}, kFloat64);
  const Tensor pw = tensor({2.0, 0.5, 1.0, 3.0}, {4}, kFloat64);
  const std::vector<double> bcel =
      binary_cross_entropy_with_logits(logits, t, Tensor(), Reduction::None, pw).to_vector<double>();
  const std::vector<double> pv = p.to_vector<double>(), tv2 = t.to_vector<double>(), lv = logits.to_vector<double>(),
                            pwv = pw.to_vector<double>();
  for (size_t i = 0; i < 4; ++i) {
    CHECK(bce_loss(pv[i], tv2[i]) == doctest::Approx(bce[i]).epsilon(1e-12));
    CHECK(bce_logits_loss(lv[i], tv2[i], pwv[i], true) == doctest::Approx(bcel[i]).epsilon(1e-12));
  }
  CHECK(bce_loss(1e-50, 1.0) == 100.0);  // log clamped at -100
}

TEST_CASE("SyncBN's count-weighted rank merge equals the global two-pass statistics, empty ranks skipped") {
  std::mt19937 rng(17);
  std::normal_distribution<double> nd(3.0, 1.5);
  std::vector<double> v(900);
  for (auto& e : v) e = nd(rng);
  const double eps = 1e-5;
  // Uneven ranks (300, 0, 100, 500 values): each reports (count, mean, invstd).
  const std::vector<size_t> sizes{300, 0, 100, 500};
  SyncMerge s;
  size_t b = 0;
  for (size_t n : sizes) {
    if (n == 0) {
      s = sync_merge_rank(s, 0.0, 0.0, 0.0, eps);  // what an empty rank sends
      continue;
    }
    const TwoPass r = two_pass(v, b, b + n);
    s = sync_merge_rank(s, static_cast<double>(n), r.mean, 1.0 / std::sqrt(r.m2 / n + eps), eps);
    b += n;
  }
  const TwoPass all = two_pass(v, 0, v.size());
  CHECK(s.n == 900);
  CHECK(s.avg == doctest::Approx(all.mean).epsilon(1e-13));
  CHECK(s.var_n == doctest::Approx(all.m2).epsilon(1e-9));
}

TEST_CASE("optimizer math equals the CPU SGD / Adam kernels; norm and clip factor") {
  const int64_t n = 50;
  for (bool nesterov : {false, true}) {
    const Tensor p = randn({n}, kFloat64), g = randn({n}, kFloat64), buf = randn({n}, kFloat64);
    std::vector<double> pv = p.to_vector<double>(), bv = buf.to_vector<double>();
    const std::vector<double> gv = g.to_vector<double>();
    SgdStepArgs a;
    a.param = p;
    a.grad = g;
    a.momentum_buffer = buf;
    a.lr = 0.1;
    a.momentum = 0.9;
    a.dampening = 0.1;
    a.weight_decay = 0.01;
    a.nesterov = nesterov;
    sgd_step_stub(kCPU)(a);
    const SgdScalars<double> s{0.01, 0.9, 1.0 - 0.1, -0.1, true, nesterov, false, true};
    for (int64_t i = 0; i < n; ++i) sgd_update(s, pv[i], gv[i], &bv[i]);
    const std::vector<double> pc = p.to_vector<double>(), bc = buf.to_vector<double>();
    for (int64_t i = 0; i < n; ++i) {
      CHECK(pv[i] == doctest::Approx(pc[i]).epsilon(1e-14));
      CHECK(bv[i] == doctest::Approx(bc[i]).epsilon(1e-14));
    }
  }
  for (bool decoupled : {false, true}) {
    const Tensor p = randn({n}, kFloat64), g = randn({n}, kFloat64), m = randn({n}, kFloat64),
                 v = rand({n}, kFloat64), vmax = rand({n}, kFloat64);
    std::vector<double> pv = p.to_vector<double>(), mv = m.to_vector<double>(), vv = v.to_vector<double>(),
                        xv = vmax.to_vector<double>();
    const std::vector<double> gv = g.to_vector<double>();
    AdamStepArgs a;
    a.param = p;
    a.grad = g;
    a.exp_avg = m;
    a.exp_avg_sq = v;
    a.max_exp_avg_sq = vmax;
    a.lr = 1e-3;
    a.beta1 = 0.9;
    a.beta2 = 0.999;
    a.eps = 1e-8;
    a.weight_decay = 0.05;
    a.decoupled_weight_decay = decoupled;
    a.step_size = 1e-3 / (1 - 0.9 * 0.9);
    a.bias_correction2_sqrt = std::sqrt(1 - 0.999 * 0.999);
    adam_step_stub(kCPU)(a);
    const AdamScalars<double> s{0.05, 1.0 - 1e-3 * 0.05, 1.0 - 0.9, 0.999, 1.0 - 0.999, a.bias_correction2_sqrt,
                                1e-8, -a.step_size, true, decoupled, true};
    for (int64_t i = 0; i < n; ++i) adam_update(s, pv[i], gv[i], mv[i], vv[i], &xv[i]);
    const std::vector<double> pc = p.to_vector<double>(), mc = m.to_vector<double>(), vc = v.to_vector<double>();
    for (int64_t i = 0; i < n; ++i) {
      CHECK(pv[i] == doctest::Approx(pc[i]).epsilon(1e-14));
      CHECK(mv[i] == doctest::Approx(mc[i]).epsilon(1e-14));
      CHECK(vv[i] == doctest::Approx(vc[i]).epsilon(1e-14));
    }
  }
  const std::vector<double> x{3.0, -4.0, 0.5};
  for (double p : {1.0, 2.0, 3.0, std::numeric_limits<double>::infinity()}) {
    const Tensor out = zeros({}, kFloat64);
    vector_norm_stub(kCPU)(out, tensor(x, {3}, kFloat64), p);
    double acc = 0;
    for (double e : x) acc = std::isinf(p) ? std::max(acc, norm_term(e, p)) : acc + norm_term(e, p);
    CHECK(norm_finish(acc, p) == doctest::Approx(out.item<double>()).epsilon(1e-14));
  }
  CHECK(clip_coefficient(1.0, 0.5) == 1.0);
  CHECK(clip_coefficient(1.0, 3.0) == doctest::Approx(1.0 / (3.0 + 1e-6)));
  CHECK(std::isnan(clip_coefficient(1.0, std::numeric_limits<double>::quiet_NaN())));
}

TEST_CASE("Philox4x32-10 known answers (Random123 kat_vectors)") {
  auto run = [](Philox4x32 ctr, uint32_t k0, uint32_t k1) { return philox4x32_10(ctr, k0, k1); };
  const Philox4x32 zero = run({{0, 0, 0, 0}}, 0, 0);
  CHECK(zero.v[0] == 0x6627e8d5u);
  CHECK(zero.v[1] == 0xe169c58du);
  CHECK(zero.v[2] == 0xbc57ac4cu);
  CHECK(zero.v[3] == 0x9b00dbd8u);
  const Philox4x32 ones = run({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu);
  CHECK(ones.v[0] == 0x408f276du);
  CHECK(ones.v[1] == 0x41c83b0eu);
  CHECK(ones.v[2] == 0xa20bc7c6u);
  CHECK(ones.v[3] == 0x6d5451fdu);
  const Philox4x32 pi = run({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u);
  CHECK(pi.v[0] == 0xd16cfe09u);
  CHECK(pi.v[1] == 0x94fdccebu);
  CHECK(pi.v[2] == 0x5001e420u);
  CHECK(pi.v[3] == 0x24126ea1u);
  // The stream of seed 0 starts with the zero-counter block.
  for (uint64_t i = 0; i < 4; ++i) CHECK(philox_u32(0, i) == zero.v[i]);
}

TEST_CASE("dropout mask: a function of (seed, index), keeping about 1 - p") {
  const double p = 0.3;
  int64_t kept = 0;
  const int64_t n = 200000;
  for (int64_t i = 0; i < n; ++i) {
    const double m = dropout_mask_value(1234, static_cast<uint64_t>(i), p);
    CHECK((m == 0.0 || m == 1.0 / (1.0 - p)));
    kept += m != 0.0;
    if (i < 1000) CHECK(m == dropout_mask_value(1234, static_cast<uint64_t>(i), p));
  }
  // Binomial(200000, 0.7): sd ~ 205; 6 sd either side.
  CHECK(std::abs(static_cast<double>(kept) - 0.7 * n) < 1230);
  int differ = 0;
  for (uint64_t i = 0; i < 1000; ++i) differ += dropout_mask_value(1, i, p) != dropout_mask_value(2, i, p);
  CHECK(differ > 100);  // another seed, another mask
  CHECK(dropout_mask_value(9, 0, 0.0) == 1.0);
}

TEST_CASE("softmax math: column layout and formulas") {
  // Each element in one column, with and without the dividers (inner 1: the last dim).
  for (const SoftmaxShape plain : {SoftmaxShape{2, 3, 4}, SoftmaxShape{5, 7, 1}, SoftmaxShape{1, 3, 33},
                                   SoftmaxShape{3, 1, 6}, SoftmaxShape{1, 1000, 1}})
    for (const SoftmaxShape& g : {plain, plain.with_dividers()}) {
      INFO("outer ", g.outer, " dim ", g.dim_size, " inner ", g.inner, " fast ", g.fast);
      const int64_t n = g.outer * g.dim_size * g.inner;
      std::vector<int> seen(static_cast<size_t>(n), 0);
      for (int64_t c = 0; c < g.outer * g.inner; ++c)
        for (int64_t d = 0; d < g.dim_size; ++d) {
          const int64_t i = g.column_start(c) + d * g.inner;
          CHECK(g.column_of(i) == c);
          ++seen[static_cast<size_t>(i)];
        }
      CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
    }
  CHECK(SoftmaxShape{2, 3, 4}.with_dividers().fast);
  CHECK(!SoftmaxShape{0, 3, 4}.with_dividers().fast);
  // The per-column factor gives the per-element formula's bits.
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> u(-20.0f, 20.0f);
  for (int t = 0; t < 1000; ++t) {
    const float xv = u(gen), mx = u(gen);
    const double sum = std::exp(static_cast<double>(u(gen)) / 4);
    for (const bool log : {false, true}) {
      const float direct =
          log ? (xv - mx) - static_cast<float>(std::log(sum)) : std::exp(xv - mx) * static_cast<float>(1.0 / sum);
      const float via = softmax_output_with(xv, mx, softmax_column_factor(mx, sum, log), log);
      CHECK(std::memcmp(&direct, &via, sizeof via) == 0);
    }
  }
  const std::vector<double> x{1.0, 2.0, 0.5};
  double sum = 0;
  for (double v : x) sum += std::exp(v - 2.0);
  double total = 0;
  for (double v : x) {
    total += softmax_output(v, 2.0, sum, false);
    CHECK(softmax_output(v, 2.0, sum, true) == doctest::Approx(std::log(softmax_output(v, 2.0, sum, false))));
  }
  CHECK(total == doctest::Approx(1.0));
  // log_softmax backward with grad = one-hot equals onehot - softmax.
  const double y0 = softmax_output(x[0], 2.0, sum, true);
  CHECK(softmax_backward_input(1.0, y0, 1.0, true) == doctest::Approx(1.0 - std::exp(y0)));
}
