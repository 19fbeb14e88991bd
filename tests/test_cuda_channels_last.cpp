// Channels-last on a CUDA device against NCHW on the CPU: cuDNN's NHWC
// convolutions (NHWC tensor and filter descriptors, the graph API's strides),
// channels-last BatchNorm (groups that are columns: the tiled column
// reduction of the statistics and of the backward sums) and the elementwise
// ops' memory-order views, through tests/channels_last_cases.h's ResNet piece
// and a BatchNorm at a size with many column chunks; every 2-D pool on NHWC
// (tests/pooling_channels_last_cases.h: the pooling kernels with elements C
// apart, threads over channels); a channels-last model (Module::to) trained
// with SGD against the CPU's NCHW one.
//
// Compiled, not yet run on a GPU (written 2026-11-27 and 11-28 without one). Needs a
// CUDA device: without one it prints "skipped: no CUDA device (<reason>)" and
// exits 77.
#include "minidl/core/backend_settings.h"
#include "minidl/minidl.h"
#include "tests/channels_last_cases.h"
#include "tests/cuda_test.h"
#include "tests/pooling_channels_last_cases.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::allclose;

MINIDL_CUDA_TEST_REQUIRES_DEVICE();

namespace {
const Device kGpu(DeviceType::CUDA, 0);
constexpr MemoryFormat kCL = MemoryFormat::ChannelsLast;
}  // namespace

TEST_CASE("a ResNet piece channels-last on the GPU: the CPU's NCHW loss, gradients and running statistics") {
  backends::BackendSettingsGuard exact({.cudnn_allow_tf32 = false});
  minidl::testing::check_channels_last_piece(kGpu, kFloat32, 1e-4, 1e-5);
}

TEST_CASE("channels-last BatchNorm on the GPU with many column chunks (N*H*W = 8192 rows of 64 channels)") {
  minidl::testing::check_channels_last_batch_norm(kGpu, 1e-4, 1e-4);
}

TEST_CASE("channels-last BatchNorm on the GPU with long columns (N*H*W = 20001 rows of 40 channels)") {
  // 126 chunks of 160 rows, the last one row long; 40 channels leave the
  // second 32-column tile partly empty.
  minidl::testing::check_channels_last_batch_norm(kGpu, 1e-4, 1e-4, {3, 40, 59, 113});
}

TEST_CASE("cuDNN convolutions channels-last: forward, grad input and grad weight against the CPU, 16-bit too") {
  backends::BackendSettingsGuard exact({.cudnn_allow_tf32 = false});
  manual_seed(23);
  const Tensor x = randn({4, 16, 12, 12}), w = randn({32, 16, 3, 3}) * 0.1, bias = randn({32});
  const Conv2dParams params{.stride = {2, 2}, .padding = {1, 1}};
  Tensor xr = x.clone().requires_grad_(true), wr = w.clone().requires_grad_(true), br = bias.clone().requires_grad_(true);
  const Tensor dy = randn({4, 32, 6, 6}).to(kBFloat16).to(kFloat32);  // exact in float16 and bfloat16 too
  const Tensor ref = conv2d(xr, wr, br, params);
  (ref * dy).sum().backward();
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    INFO(dtype_name(dt));
    const double tol = dt == kFloat32 ? 1e-4 : 3e-2;
    Tensor xg = x.to(kGpu).to(dt).contiguous(kCL).detach().requires_grad_(true);
    Tensor wg = w.to(kGpu).to(dt).detach().requires_grad_(true);
    Tensor bg = bias.to(kGpu).to(dt).detach().requires_grad_(true);
    const Tensor y = conv2d(xg, wg, bg, params);
    CHECK(y.is_contiguous(kCL));
    CHECK(allclose(y.to(kFloat32).to(kCPU), ref, tol, tol));
    // dbias: the column sums of NHWC dy (the tiled column reduction: 32 channels, 144 rows).
    (y * dy.to(kGpu).to(dt)).sum().backward();
    CHECK(allclose(bg.grad().to(kFloat32).to(kCPU), br.grad(), tol, tol * 10));
    CHECK(xg.grad().is_contiguous(kCL));
    CHECK(wg.grad().is_contiguous());
    CHECK(allclose(xg.grad().to(kFloat32).to(kCPU), xr.grad(), tol, tol));
    CHECK(allclose(wg.grad().to(kFloat32).to(kCPU), wr.grad(), tol, tol * 10));
  }
}

TEST_CASE("every 2-D pool on a channels-last GPU tensor: the CPU's NCHW values, indices and gradients") {
  // Max pooling and float32/float64 sums run in the CPU's order; 16-bit
  // window averages round double -> T once on the GPU, double -> float -> T
  // on the CPU (one unit in the last place at most).
  const std::vector<std::pair<DType, double>> tolerances = {
      {kFloat32, 1e-6}, {kFloat64, 1e-13}, {kFloat16, 2e-3}, {kBFloat16, 1e-2}};
  for (const auto& [dtype, tol] : tolerances)
    for (int64_t channels : {3, 70}) minidl::testing::check_pool_cases(dtype, channels, kGpu, tol);
}

TEST_CASE("a channels-last model on the GPU (Module::to): two SGD steps follow the CPU's NCHW model") {
  // cuDNN with NHWC filters (no per-call conversion), channels-last weight
  // gradients, and the fused SGD kernels over channels-last parameters.
  backends::BackendSettingsGuard exact({.cudnn_allow_tf32 = false});
  auto make = [](Device device, bool channels_last) {
    manual_seed(3);
    auto model = models::create_model("resnet18", models::ModelOptions().width(0.125));
    model->to(device);
    if (channels_last) model->to(kCL);
    return model;
  };
  auto ref = make(kCPU, false), gpu = make(kGpu, true);
  optim::SGD opt_ref(ref->parameters(), 0.05, 0.9, 0.0, 5e-4, true);
  optim::SGD opt_gpu(gpu->parameters(), 0.05, 0.9, 0.0, 5e-4, true);
  for (int step = 0; step < 2; ++step) {
    manual_seed(60 + step);
    const Tensor x = randn({8, 3, 16, 16}), y = randint(0, 10, {8});
    opt_ref.zero_grad();
    cross_entropy(ref->forward(x), y).backward();
    opt_ref.step();
    opt_gpu.zero_grad();
    cross_entropy(gpu->forward(x.to(kGpu).contiguous(kCL)), y.to(kGpu)).backward();
    opt_gpu.step();
  }
  const std::vector<Tensor> pr = ref->parameters(), pg = gpu->parameters();
  for (size_t i = 0; i < pr.size(); ++i) {
    INFO("parameter ", i, " ", shape_str(pr[i].shape()), ", max |diff| ", minidl::testing::max_abs_diff(pg[i].to(kCPU), pr[i]));
    CHECK(allclose(pg[i].to(kCPU), pr[i], 1e-3, 1e-4));
    if (pg[i].dim() == 4) CHECK((pg[i].is_contiguous(kCL) && pg[i].grad().is_contiguous(kCL)));
  }
}
