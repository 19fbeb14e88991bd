// The GPU benchmarks (issue "training on the GPU"): one JSON object a line,
//   {"impl":"minidl","op":"conv3x3_fwd_bwd","shape":"128x64x32x32","median_ms":...,"tflops":...,"peak_mib":...}
// bench/bench_gpu_torch.py prints the PyTorch twins with the same op and
// shape names; bench/gpu_report.py joins the two into a table of ratios.
//
//   bench_gpu [--device cuda:0] [--rounds 7] [--suite all|ops|norms|pools|train|graph|profile]
//             [--model resnet18|smallnet] [--batch 128] [--amp off|fp16]
//             [--memory-format contiguous|channels-last]   (--suite profile)
//
// Timing: each round synchronizes the device, runs the work `iters` times,
// synchronizes again and divides the host time by iters (a round of many
// launches hides the per-sync latency); the median over rounds is printed.
// Settings on both sides: cudnn.benchmark on (each shape's fastest
// algorithm, searched once in the warm-up), cuDNN TF32 on (both libraries'
// default), matmul TF32 off unless the op name says tf32.
// peak_mib (train steps only): max_memory_allocated over the timed rounds,
// parameters, gradients and optimizer state included. train_step_host_*: the
// host time to enqueue one step on an idle device (launch-bound when it is
// close to the step's time). train_step_fp16_*: the same step with the
// forward under float16 autocast and a GradScaler (issue 16's "fp16 autocast
// vs float32", next to PyTorch's torch.autocast + torch.amp.GradScaler).
// train_step_deterministic_*: under train_cifar10 --deterministic's cuDNN
// settings, PyTorch's twin under cudnn.deterministic = True, benchmark off.
// train_step_cl_*, batch_norm2d_train_cl, *_pool*_cl: channels-last images and
// activations (core/memory_format.h; PyTorch's twin: model and input
// .to(memory_format=torch.channels_last)). --suite pools: the pools alone
// (SmallNet's 2x2 max pool, ResNet's 3x3 stride-2 one, the global average)
// and softmax (a classifier's log_softmax over 1000 logits, a 3-D
// segmentation's softmax over 4 classes).
//
// --suite graph (not part of all: PyTorch's twin has no such entry): a
// training step eager and replayed from a CUDA graph at batch 32
// (train_cifar10 --cuda-graph's case; on an H100, 2026-11-27: 1.15x for
// SmallNet and for ResNet-18).
//
// --suite profile: 3 warm-up training steps of --model at --batch (cuDNN's
// algorithm search among them), then 2 steps between cuda::profiler_start and
// profiler_stop, for `ncu --profile-from-start off` (scripts/gpu-check.sh
// profile; bench_gpu_torch.py --suite profile is the twin): the per-kernel
// times of a step on both sides, where the step's time goes.
//
// Without a usable CUDA device it prints the reason and exits 77 (skipped).
// --device cpu (or test) runs the same code on that device, slowly: a dry
// run of the program itself where there is no GPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "examples/common/main_guard.h"
#include "minidl/core/cuda_graph.h"
#include "minidl/minidl.h"

using namespace minidl;

namespace {

struct Options {
  Device device{DeviceType::CUDA, 0};
  int rounds = 7;
  std::string suite = "all";
  std::string model = "resnet18";  // --suite profile
  int64_t batch = 128;
  bool fp16 = false;           // --suite profile
  bool channels_last = false;  // --suite profile
};

std::string dims(const Shape& s) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "x" : "") + std::to_string(s[i]);
  return r;
}

void sync(const Options& o) {
  if (o.device.type == DeviceType::CUDA) cuda::synchronize(o.device.index);
}

// Median over rounds of (time of `iters` calls of f) / iters, in ms, after
// `warmup` calls.
double median_ms(const Options& o, int iters, const std::function<void()>& f, int warmup = 3) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> ms;
  for (int r = 0; r < o.rounds; ++r) {
    sync(o);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) f();
    sync(o);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / iters);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Median host time of one f() call started on an idle device (the time to
// enqueue its work, plus any synchronization inside it).
double enqueue_ms(const Options& o, const std::function<void()>& f) {
  std::vector<double> ms;
  for (int r = 0; r < o.rounds; ++r) {
    sync(o);
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  sync(o);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void print(const std::string& op, const std::string& shape, double ms, double flops, double peak_mib = 0,
           double images_per_s = 0) {
  std::printf("{\"impl\":\"minidl\",\"op\":\"%s\",\"shape\":\"%s\",\"median_ms\":%.4f,\"tflops\":%.2f", op.c_str(),
              shape.c_str(), ms, flops / (ms * 1e9));
  if (peak_mib > 0) std::printf(",\"peak_mib\":%.1f", peak_mib);
  if (images_per_s > 0) std::printf(",\"images_per_s\":%.0f", images_per_s);
  std::printf("}\n");
  std::fflush(stdout);
}

Tensor leaf(const Shape& s, const Options& o, double scale = 1.0, bool channels_last = false) {
  Tensor t = (randn(s) * scale).to(o.device);
  if (channels_last) t = t.contiguous(MemoryFormat::ChannelsLast);
  return t.requires_grad_();
}

// Forward, or forward + backward with a fixed upstream gradient; leaves' grads
// reset each call so nothing accumulates.
void time_op(const Options& o, const std::string& op, const std::string& shape, double fwd_flops,
             const std::vector<Tensor>& leaves, const std::function<Tensor(const std::vector<Tensor>&)>& f,
             int iters = 20) {
  {
    NoGradGuard no_grad;
    print(op + "_fwd", shape, median_ms(o, iters, [&] { f(leaves); }), fwd_flops);
  }
  const Tensor out = f(leaves).detach();
  const Tensor grad = ones_like(out).contiguous(out.suggest_memory_format());  // as the op's own gradient would come
  print(op + "_fwd_bwd", shape,
        median_ms(o, iters,
                  [&] {
                    for (const Tensor& t : leaves) Tensor(t).set_grad(Tensor());
                    f(leaves).backward(grad);
                  }),
        3 * fwd_flops);
}

void conv_suite(const Options& o) {
  // ResNet-18 (CIFAR) 3x3 convs at batch 128: the stem, each stage's body
  // conv, and the strided first conv of stages 2-4.
  struct Case {
    int64_t cin, cout, hw, stride;
  };
  const Case cases[] = {{3, 64, 32, 1},   {64, 64, 32, 1},   {64, 128, 32, 2}, {128, 128, 16, 1},
                        {128, 256, 16, 2}, {256, 256, 8, 1}, {256, 512, 8, 2}, {512, 512, 4, 1}};
  for (const Case& c : cases) {
    const int64_t n = 128, out = c.hw / c.stride;
    Conv2dParams p;
    p.stride = {c.stride, c.stride};
    p.padding = {1, 1};
    const double flops = 2.0 * n * c.cout * out * out * c.cin * 9;
    const std::string shape = std::to_string(n) + "x" + std::to_string(c.cin) + "x" + std::to_string(c.hw) + "x" +
                              std::to_string(c.hw) + "->" + std::to_string(c.cout) + "/s" + std::to_string(c.stride);
    for (bool cl : {false, true})  // conv3x3_cl: NHWC input (the weight converted per call, as in training)
      time_op(o, cl ? "conv3x3_cl" : "conv3x3", shape, flops,
              {leaf({n, c.cin, c.hw, c.hw}, o, 1.0, cl), leaf({c.cout, c.cin, 3, 3}, o, 0.05)},
              [p](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], Tensor(), p); });
  }
}

void norm_suite(const Options& o) {
  const Shape s{128, 64, 32, 32};
  const std::string shape = dims(s);
  // BatchNorm also at ResNet-18's batch-512 shapes (first and last stage), where its channels-last step trails,
  // and at ResNet-20's 16 channels (channels-last: one block of 32 columns, at most 128 chunks of rows).
  for (const Shape& b : {s, Shape{512, 64, 32, 32}, Shape{512, 512, 4, 4}, Shape{128, 16, 32, 32}}) {
    const Tensor brm = zeros({b[1]}).to(o.device), brv = ones({b[1]}).to(o.device);
    for (bool cl : {false, true})
      time_op(o, cl ? "batch_norm2d_train_cl" : "batch_norm2d_train", dims(b), 0,
              {leaf(b, o, 1.0, cl), leaf({b[1]}, o), leaf({b[1]}, o)},
              [&](const std::vector<Tensor>& v) { return batch_norm(v[0], brm, brv, v[1], v[2], true); });
  }
  time_op(o, "group_norm32", shape, 0, {leaf(s, o), leaf({64}, o), leaf({64}, o)},
          [](const std::vector<Tensor>& v) { return group_norm(v[0], 32, v[1], v[2]); });
  time_op(o, "layer_norm_chw", shape, 0, {leaf(s, o), leaf({64, 32, 32}, o), leaf({64, 32, 32}, o)},
          [](const std::vector<Tensor>& v) { return layer_norm(v[0], {64, 32, 32}, v[1], v[2]); });
  time_op(o, "instance_norm2d", shape, 0, {leaf(s, o)},
          [](const std::vector<Tensor>& v) { return instance_norm(v[0]); });
}

void pool_suite(const Options& o) {
  const Shape maps{128, 64, 32, 32}, head{128, 512, 4, 4};
  for (bool cl : {false, true}) {
    const std::string suffix = cl ? "_cl" : "";
    time_op(o, "max_pool2x2" + suffix, dims(maps), 0, {leaf(maps, o, 1.0, cl)},
            [](const std::vector<Tensor>& v) { return max_pool2d(v[0], {2, 2}); });
    time_op(o, "max_pool3x3s2" + suffix, dims(maps), 0, {leaf(maps, o, 1.0, cl)},
            [](const std::vector<Tensor>& v) { return max_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}); });
    time_op(o, "global_avg_pool" + suffix, dims(head), 0, {leaf(head, o, 1.0, cl)},
            [](const std::vector<Tensor>& v) { return adaptive_avg_pool2d(v[0], {1, 1}); });
  }
  // Softmax over a classifier's logits (the last dim) and over a 3-D
  // segmentation's classes (dim 1 of (N, C, D, H, W): columns H*W*D apart).
  const Shape logits{8192, 1000}, volume{2, 4, 32, 64, 64};
  time_op(o, "log_softmax_rows", dims(logits), 0, {leaf(logits, o)},
          [](const std::vector<Tensor>& v) { return log_softmax(v[0], -1); });
  time_op(o, "softmax_channels", dims(volume), 0, {leaf(volume, o)},
          [](const std::vector<Tensor>& v) { return softmax(v[0], 1); });
}

void matmul_suite(const Options& o) {
  const int64_t n = 4096;
  const Tensor a = randn({n, n}).to(o.device), b = randn({n, n}).to(o.device);
  for (bool tf32 : {false, true}) {
    backends::cuda::matmul::set_allow_tf32(tf32);
    print(tf32 ? "matmul_tf32" : "matmul_fp32", "4096x4096x4096", median_ms(o, 10, [&] { matmul(a, b); }),
          2.0 * n * n * n);
  }
  backends::cuda::matmul::set_allow_tf32(false);
}

// bench_train's step (forward, cross_entropy, zero_grad, backward, SGD lr 0.1
// momentum 0.9 weight decay 5e-4) on a fixed random batch on the device;
// capturable keeps the SGD's lr and step count in device memory (CUDA graphs);
// fp16: the forward under float16 autocast and a GradScaler around backward
// and step (PyTorch's AMP recipe, which bench_gpu_torch.py runs).
struct TrainStep {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::SGD> sgd;
  std::unique_ptr<amp::GradScaler> scaler;  // fp16 only
  Tensor x, y;

  TrainStep(const Options& o, const std::string& name, int64_t batch, bool capturable, bool fp16 = false,
            bool channels_last = false) {
    manual_seed(0);
    model = models::create_model(name, models::ModelOptions().norm("batchnorm"));
    model->to(o.device);
    if (channels_last) model->to(MemoryFormat::ChannelsLast);  // PyTorch's recipe, as the twin's
    model->train();
    optim::SGDOptions so(0.1);
    so.momentum = 0.9;
    so.weight_decay = 5e-4;
    so.capturable = capturable;
    sgd = std::make_unique<optim::SGD>(std::vector<optim::ParamGroup>{model->parameters()}, so);
    x = randn({batch, 3, 32, 32}).to(o.device);
    // Channels-last images (and weights) keep every activation NHWC (core/memory_format.h).
    if (channels_last) x = x.contiguous(MemoryFormat::ChannelsLast);
    y = randint(0, 10, {batch}).to(o.device);
    if (fp16) scaler = std::make_unique<amp::GradScaler>("cuda");
  }
  void operator()() {
    Tensor loss;
    {
      amp::autocast region(DeviceType::CUDA, kFloat16, scaler != nullptr);
      loss = cross_entropy(model->forward(x), y);
    }
    sgd->zero_grad();
    if (!scaler) {
      loss.backward();
      sgd->step();
      return;
    }
    scaler->scale(loss).backward();
    scaler->step(*sgd);
    scaler->update();
  }
};

// train_step_<model> (float32) or train_step_fp16_<model>: time, images/s and
// peak memory; for float32 also the host's share of a step. deterministic:
// train_step_deterministic_<model>, under train_cifar10 --deterministic's
// settings (cuDNN's deterministic algorithms, no benchmark search), what that
// flag costs next to the train_step_<model> line.
void train_step(const Options& o, const std::string& name, int64_t batch, bool fp16 = false,
                bool deterministic = false, bool channels_last = false) {
  backends::cudnn::set_deterministic(deterministic);
  backends::cudnn::set_benchmark(!deterministic);
  TrainStep step(o, name, batch, /*capturable=*/false, fp16, channels_last);
  step();
  cuda::reset_peak_memory_stats(o.device.index);
  const double ms = median_ms(o, 5, std::ref(step));
  const double peak = static_cast<double>(cuda::max_memory_allocated(o.device.index)) / (1024.0 * 1024.0);
  const std::string op = std::string(fp16 ? "train_step_fp16_" : deterministic ? "train_step_deterministic_" : "train_step_") +
                         (channels_last ? "cl_" : "") + name;
  print(op, "batch " + std::to_string(batch), ms, 0, peak, 1000.0 * batch / ms);
  backends::cudnn::set_deterministic(false);
  backends::cudnn::set_benchmark(true);
  // The host's share: one step enqueued on an idle device, not waited for. Near
  // the step time, the step is bound by launches, not by the GPU.
  if (!fp16 && !deterministic && !channels_last) print("train_step_host_" + name, "batch " + std::to_string(batch), enqueue_ms(o, std::ref(step)), 0);
}

// The same step (capturable SGD) eager and as a CUDA graph replay, on the
// same model, batch and device: the launch cost the graph removes. Also
// prints {"op":"cuda_graph_speedup_<model>","speedup":eager/graph}.
void graph_step(const Options& o, const std::string& name, int64_t batch, bool channels_last = false) {
  MINIDL_CHECK(o.device.is_cuda(), "bench_gpu --suite graph: CUDA graphs need a CUDA device, got ", o.device.str());
  TrainStep step(o, name, batch, /*capturable=*/true, /*fp16=*/false, channels_last);
  {
    cuda::CaptureStreamGuard side;  // warm-up where the capture will run
    for (int i = 0; i < 3; ++i) step();
  }
  const double eager = median_ms(o, 20, std::ref(step));
  cuda::CUDAGraph graph;
  {
    cuda::GraphCapture capture(graph);
    step();
    capture.end();
  }
  const double replay = median_ms(o, 20, [&] {
    step.sgd->write_device_lr();
    graph.replay();
  });
  const std::string shape = "batch " + std::to_string(batch), tag = (channels_last ? "cl_" : "") + name;
  print("train_step_eager_" + tag, shape, eager, 0, 0, 1000.0 * batch / eager);
  print("train_step_graph_" + tag, shape, replay, 0, 0, 1000.0 * batch / replay);
  std::printf("{\"impl\":\"minidl\",\"op\":\"cuda_graph_speedup_%s\",\"shape\":\"%s\",\"speedup\":%.2f}\n",
              tag.c_str(), shape.c_str(), eager / replay);
  std::fflush(stdout);
}

// --suite profile: the steps a profiler records (see the comment at the top).
void profile_steps(const Options& o) {
  TrainStep step(o, o.model, o.batch, /*capturable=*/false, o.fp16, o.channels_last);
  for (int i = 0; i < 3; ++i) step();
  cuda::synchronize(o.device.index);
  cuda::profiler_start();
  for (int i = 0; i < 2; ++i) step();
  cuda::synchronize(o.device.index);
  cuda::profiler_stop();
  std::printf("{\"impl\":\"minidl\",\"op\":\"profile_%s%s\",\"shape\":\"batch %lld\",\"steps\":2}\n",
              o.channels_last ? "cl_" : "", o.model.c_str(), static_cast<long long>(o.batch));
}

int program(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) throw examples::UsageError(std::string("missing value after ") + argv[i]);
    if (std::strcmp(argv[i], "--device") == 0) o.device = Device(argv[i + 1]);
    else if (std::strcmp(argv[i], "--rounds") == 0) o.rounds = static_cast<int>(std::max<int64_t>(1, examples::parse_int_arg(argv[i + 1], "--rounds")));
    else if (std::strcmp(argv[i], "--suite") == 0) o.suite = argv[i + 1];
    else if (std::strcmp(argv[i], "--model") == 0) o.model = argv[i + 1];
    else if (std::strcmp(argv[i], "--batch") == 0) o.batch = std::max<int64_t>(1, examples::parse_int_arg(argv[i + 1], "--batch"));
    else if (std::strcmp(argv[i], "--amp") == 0) {
      const std::string amp = argv[i + 1];
      if (amp != "off" && amp != "fp16") throw examples::UsageError("--amp must be off or fp16, got " + amp);
      o.fp16 = amp == "fp16";
    } else if (std::strcmp(argv[i], "--memory-format") == 0) {
      const std::string f = argv[i + 1];
      if (f != "contiguous" && f != "channels-last")
        throw examples::UsageError("--memory-format must be contiguous or channels-last, got " + f);
      o.channels_last = f == "channels-last";
    }
    else throw examples::UsageError(std::string("unknown option ") + argv[i]);
  }
  if (o.suite != "all" && o.suite != "ops" && o.suite != "norms" && o.suite != "pools" && o.suite != "train" &&
      o.suite != "graph" && o.suite != "profile")
    throw examples::UsageError("--suite must be all, ops, norms, pools, train, graph or profile, got " + o.suite);
  if (o.model != "resnet18" && o.model != "smallnet")
    throw examples::UsageError("--model must be resnet18 or smallnet, got " + o.model);
  if (o.device.type == DeviceType::CUDA && !cuda::is_available()) {
    std::printf("bench_gpu: skipped: %s\n", cuda::unavailable_reason().c_str());
    return 77;
  }
  backends::cudnn::set_benchmark(true);
  if (o.suite == "profile") {
    MINIDL_CHECK(o.device.is_cuda(), "bench_gpu --suite profile: the profiler markers need a CUDA device, got ",
                 o.device.str());
    profile_steps(o);
    return 0;
  }
  if (o.suite == "graph") {
    graph_step(o, "smallnet", 32);
    graph_step(o, "resnet18", 32);
    graph_step(o, "resnet18", 32, /*channels_last=*/true);  // less GPU work a step: more for the graph to save
    return 0;
  }
  // norms: the norm ops alone, to compare MINIDL_CUDA_NORM_KERNELS=legacy with the default in one session.
  if (o.suite == "norms") {
    norm_suite(o);
    return 0;
  }
  if (o.suite == "pools") {
    pool_suite(o);
    return 0;
  }
  if (o.suite != "train") {
    conv_suite(o);
    norm_suite(o);
    pool_suite(o);
    matmul_suite(o);
  }
  if (o.suite == "all" || o.suite == "train") {
    train_step(o, "resnet18", 128);
    train_step(o, "resnet18", 512);
    train_step(o, "smallnet", 128);
    train_step(o, "resnet18", 128, /*fp16=*/true);  // autocast float16 + GradScaler against the float32 line
    train_step(o, "smallnet", 128, /*fp16=*/true);
    train_step(o, "resnet18", 128, /*fp16=*/false, /*deterministic=*/true);
    train_step(o, "smallnet", 128, /*fp16=*/false, /*deterministic=*/true);
    train_step(o, "resnet18", 128, /*fp16=*/false, /*deterministic=*/false, /*channels_last=*/true);
    train_step(o, "resnet18", 512, /*fp16=*/false, /*deterministic=*/false, /*channels_last=*/true);
    train_step(o, "smallnet", 128, /*fp16=*/false, /*deterministic=*/false, /*channels_last=*/true);
    train_step(o, "resnet18", 128, /*fp16=*/true, /*deterministic=*/false, /*channels_last=*/true);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return examples::run_main_with_usage("bench_gpu",
                                       "bench_gpu [--device cuda:N] [--rounds N] [--suite all|ops|norms|pools|train|graph|profile] "
                                       "[--model resnet18|smallnet] [--batch N] [--amp off|fp16] [--memory-format contiguous|channels-last]",
                                       argc, argv, [&] { return program(argc, argv); });
}
