// amp_bn_demo, section 2: why BatchNorm keeps float32 statistics. 16-bit
// accumulation emulated on the host (every addition rounded to the storage
// type), on real activations: batch variance, running_var updates, and where
// a float16 sum of squares overflows.
#include <cmath>
#include <utility>
#include <vector>

#include "examples/amp_bn_demo/demo.h"
#include "examples/common/csv_log.h"
#include "examples/common/svg_plot.h"
#include "minidl/core/half.h"

namespace minidl::amp_demo {

using examples::CsvLog;
using examples::Panel;
using examples::Series;

namespace {

// ---- emulated 16-bit accumulation ----------------------------------------------
// An accumulator held in T: every addition computed in float and rounded back
// to T (what a kernel that accumulates in its storage type does). float32's
// 24-bit significand makes each float sum of two 16-bit values exact before
// the one rounding, so this is true 16-bit arithmetic.
template <class T>
float add_in(float acc, float v) {
  if constexpr (std::is_same_v<T, float>) return acc + v;
  else return static_cast<float>(T(acc + v));
}
template <class T>
float round_to(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else return static_cast<float>(T(v));
}

// One-pass mean and variance of xs (values rounded to T first) with the sums in T.
template <class T>
std::pair<double, double> one_pass_stats(const std::vector<float>& xs) {
  float s = 0, s2 = 0;
  for (float x : xs) {
    const float v = round_to<T>(x);
    s = add_in<T>(s, v);
    s2 = add_in<T>(s2, round_to<T>(v * v));
  }
  const double n = static_cast<double>(xs.size()), mean = s / n;
  return {mean, s2 / n - mean * mean};
}

// A pairwise (tree) sum in T, the order of a GPU block reduction.
template <class T>
float pairwise_sum(const float* v, size_t n) {
  if (n == 1) return round_to<T>(v[0]);
  const size_t h = n / 2;
  return round_to<T>(pairwise_sum<T>(v, h) + pairwise_sum<T>(v + h, n - h));
}

// ---- 2. BatchNorm statistics in half ------------------------------------------------

// What enters the first BatchNorm of an untrained ResNet-20 (its conv1 output)
// for `images`: realistic activations, (N, C, 32, 32).
Tensor first_bn_input(const Images& images, double width, uint64_t seed) {
  manual_seed(seed);
  auto model = models::create_model("resnet20", models::ModelOptions().width(width));
  NoGradGuard no_grad;
  return model->child("conv1")->forward(images.x);
}

std::vector<float> channel_values(const Tensor& act, int64_t c) {
  return act.select(1, c).contiguous().to(kFloat32).flatten().to_vector<float>();
}

}  // namespace

void section_bn_stats(const Images& train, const Args& a, const fs::path& out, Checks& check) {
  std::printf("\n2. Why BatchNorm keeps float32 statistics\n");
  const Images batch = train.first(a.stat_batch);
  const Tensor act = first_bn_input(batch, a.level_width, a.seed);
  const int64_t C = act.size(1), n = act.numel() / C;

  // (a) batch statistics accumulated in the storage type.
  std::printf("(a) batch variance of the first BN layer's input (%lld images -> n = N*H*W = %lld values per channel),\n"
              "    one pass (sum x, sum x^2) with the sums held in each type; relative error vs float64, over %lld channels:\n",
              static_cast<long long>(batch.size()), static_cast<long long>(n), static_cast<long long>(C));
  double err[3] = {0, 0, 0};  // mean over channels: float32, bfloat16, float16
  CsvLog csv_a((out / "bn_stats_variance.csv").string(), {"channel", "var_f64", "var_f32", "var_bf16", "var_f16"});
  for (int64_t c = 0; c < C; ++c) {
    const std::vector<float> xs = channel_values(act, c);
    double mean = 0, var = 0;
    for (float x : xs) mean += x;
    mean /= static_cast<double>(xs.size());
    for (float x : xs) var += (x - mean) * (x - mean);
    var /= static_cast<double>(xs.size());
    const double v[3] = {one_pass_stats<float>(xs).second, one_pass_stats<BFloat16>(xs).second,
                         one_pass_stats<Half>(xs).second};
    for (int k = 0; k < 3; ++k) err[k] += std::abs(v[k] - var) / var / static_cast<double>(C);
    csv_a.row({double(c), var, v[0], v[1], v[2]});
  }
  std::printf("    float32 %.2e   bfloat16 %.2e   float16 %.2e   (16-bit sums stop growing once x^2 falls below half\n"
              "    their spacing, inf: a float16 sum passed 65504; BN's kernels accumulate in float32/float64 whatever the input)\n",
              err[0], err[1], err[2]);
  check(err[0] < 1e-3, "float32 accumulation: variance within 0.1% (" + fmt("%.1e", err[0]) + ")");
  check(err[1] > 0.1 && err[2] > 0.1, "bfloat16 and float16 accumulation: variance off by more than 10%");

  // (b) running_var stored in half: rv = 0.9 rv + 0.1 v_batch, computed in
  // float32 and rounded to the storage type (minidl's kernel for 16-bit
  // running statistics, the O3 case). The batch variance is 1.02 every step.
  const int64_t N = a.rv_updates;
  std::printf("(b) running_var after %lld momentum-0.1 updates towards a batch variance of 1.02, starting at 1:\n",
              static_cast<long long>(N));
  Series rv_series[3] = {{"float32", {}, {}}, {"bfloat16", {}, {}}, {"float16", {}, {}}};
  float rv[3] = {1, 1, 1};
  CsvLog csv_b((out / "bn_stats_running_var.csv").string(), {"update", "float32", "bfloat16", "float16"});
  for (int64_t s = 0; s <= N; ++s) {
    csv_b.row({double(s), rv[0], rv[1], rv[2]});
    for (int k = 0; k < 3; ++k) rv_series[k].x.push_back(double(s)), rv_series[k].y.push_back(rv[k]);
    const float next = 0.9f * rv[0] + 0.1f * 1.02f;
    const float nb = 0.9f * rv[1] + 0.1f * 1.02f, nh = 0.9f * rv[2] + 0.1f * 1.02f;
    rv[0] = next, rv[1] = round_to<BFloat16>(nb), rv[2] = round_to<Half>(nh);
  }
  std::printf("    float32 %.6f   bfloat16 %.6f   float16 %.6f   (target 1.02; spacing of values near 1:\n"
              "    bfloat16 2^-7 = 0.0078, float16 2^-10 = 0.00098: an update 0.1 * (1.02 - rv) below half of it is lost)\n",
              rv[0], rv[1], rv[2]);
  check(std::abs(rv[0] - 1.02f) < 1e-4, "float32 running_var reaches 1.02");
  check(rv[1] == 1.0f, "bfloat16 running_var never moves from 1 (every update 0.002 < 0.0039, half its spacing)");
  check(rv[2] > 1.0f && 1.02f - rv[2] > 0.002f, "float16 running_var stops short of 1.02 by more than 0.002 (" +
                                                     fmt("%.4f)", rv[2]));

  // (c) where a float16 sum of squares overflows: pairwise sums over the
  // largest-energy channel, for growing batches of the same images.
  int64_t cmax = 0;
  double best = -1;
  for (int64_t c = 0; c < C; ++c) {
    double e = 0;
    for (float x : channel_values(act, c)) e += double(x) * x / double(n);
    if (e > best) best = e, cmax = c;
  }
  std::printf("(c) sum of x^2 over channel %lld (mean x^2 = %.3f) for batches of 1..%lld images, pairwise, float16 max 65504:\n",
              static_cast<long long>(cmax), best, static_cast<long long>(batch.size()));
  std::printf("    %7s %10s %14s %14s %14s\n", "images", "n", "float64", "float16", "bfloat16");
  CsvLog csv_c((out / "bn_stats_overflow.csv").string(), {"images", "n", "sum_f64", "sum_f16", "sum_bf16"});
  Series s64{"float64", {}, {}}, s16{"float16 (inf not drawn)", {}, {}}, sbf{"bfloat16", {}, {}},
      lim{"65504 (float16 max)", {}, {}, true};
  std::vector<float> sq;
  for (float x : channel_values(act, cmax)) sq.push_back(x * x);
  const int64_t per_image = act.size(2) * act.size(3);
  bool overflow_ok = true, saw_inf = false, saw_finite = false;
  for (int64_t imgs = 1; imgs <= batch.size(); imgs *= 2) {
    const size_t m = static_cast<size_t>(imgs * per_image);
    double exact = 0;
    for (size_t i = 0; i < m; ++i) exact += sq[i];
    const float h = pairwise_sum<Half>(sq.data(), m), b = pairwise_sum<BFloat16>(sq.data(), m);
    std::printf("    %7lld %10zu %14.1f %14.1f %14.1f\n", static_cast<long long>(imgs), m, exact, h, b);
    csv_c.row({double(imgs), double(m), exact, h, b});
    for (auto [s, v] : {std::pair{&s64, exact}, std::pair{&s16, double(h)}, std::pair{&sbf, double(b)}})
      s->x.push_back(double(imgs)), s->y.push_back(v);
    lim.x.push_back(double(imgs)), lim.y.push_back(65504);
    if (exact > 70000) overflow_ok = overflow_ok && std::isinf(h), saw_inf = true;
    if (exact < 60000) overflow_ok = overflow_ok && std::isfinite(h), saw_finite = true;
  }
  check(overflow_ok && saw_finite && saw_inf,
        "the float16 sum is inf exactly where the true sum passes 65504 (and finite below; bfloat16 never overflows)");

  Panel pa{"(b) running_var, momentum 0.1, target 1.02", "update", "running_var", {rv_series[0], rv_series[1], rv_series[2]}};
  Panel pc{"(c) sum of x^2 of one channel", "images in the batch", "sum", {s64, s16, sbf, lim}};
  pc.log_x = pc.log_y = true;
  examples::write_svg_plot((out / "bn_stats.svg").string(), {pa, pc}, "BatchNorm statistics in half precision");
}

}  // namespace minidl::amp_demo
