// The __host__ __device__ math of the CUDA kernels, run on the CPU in every
// build: the CUDA kernels call the same functions, so this checks their
// index math and formulas without a GPU. This file: strided offsets,
// elementwise, reduction and normalization math; the layer kernels' math
// (softmax, losses, pooling, optimizers, SyncBN, Philox dropout) is in
// tests/test_cuda_layer_math.cpp, pad's and upsample's in
// tests/test_cuda_pad_upsample_math.cpp. Against brute force, the CPU ops and
// two-pass float64.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "minidl/ops/cuda/elementwise_math.h"
#include "minidl/ops/cuda/norm_math.h"
#include "minidl/ops/cuda/offset_calculator.h"
#include "minidl/ops/cuda/reduce_math.h"
#include "tests/norm_reference.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::cuda_math;
using minidl::testing::element_offset;
using minidl::testing::two_pass;
using minidl::testing::TwoPass;

TEST_CASE("OffsetCalculator matches brute-force unravelling for views and broadcasts") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int ndim = 1 + static_cast<int>(rng() % 5);
    Shape shape(ndim);
    for (auto& s : shape) s = 1 + static_cast<int64_t>(rng() % 4);
    // Operand 0 contiguous, 1 permuted-ish (random positive strides), 2 broadcast (some strides 0).
    Shape s0 = contiguous_strides(shape), s1(ndim), s2(ndim);
    for (int d = 0; d < ndim; ++d) {
      s1[d] = 1 + static_cast<int64_t>(rng() % 50);
      s2[d] = (rng() % 3 == 0) ? 0 : s0[d];
    }
    const int64_t* strides[3] = {s0.data(), s1.data(), s2.data()};
    OffsetCalculator<3> calc;
    REQUIRE(make_offset_calculator<3>(shape.data(), ndim, strides, calc));
    REQUIRE(calc.fast);  // the kernels' path: 32-bit dividers
    OffsetCalculator<3> slow = calc;
    slow.fast = false;  // 64-bit division, the path of indices past 2^31
    const int64_t n = numel_of(shape);
    for (int64_t i = 0; i < n; ++i) {
      for (const OffsetCalculator<3>* c : {&calc, &slow}) {
        const Offsets<3> o = c->get(i);
        CHECK(o.v[0] == element_offset(shape, s0, i));
        CHECK(o.v[1] == element_offset(shape, s1, i));
        CHECK(o.v[2] == element_offset(shape, s2, i));
      }
    }
  }
  // An empty shape sets no divider (a divider by zero would fault on the host).
  const Shape empty{3, 0, 2};
  const Shape es = contiguous_strides(empty);
  const int64_t* e_strides[1] = {es.data()};
  OffsetCalculator<1> e;
  REQUIRE(make_offset_calculator<1>(empty.data(), 3, e_strides, e));
  CHECK_FALSE(e.fast);
}

TEST_CASE("OffsetCalculator collapses contiguous dims and refuses too many") {
  const Shape shape{2, 3, 4, 1, 5};
  const Shape st = contiguous_strides(shape);
  const int64_t* s[1] = {st.data()};
  OffsetCalculator<1> calc;
  REQUIRE(make_offset_calculator<1>(shape.data(), 5, s, calc));
  CHECK(calc.ndim == 1);
  CHECK(calc.sizes[0] == 120);
  // A transposed operand blocks the merge of the two dims it swaps.
  const Shape t{1, 3};
  const Shape shape2{3, 4};
  const Shape c2{4, 1};
  const int64_t* s2[2] = {c2.data(), t.data()};
  OffsetCalculator<2> calc2;
  REQUIRE(make_offset_calculator<2>(shape2.data(), 2, s2, calc2));
  CHECK(calc2.ndim == 2);
  // 17 dims of size 2 with strides that never merge.
  Shape big(kMaxDims + 1, 2), bs(kMaxDims + 1);
  for (size_t d = 0; d < big.size(); ++d) bs[d] = int64_t(1) << (2 * (big.size() - d));
  const int64_t* s3[1] = {bs.data()};
  CHECK_FALSE(make_offset_calculator<1>(big.data(), static_cast<int>(big.size()), s3, calc));
}

TEST_CASE("binary and unary math equal the CPU kernels") {
  const Tensor x = tensor({-2.5, -1.0, -0.25, 0.0, 0.3, 1.0, 2.0, 7.5}, {8}, kFloat64);
  const Tensor pos = tensor({0.1, 0.5, 1.0, 2.0, 3.0, 10.0, 0.01, 4.0}, {8}, kFloat64);
  const std::vector<double> xv = x.to_vector<double>(), pv = pos.to_vector<double>();
  struct Case {
    UnaryOp op;
    Tensor cpu;
    const std::vector<double>* in;
    UnaryParams p;
  };
  UnaryParams leaky;
  leaky.scalar = 0.1;
  UnaryParams pw;
  pw.scalar = 1.5;
  UnaryParams clampp;
  clampp.lo = -1.0;
  clampp.hi = 1.0;
  const std::vector<Case> cases = {
      {UnaryOp::Neg, neg(x), &xv, {}},          {UnaryOp::Exp, exp(x), &xv, {}},
      {UnaryOp::Log, log(pos), &pv, {}},        {UnaryOp::Sqrt, sqrt(pos), &pv, {}},
      {UnaryOp::Rsqrt, rsqrt(pos), &pv, {}},    {UnaryOp::Abs, abs(x), &xv, {}},
      {UnaryOp::Pow, pow(pos, 1.5), &pv, pw},   {UnaryOp::Clamp, clamp(x, -1.0, 1.0), &xv, clampp},
      {UnaryOp::Relu, relu(x), &xv, {}},        {UnaryOp::LeakyRelu, leaky_relu(x, 0.1), &xv, leaky},
      {UnaryOp::Sigmoid, sigmoid(x), &xv, {}},  {UnaryOp::Tanh, tanh(x), &xv, {}},
      {UnaryOp::Gelu, gelu(x), &xv, {}},        {UnaryOp::GeluTanh, gelu(x, "tanh"), &xv, {}},
  };
  for (const Case& c : cases) {
    CAPTURE(unary_op_name(c.op));
    const UnaryArgs<double> args = make_unary_args<double>(c.p);
    const std::vector<double> ref = c.cpu.to_vector<double>();
    // The CPU kernels of exp, log, sigmoid, tanh and the GELUs run Eigen's
    // packet math (ops/cpu/array_math.h), not std::, so they agree with the
    // device formulas to a few ulp (tests/test_vec_math.cpp has the bounds);
    // the rest are the same formula and must agree exactly.
    const bool transcendental = c.op == UnaryOp::Exp || c.op == UnaryOp::Log || c.op == UnaryOp::Sigmoid ||
                                c.op == UnaryOp::Tanh || c.op == UnaryOp::Gelu || c.op == UnaryOp::GeluTanh;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double got = unary_forward(c.op, args, (*c.in)[i]);
      if (transcendental)
        CHECK(got == doctest::Approx(ref[i]).epsilon(8 * std::numeric_limits<double>::epsilon()));
      else
        CHECK(got == ref[i]);
    }
  }
  // Backward against central differences of the forward (away from kinks).
  for (const Case& c : cases) {
    if (c.op == UnaryOp::Abs || c.op == UnaryOp::Relu || c.op == UnaryOp::LeakyRelu || c.op == UnaryOp::Clamp) continue;
    CAPTURE(unary_op_name(c.op));
    const UnaryArgs<double> args = make_unary_args<double>(c.p);
    // Ops that save y (exp, sqrt, rsqrt, sigmoid, tanh) take y as `saved`.
    const bool saves_y = c.op == UnaryOp::Exp || c.op == UnaryOp::Sqrt || c.op == UnaryOp::Rsqrt ||
                         c.op == UnaryOp::Sigmoid || c.op == UnaryOp::Tanh;
    for (double v : *c.in) {
      const double h = 1e-6;
      const double fd = (unary_forward(c.op, args, v + h) - unary_forward(c.op, args, v - h)) / (2 * h);
      const double saved = saves_y ? unary_forward(c.op, args, v) : v;
      CHECK(unary_backward(c.op, args, 1.0, saved) == doctest::Approx(fd).epsilon(1e-6));
    }
  }
  // Integer clamp with an absent bound uses the type's extreme; uint8 relu/abs are identities.
  UnaryParams lo_only;
  lo_only.lo = 3;
  const UnaryArgs<int64_t> ia = make_unary_args<int64_t>(lo_only);
  CHECK(unary_forward<int64_t>(UnaryOp::Clamp, ia, 1) == 3);
  CHECK(unary_forward<int64_t>(UnaryOp::Clamp, ia, 1000000000000) == 1000000000000);
  CHECK(unary_forward<uint8_t>(UnaryOp::Relu, make_unary_args<uint8_t>({}), 200) == 200);
  // pow's exponent 0 gives a zero gradient at 0 (not 0 * 0^-1).
  CHECK(unary_backward<double>(UnaryOp::Pow, make_unary_args<double>({}), 1.0, 0.0) == 0.0);

  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(std::isnan(binary_apply(BinaryOp::Maximum, 1.0, true, nan, 2.0)));
  CHECK(std::isnan(binary_apply(BinaryOp::Minimum, 1.0, true, 2.0, nan)));
  CHECK(binary_apply(BinaryOp::Sub, 0.5, false, 3.0, 2.0) == 2.0);
  CHECK(binary_apply(BinaryOp::Add, 1.0, true, 3.0, 2.0) == 5.0);
  CHECK(binary_apply<int64_t>(BinaryOp::Gt, 1, true, 3, 2) == 1);
  CHECK(binary_apply<double>(BinaryOp::Eq, 1, true, nan, nan) == 0.0);
}

TEST_CASE("RowIndexer walks a permuted reduction's rows like nested loops") {
  // x [2, 3, 4] contiguous, reduce dims {0, 2}: rows along dim 1 (stride 4);
  // a row is 2 segments of 4 (dim 2, stride 1), 12 apart (dim 0).
  const Shape kept{3}, kept_strides{4}, seg{2}, seg_strides{12};
  const int64_t* ks[1] = {kept_strides.data()};
  const int64_t* ss[1] = {seg_strides.data()};
  RowIndexer idx;
  REQUIRE(make_offset_calculator<1>(kept.data(), 1, ks, idx.rows));
  REQUIRE(make_offset_calculator<1>(seg.data(), 1, ss, idx.segs));
  idx.seg_len = 4;
  for (int64_t r = 0; r < 3; ++r) {
    std::vector<int64_t> got, want;
    const int64_t start = idx.row_start(r);
    for (int64_t j = 0; j < 8; ++j) got.push_back(idx.element(start, j));
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t k = 0; k < 4; ++k) want.push_back(a * 12 + r * 4 + k);
    CHECK(got == want);
  }
  // Many segments over two reduced dims (NCHW summed over {0, 2, 3} has N of
  // them), computed rather than read from a table: segment s = (a, b) of
  // shape (5, 4) at a * 1000 + b * 100, row-major as RowLayout's seg_offset.
  const Shape seg2{5, 4}, seg2_strides{1000, 100};
  const int64_t* ss2[1] = {seg2_strides.data()};
  REQUIRE(make_offset_calculator<1>(seg2.data(), 2, ss2, idx.segs));
  idx.seg_len = 3;
  for (int64_t a = 0; a < 5; ++a)
    for (int64_t b = 0; b < 4; ++b)
      for (int64_t k = 0; k < 3; ++k) CHECK(idx.element(7, (a * 4 + b) * 3 + k) == 7 + a * 1000 + b * 100 + k);
  // No reduced dims outside the segment: one segment at 0.
  REQUIRE(make_offset_calculator<1>(seg2.data(), 0, ss2, idx.segs));
  idx.seg_len = 50;
  CHECK(idx.element(9, 49) == 58);
}

TEST_CASE("pick_extremum gives the first extreme in any combination order, NaN first") {
  std::mt19937 rng(3);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<ValueIndex<double>> v;
    for (int64_t j = 0; j < 40; ++j) v.push_back({static_cast<double>(rng() % 5), j});
    if (trial % 4 == 0) v[rng() % 40].value = nan;
    // Sequential reference: NaN wins, else strict >, first index on ties.
    ValueIndex<double> ref{0, -1};
    for (const auto& e : v) {
      if (ref.index < 0) { ref = e; continue; }
      if (std::isnan(ref.value)) continue;
      if (std::isnan(e.value) || e.value > ref.value) ref = e;
    }
    // Random pairwise tree.
    std::vector<ValueIndex<double>> pool = v;
    std::shuffle(pool.begin(), pool.end(), rng);
    pool.push_back({0, -1});  // an empty partial
    while (pool.size() > 1) {
      const size_t a = rng() % pool.size();
      ValueIndex<double> x = pool[a];
      pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(a));
      const size_t b = rng() % pool.size();
      pool[b] = pick_extremum<true>(x, pool[b]);
    }
    CHECK(pool[0].index == ref.index);
  }
}

TEST_CASE("variance from deviations equals the two-pass formula") {
  std::mt19937 rng(11);
  std::normal_distribution<double> nd(1e4, 3.0);
  std::vector<double> v(1000);
  for (auto& e : v) e = nd(rng);
  const TwoPass tp = two_pass(v, 0, v.size());
  // The kernel's deviations are taken from a (slightly wrong) float32 mean.
  const double m = static_cast<float>(tp.mean);
  Deviations d;
  for (double e : v) d = add_deviations(d, Deviations{(e - m) * (e - m), e - m});
  CHECK(variance_from_deviations(d, 1000, 1) == doctest::Approx(tp.m2 / 999).epsilon(1e-12));
  CHECK(variance_from_deviations(d, 1000, 0) == doctest::Approx(tp.m2 / 1000).epsilon(1e-12));
  CHECK(std::isinf(variance_from_deviations(Deviations{1.0, 0.0}, 1, 1)));
}

TEST_CASE("Welford with Chan's merge equals two-pass float64 in any merge order") {
  std::mt19937 rng(5);
  for (double offset : {0.0, 1e6}) {
    std::normal_distribution<double> nd(offset, 2.0);
    std::vector<double> v(5000);
    for (auto& e : v) e = nd(rng);
    const TwoPass tp = two_pass(v, 0, v.size());
    // Per-element Welford updates over random chunks, chunks merged in a random tree.
    std::vector<Welford> parts;
    for (size_t b = 0; b < v.size();) {
      const size_t e = std::min(v.size(), b + 1 + rng() % 300);
      Welford w;
      for (size_t i = b; i < e; ++i) w = welford_merge(w, welford_of(v[i]));
      parts.push_back(w);
      b = e;
    }
    parts.push_back(Welford{});  // an empty thread's partial
    while (parts.size() > 1) {
      const size_t a = rng() % parts.size();
      const Welford x = parts[a];
      parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(a));
      const size_t b = rng() % parts.size();
      parts[b] = (rng() % 2) ? welford_merge(x, parts[b]) : welford_merge(parts[b], x);
    }
    CAPTURE(offset);
    CHECK(parts[0].n == 5000);
    CHECK(parts[0].mean == doctest::Approx(tp.mean).epsilon(1e-14));
    CHECK(parts[0].m2 == doctest::Approx(tp.m2).epsilon(1e-9));
    const GroupStatistics s = statistics_of(parts[0], 1e-5);
    CHECK(s.invstd == doctest::Approx(1.0 / std::sqrt(tp.m2 / 5000 + 1e-5)).epsilon(1e-9));
  }
  CHECK(statistics_of(Welford{}, 1e-5).invstd == 0.0);
}

TEST_CASE("shifted double sums give Welford's moments, also far from zero") {
  std::mt19937 rng(11);
  for (double offset : {0.0, 1e3, 1e6}) {
    std::normal_distribution<double> nd(offset, 2.0);
    std::vector<double> v(5000);
    // float inputs, as the float32 kernels see them
    for (auto& e : v) e = static_cast<double>(static_cast<float>(nd(rng)));
    const TwoPass tp = two_pass(v, 0, v.size());
    const double shift = v[0];
    // Per-thread partials over a strided split (as a 256-thread block), then added.
    std::vector<ShiftedSums> parts(256);
    for (size_t i = 0; i < v.size(); ++i) parts[i % 256] = shifted_add(parts[i % 256], shifted_of(v[i], shift));
    ShiftedSums total;
    for (const auto& p : parts) total = shifted_add(total, p);
    const Welford w = welford_from_shifted(total, 5000, shift);
    Welford ref;
    for (double e : v) ref = welford_merge(ref, welford_of(e));
    CAPTURE(offset);
    CHECK(w.n == 5000);
    CHECK(w.mean == doctest::Approx(tp.mean).epsilon(1e-14));
    CHECK(w.m2 == doctest::Approx(tp.m2).epsilon(1e-11));
    CHECK(w.m2 == doctest::Approx(ref.m2).epsilon(1e-9));
    const GroupStatistics s = statistics_of(w, 1e-5);
    CHECK(s.invstd == doctest::Approx(1.0 / std::sqrt(tp.m2 / 5000 + 1e-5)).epsilon(1e-11));
  }
  // A constant group: M2 exactly 0 (the shift is the value), never negative.
  const Welford c = welford_from_shifted(shifted_add(shifted_of(3.5, 3.5), shifted_of(3.5, 3.5)), 2, 3.5);
  CHECK(c.mean == 3.5);
  CHECK(c.m2 == 0.0);
  CHECK(welford_from_shifted(ShiftedSums{}, 0, 0).n == 0);
  // The documented weakness, bounded: a shift 1e4 standard deviations away still
  // gives M2 to 1e-6 relative (double has 52 bits; (1e4)^2 costs about 27).
  std::vector<double> u(1000);
  std::normal_distribution<double> nd(0.0, 1.0);
  for (auto& e : u) e = nd(rng);
  const TwoPass tu = two_pass(u, 0, u.size());
  ShiftedSums far;
  for (double e : u) far = shifted_add(far, shifted_of(e, 1e4));
  CHECK(welford_from_shifted(far, 1000, 1e4).m2 == doctest::Approx(tu.m2).epsilon(1e-6));
}

// A NaN or infinite value: the shifted sums' M2 = s2 - s1^2/n is NaN (inf -
// inf), and must stay NaN, as the CPU's two passes and the legacy Welford give
// (PyTorch's running_var turns NaN too); only a negative rounding result is
// clamped to 0. An infinite shift (the group's first value) included.
TEST_CASE("shifted double sums keep the NaN variance of a NaN or infinite value") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (const std::vector<double>& v : {std::vector<double>{1.0, nan, 2.0}, std::vector<double>{1.0, inf, 2.0},
                                       std::vector<double>{-inf, 1.0, 2.0}, std::vector<double>{nan, 1.0, 2.0}}) {
    CAPTURE(v[0]);
    CAPTURE(v[1]);
    ShiftedSums s;
    for (double e : v) s = shifted_add(s, shifted_of(e, v[0]));
    const Welford w = welford_from_shifted(s, 3, v[0]);
    CHECK(std::isnan(two_pass(v, 0, v.size()).m2));
    CHECK(std::isnan(w.m2));
    const GroupStatistics st = statistics_of(w, 1e-5);
    CHECK(std::isnan(st.var));
    CHECK(std::isnan(st.invstd));
  }
  // Rounding below zero still becomes exactly 0 (here s2 - s1^2/n = -2^-52 s2).
  const Welford r = welford_from_shifted(ShiftedSums{3.0, 3.0 * (1.0 - 0x1p-52)}, 3, 0.0);
  CHECK(r.m2 == 0.0);
}

TEST_CASE("IntDivider divides like / and % below 2^31") {
  std::mt19937_64 rng(7);
  std::vector<int64_t> divisors = {1, 2, 3, 5, 7, 16, 31, 32, 33, 1000, 1023, 1024, 1025, 65535, 65536, 65537,
                                   (int64_t{1} << 30) - 1, int64_t{1} << 30, (int64_t{1} << 31) - 1};
  for (int i = 0; i < 200; ++i) divisors.push_back(1 + static_cast<int64_t>(rng() % (kIntDividerLimit - 1)));
  for (int i = 0; i < 200; ++i) divisors.push_back(1 + static_cast<int64_t>(rng() % 5000));
  for (const int64_t d : divisors) {
    const IntDivider div(d);
    std::vector<int64_t> ns = {0, 1, d - 1, d, d + 1, 2 * d - 1, kIntDividerLimit - 1, kIntDividerLimit - 2};
    for (int i = 0; i < 200; ++i) ns.push_back(static_cast<int64_t>(rng() % kIntDividerLimit));
    for (const int64_t n : ns) {
      if (n < 0 || n >= kIntDividerLimit) continue;
      const auto u = static_cast<uint32_t>(n);
      if (div.div(u) != n / d || div.mod(u) != n % d) {
        FAIL_CHECK("IntDivider(" << d << ") of " << n << ": got " << div.div(u) << " rem " << div.mod(u));
      }
    }
  }
  CHECK(fits_int_divider(kIntDividerLimit - 1));
  CHECK_FALSE(fits_int_divider(kIntDividerLimit));
  CHECK_FALSE(NormShape{1 << 16, 1 << 16, 1, 1, 1}.with_dividers().fast);  // 2^32 elements: the 64-bit path
  // An empty tensor (its first H100 run: SIGFPE making a divider by zero on the host).
  CHECK_FALSE(NormShape{0, 4, 1, 5, 4}.with_dividers().fast);
  CHECK_FALSE(NormShape{2, 4, 1, 0, 4}.with_dividers().fast);
}

TEST_CASE("NormShape enumerates each group's and channel's elements exactly once") {
  // BatchNorm (N=3, C=4, HW=5), GroupNorm (N=2, 6 channels in 3 groups, HW=2), LayerNorm (4 rows of 6).
  // Each twice: 64-bit divisions, then the precomputed dividers (the kernels' path).
  std::vector<NormShape> shapes;
  // And the geometries with shortcuts (A == 1, S == 1, P == 1, K == 1, alone and together).
  for (const NormShape s : {NormShape{3, 4, 1, 5, 4}, NormShape{1, 6, 2, 2, 3}, NormShape{1, 4, 6, 1, 1},
                            NormShape{2, 6, 3, 7, 2}, NormShape{5, 3, 1, 33, 3}, NormShape{1, 6, 2, 1, 3},
                            NormShape{1, 4, 3, 5, 1}, NormShape{3, 4, 5, 1, 1}, NormShape{2, 4, 1, 1, 4},
                            NormShape{1, 6, 1, 4, 6}, NormShape{1, 1, 7, 1, 1}, NormShape{1, 6, 1, 4, 3},
                            NormShape{1, 8, 1, 1, 4}}) {
    shapes.push_back(s);
    shapes.push_back(s.with_dividers());
    CHECK(shapes.back().fast);
  }
  for (const NormShape& s : shapes) {
    CAPTURE(s.fast);
    const int64_t numel = s.A * s.G * s.K * s.S;
    std::vector<int> seen(static_cast<size_t>(numel), 0);
    for (int64_t g = 0; g < s.G; ++g)
      for (int64_t j = 0; j < s.group_size(); ++j) {
        const int64_t off = s.group_offset(g, j);
        REQUIRE(off < numel);
        CHECK(s.group_of(off) == g);
        CHECK(s.channel_in_group(g, j) == s.channel_of(off));
        CHECK(s.channel_of(off) == NormShape{s.A, s.G, s.K, s.S, s.P}.channel_of(off));  // the 64-bit formulas
        // One weight a group when K == 1: the CUDA passes' per-group factors
        // (ops/cuda/norm_factors.cuh's StatsStore and SumsStore, norm_core.cu's
        // FactorParamStore) take channel g % P; InstanceNorm's groups are
        // (image, channel) pairs, P of them an image.
        if (s.K == 1) CHECK(s.channel_of(off) == g % s.P);
        ++seen[off];
      }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
    std::fill(seen.begin(), seen.end(), 0);
    for (int64_t c = 0; c < s.channels(); ++c)
      for (int64_t j = 0; j < s.channel_size(); ++j) {
        int64_t g = -1;
        const int64_t off = s.channel_offset(c, j, g);
        REQUIRE(off < numel);
        CHECK(s.channel_of(off) == c);
        CHECK(s.group_of(off) == g);
        CHECK(s.group_of(off) == NormShape{s.A, s.G, s.K, s.S, s.P}.group_of(off));
        ++seen[off];
      }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
  }
}

TEST_CASE("norm formulas: normalize, backward with batch statistics, running update") {
  // dx of a batch-statistics normalization equals its finite-difference gradient.
  const std::vector<double> x{0.3, -1.2, 2.0, 0.7, 1.1};
  const std::vector<double> dy{0.5, -0.1, 0.2, 1.0, -0.7};
  const double w = 1.7, eps = 1e-5;
  auto loss = [&](const std::vector<double>& v) {
    Welford st;
    for (double e : v) st = welford_merge(st, welford_of(e));
    const GroupStatistics s = statistics_of(st, eps);
    double l = 0;
    for (size_t i = 0; i < v.size(); ++i) l += dy[i] * normalize_value(v[i], s.mean, s.invstd, w, 0.25);
    return l;
  };
  Welford st;
  for (double e : x) st = welford_merge(st, welford_of(e));
  const GroupStatistics s = statistics_of(st, eps);
  double s1 = 0, s2 = 0;
  for (size_t i = 0; i < x.size(); ++i) s1 += w * dy[i], s2 += w * dy[i] * (x[i] - s.mean);
  for (size_t i = 0; i < x.size(); ++i) {
    std::vector<double> xp = x, xm = x;
    xp[i] += 1e-6;
    xm[i] -= 1e-6;
    const double fd = (loss(xp) - loss(xm)) / 2e-6;
    CHECK(norm_backward_value(dy[i], x[i], s.mean, s.invstd, w, true, s1, s2, 5.0) == doctest::Approx(fd).epsilon(1e-6));
  }
  CHECK(norm_backward_value(2.0, 5.0, 1.0, 0.5, 3.0, false, 9.0, 9.0, 5.0) == 3.0);
  CHECK(running_update(1.0, 3.0, 0.1) == doctest::Approx(1.2));
  // K > 1 dx (ops/cuda/norm_factors.cuh): a group's factors made with weight 1
  // and the element's scale put in are the element's factors, bit for bit.
  std::mt19937 gen(7);
  std::uniform_real_distribution<double> u(-3.0, 3.0);
  for (int t = 0; t < 1000; ++t) {
    const double mean = u(gen), invstd = std::exp(u(gen)), weight = u(gen), sdy = u(gen) * 50, sxmu = u(gen) * 50;
    const double count = 1 + t;
    BackwardFactors<float> group = backward_factors<float>(mean, invstd, 1.0, true, sdy, sxmu, count);
    group.scale = backward_scale<float>(invstd, weight);
    const BackwardFactors<float> element = backward_factors<float>(mean, invstd, weight, true, sdy, sxmu, count);
    CHECK(std::memcmp(&group, &element, sizeof group) == 0);
  }
}

TEST_CASE("groups that are channels: one reduction gives the group sums and the parameter gradients") {
  // BatchNorm's geometry only; InstanceNorm (P < G), GroupNorm (K > 1) and LayerNorm are not.
  CHECK(groups_are_channels(NormShape{3, 4, 1, 5, 4}));
  CHECK(groups_are_channels(NormShape{7, 2, 1, 1, 2}));  // BatchNorm1d on (N, C)
  CHECK_FALSE(groups_are_channels(NormShape{1, 6, 1, 5, 3}));
  CHECK_FALSE(groups_are_channels(NormShape{1, 6, 2, 2, 3}));
  CHECK_FALSE(groups_are_channels(NormShape{1, 4, 6, 1, 1}));
  // BatchNorm N=3, C=4, HW=5 (and N=5, C=3, HW=1): the kernel's unweighted
  // group sums through group_param_sums equal (a) the w-weighted group sums
  // and (b) the per-channel sums of the general path, and (c) the parameter
  // gradients equal finite differences of sum dy * y in w and b.
  for (const NormShape s0 : {NormShape{3, 4, 1, 5, 4}, NormShape{5, 3, 1, 1, 3}}) {
    for (const NormShape& s : {s0, s0.with_dividers()}) {
      const int64_t numel = s.A * s.G * s.S;
      std::vector<double> x(static_cast<size_t>(numel)), dy(x.size()), w(static_cast<size_t>(s.G));
      for (int64_t i = 0; i < numel; ++i) x[i] = std::sin(0.7 * i) * 2 + 0.5, dy[i] = std::cos(1.3 * i);
      for (int64_t c = 0; c < s.G; ++c) w[c] = c == 1 ? 0.0 : 0.5 + c;  // a zero weight: no division by w
      std::vector<double> mean(w.size()), invstd(w.size());
      for (int64_t g = 0; g < s.G; ++g) {
        Welford st;
        for (int64_t j = 0; j < s.group_size(); ++j) st = welford_merge(st, welford_of(x[s.group_offset(g, j)]));
        const GroupStatistics gs = statistics_of(st, 1e-5);
        mean[g] = gs.mean, invstd[g] = gs.invstd;
      }
      auto loss = [&](const std::vector<double>& wv, const std::vector<double>& bv) {
        double l = 0;
        for (int64_t i = 0; i < numel; ++i) {
          const int64_t g = s.group_of(i), c = s.channel_of(i);
          l += dy[i] * normalize_value(x[i], mean[g], invstd[g], wv[c], bv[c]);
        }
        return l;
      };
      const std::vector<double> b(w.size(), 0.25);
      for (const bool with_weight : {true, false}) {
        CAPTURE(with_weight);
        for (int64_t g = 0; g < s.G; ++g) {
          double u1 = 0, u2 = 0, s1 = 0, s2 = 0;
          const double wg = with_weight ? w[g] : 1.0;
          for (int64_t j = 0; j < s.group_size(); ++j) {
            const int64_t i = s.group_offset(g, j);
            u1 += dy[i], u2 += dy[i] * (x[i] - mean[g]);
            s1 += wg * dy[i], s2 += wg * dy[i] * (x[i] - mean[g]);
          }
          const GroupParamSums r = group_param_sums(u1, u2, wg, invstd[g]);
          CHECK(r.sum_dy == doctest::Approx(s1).epsilon(1e-12));
          CHECK(r.sum_dy_xmu == doctest::Approx(s2).epsilon(1e-12));
          double cw = 0, cb = 0;  // ChannelDyLoader's sums of channel g
          for (int64_t j = 0; j < s.channel_size(); ++j) {
            int64_t gg = -1;
            const int64_t i = s.channel_offset(g, j, gg);
            REQUIRE(gg == g);
            cw += dy[i] * (x[i] - mean[gg]) * invstd[gg], cb += dy[i];
          }
          CHECK(r.grad_weight == doctest::Approx(cw).epsilon(1e-12));
          CHECK(r.grad_bias == doctest::Approx(cb).epsilon(1e-12));
          std::vector<double> wp = w, wm = w, bp = b, bm = b;
          wp[g] += 1e-4, wm[g] -= 1e-4, bp[g] += 1e-4, bm[g] -= 1e-4;
          CHECK(r.grad_weight == doctest::Approx((loss(wp, b) - loss(wm, b)) / 2e-4).epsilon(1e-7));
          CHECK(r.grad_bias == doctest::Approx((loss(w, bp) - loss(w, bm)) / 2e-4).epsilon(1e-7));
        }
      }
    }
  }
}

TEST_CASE("ColumnTiling: each row of a column once, in a fixed order") {
  // Row counts around the slice and chunk sizes (1 row, 8 rows a slice, a
  // chunk of 128, beyond), and long columns whose chunks grow (more than
  // kMaxChunks x 128 rows: channels-last BatchNorm's N*H*W), as the tiled
  // column reduction walks them.
  for (const int64_t len : {1, 15, 16, 17, 127, 128, 129, 300, 1000, 16384, 16385, 20000, 131072, 524288 + 5}) {
    CAPTURE(len);
    const int64_t rows = ColumnTiling::chunk_rows(len);
    REQUIRE(rows % ColumnTiling::kSlices == 0);
    REQUIRE(rows >= ColumnTiling::kMinChunkRows);
    REQUIRE(ColumnTiling::chunks(len) <= ColumnTiling::kMaxChunks);
    std::vector<int> seen(static_cast<size_t>(len), 0);
    for (int64_t b = 0; b < ColumnTiling::chunks(len); ++b)
      for (int t = 0; t < ColumnTiling::kSlices; ++t)
        for (int64_t k = 0; k < rows / ColumnTiling::kSlices; ++k) {
          const int64_t j = ColumnTiling::row(rows, b, t, k);
          REQUIRE(j < (b + 1) * rows);
          if (j < ColumnTiling::chunk_end(rows, b, len)) ++seen[static_cast<size_t>(j)];
        }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
    // Integers sum exactly in any order; the list of visited rows shows the order.
    CHECK(column_tiled_reduce(len, int64_t{0}, [](int64_t j) { return j + 1; }, std::plus<int64_t>()) ==
          len * (len + 1) / 2);
    std::vector<int64_t> order;
    column_tiled_reduce(len, 0, [&](int64_t j) { order.push_back(j); return 0; }, std::plus<int>());
    REQUIRE(order.size() == static_cast<size_t>(len));
    if (len >= 129) {  // slice 0 of chunk 0 takes rows 0, 16, ..., then slice 1 from row 1
      const int64_t per_slice = rows / ColumnTiling::kSlices;
      for (int64_t k = 0; k < per_slice; ++k) CHECK(order[static_cast<size_t>(k)] == 16 * k);
      CHECK(order[static_cast<size_t>(per_slice)] == 1);
    }
  }
  // The grids: 128-row chunks up to 128 x 128 rows; (128, 64, 32, 32)
  // channels-last BatchNorm's 131072 rows in 128 chunks of 1024.
  CHECK(ColumnTiling::chunk_rows(16384) == 128);
  CHECK(ColumnTiling::chunk_rows(16385) == 144);
  CHECK(ColumnTiling::chunk_rows(131072) == 1024);
  CHECK(ColumnTiling::chunks(131072) == 128);
}
