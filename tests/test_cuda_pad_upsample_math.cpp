// The per-thread index math of the CUDA pad and upsample kernels
// (ops/cuda/pad_math.h, ops/cuda/upsample_math.h), run on the CPU in every
// build: pad's source rule against hand-written tables, its source offsets
// against the CPU pad forward, its reader enumeration against brute force and
// the CPU backward over random geometries; upsample's taps against the CPU
// interpolate, and its binary-searched readers against the reader lists the
// CUDA backward used to upload (kept here as the oracle), bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "minidl/ops/cuda/pad_math.h"
#include "minidl/ops/cuda/upsample_math.h"
#include "minidl/ops/interpolate.h"
#include "minidl/ops/pad.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::cuda_math;

namespace {

std::vector<int64_t> source_table(int64_t in, int64_t left, int64_t right, int mode) {
  std::vector<int64_t> src;
  const int64_t out = in + left + right;
  for (int64_t i = 0; i < out; ++i) src.push_back(pad_source_index(i, left, in, out, mode));
  return src;
}

// The reader lists the CUDA upsample backward uploaded before it searched
// them per thread: for each input index, (output, weight) in increasing
// output order, the l0 tap before the l1 tap, l1 taps of weight 0 dropped.
template <class T>
struct UpsampleReader {
  int64_t o;
  T w;
};

template <class T>
std::vector<std::vector<UpsampleReader<T>>> upsample_readers(const UpsampleDim& d) {
  std::vector<std::vector<UpsampleReader<T>>> per(static_cast<size_t>(d.in));
  for (int64_t o = 0; o < d.out; ++o) {
    const UpsampleTap<T> t = upsample_tap<T>(d, o);
    per[static_cast<size_t>(t.i0)].push_back({o, t.l0});
    if (t.l1 != T(0)) per[static_cast<size_t>(t.i1)].push_back({o, t.l1});
  }
  return per;
}

template <class T>
std::vector<UpsampleReader<T>> searched_readers(const UpsampleDim& d, int64_t j) {
  std::vector<UpsampleReader<T>> r;
  for_each_upsample_reader<T>(d, j, [&](int64_t o, T w) { r.push_back({o, w}); });
  return r;
}

// Same outputs, bit-equal weights, same order.
template <class T>
bool same_readers(const std::vector<UpsampleReader<T>>& a, const std::vector<UpsampleReader<T>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (a[k].o != b[k].o || std::memcmp(&a[k].w, &b[k].w, sizeof(T)) != 0) return false;
  return true;
}

}  // namespace

TEST_CASE("pad source rule: PyTorch's tables for each mode") {
  CHECK(source_table(4, 2, 1, kPadReflect) == std::vector<int64_t>{2, 1, 0, 1, 2, 3, 2});
  CHECK(source_table(3, 2, 2, kPadReplicate) == std::vector<int64_t>{0, 0, 0, 1, 2, 2, 2});
  CHECK(source_table(3, 2, 3, kPadCircular) == std::vector<int64_t>{1, 2, 0, 1, 2, 0, 1, 2});
  CHECK(source_table(3, 3, 3, kPadCircular) == std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1, 2});
  // Circular with a crop wraps within the cropped input (PyTorch: F.pad(torch.arange(5.), (2, -1), mode="circular")).
  CHECK(source_table(5, 2, -1, kPadCircular) == std::vector<int64_t>{2, 3, 0, 1, 2, 3});
  CHECK(source_table(5, -1, 2, kPadCircular) == std::vector<int64_t>{1, 2, 3, 4, 1, 2});
  CHECK(source_table(3, 1, 1, kPadConstant) == std::vector<int64_t>{-1, 0, 1, 2, -1});
  CHECK(source_table(4, -1, -2, kPadConstant) == std::vector<int64_t>{1});  // cropped
  CHECK(source_table(1, 2, 1, kPadReplicate) == std::vector<int64_t>{0, 0, 0, 0});
}

TEST_CASE("pad maps: offsets, readers and their sums match the CPU pad over random geometries") {
  std::mt19937 rng(29);
  auto uniform = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % static_cast<uint32_t>(hi - lo + 1)); };
  const PadMode modes[] = {PadMode::kConstant, PadMode::kReflect, PadMode::kReplicate, PadMode::kCircular};
  int multi_readers = 0, unread = 0;
  for (int trial = 0; trial < 1200; ++trial) {
    const PadMode mode = modes[trial % 4];
    const int mode_int = static_cast<int>(mode);
    const int64_t m = uniform(1, 3);
    // Negative pads (crops) mostly for constant, now and then for the others.
    const bool crop = mode == PadMode::kConstant ? trial % 3 != 0 : (trial / 4) % 4 == 1;
    std::vector<int64_t> in(static_cast<size_t>(m)), left(in.size()), out(in.size());
    std::vector<int64_t> pads(static_cast<size_t>(2 * m));
    Shape shape{2};
    for (int64_t k = 0; k < m; ++k) {
      const int64_t n = uniform(1, 6);
      const int64_t hi = mode == PadMode::kReflect ? n - 1 : mode == PadMode::kCircular ? n : n + 2;
      const int64_t lo = crop ? -(n - 1) : 0;
      const int64_t l = uniform(lo, hi);
      int64_t r = uniform(std::max(lo, -(n + l)), hi);
      // Circular: a positive pad wraps within what the negative one leaves (ops/pad.cpp refuses more).
      if (mode == PadMode::kCircular && l < 0) r = std::min(r, n + l);
      if (mode == PadMode::kCircular && r < 0 && l > n + r) r = std::max(r, l - n);
      in[static_cast<size_t>(k)] = n;
      left[static_cast<size_t>(k)] = l;
      out[static_cast<size_t>(k)] = n + l + r;
      pads[static_cast<size_t>(2 * (m - 1 - k))] = l;  // F.pad: the last dim first
      pads[static_cast<size_t>(2 * (m - 1 - k) + 1)] = r;
      shape.push_back(n);
    }
    std::string geometry = std::string(pad_mode_name(mode)) + " in";
    for (int64_t n : in) geometry += " " + std::to_string(n);
    geometry += " pads";
    for (int64_t p : pads) geometry += " " + std::to_string(p);
    CAPTURE(geometry);
    const double value = 1234.5;
    const Tensor x = randn(shape, kFloat64).requires_grad_(true);
    const Tensor y = pad(x, pads, mode, value);
    const Tensor g = randn(y.shape(), kFloat64);
    mul(y, g).sum().backward();
    PadMaps maps;
    REQUIRE(make_pad_maps(in, out, left, mode_int, maps));
    REQUIRE(y.numel() == 2 * maps.out_plane);
    const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>(), gv = g.to_vector<double>(),
                              dx = x.grad().to_vector<double>();
    int bad_forward = 0, bad_readers = 0, bad_sums = 0;
    std::vector<std::vector<int64_t>> brute(static_cast<size_t>(maps.in_plane));
    for (int64_t o = 0; o < maps.out_plane; ++o) {
      const int64_t s = maps.source_offset(o);
      if (s >= 0) brute[static_cast<size_t>(s)].push_back(o);
      for (int64_t n = 0; n < 2; ++n) {
        const double want = s < 0 ? value : xv[static_cast<size_t>(n * maps.in_plane + s)];
        bad_forward += yv[static_cast<size_t>(n * maps.out_plane + o)] != want;
      }
    }
    for (int64_t e = 0; e < maps.in_plane; ++e) {
      std::vector<int64_t> readers;
      maps.for_each_reader(e, [&](int64_t o) { readers.push_back(o); });
      bad_readers += readers != brute[static_cast<size_t>(e)];
      multi_readers += readers.size() > 1;
      unread += readers.empty();
      for (int64_t n = 0; n < 2; ++n) {
        double acc = 0;  // in increasing output order from 0, as the CPU backward
        maps.for_each_reader(e, [&](int64_t o) { acc += gv[static_cast<size_t>(n * maps.out_plane + o)]; });
        bad_sums += acc != dx[static_cast<size_t>(n * maps.in_plane + e)];
      }
    }
    CHECK(bad_forward == 0);
    CHECK(bad_readers == 0);
    CHECK(bad_sums == 0);
  }
  CHECK(multi_readers > 1000);  // the geometries read inputs several times...
  CHECK(unread > 100);          // ...and crop some away
}

TEST_CASE("pad maps with no padded dims read the whole plane once") {
  PadMaps maps;
  REQUIRE(make_pad_maps({}, {}, {}, kPadConstant, maps));
  CHECK(maps.source_offset(0) == 0);
  std::vector<int64_t> readers;
  maps.for_each_reader(0, [&](int64_t o) { readers.push_back(o); });
  CHECK(readers == std::vector<int64_t>{0});
  CHECK_FALSE(make_pad_maps(std::vector<int64_t>(9, 1), std::vector<int64_t>(9, 1), std::vector<int64_t>(9, 0),
                            kPadConstant, maps));
}

TEST_CASE("upsample taps and searched readers reproduce the CPU interpolate and its gradient") {
  struct Case {
    const char* mode;
    int code;
    bool align;
    Shape shape;
    std::vector<int64_t> size;
  };
  for (const Case& c : {Case{"bilinear", 2, false, {1, 2, 3, 5}, {7, 4}}, Case{"bilinear", 2, true, {1, 2, 3, 5}, {7, 4}},
                        Case{"nearest", 0, false, {1, 2, 3, 5}, {7, 4}},
                        Case{"nearest-exact", 1, false, {1, 2, 3, 5}, {7, 4}},
                        Case{"trilinear", 2, false, {1, 2, 2, 3, 4}, {5, 3, 8}},
                        Case{"trilinear", 2, true, {1, 2, 2, 3, 4}, {5, 3, 8}}}) {
    CAPTURE(c.mode);
    CAPTURE(c.align);
    const Tensor x = randn(c.shape, kFloat64).requires_grad_(true);
    InterpolateOptions opt;
    opt.size = c.size;
    opt.mode = c.mode;
    if (c.code == 2) opt.align_corners = c.align;
    const Tensor y = interpolate(x, opt);
    const Tensor g = randn(y.shape(), kFloat64);
    mul(y, g).sum().backward();
    // (D, H, W); 2-D input: D of size 1.
    const bool three = c.shape.size() == 5;
    const int64_t in[3] = {three ? c.shape[2] : 1, c.shape[c.shape.size() - 2], c.shape.back()};
    const int64_t out[3] = {three ? c.size[0] : 1, c.size[c.size.size() - 2], c.size.back()};
    UpsampleDim dim[3];
    for (int k = 0; k < 3; ++k) dim[k] = UpsampleDim{in[k], out[k], 0, c.code, c.align};
    const int64_t in_plane = in[0] * in[1] * in[2], out_plane = out[0] * out[1] * out[2];
    const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>(), gv = g.to_vector<double>(),
                              dx = x.grad().to_vector<double>();
    for (int64_t p = 0; p < 2; ++p) {
      const double* xp = xv.data() + p * in_plane;
      for (int64_t od = 0; od < out[0]; ++od)
        for (int64_t oh = 0; oh < out[1]; ++oh)
          for (int64_t ow = 0; ow < out[2]; ++ow) {
            const UpsampleTap<double> td = upsample_tap<double>(dim[0], od), th = upsample_tap<double>(dim[1], oh),
                                      tw = upsample_tap<double>(dim[2], ow);
            double want = 0;
            for (int a = 0; a < 2; ++a)
              for (int b = 0; b < 2; ++b)
                for (int k = 0; k < 2; ++k)
                  want += (a ? td.l1 : td.l0) * (b ? th.l1 : th.l0) * (k ? tw.l1 : tw.l0) *
                          xp[((a ? td.i1 : td.i0) * in[1] + (b ? th.i1 : th.i0)) * in[2] + (k ? tw.i1 : tw.i0)];
            CHECK(want == doctest::Approx(yv[p * out_plane + (od * out[1] + oh) * out[2] + ow]).epsilon(1e-12));
          }
      // The CUDA backward's nest (ops/cuda/upsample.cu's UpsampleBackward).
      for (int64_t jd = 0; jd < in[0]; ++jd)
        for (int64_t jh = 0; jh < in[1]; ++jh)
          for (int64_t jw = 0; jw < in[2]; ++jw) {
            double acc = 0;
            for_each_upsample_reader<double>(dim[0], jd, [&](int64_t od, double wd) {
              for_each_upsample_reader<double>(dim[1], jh, [&](int64_t oh, double wh) {
                const double wdh = wd * wh;
                for_each_upsample_reader<double>(dim[2], jw, [&](int64_t ow, double ww) {
                  acc += ww * (wdh * gv[p * out_plane + (od * out[1] + oh) * out[2] + ow]);
                });
              });
            });
            CHECK(acc == doctest::Approx(dx[p * in_plane + (jd * in[1] + jh) * in[2] + jw]).epsilon(1e-12));
          }
    }
  }
}

TEST_CASE("searched upsample readers equal the reader lists bit for bit, float and double") {
  std::mt19937 rng(31);
  auto uniform = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % static_cast<uint32_t>(hi - lo + 1)); };
  const double scales[] = {1.0, 2.0, 0.5, 1.5, 3.0, 0.3, 1.0 / 3.0, 2.5};
  int linear_two_taps = 0, downsampled = 0, cases = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    UpsampleDim d;
    d.mode = static_cast<int>(trial % 3);
    d.align_corners = trial % 2 == 1;
    d.in = uniform(1, 9);
    if (trial % 4 == 3) {  // a user scale_factor: out = floor(in * scale)
      d.scale = rng() % 2 ? scales[rng() % 8] : 0.2 + 3.8 * static_cast<double>(rng() % 1000) / 1000.0;
      d.out = static_cast<int64_t>(std::floor(static_cast<double>(d.in) * d.scale));
      if (d.out < 1 || d.out > 20) continue;
    } else {
      const int64_t pick = uniform(0, 3);
      d.out = pick == 0 ? d.in : pick == 1 ? 2 * d.in : pick == 2 ? uniform(1, d.in) : uniform(1, 20);
    }
    CAPTURE(d.mode);
    CAPTURE(d.align_corners);
    CAPTURE(d.in);
    CAPTURE(d.out);
    CAPTURE(d.scale);
    ++cases;
    downsampled += d.out < d.in;
    const auto want_d = upsample_readers<double>(d);
    const auto want_f = upsample_readers<float>(d);
    int bad = 0;
    for (int64_t j = 0; j < d.in; ++j) {
      bad += !same_readers(searched_readers<double>(d, j), want_d[static_cast<size_t>(j)]);
      bad += !same_readers(searched_readers<float>(d, j), want_f[static_cast<size_t>(j)]);
      linear_two_taps += d.mode == 2 && want_f[static_cast<size_t>(j)].size() > 1;
    }
    CHECK(bad == 0);
  }
  CHECK(cases > 2500);
  CHECK(downsampled > 300);
  CHECK(linear_two_taps > 1000);
}
