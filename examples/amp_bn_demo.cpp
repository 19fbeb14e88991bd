// amp_bn_demo: mixed precision on the CPU, measured. What Apex's opt levels
// cost and save, why BatchNorm stays in float32, why float16 needs a loss
// scaler, and what bfloat16 autocast does to accuracy.
//
//   build/examples/amp_bn_demo            # ~3 min on a busy 2-core machine (1 thread)
//   build/examples/amp_bn_demo --smoke    # seconds; asserts the claims (make test)
//
// Four sections, each a printed table, <out>/<name>.csv and <out>/<name>.svg:
//  1. levels        O0/O1/O2/O3 (amp::initialize) on ResNet-20: peak memory of
//                   a training step from the test device's allocator counters
//                   (Device("test") runs the CPU kernels on separately counted
//                   memory), and time per step.
//  2. bn_stats      BatchNorm statistics in half precision: the batch variance
//                   of real activations accumulated in bfloat16/float16 vs
//                   float32, running_var after momentum-0.1 updates stored in
//                   half, and the batch size at which a float16 sum of squares
//                   passes 65504 and becomes inf.
//  3. grad_scaler   the fraction of a real step's gradients that float16 flushes
//                   to zero or to subnormals, unscaled and times 2^16; the
//                   GradScaler's scale history from 2^24, with skipped steps
//                   and an injected inf.
//  4. accuracy      the same short training in float32 (O0), with bfloat16
//                   autocast (O1) and with a bfloat16 model + float32 masters (O2).
// Half precision on the CPU: bfloat16 is the CPU's autocast type; the float16
// parts (underflow, overflow, the scaler) run on the CPU too, every op
// computing in float32 and rounding to float16 at its boundary, the values a
// GPU's float16 storage would hold. Neither is faster than float32 here (no
// 16-bit dot products yet; see README "Mixed precision").
// Every check is printed with "ok" or "FAILED"; the exit status is 1 if one
// failed. Deterministic for a given --seed, except the times.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "examples/common/batch_eval.h"
#include "examples/common/csv_log.h"
#include "examples/common/demo_checks.h"
#include "examples/common/example_data.h"
#include "examples/common/main_guard.h"
#include "examples/common/svg_plot.h"
#include "minidl/core/half.h"
#include "minidl/core/test_device.h"
#include "minidl/minidl.h"

namespace fs = std::filesystem;
using namespace minidl;
using examples::Checks;
using examples::CsvLog;
using examples::Images;
using examples::Panel;
using examples::seconds_since;
using examples::Series;

namespace {

struct Args {
  std::string data, out = "runs/amp_bn_demo";
  int64_t epochs = 10, batch_size = 64, limit_train = 0, limit_test = 0;
  int64_t level_batch = 32, level_steps = 4, stat_batch = 256, rv_updates = 200, scaler_steps = 60, growth_interval = 10;
  double width = 0.25, level_width = 0.5, lr = 0.05;
  int threads = 1;  // small tensors: a second thread costs more than it gives on a busy machine
  uint64_t seed = 0;
  bool smoke = false;
};

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

const char* kLevels[] = {"O0", "O1", "O2", "O3"};

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

// ---- 1. the opt levels ------------------------------------------------------------

void section_levels(const Images& train, const Args& a, const fs::path& out, Checks& check) {
  std::printf("\n1. Apex's opt levels on ResNet-20 (width %g, batch %lld, SGD momentum 0.9), on the test device\n",
              a.level_width, static_cast<long long>(a.level_batch));
  std::printf("   memory: the test device allocator's live/peak bytes; O1-O3 use bfloat16 (the CPU's half type)\n");
  std::printf("   %-5s %12s %12s %12s %12s %12s %10s\n", "level", "params MB", "masters MB", "at rest MB", "peak MB",
              "step MB", "ms/step");
  CsvLog csv((out / "levels.csv").string(),
             {"level", "param_bytes", "master_bytes", "rest_bytes", "peak_bytes", "step_bytes", "ms_per_step"});
  Series s_peak{"peak of a step", {}, {}}, s_rest{"at rest (params, masters, momentum, batch)", {}, {}},
      s_time{"ms per step", {}, {}};
  const Images batch = train.first(a.level_batch);
  std::vector<double> param_mb, master_mb, peak_mb, step_mb;
  const double MB = 1024.0 * 1024.0;
  for (int l = 0; l < 4; ++l) {
    manual_seed(a.seed);
    auto model = models::create_model("resnet20", models::ModelOptions().width(a.level_width));
    model->to(kTestDevice);
    optim::SGD opt(model->parameters(), 0.02, 0.9);
    amp::Amp amp = amp::initialize(model, opt, kLevels[l]);
    const Tensor x = batch.x.to(kTestDevice), y = batch.y.to(kTestDevice);
    auto step = [&] {
      Tensor loss = cross_entropy(amp.forward(x), y);
      amp.zero_grad();
      amp.backward(loss);
      amp.step();
    };
    step();  // momentum buffers, the scaler's tensors
    amp.zero_grad();
    const int64_t rest = test_device_memory().live_bytes;
    reset_test_device_peak_memory();
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t s = 0; s < a.level_steps; ++s) step();
    const double ms = 1000.0 * seconds_since(t0) / static_cast<double>(a.level_steps);
    const int64_t peak = test_device_memory().peak_bytes;
    double params = 0, masters = 0;
    for (const Tensor& p : model->parameters()) params += static_cast<double>(p.nbytes());
    for (const auto& [p, m] : amp.master_params()) masters += static_cast<double>(m.nbytes());
    std::printf("   %-5s %12.3f %12.3f %12.3f %12.3f %12.3f %10.1f\n", kLevels[l], params / MB, masters / MB, rest / MB,
                peak / MB, (peak - rest) / MB, ms);
    csv.row({double(l), params, masters, double(rest), double(peak), double(peak - rest), ms});
    s_peak.x.push_back(l), s_peak.y.push_back(peak / MB);
    s_rest.x.push_back(l), s_rest.y.push_back(rest / MB);
    s_time.x.push_back(l), s_time.y.push_back(ms);
    param_mb.push_back(params / MB), master_mb.push_back(masters / MB), peak_mb.push_back(peak / MB),
        step_mb.push_back((peak - rest) / MB);
  }
  std::printf("   (step MB: peak minus at rest = activations kept for backward, gradients, temporaries;\n"
              "    times on a shared machine are rough; bfloat16 computes through float32 here, so it is not faster)\n");
  Panel mem{"memory of a training step", "opt level (0 = O0 ... 3 = O3)", "MB", {s_peak, s_rest}, true};
  Panel time{"time per training step", "opt level (0 = O0 ... 3 = O3)", "ms", {s_time}, true};
  mem.x_ticks = time.x_ticks = {0, 1, 2, 3};
  examples::write_svg_plot((out / "levels.svg").string(), {mem, time}, "ResNet-20, O0-O3, CPU bfloat16");

  check(std::abs(param_mb[3] - param_mb[0] / 2) < 1e-9, "O3 holds every parameter in bfloat16: half O0's parameter bytes");
  check(param_mb[2] < param_mb[0] && param_mb[2] + master_mb[2] > param_mb[0],
        "O2's half model is smaller, but with its float32 masters it holds more than O0");
  check(peak_mb[3] < peak_mb[0], "O3's peak step memory is below O0's (" + fmt("%.2f", peak_mb[3]) + " < " +
                                     fmt("%.2f MB)", peak_mb[0]));
  check(step_mb[2] < step_mb[0], "O2's step memory (activations, grads) is below O0's (" + fmt("%.2f", step_mb[2]) +
                                     " < " + fmt("%.2f MB)", step_mb[0]));
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

// ---- 3. the GradScaler ---------------------------------------------------------------

void section_grad_scaler(const Images& train, const Args& a, const fs::path& out, Checks& check) {
  std::printf("\n3. Why float16 needs a loss scale (float16 computed on the CPU: float32 math rounded to float16)\n");
  const Images batch = train.first(a.level_batch);
  // (a) one real step of ResNet-20: its gradients with float32 everywhere,
  // and with float16 autocast (conv/linear backward in float16), unscaled and
  // with the loss times 2^16 (the gradients divided back afterwards).
  manual_seed(a.seed);
  auto model = models::create_model("resnet20", models::ModelOptions().width(a.level_width));
  auto grads_of = [&](bool fp16, float scale) {
    model->zero_grad();
    Tensor loss;
    {
      amp::autocast region(DeviceType::CPU, kFloat16, fp16);
      loss = cross_entropy(model->forward(batch.x), batch.y);
    }
    (loss * scale).backward();
    std::vector<float> g;
    for (const Tensor& p : model->parameters())
      for (float v : p.grad().flatten().to_vector<float>()) g.push_back(v);
    return g;
  };
  const std::vector<float> g = grads_of(false, 1.0f);
  const double total = double(g.size());
  std::printf("(a) the %zu parameter gradients of one ResNet-20 step (batch %lld) under float16 autocast, vs float32:\n",
              g.size(), static_cast<long long>(batch.size()));
  std::printf("    %-12s %12s %12s %24s %24s\n", "loss scale", "lost (-> 0)", "subnormal", "small ones: cast error",
              "small ones: step error");
  double frac_zero[2], frac_sub[2], cast_err[2], step_err[2];
  const float scales[2] = {1.0f, 65536.0f}, min_normal = std::ldexp(1.0f, -14);
  CsvLog csv((out / "grad_scaler_underflow.csv").string(),
             {"scale", "lost", "subnormal", "small_cast_median_rel_error", "small_step_median_rel_error"});
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  bool finite = true;
  for (int k = 0; k < 2; ++k) {
    const std::vector<float> h = grads_of(true, scales[k]);  // scaled float16 values, as float32
    double zero = 0, sub = 0;
    std::vector<double> cast_rel, step_rel;
    for (size_t i = 0; i < g.size(); ++i) {
      finite = finite && std::isfinite(h[i]);
      if (g[i] == 0) continue;
      const float v = std::abs(h[i]);
      zero += v == 0, sub += v > 0 && v < min_normal;
      if (std::abs(g[i]) >= min_normal) continue;
      const double stored = static_cast<float>(Half(g[i] * scales[k])) / double(scales[k]);
      cast_rel.push_back(std::abs(stored - g[i]) / std::abs(g[i]));
      step_rel.push_back(std::abs(double(h[i]) / scales[k] - g[i]) / std::abs(g[i]));
    }
    frac_zero[k] = zero / total, frac_sub[k] = sub / total;
    cast_err[k] = median(cast_rel), step_err[k] = median(step_rel);
    std::printf("    %-12s %11.3f%% %11.3f%% %24.2e %24.2e\n", k ? "2^16" : "1 (unscaled)", 100 * frac_zero[k],
                100 * frac_sub[k], cast_err[k], step_err[k]);
    csv.row({scales[k], frac_zero[k], frac_sub[k], cast_err[k], step_err[k]});
  }
  std::printf("    (lost/subnormal: the float16 gradients of the autocast step that are 0 or below 2^-14, where float16\n"
              "    keeps fewer than 11 bits; small ones: the gradients below 2^-14 in float32, median relative error of\n"
              "    their float32 value stored in float16 (cast) and of the float16 step's value (step): in the step the\n"
              "    forward's float16 rounding dominates, so scaling fixes their storage, not their noise)\n");
  // The histogram of log2 |g|, with float16's smallest subnormal and normal.
  Series hist{"gradients per power of two", {}, {}};
  std::vector<double> bins(41, 0.0);  // 2^-40 .. 2^0
  for (float v : g)
    if (v != 0) bins[static_cast<size_t>(std::clamp(std::ilogb(v), -40, 0) + 40)] += 100.0 / total;
  for (int e = -40; e <= 0; ++e) hist.x.push_back(e), hist.y.push_back(bins[static_cast<size_t>(e + 40)]);
  Series sub{"2^-24 (smallest float16)", {-24, -24}, {0, 0}, true}, nor{"2^-14 (smallest normal float16)", {-14, -14}, {0, 0}, true};
  sub.y[1] = nor.y[1] = *std::max_element(hist.y.begin(), hist.y.end());
  check(frac_zero[0] + frac_sub[0] > 0.001,
        "unscaled, float16 flushes more than 0.1% of the gradients to 0 or to subnormals (" +
            fmt("%.2f%%)", 100 * (frac_zero[0] + frac_sub[0])));
  check(frac_zero[1] + frac_sub[1] < 0.2 * (frac_zero[0] + frac_sub[0]) && finite,
        "scaled by 2^16, under a fifth of that and nothing overflows");
  check(cast_err[1] < 0.5 * cast_err[0], "scaled, float16 stores the small gradients over 2x more precisely (" +
                                            fmt("%.1e", cast_err[1]) + " vs " + fmt("%.1e)", cast_err[0]));

  // (b) the scale's history: float16 autocast + GradScaler from 2^24.
  std::printf("(b) float16 autocast training of SmallNet with GradScaler(\"cpu\", init_scale=2^24, growth_interval=%lld);\n"
              "    an inf is injected into one gradient at step %lld:\n",
              static_cast<long long>(a.growth_interval), static_cast<long long>(a.scaler_steps * 2 / 3));
  manual_seed(a.seed);
  auto net = models::create_model("smallnet", models::ModelOptions().width(a.width));
  optim::SGD opt(net->parameters(), 0.02, 0.9);
  amp::GradScaler scaler("cpu", std::ldexp(1.0, 24), 2.0, 0.5, a.growth_interval);
  Series s_scale{"loss scale", {}, {}}, s_skip{"skipped steps so far", {}, {}};
  CsvLog csv_h((out / "grad_scaler_history.csv").string(), {"step", "scale", "skipped"});
  const int64_t inject = a.scaler_steps * 2 / 3;
  int64_t skipped_start = 0, first_clean = -1, growths = 0;
  bool halves = true, skip_keeps_params = true, injected_backoff = false;
  std::string line;
  for (int64_t s = 0; s < a.scaler_steps; ++s) {
    const int64_t off = (s * 16) % std::max<int64_t>(1, train.size() - 16);
    const Tensor x = train.x.narrow(0, off, 16), y = train.y.narrow(0, off, 16);
    Tensor loss;
    {
      amp::autocast region(DeviceType::CPU, kFloat16);
      loss = cross_entropy(net->forward(x), y);
    }
    opt.zero_grad();
    scaler.scale(loss).backward();
    if (s == inject) net->parameters()[0].grad().view({-1}).narrow(0, 0, 1).fill_(INFINITY);
    const double before = scaler.get_scale();
    const Tensor p0 = net->parameters()[0].detach().clone();
    const bool stepped = scaler.step(opt);
    scaler.update();
    const double after = scaler.get_scale();
    csv_h.row({double(s), before, stepped ? 0.0 : 1.0});
    s_scale.x.push_back(s), s_scale.y.push_back(before);
    s_skip.x.push_back(s), s_skip.y.push_back((s_skip.y.empty() ? 0.0 : s_skip.y.back()) + (stepped ? 0 : 1));
    if (!stepped) {
      halves = halves && after == before / 2;
      skip_keeps_params = skip_keeps_params && (net->parameters()[0] - p0).abs().max().item<double>() == 0;
      if (first_clean < 0) ++skipped_start;
      if (s == inject) injected_backoff = true;
    } else {
      if (first_clean < 0) first_clean = s;
      if (after == before * 2) ++growths;
    }
    line += stepped ? "." : "x";
  }
  std::printf("    steps (x = skipped): %s\n", line.c_str());
  std::printf("    %lld skipped steps from 2^24 down to a first clean scale 2^%.0f; final scale 2^%.0f after %lld growth(s)\n",
              static_cast<long long>(skipped_start), std::log2(s_scale.y[std::max<int64_t>(first_clean, 0)]),
              std::log2(scaler.get_scale()), static_cast<long long>(growths));
  Panel pa{"(a) |gradient| of one ResNet-20 step", "log2 |g|", "% of gradients", {hist, sub, nor}, true};
  Panel pb{"(b) GradScaler scale, float16 autocast", "step", "scale (before the step)", {s_scale}};
  pb.log_y = true;
  Panel pc{"(b) skipped steps (inf/NaN gradients)", "step", "skipped so far", {s_skip}, true};
  examples::write_svg_plot((out / "grad_scaler.svg").string(), {pa, pb, pc}, "Loss scaling for float16");

  check(skipped_start >= 1 && first_clean > 0, "2^24 overflows float16 gradients: the first step(s) are skipped");
  check(halves, "every skipped step halves the scale (backoff_factor 0.5)");
  check(skip_keeps_params, "a skipped step leaves the parameters unchanged");
  check(injected_backoff, "the injected inf is caught: that step is skipped");
  check(growths >= 1, "after growth_interval clean steps the scale doubles");
}

// ---- 4. accuracy ------------------------------------------------------------------------

struct TrainResult {
  double first_loss = 0, last_loss = 0, test_acc = 0;
};

TrainResult train_level(const std::string& level, const std::shared_ptr<const data::Dataset>& train_set,
                        const data::TransformPtr& augment, const Images& test, const Args& a) {
  manual_seed(a.seed);
  auto model = models::create_model("smallnet", models::ModelOptions().width(a.width));
  optim::SGD opt(model->parameters(), a.lr, 0.9, 0.0, 5e-4);
  amp::Amp amp = amp::initialize(model, opt, level);
  data::DataLoader loader(train_set, {.batch_size = a.batch_size, .shuffle = true, .seed = a.seed, .transform = augment});
  optim::CosineAnnealingLR sched(opt, a.epochs * loader.size());
  TrainResult r;
  bool first = true;
  for (int64_t epoch = 0; epoch < a.epochs; ++epoch) {
    model->train();
    loader.set_epoch(epoch);
    double sum = 0;
    int64_t seen = 0;
    for (data::Batch& b : loader) {
      Tensor loss = cross_entropy(amp.forward(b.data), b.targets);
      amp.zero_grad();
      amp.backward(loss);
      amp.step();
      sched.step();
      if (first) r.first_loss = loss.item<double>(), first = false;
      sum += loss.item<double>() * double(b.targets.numel());
      seen += b.targets.numel();
    }
    r.last_loss = sum / double(seen);
  }
  model->eval();
  NoGradGuard no_grad;
  int64_t correct = 0;
  for (int64_t s = 0; s < test.size(); s += 256) {
    const int64_t n = std::min<int64_t>(256, test.size() - s);
    correct += examples::count_correct(amp.forward(test.x.narrow(0, s, n)), test.y.narrow(0, s, n));
  }
  r.test_acc = 100.0 * double(correct) / double(test.size());
  return r;
}

void section_accuracy(const std::shared_ptr<const data::Dataset>& train_set, const data::TransformPtr& augment,
                      const Images& test, const Args& a, const fs::path& out, Checks& check) {
  std::printf("\n4. Accuracy: SmallNet width %g, %lld epoch(s) on %lld images, batch %lld, SGD lr %g cosine, same seed\n",
              a.width, static_cast<long long>(a.epochs), static_cast<long long>(train_set->size()),
              static_cast<long long>(a.batch_size), a.lr);
  const char* names[3] = {"O0 float32", "O1 bf16 autocast", "O2 bf16 model + fp32 masters"};
  CsvLog csv((out / "accuracy.csv").string(), {"level", "first_loss", "last_epoch_loss", "test_accuracy"});
  Series acc{"test accuracy (eval mode)", {}, {}};
  TrainResult r[3];
  for (int l = 0; l < 3; ++l) {
    const auto t0 = std::chrono::steady_clock::now();
    r[l] = train_level(kLevels[l], train_set, augment, test, a);
    std::printf("   %-30s first loss %.3f  last epoch loss %.3f  test accuracy %5.2f%%  (%.1f s)\n", names[l],
                r[l].first_loss, r[l].last_loss, r[l].test_acc, seconds_since(t0));
    csv.row({double(l), r[l].first_loss, r[l].last_loss, r[l].test_acc});
    acc.x.push_back(l), acc.y.push_back(r[l].test_acc);
  }
  Panel p{"test accuracy after the same training", "opt level (0 = O0, 1 = O1, 2 = O2)", "%", {acc}, true};
  p.x_ticks = {0, 1, 2};
  examples::write_svg_plot((out / "accuracy.svg").string(), {p}, "float32 vs bfloat16 mixed precision");
  for (int l = 0; l < 3; ++l)
    check(std::isfinite(r[l].last_loss) && r[l].last_loss < r[l].first_loss,
          std::string(names[l]) + ": the loss falls (" + fmt("%.3f", r[l].first_loss) + " -> " + fmt("%.3f)", r[l].last_loss));
  // Autocast's cast of a float32 weight is O2's rounded master, conv/linear
  // see the same bfloat16 operands and BN the same float32 parameters: the
  // two levels are one computation here.
  check(r[1].last_loss == r[2].last_loss && r[1].test_acc == r[2].test_acc,
        "O1 and O2 train identically (the same losses and accuracy, bit for bit)");
  if (!a.smoke)
    check(r[1].test_acc >= r[0].test_acc - 3.0, "bfloat16 autocast's test accuracy is not 3 points below float32's (" +
                                                    fmt("%+.2f)", r[1].test_acc - r[0].test_acc));
}

int run(const Args& a) {
  const auto t_start = std::chrono::steady_clock::now();
  if (a.threads > 0) set_num_threads(a.threads);
  const fs::path out = a.out;
  fs::create_directories(out);
  std::vector<std::string> files;
  for (int i = 1; i <= 4; ++i) files.push_back(a.data + "/data_batch_" + std::to_string(i) + ".bin");
  std::shared_ptr<const data::Dataset> train_set = std::make_shared<data::CIFAR10>(data::CIFAR10::from_files(files));
  std::shared_ptr<const data::Dataset> test_set =
      std::make_shared<data::CIFAR10>(data::CIFAR10::from_files({a.data + "/data_batch_5.bin"}));
  if (a.limit_train > 0) train_set = std::make_shared<data::Subset>(data::Subset::first(train_set, a.limit_train));
  if (a.limit_test > 0) test_set = std::make_shared<data::Subset>(data::Subset::first(test_set, a.limit_test));
  auto normalize = std::make_shared<data::Normalize>(std::vector<double>{0.4914, 0.4822, 0.4465},
                                                     std::vector<double>{0.2470, 0.2435, 0.2616});
  auto to_float = std::make_shared<data::ToFloat>();
  data::TransformPtr plain = std::make_shared<data::Compose>(std::vector<data::TransformPtr>{to_float, normalize});
  data::TransformPtr augment = std::make_shared<data::Compose>(std::vector<data::TransformPtr>{
      std::make_shared<data::RandomCrop>(32, 4), std::make_shared<data::RandomHorizontalFlip>(), to_float, normalize});
  const Images train = examples::load_all(train_set, plain, "amp_bn_demo"),
               test = examples::load_all(test_set, plain, "amp_bn_demo");
  std::printf("data: CIFAR-10 from %s: %lld training images, %lld test images; %d thread(s), seed %llu\n",
              a.data.c_str(), static_cast<long long>(train.size()), static_cast<long long>(test.size()),
              get_num_threads(), static_cast<unsigned long long>(a.seed));

  Checks check;
  auto timed = [&](auto&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    std::printf("  (%.1f s)\n", seconds_since(t0));
  };
  timed([&] { section_levels(train, a, out, check); });
  timed([&] { section_bn_stats(train, a, out, check); });
  timed([&] { section_grad_scaler(train, a, out, check); });
  timed([&] { section_accuracy(train_set, augment, test, a, out, check); });
  std::printf("\nwrote %s/{levels,bn_stats,grad_scaler,accuracy}.svg and their .csv tables\n", out.string().c_str());
  return check.finish(seconds_since(t_start));
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Mixed precision and BatchNorm on the CPU, measured: Apex's O0-O3, BN statistics, loss scaling"};
  app.add_option("--data", a.data, "folder with data_batch_1..5.bin (default: the shared subset)");
  app.add_option("--out", a.out, "where the CSVs and SVGs go")->capture_default_str();
  app.add_option("--epochs", a.epochs, "section 4's training")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--width", a.width, "SmallNet width (sections 3b, 4)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--batch-size", a.batch_size)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--lr", a.lr)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--threads", a.threads, "compute threads (0: OMP_NUM_THREADS or all cores)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--seed", a.seed)->capture_default_str();
  app.add_flag("--smoke", a.smoke, "seconds: tiny sizes, every check (make test)");
  MINIDL_CLI_PARSE(app, argc, argv);
  if (a.data.empty()) a.data = examples::shared_cifar10_subset_dir();
  if (a.smoke) {
    a.epochs = 1, a.width = 0.125, a.level_width = 0.25, a.limit_train = 256, a.limit_test = 128, a.batch_size = 32;
    a.level_batch = 16, a.level_steps = 2, a.stat_batch = 256, a.rv_updates = 200, a.scaler_steps = 24, a.growth_interval = 4;
  }
  return examples::run_main("amp_bn_demo", [&] { return run(a); });
}
