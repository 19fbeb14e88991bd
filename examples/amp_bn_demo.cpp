// amp_bn_demo: mixed precision, measured. What Apex's opt levels cost and
// save, why BatchNorm stays in float32, why float16 needs a loss scaler, and
// what 16-bit autocast does to accuracy. On the CPU (bfloat16, the default)
// or on a GPU (--device cuda: float16, the GPU's autocast type).
//
//   build/examples/amp_bn_demo                  # ~3 min on a busy 2-core machine (1 thread)
//   build/examples/amp_bn_demo --smoke          # seconds; asserts the claims (make test)
//   build-cuda/examples/amp_bn_demo --device cuda
//
// Four sections, each a printed table, <out>/<name>.csv and <out>/<name>.svg:
//  1. levels        O0/O1/O2/O3 (amp::initialize) on ResNet-20: peak memory of
//                   a training step from the allocator's counters (the test
//                   device's: Device("test") runs the CPU kernels on separately
//                   counted memory; or the CUDA caching allocator's), and time
//                   per step.
//  2. bn_stats      BatchNorm statistics in half precision: the batch variance
//                   of real activations accumulated in bfloat16/float16 vs
//                   float32, running_var after momentum-0.1 updates stored in
//                   half, and the batch size at which a float16 sum of squares
//                   passes 65504 and becomes inf (emulated on the host).
//  3. grad_scaler   the fraction of a real step's gradients that float16 flushes
//                   to zero or to subnormals, unscaled and times 2^16; the
//                   GradScaler's scale history from 2^24, with skipped steps
//                   and an injected inf.
//  4. accuracy      the same short training in float32 (O0), with 16-bit
//                   autocast (O1) and with a 16-bit model + float32 masters (O2).
// On the CPU, bfloat16 is the autocast type; the float16 parts (underflow,
// the scaler) run there too, every op computing in float32 and rounding to
// float16 at its boundary, the values a GPU's float16 storage would hold.
// Sections 2 and 3 are in examples/amp_bn_demo/.
// Every check is printed with "ok" or "FAILED"; the exit status is 1 if one
// failed. Deterministic for a given --seed on the CPU, except the times.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "examples/amp_bn_demo/demo.h"
#include "examples/common/cli_checks.h"
#include "examples/common/csv_log.h"
#include "examples/common/example_data.h"
#include "examples/common/main_guard.h"
#include "examples/common/svg_plot.h"
#include "minidl/core/cuda.h"
#include "minidl/core/test_device.h"

using namespace minidl;
using namespace minidl::amp_demo;
using examples::CsvLog;
using examples::Panel;
using examples::seconds_since;
using examples::Series;

namespace minidl::amp_demo {

DemoDevice DemoDevice::parse(const std::string& name) {
  if (name == "test") return {kTestDevice, kCPU, kBFloat16};
  MINIDL_CHECK(name == "cuda", "amp_bn_demo: --device expects test or cuda, got '", name, "'");
  MINIDL_CHECK(cuda::is_available(), "amp_bn_demo --device cuda: ", cuda::unavailable_reason());
  return {Device("cuda"), Device("cuda"), kFloat16};
}
int64_t DemoDevice::live_bytes() const {
  return is_cuda() ? static_cast<int64_t>(cuda::memory_allocated(levels.index)) : test_device_memory().live_bytes;
}
int64_t DemoDevice::peak_bytes() const {
  return is_cuda() ? static_cast<int64_t>(cuda::max_memory_allocated(levels.index)) : test_device_memory().peak_bytes;
}
void DemoDevice::reset_peak() const {
  if (is_cuda())
    cuda::reset_peak_memory_stats(levels.index);
  else
    reset_test_device_peak_memory();
}
void DemoDevice::synchronize() const {
  if (is_cuda()) cuda::synchronize(levels.index);
}

// ---- 1. the opt levels ------------------------------------------------------------

void section_levels(const Images& train, const Args& a, const DemoDevice& dd, const fs::path& out, Checks& check) {
  std::printf("\n1. Apex's opt levels on ResNet-20 (width %g, batch %lld, SGD momentum 0.9), on %s\n", a.level_width,
              static_cast<long long>(a.level_batch), dd.levels.str().c_str());
  std::printf("   memory: the %s allocator's live/peak bytes; O1-O3 use %s\n",
              dd.is_cuda() ? "CUDA caching" : "test device", dd.half_name());
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
    model->to(dd.levels);
    optim::SGD opt(model->parameters(), 0.02, 0.9);
    amp::Amp amp = amp::initialize(model, opt, kLevels[l]);
    const Tensor x = batch.x.to(dd.levels), y = batch.y.to(dd.levels);
    auto step = [&] {
      Tensor loss = cross_entropy(amp.forward(x), y);
      amp.zero_grad();
      amp.backward(loss);
      amp.step();
    };
    step();  // momentum buffers, the scaler's tensors
    amp.zero_grad();
    dd.synchronize();
    const int64_t rest = dd.live_bytes();
    dd.reset_peak();
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t s = 0; s < a.level_steps; ++s) step();
    dd.synchronize();
    const double ms = 1000.0 * seconds_since(t0) / static_cast<double>(a.level_steps);
    const int64_t peak = dd.peak_bytes();
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
  std::printf("   (step MB: peak minus at rest = activations kept for backward, gradients, temporaries;%s)\n",
              dd.is_cuda() ? "" : "\n    times on a shared machine are rough");
  Panel mem{"memory of a training step", "opt level (0 = O0 ... 3 = O3)", "MB", {s_peak, s_rest}, true};
  Panel time{"time per training step", "opt level (0 = O0 ... 3 = O3)", "ms", {s_time}, true};
  mem.x_ticks = time.x_ticks = {0, 1, 2, 3};
  examples::write_svg_plot((out / "levels.svg").string(), {mem, time},
                           std::string("ResNet-20, O0-O3, ") + (dd.is_cuda() ? "CUDA " : "CPU ") + dd.half_name());

  check(std::abs(param_mb[3] - param_mb[0] / 2) < 1e-9,
        std::string("O3 holds every parameter in ") + dd.half_name() + ": half O0's parameter bytes");
  check(param_mb[2] < param_mb[0] && param_mb[2] + master_mb[2] > param_mb[0],
        "O2's half model is smaller, but with its float32 masters it holds more than O0");
  check(peak_mb[3] < peak_mb[0], "O3's peak step memory is below O0's (" + fmt("%.2f", peak_mb[3]) + " < " +
                                     fmt("%.2f MB)", peak_mb[0]));
  check(step_mb[2] < step_mb[0], "O2's step memory (activations, grads) is below O0's (" + fmt("%.2f", step_mb[2]) +
                                     " < " + fmt("%.2f MB)", step_mb[0]));
}

// ---- 4. accuracy ------------------------------------------------------------------------

namespace {

struct TrainResult {
  double first_loss = 0, last_loss = 0, test_acc = 0;
};

TrainResult train_level(const std::string& level, const std::shared_ptr<const data::Dataset>& train_set,
                        const data::TransformPtr& augment, const Images& test, const Args& a, const Device& dev) {
  manual_seed(a.seed);
  auto model = models::create_model("smallnet", models::ModelOptions().width(a.width));
  model->to(dev);
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
      Tensor loss = cross_entropy(amp.forward(b.data.to(dev)), b.targets.to(dev));
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
    correct += examples::count_correct(amp.forward(test.x.narrow(0, s, n).to(dev)), test.y.narrow(0, s, n).to(dev));
  }
  r.test_acc = 100.0 * double(correct) / double(test.size());
  return r;
}

}  // namespace

void section_accuracy(const std::shared_ptr<const data::Dataset>& train_set, const data::TransformPtr& augment,
                      const Images& test, const Args& a, const DemoDevice& dd, const fs::path& out, Checks& check) {
  std::printf("\n4. Accuracy: SmallNet width %g, %lld epoch(s) on %lld images, batch %lld, SGD lr %g cosine, same seed\n",
              a.width, static_cast<long long>(a.epochs), static_cast<long long>(train_set->size()),
              static_cast<long long>(a.batch_size), a.lr);
  const std::string half = dd.half_name();
  const std::string names[3] = {"O0 float32", "O1 " + half + " autocast", "O2 " + half + " model + fp32 masters"};
  CsvLog csv((out / "accuracy.csv").string(), {"level", "first_loss", "last_epoch_loss", "test_accuracy"});
  Series acc{"test accuracy (eval mode)", {}, {}};
  TrainResult r[3];
  for (int l = 0; l < 3; ++l) {
    const auto t0 = std::chrono::steady_clock::now();
    r[l] = train_level(kLevels[l], train_set, augment, test, a, dd.compute);
    std::printf("   %-34s first loss %.3f  last epoch loss %.3f  test accuracy %5.2f%%  (%.1f s)\n", names[l].c_str(),
                r[l].first_loss, r[l].last_loss, r[l].test_acc, seconds_since(t0));
    csv.row({double(l), r[l].first_loss, r[l].last_loss, r[l].test_acc});
    acc.x.push_back(l), acc.y.push_back(r[l].test_acc);
  }
  Panel p{"test accuracy after the same training", "opt level (0 = O0, 1 = O1, 2 = O2)", "%", {acc}, true};
  p.x_ticks = {0, 1, 2};
  examples::write_svg_plot((out / "accuracy.svg").string(), {p}, "float32 vs " + half + " mixed precision");
  for (int l = 0; l < 3; ++l)
    check(std::isfinite(r[l].last_loss) && r[l].last_loss < r[l].first_loss,
          names[l] + ": the loss falls (" + fmt("%.3f", r[l].first_loss) + " -> " + fmt("%.3f)", r[l].last_loss));
  // Autocast's cast of a float32 weight is O2's rounded master, conv/linear
  // see the same 16-bit operands and BN the same float32 parameters: the two
  // levels are one computation on the CPU. On a GPU the GradScaler's dynamic
  // scale and cuDNN's algorithm choices may part them: printed, not checked.
  const bool same = r[1].last_loss == r[2].last_loss && r[1].test_acc == r[2].test_acc;
  if (dd.is_cuda())
    std::printf("   O1 and O2 train %s\n", same ? "identically (bit for bit)" : "differently (GPU: not required)");
  else
    check(same, "O1 and O2 train identically (the same losses and accuracy, bit for bit)");
  if (!a.smoke)
    check(r[1].test_acc >= r[0].test_acc - 3.0, half + " autocast's test accuracy is not 3 points below float32's (" +
                                                    fmt("%+.2f)", r[1].test_acc - r[0].test_acc));
}

}  // namespace minidl::amp_demo

namespace {

int run(const Args& a) {
  const auto t_start = std::chrono::steady_clock::now();
  const DemoDevice dd = DemoDevice::parse(a.device);
  if (a.threads > 0) set_num_threads(a.threads);
  const fs::path out = a.out;
  examples::create_output_dir("--out", a.out);
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
  std::printf("data: CIFAR-10 from %s: %lld training images, %lld test images; %d thread(s), seed %llu; "
              "device %s (half: %s)\n",
              a.data.c_str(), static_cast<long long>(train.size()), static_cast<long long>(test.size()),
              get_num_threads(), static_cast<unsigned long long>(a.seed), dd.compute.str().c_str(), dd.half_name());

  Checks check;
  auto timed = [&](auto&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    std::printf("  (%.1f s)\n", seconds_since(t0));
  };
  timed([&] { section_levels(train, a, dd, out, check); });
  timed([&] { section_bn_stats(train, a, out, check); });
  timed([&] { section_grad_scaler(train, a, dd, out, check); });
  timed([&] { section_accuracy(train_set, augment, test, a, dd, out, check); });
  std::printf("\nwrote %s/{levels,bn_stats,grad_scaler,accuracy}.svg and their .csv tables\n", out.string().c_str());
  return check.finish(seconds_since(t_start));
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Mixed precision and BatchNorm, measured: Apex's O0-O3, BN statistics, loss scaling"};
  app.add_option("--data", a.data, "folder with data_batch_1..5.bin (default: the shared subset)");
  app.add_option("--out", a.out, "where the CSVs and SVGs go")->capture_default_str();
  app.add_option("--device", a.device, "test (CPU kernels, bfloat16) or cuda (float16)")
      ->check(CLI::IsMember({"test", "cuda"}))
      ->capture_default_str();
  app.add_option("--epochs", a.epochs, "section 4's training")->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--width", a.width, "SmallNet width (sections 3b, 4)")->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--batch-size", a.batch_size)->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--lr", a.lr)->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--threads", a.threads, "compute threads (0: OMP_NUM_THREADS or all cores)")
      ->check(minidl::examples::kNonNegative)
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
