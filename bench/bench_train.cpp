// Times whole training steps of the CIFAR models and prints one JSON object
// per line, like bench_ops, plus images_per_s and peak_rss_mib:
//   {"impl":"minidl","op":"train_step_resnet18","shape":"batch 64",...}
// bench/bench_torch.py --suite train prints the PyTorch twins.
//
//   bench_train --model resnet18|resnet20|resnet56|smallnet|unet3d|unet3d_predict [--batch N] [--threads 2] [--reps 15] [--profile 1]
//               [--amp off|bf16]   (resnet18, smallnet, unet3d: the forward under CPU bfloat16 autocast)
//
// One model per process, so peak_rss_mib (getrusage ru_maxrss: the process's
// high-water resident set) belongs to that model. A step is forward,
// cross_entropy, zero_grad, backward, SGD step (lr 0.1, momentum 0.9, weight
// decay 5e-4) on a fixed random float32 batch (N, 3, 32, 32) with int64 labels.
// --model unet3d is the step of examples/train_unet3d (the seed's template):
// UNet3d(1, 1, 16) with BatchNorm on a (N, 1, 32, 64, 64) patch (default
// N = 2), BCE + Dice loss against a random 0/1 mask, Adam (lr 2e-4, weight
// decay 1e-4); "images" per second are patches per second.
// --profile 1 also prints, as "#" lines, the median time of each phase
// (forward, loss, backward, step) and the forward+backward of single ops at
// the model's shapes (smallnet: every layer; resnet18: one 3x3 conv per
// stage), to see where the time goes (bench_torch.py --suite train --profile 1 prints the same for PyTorch);
// with --amp bf16 the forwards run under the step's autocast.
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "examples/common/mixed_precision.h"
#include "minidl/minidl.h"

using namespace minidl;

namespace {

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux: KiB
}

// Process CPU time in ms (all threads): on a loaded machine the least CPU
// time of a step, divided by the thread count, says more than its wall time.
double process_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

double elapsed_ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Forward (under amp's autocast, as the step's) + backward (with a ones
// upstream gradient) of one op on fresh leaves, median over reps after one warm-up.
void time_op(const std::string& name, const std::vector<Tensor>& leaves,
             const std::function<Tensor(const std::vector<Tensor>&)>& f, int reps,
             const examples::MixedPrecision& amp) {
  std::vector<double> ms;
  for (int r = 0; r <= reps; ++r) {
    for (const Tensor& t : leaves) Tensor(t).set_grad(Tensor());
    const auto t0 = std::chrono::steady_clock::now();
    Tensor y;
    {
      auto region = amp.autocast();
      y = f(leaves);
    }
    y.backward(ones_like(y));
    if (r > 0) ms.push_back(elapsed_ms(t0));
  }
  std::printf("# op %-34s fwd+bwd %8.1f ms\n", name.c_str(), median_of(ms));
  std::fflush(stdout);
}

// SmallNet's layers one at a time, at batch n (activations as in the model:
// the pooling and norm inputs in the dtype the convs give them under amp).
void profile_smallnet_ops(int64_t n, int reps, const examples::MixedPrecision& amp) {
  const int64_t widths[] = {64, 128, 256, 512};
  int64_t cin = 3, hw = 32;
  for (int i = 0; i < 4; ++i) {
    const int64_t cout = widths[i];
    const Tensor x = randn({n, cin, hw, hw}).requires_grad_();
    const Tensor w = (randn({cout, cin, 3, 3}) * 0.05).requires_grad_();
    Conv2dParams params;
    params.padding = {1, 1};
    const std::string conv = "conv3x3 " + std::to_string(cin) + "->" + std::to_string(cout) + " @" +
                             std::to_string(hw);
    time_op(conv, {x, w}, [&](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], Tensor(), params); }, reps,
            amp);
    int64_t out_hw = hw;
    if (i > 0) {
      const Tensor y = randn({n, cout, hw, hw}).to(amp.activation_dtype()).requires_grad_();
      time_op("max_pool2d 2x2 C" + std::to_string(cout) + " @" + std::to_string(hw), {y},
              [](const std::vector<Tensor>& v) { return max_pool2d(v[0], {2, 2}); }, reps, amp);
      out_hw = hw / 2;
    }
    const Tensor z = randn({n, cout, out_hw, out_hw}).to(amp.activation_dtype()).requires_grad_();
    const Tensor gamma = ones({cout}).requires_grad_(), beta = zeros({cout}).requires_grad_();
    const Tensor rm = zeros({cout}), rv = ones({cout});
    time_op("batch_norm+relu C" + std::to_string(cout) + " @" + std::to_string(out_hw), {z, gamma, beta},
            [&](const std::vector<Tensor>& v) { return relu(batch_norm(v[0], rm, rv, v[1], v[2], true)); }, reps,
            amp);
    cin = cout;
    hw = out_hw;
  }
}

// ResNet-18's convs, one of each kind per stage at batch n: the 3x3 stride-1
// conv (4 a stage, 3 in stages 2-4), and in stages 2-4 the strided 3x3 that
// opens the stage and the 1x1 stride-2 shortcut ("@hw" is the input map).
void profile_resnet18_convs(int64_t n, int reps, const examples::MixedPrecision& amp) {
  auto conv = [&](int64_t cin, int64_t cout, int64_t hw, int64_t k, int64_t stride) {
    const Tensor x = randn({n, cin, hw, hw}).requires_grad_();
    const Tensor w = (randn({cout, cin, k, k}) * 0.05).requires_grad_();
    Conv2dParams params;
    params.stride = {stride, stride};
    params.padding = {k / 2, k / 2};
    time_op("conv" + std::to_string(k) + "x" + std::to_string(k) + (stride > 1 ? " s2 " : " ") +
                std::to_string(cin) + "->" + std::to_string(cout) + " @" + std::to_string(hw),
            {x, w}, [&](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], Tensor(), params); }, reps, amp);
  };
  for (int64_t c = 64, hw = 32; c <= 512; c *= 2, hw /= 2) {
    if (c > 64) {
      conv(c / 2, c, hw * 2, 3, 2);
      conv(c / 2, c, hw * 2, 1, 2);
    }
    conv(c, c, hw, 3, 1);
  }
}

// A step's times (bench_train's JSON: median_ms, cpu_ms).
struct StepTimes {
  double ms;      // median wall time over reps
  double cpu_ms;  // least process CPU time of one call divided by threads
};

void print_step(const std::string& model_name, int64_t batch, const std::string& shape, const StepTimes& t,
                int threads) {
  std::printf(
      "{\"impl\":\"minidl\",\"op\":\"train_step_%s\",\"shape\":\"%s\",\"median_ms\":%.3f,\"gflops\":0.0,"
      "\"threads\":%d,\"version\":\"minidl\",\"images_per_s\":%.1f,\"peak_rss_mib\":%.1f,\"cpu_ms\":%.3f",
      model_name.c_str(), shape.c_str(), t.ms, threads, 1000.0 * static_cast<double>(batch) / t.ms, peak_rss_mib(),
      t.cpu_ms);
  std::printf("}\n");
  std::fflush(stdout);
}

// f() timed over options.reps calls after a warm-up (bench::median_ms).
template <class F>
StepTimes time_step(const F& f, const bench::Options& options) {
  double cpu_ms = 1e30;
  const double ms = bench::median_ms(
      [&] {
        const double c0 = process_cpu_ms();
        f();
        cpu_ms = std::min(cpu_ms, (process_cpu_ms() - c0) / options.threads);
      },
      options.reps);
  return {ms, cpu_ms};
}

// A training step: the forward under amp's autocast, loss_of(logits in
// float32), zero_grad, backward, the optimizer's step.
template <class Model, class LossOf>
StepTimes time_training_step(const Model& model, optim::Optimizer& optimizer, const Tensor& x, const LossOf& loss_of,
                             const examples::MixedPrecision& amp, const bench::Options& options) {
  return time_step(
      [&] {
        Tensor logits;
        {
          auto region = amp.autocast();
          logits = model->forward(x);
        }
        Tensor loss = loss_of(logits.to(kFloat32));
        optimizer.zero_grad();
        loss.backward();
        optimizer.step();
      },
      options);
}

// The training step of examples/train_unet3d on one (batch, 1, 32, 64, 64)
// patch; the forward under CPU autocast where amp is on (--amp bf16).
int unet3d_step(int64_t batch, const bench::Options& options, const examples::MixedPrecision& amp,
                const std::string& amp_mode) {
  manual_seed(0);
  auto model = models::UNet3d(models::UNetOptions().in_channels(1).classes(1).base_width(16).norm("batchnorm"));
  model->train();
  optim::Adam adam(model->parameters(), 2e-4, {0.9, 0.999}, 1e-8, 1e-4);
  const Tensor x = randn({batch, 1, 32, 64, 64});
  const Tensor y = gt(rand({batch, 1, 32, 64, 64}), 0.8);  // about 20% foreground, as the grain data
  const StepTimes t = time_training_step(
      model, adam, x, [&](const Tensor& logits) { return bce_dice_loss(logits, y); }, amp, options);
  print_step("unet3d", batch,
             "batch " + std::to_string(batch) + " patch 32x64x64" + (amp.enabled() ? " " + amp_mode : ""), t,
             options.threads);
  return 0;
}

// examples/predict_unet3d's work: the UNet3d in eval mode over a whole
// (1, 1, 64, 128, 128) volume by sliding windows of the training patch
// (32x64x64), overlap 0.5, Gaussian blending, 4 windows a batch: 27 windows.
// "images_per_s" is volumes per second.
int unet3d_predict(const bench::Options& options) {
  manual_seed(0);
  auto model = models::UNet3d(models::UNetOptions().in_channels(1).classes(1).base_width(16).norm("batchnorm"));
  model->eval();
  const Tensor volume = randn({1, 1, 64, 128, 128});
  nn::SlidingWindowOptions sw;
  sw.roi_size = {32, 64, 64};
  sw.overlap = 0.5;
  sw.mode = nn::BlendMode::kGaussian;
  sw.sw_batch_size = 4;
  const StepTimes t = time_step(
      [&] { (void)nn::sliding_window_inference(volume, sw, [&](const Tensor& w) { return model->forward(w); }); },
      options);
  print_step("unet3d_predict", 1, "volume 64x128x128, windows 32x64x64, overlap 0.5, gaussian, 4 a batch", t,
             options.threads);
  return 0;
}

}  // namespace

static int program(int argc, char** argv) {
  const bench::Options options = bench::parse_options(argc, argv);
  std::string model_name = "smallnet";
  int64_t batch = 0;  // 0: the model's default (64 for resnet18, 128 otherwise)
  bool profile = false;
  std::string amp_mode = "off";  // off or bf16: the forward under CPU autocast (examples/common/mixed_precision.h)
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--amp") == 0) amp_mode = argv[i + 1];
    if (std::strcmp(argv[i], "--model") == 0) model_name = argv[i + 1];
    if (std::strcmp(argv[i], "--batch") == 0) batch = examples::parse_int_arg(argv[i + 1], argv[i]);
    if (std::strcmp(argv[i], "--profile") == 0) profile = examples::parse_int_arg(argv[i + 1], argv[i]) != 0;
  }
  if (amp_mode != "off" && amp_mode != "bf16")
    throw examples::UsageError("--amp: expected off or bf16, got " + amp_mode);
  const examples::MixedPrecision amp(amp_mode, kCPU);
  if (model_name == "unet3d") return unet3d_step(batch > 0 ? batch : 2, options, amp, amp_mode);
  if (model_name == "unet3d_predict") return unet3d_predict(options);
  if (batch <= 0) batch = model_name == "resnet18" ? 64 : 128;

  manual_seed(0);
  auto model = models::create_model(model_name, models::ModelOptions().norm("batchnorm"));
  model->train();
  optim::SGD sgd(model->parameters(), 0.1, 0.9, 0.0, 5e-4);
  const Tensor x = randn({batch, 3, 32, 32});
  const Tensor y = randint(0, 10, {batch});

  const StepTimes t = time_training_step(
      model, sgd, x, [&](const Tensor& logits) { return cross_entropy(logits, y); }, amp, options);
  print_step(model_name, batch, "batch " + std::to_string(batch) + (amp.enabled() ? " " + amp_mode : ""), t,
             options.threads);

  if (profile) {
    // Phase times, each the median over reps steps (the phases of one step
    // are timed in turn, so they add up to about one step).
    std::vector<double> t_fwd, t_loss, t_bwd, t_step;
    for (int r = 0; r < options.reps; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      Tensor logits;
      {
        auto region = amp.autocast();
        logits = model->forward(x);
      }
      t_fwd.push_back(elapsed_ms(t0));
      t0 = std::chrono::steady_clock::now();
      Tensor loss = cross_entropy(logits.to(kFloat32), y);
      sgd.zero_grad();
      t_loss.push_back(elapsed_ms(t0));
      t0 = std::chrono::steady_clock::now();
      loss.backward();
      t_bwd.push_back(elapsed_ms(t0));
      t0 = std::chrono::steady_clock::now();
      sgd.step();
      t_step.push_back(elapsed_ms(t0));
    }
    std::printf("# phases (median ms): forward %.1f, loss+zero_grad %.1f, backward %.1f, sgd step %.1f\n",
                median_of(t_fwd), median_of(t_loss), median_of(t_bwd), median_of(t_step));
    if (model_name == "smallnet") profile_smallnet_ops(batch, options.reps, amp);
    if (model_name == "resnet18") profile_resnet18_convs(batch, options.reps, amp);
  }
  return 0;
}

int main(int argc, char** argv) {
  return minidl::examples::run_main_with_usage(
      "bench_train",
      "bench_train [--threads N] [--reps N] [--model resnet18|resnet20|resnet56|smallnet|unet3d|unet3d_predict] "
      "[--batch N] [--amp off|bf16] [--profile 1]",
      argc, argv, [&] { return program(argc, argv); });
}
