// Times minidl's hot ops (matmul, conv2d, the 3-D pool and upsampling) and prints one JSON object per line:
//   {"impl":"minidl","op":"conv2d_fwd_bwd","shape":"...","median_ms":..,"gflops":..,"threads":2,"version":"eigen 3.4.0"}
// bench/bench_torch.py prints the same lines for PyTorch; bench/run_bench.py
// runs both and compares. Options: --threads N (default 2), --reps N (default 15),
// --only matmul|conv|volume|overhead|activations|reduce|softmax (default: all).
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_util.h"
#include "minidl/minidl.h"

using namespace minidl;

namespace {

bench::Options g_options;

double median_ms(const std::function<void()>& f) { return bench::median_ms(f, g_options.reps); }

void report(const std::string& op, const std::string& shape, double ms, double flops) {
  bench::print_result(op, shape, ms, flops, g_options.threads, "eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." + std::to_string(EIGEN_MINOR_VERSION));
}

void bench_matmul(int64_t n) {
  manual_seed(0);
  const Tensor a = randn({n, n}), b = randn({n, n});
  NoGradGuard no_grad;
  const double ms = median_ms([&] { (void)matmul(a, b); });
  report("matmul", std::to_string(n) + "x" + std::to_string(n) + "x" + std::to_string(n), ms, 2.0 * n * n * n);
}

struct ConvCase {
  int64_t N, C, K, H, W, k, stride, pad;
  std::string shape() const {
    return "N" + std::to_string(N) + " C" + std::to_string(C) + " K" + std::to_string(K) + " " + std::to_string(H) +
           "x" + std::to_string(W) + " k" + std::to_string(k) + " s" + std::to_string(stride) + " p" +
           std::to_string(pad);
  }
};

void bench_conv(const ConvCase& c) {
  manual_seed(0);
  Tensor x = randn({c.N, c.C, c.H, c.W});
  Tensor w = randn({c.K, c.C, c.k, c.k}) * 0.05;
  Conv2dParams p;
  p.stride = {c.stride, c.stride};
  p.padding = {c.pad, c.pad};
  const int64_t oh = (c.H + 2 * c.pad - c.k) / c.stride + 1, ow = (c.W + 2 * c.pad - c.k) / c.stride + 1;
  const double flops = 2.0 * c.N * c.K * c.C * c.k * c.k * oh * ow;
  {
    NoGradGuard no_grad;
    report("conv2d_fwd", c.shape(), median_ms([&] { (void)conv2d(x, w, Tensor(), p); }), flops);
  }
  // Forward + backward with both grads (input and weight): 3x the forward's flops.
  x.requires_grad_();
  w.requires_grad_();
  const Tensor dy = ones({c.N, c.K, oh, ow});
  report("conv2d_fwd_bwd", c.shape(), median_ms([&] {
           x.set_grad(Tensor());
           w.set_grad(Tensor());
           conv2d(x, w, Tensor(), p).backward(dy);
         }),
         3 * flops);
}

// The UNet3d down/up path on a (2, 32, 32, 64, 64) volume: MaxPool3d(2) and
// trilinear x2 upsampling, forward and forward + backward. Memory-bound ops:
// "gflops" counts one operation per window tap (8 per output).
void bench_volume() {
  manual_seed(0);
  const Shape shape{2, 32, 32, 64, 64};
  const std::string name = "2x32x32x64x64";
  Tensor x = randn(shape);
  const InterpolateOptions up{.scale_factor = {2.0}, .mode = "trilinear", .align_corners = false};
  const double pool_taps = 8.0 * static_cast<double>(x.numel()) / 8, up_taps = 8.0 * static_cast<double>(x.numel()) * 8;
  {
    NoGradGuard no_grad;
    report("max_pool3d_fwd", name, median_ms([&] { (void)max_pool3d(x, {2, 2, 2}); }), pool_taps);
    report("upsample_trilinear_fwd", name, median_ms([&] { (void)interpolate(x, up); }), up_taps);
  }
  x.requires_grad_();
  const Tensor dy_pool = ones({2, 32, 16, 32, 32}), dy_up = ones({2, 32, 64, 128, 128});
  report("max_pool3d_fwd_bwd", name, median_ms([&] {
           x.set_grad(Tensor());
           max_pool3d(x, {2, 2, 2}).backward(dy_pool);
         }),
         2 * pool_taps);
  report("upsample_trilinear_fwd_bwd", name, median_ms([&] {
           x.set_grad(Tensor());
           interpolate(x, up).backward(dy_up);
         }),
         2 * up_taps);
}

// --suite volume: the 3-D convolutions of a UNet3d level, (N, C, D, H, W).
struct Conv3dCase {
  int64_t N, C, K, D, H, W, k, stride, pad;
  bool transposed = false;
  std::string shape() const {
    return "N" + std::to_string(N) + " C" + std::to_string(C) + " K" + std::to_string(K) + " " + std::to_string(D) +
           "x" + std::to_string(H) + "x" + std::to_string(W) + " k" + std::to_string(k) + " s" +
           std::to_string(stride) + " p" + std::to_string(pad);
  }
};

void bench_conv3d(const Conv3dCase& c) {
  manual_seed(0);
  Tensor x = randn({c.N, c.C, c.D, c.H, c.W});
  Tensor w = (c.transposed ? randn({c.C, c.K, c.k, c.k, c.k}) : randn({c.K, c.C, c.k, c.k, c.k})) * 0.05;
  const int64_t s = c.stride, p = c.pad;
  auto out = [&](int64_t in) { return c.transposed ? (in - 1) * s - 2 * p + c.k : (in + 2 * p - c.k) / s + 1; };
  // Products: every (input voxel, tap) pair for the transposed conv, every (output voxel, tap) for conv3d.
  const double voxels = static_cast<double>(c.transposed ? c.D * c.H * c.W : out(c.D) * out(c.H) * out(c.W));
  const double flops = 2.0 * c.N * c.K * c.C * c.k * c.k * c.k * voxels;
  auto run = [&] {
    return c.transposed ? conv_transpose3d(x, w, Tensor(), {.stride = {s, s, s}, .padding = {p, p, p}})
                        : conv3d(x, w, Tensor(), {.stride = {s, s, s}, .padding = {p, p, p}});
  };
  const std::string name = c.transposed ? "conv_transpose3d" : "conv3d";
  {
    NoGradGuard no_grad;
    report(name + "_fwd", c.shape(), median_ms([&] { (void)run(); }), flops);
  }
  x.requires_grad_();
  w.requires_grad_();
  const Tensor dy = ones({c.N, c.K, out(c.D), out(c.H), out(c.W)});
  report(name + "_fwd_bwd", c.shape(), median_ms([&] {
           x.set_grad(Tensor());
           w.set_grad(Tensor());
           run().backward(dy);
         }),
         3 * flops);
}

// --only overhead: what the framework costs per call when the arithmetic is
// nothing (dispatch, allocation, autograd bookkeeping): 1000 calls per timed
// run on tiny tensors. The host's share of every op on a GPU too. PyTorch's
// twin runs from Python, as its users call it.
void bench_overhead() {
  manual_seed(0);
  const std::string calls = "x1000 calls";
  auto per_1000 = [](const std::function<void()>& f) {
    return median_ms([&] {
      for (int i = 0; i < 1000; ++i) f();
    });
  };
  const Tensor a = randn({1}), b = randn({1});
  {
    NoGradGuard no_grad;
    report("overhead_add", "1 element, " + calls, per_1000([&] { (void)(a + b); }), 0);
  }
  Tensor ag = randn({1}).requires_grad_(), bg = randn({1}).requires_grad_();
  report("overhead_add_grad", "1 element, requires_grad, " + calls, per_1000([&] { (void)(ag + bg); }), 0);
  Tensor x = randn({4, 16}), w = (randn({16, 16}) * 0.1).requires_grad_(), bias = zeros({16}).requires_grad_();
  report("overhead_linear_fwd_bwd", "(4,16)x(16,16), sum, backward, " + calls, per_1000([&] {
           w.set_grad(Tensor());
           bias.set_grad(Tensor());
           linear(x, w, bias).sum().backward();
         }),
         0);
  // A full training step of a 3-layer MLP: forward, MSE, zero_grad, backward, SGD with momentum.
  nn::Sequential mlp(nn::Linear(16, 16), nn::ReLU(), nn::Linear(16, 16), nn::ReLU(), nn::Linear(16, 1));
  optim::SGDOptions so(0.01);
  so.momentum = 0.9;
  optim::SGD sgd(std::vector<optim::ParamGroup>{mlp->parameters()}, so);
  const Tensor target = randn({4, 1});
  report("overhead_mlp_step", "3x Linear(16) + ReLU, MSE, SGD momentum, batch 4, " + calls, per_1000([&] {
           sgd.zero_grad();
           mse_loss(mlp->forward(x), target).backward();
           sgd.step();
         }),
         0);
}

// --only activations: the elementwise transcendental activations on a
// ResNet-sized activation (64, 256, 28, 28) = 12.8M floats, forward and
// forward + backward (upstream gradient of ones). "gflops" counts one
// operation per element (G elements/s): memory-bound, vectorized math.
void bench_activations() {
  manual_seed(0);
  const Shape shape{64, 256, 28, 28};
  const std::string name = "64x256x28x28";
  const Tensor x = randn(shape), positive = rand(shape) + 0.5, dy = ones(shape);
  const double n = static_cast<double>(x.numel());
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> ops = {
      {"exp", [](const Tensor& v) { return exp(v); }},
      {"log", [](const Tensor& v) { return log(v); }},
      {"sigmoid", [](const Tensor& v) { return sigmoid(v); }},
      {"tanh", [](const Tensor& v) { return tanh(v); }},
      {"gelu", [](const Tensor& v) { return gelu(v); }},
      {"gelu_tanh", [](const Tensor& v) { return gelu(v, "tanh"); }},
  };
  for (const auto& [op, f] : ops) {
    Tensor in = (op == "log" ? positive : x).detach();
    {
      NoGradGuard no_grad;
      report(op + "_fwd", name, median_ms([&] { (void)f(in); }), n);
    }
    in.requires_grad_();
    report(op + "_fwd_bwd", name, median_ms([&] {
             in.set_grad(Tensor());
             f(in).backward(dy);
           }),
           2 * n);
  }
}

// --only reduce: the reductions, transposed copy and pooling that a CPU scan
// found slower than PyTorch (compare cpu_ms at --threads 1 on a loaded machine).
void bench_reduce() {
  manual_seed(0);
  const Tensor x = randn({64, 256, 28, 28}), m = randn({4096, 4096});
  const std::string xs = "64x256x28x28", ms = "4096x4096";
  auto timed = [](const std::string& op, const std::string& shape, const std::function<void()>& f) {
    report(op, shape, median_ms(f), 0);
  };
  {
    NoGradGuard no_grad;
    timed("transpose_contiguous", ms, [&] { (void)m.transpose(0, 1).contiguous(); });
    timed("adaptive_avg_pool2d_1", xs, [&] { (void)adaptive_avg_pool2d(x, {1, 1}); });
    timed("amax_last_dim", ms, [&] { (void)amax(m, {1}); });
    timed("sum_all", xs, [&] { (void)sum(x); });
    timed("mean_dim1", xs, [&] { (void)mean(x, {1}); });
    timed("sum_last_dim", ms, [&] { (void)sum(m, {1}); });
    timed("max_pool2d_3x3s2p1_fwd", xs, [&] { (void)max_pool2d(x, {3, 3}, {2, 2}, {1, 1}); });
    const Tensor xb = x.to(kBFloat16);
    timed("max_pool2d_3x3s2p1_fwd_bf16", xs, [&] { (void)max_pool2d(xb, {3, 3}, {2, 2}, {1, 1}); });
  }
  Tensor xg = x.clone().requires_grad_();
  const Tensor dy_pool = ones({64, 256, 14, 14}), dy_gap = ones({64, 256, 1, 1});
  timed("adaptive_avg_pool2d_1_fwd_bwd", xs, [&] {
    xg.set_grad(Tensor());
    adaptive_avg_pool2d(xg, {1, 1}).backward(dy_gap);
  });
  timed("max_pool2d_3x3s2p1_fwd_bwd", xs, [&] {
    xg.set_grad(Tensor());
    max_pool2d(xg, {3, 3}, {2, 2}, {1, 1}).backward(dy_pool);
  });
}

// --only softmax: softmax and log_softmax over the last dim (a classifier's
// 256x1000, a language model's 64x32000) and over the channels of a
// segmentation batch (dim 1 of 8x21x128x128), then cross_entropy with class
// indices at the classifier and segmentation shapes, and with probability
// targets and nll_loss at the segmentation shape. Memory-bound: "gflops" counts one
// operation per element (two for fwd_bwd).
void bench_softmax() {
  struct Case {
    Shape shape;
    int64_t dim;
    std::string name;
  };
  const Case cases[] = {{{256, 1000}, -1, "256x1000 dim -1"},
                        {{64, 32000}, -1, "64x32000 dim -1"},
                        {{8, 21, 128, 128}, 1, "8x21x128x128 dim 1"}};
  for (const Case& c : cases) {
    manual_seed(0);
    Tensor x = randn(c.shape) * 3.0;
    const Tensor dy = randn(c.shape);
    const double n = static_cast<double>(x.numel());
    for (const bool log : {false, true}) {
      const std::string op = log ? "log_softmax" : "softmax";
      auto run = [&] { return log ? log_softmax(x, c.dim) : softmax(x, c.dim); };
      {
        NoGradGuard no_grad;
        report(op + "_fwd", c.name, median_ms([&] { (void)run(); }), n);
      }
      x.requires_grad_();
      report(op + "_fwd_bwd", c.name, median_ms([&] {
               x.set_grad(Tensor());
               run().backward(dy);
             }),
             2 * n);
      x.requires_grad_(false);
    }
  }
  for (const Case& c : {cases[0], cases[2]}) {
    manual_seed(0);
    Tensor x = randn(c.shape) * 3.0;
    Shape target_shape = c.shape;
    target_shape.erase(target_shape.begin() + 1);
    const Tensor target = randint(0, c.shape[1], target_shape);
    const double n = static_cast<double>(x.numel());
    const std::string shape = c.name.substr(0, c.name.find(' '));
    {
      NoGradGuard no_grad;
      report("cross_entropy_fwd", shape, median_ms([&] { (void)cross_entropy(x, target); }), n);
    }
    x.requires_grad_();
    report("cross_entropy_fwd_bwd", shape, median_ms([&] {
             x.set_grad(Tensor());
             cross_entropy(x, target).backward();
           }),
           2 * n);
  }
  manual_seed(0);
  Tensor x = randn({8, 21, 128, 128}) * 3.0;
  const Tensor probs = softmax(randn({8, 21, 128, 128}), 1);
  x.requires_grad_();
  report("cross_entropy_probs_fwd_bwd", "8x21x128x128", median_ms([&] {
           x.set_grad(Tensor());
           cross_entropy(x, probs).backward();
         }),
         2.0 * static_cast<double>(x.numel()));
  Tensor logp = log_softmax(randn({8, 21, 128, 128}), 1).requires_grad_();
  const Tensor target = randint(0, 21, {8, 128, 128});
  report("nll_loss_fwd_bwd", "8x21x128x128", median_ms([&] {
           logp.set_grad(Tensor());
           nll_loss(logp, target).backward();
         }),
         2.0 * static_cast<double>(logp.numel()));
}

}  // namespace

static int program(int argc, char** argv) {
  g_options = bench::parse_options(argc, argv);
  // --only matmul|conv|volume|overhead|activations|reduce|softmax runs one group (the default: all).
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::strcmp(argv[i], "--only") == 0) only = argv[i + 1];
  auto want = [&](const char* group) { return only.empty() || only == group; };
  if (want("matmul")) bench_matmul(1024);
  if (want("conv")) {
    bench_conv({128, 64, 64, 32, 32, 3, 1, 1});   // the target: a CIFAR ResNet's 64-channel 3x3 conv
    bench_conv({128, 128, 128, 16, 16, 3, 1, 1});  // deeper stage
    bench_conv({128, 64, 128, 32, 32, 3, 2, 1});   // stride-2 downsampling conv
    bench_conv({128, 3, 64, 32, 32, 3, 1, 1});     // first layer (RGB input)
    // CIFAR ResNet-18 at batch 64: the 3x3 convs of each stage, then the
    // downsampling convs into stages 2-4 (3x3 stride 2 and the 1x1 stride-2 shortcut).
    for (auto [c, hw] : {std::pair<int64_t, int64_t>{64, 32}, {128, 16}, {256, 8}, {512, 4}})
      bench_conv({64, c, c, hw, hw, 3, 1, 1});
    for (auto [c, hw] : {std::pair<int64_t, int64_t>{64, 32}, {128, 16}, {256, 8}}) {
      bench_conv({64, c, 2 * c, hw, hw, 3, 2, 1});
      bench_conv({64, c, 2 * c, hw, hw, 1, 2, 0});
    }
  }
  if (want("volume")) {
    bench_conv3d({2, 32, 32, 32, 64, 64, 3, 1, 1});        // the target: a UNet3d 3x3x3 conv
    bench_conv3d({2, 64, 32, 16, 32, 32, 2, 2, 0, true});  // UNet3d upsampling 2x2x2 stride 2
    bench_volume();
  }
  if (want("overhead")) bench_overhead();
  if (want("activations")) bench_activations();
  if (want("reduce")) bench_reduce();
  if (want("softmax")) bench_softmax();
  return 0;
}

int main(int argc, char** argv) {
  return minidl::examples::run_main_with_usage(
      "bench_ops", "bench_ops [--threads N] [--reps N] [--only matmul|conv|volume|overhead|activations|reduce|softmax]",
      argc, argv, [&] { return program(argc, argv); });
}
