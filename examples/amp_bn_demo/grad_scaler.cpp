// amp_bn_demo, section 3: why float16 needs a loss scale. The gradients of a
// real ResNet-20 step under float16 autocast, unscaled and times 2^16 (how
// many float16 flushes to zero or to subnormals), and the GradScaler's scale
// history from 2^24 with an injected inf. On the CPU (float32 math rounded to
// float16 at each op) or, with --device cuda, on the GPU.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "examples/amp_bn_demo/demo.h"
#include "examples/common/csv_log.h"
#include "examples/common/svg_plot.h"
#include "minidl/core/half.h"

namespace minidl::amp_demo {

using examples::CsvLog;
using examples::Panel;
using examples::Series;

void section_grad_scaler(const Images& train, const Args& a, const DemoDevice& dd, const fs::path& out, Checks& check) {
  const Device dev = dd.compute;
  std::printf("\n3. Why float16 needs a loss scale (%s)\n",
              dd.is_cuda() ? "float16 on the GPU" : "float16 computed on the CPU: float32 math rounded to float16");
  const Images batch{train.first(a.level_batch).x.to(dev), train.first(a.level_batch).y.to(dev)};
  // (a) one real step of ResNet-20: its gradients with float32 everywhere,
  // and with float16 autocast (conv/linear backward in float16), unscaled and
  // with the loss times 2^16 (the gradients divided back afterwards).
  manual_seed(a.seed);
  auto model = models::create_model("resnet20", models::ModelOptions().width(a.level_width));
  model->to(dev);
  auto grads_of = [&](bool fp16, float scale) {
    model->zero_grad();
    Tensor loss;
    {
      amp::autocast region(dev.type, kFloat16, fp16);
      loss = cross_entropy(model->forward(batch.x), batch.y);
    }
    (loss * scale).backward();
    std::vector<float> g;
    for (const Tensor& p : model->parameters())
      for (float v : p.grad().flatten().to(kCPU).to_vector<float>()) g.push_back(v);
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
  const std::string scaler_device = dd.is_cuda() ? "cuda" : "cpu";
  std::printf("(b) float16 autocast training of SmallNet with GradScaler(\"%s\", init_scale=2^24, growth_interval=%lld);\n"
              "    an inf is injected into one gradient at step %lld:\n",
              scaler_device.c_str(), static_cast<long long>(a.growth_interval),
              static_cast<long long>(a.scaler_steps * 2 / 3));
  manual_seed(a.seed);
  auto net = models::create_model("smallnet", models::ModelOptions().width(a.width));
  net->to(dev);
  optim::SGD opt(net->parameters(), 0.02, 0.9);
  amp::GradScaler scaler(scaler_device, std::ldexp(1.0, 24), 2.0, 0.5, a.growth_interval);
  Series s_scale{"loss scale", {}, {}}, s_skip{"skipped steps so far", {}, {}};
  CsvLog csv_h((out / "grad_scaler_history.csv").string(), {"step", "scale", "skipped"});
  const int64_t inject = a.scaler_steps * 2 / 3;
  int64_t skipped_start = 0, first_clean = -1, growths = 0;
  bool halves = true, skip_keeps_params = true, injected_backoff = false;
  std::string line;
  for (int64_t s = 0; s < a.scaler_steps; ++s) {
    const int64_t off = (s * 16) % std::max<int64_t>(1, train.size() - 16);
    const Tensor x = train.x.narrow(0, off, 16).to(dev), y = train.y.narrow(0, off, 16).to(dev);
    Tensor loss;
    {
      amp::autocast region(dev.type, kFloat16);
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

}  // namespace minidl::amp_demo
