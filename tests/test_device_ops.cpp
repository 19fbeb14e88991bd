// Every op, forward and backward, on the test device (core/test_device.h)
// against the same op on the CPU. The test device runs the CPU kernels, so the
// values must agree bit for bit; what this proves is the plumbing:
//   - outputs and gradients live on the input's device,
//   - no CPU tensor is created while the op runs on the device (counted with
//     Storage::created), so nothing silently falls back to the CPU and no
//     per-op host round trip (a 0-d CPU scalar, stats pulled to the host) hides,
//   - mixing devices is refused with an error naming the op.
// The same cases will compare the CUDA kernels with the CPU ones on a GPU.
//
// What it cannot catch: host code reading device memory through data_ptr
// (test-device memory is host memory), missing stream ordering, and anything
// about real device memory.
#include <functional>
#include <string>
#include <vector>

#include "tests/device_test_util.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::leaves_on;
using minidl::testing::max_abs_diff;

namespace {

const Device kDev = kTestDevice;
using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Runs f on CPU copies and on test-device copies of `inputs` (those with
// requires_grad get gradients) and compares everything.
void check_op(const std::string& name, const std::vector<Tensor>& inputs, const OpFn& f) {
  CAPTURE(name);
  std::vector<Tensor> cpu_in = leaves_on(inputs, kCPU);
  std::vector<Tensor> dev_in = leaves_on(inputs, kDev);
  manual_seed(7);
  Tensor y_cpu = f(cpu_in);
  const bool differentiable = y_cpu.requires_grad();
  Tensor probe = differentiable ? randn(y_cpu.shape(), y_cpu.dtype()) : zeros(y_cpu.shape(), y_cpu.dtype());
  if (differentiable) y_cpu.backward(probe);
  Tensor probe_dev = probe.to(kDev);

  manual_seed(7);
  const int64_t cpu_before = Storage::created(DeviceType::CPU);
  Tensor y_dev = f(dev_in);
  if (differentiable) y_dev.backward(probe_dev);
  const int64_t cpu_made = Storage::created(DeviceType::CPU) - cpu_before;
  CHECK_MESSAGE(cpu_made == 0, name, " created ", cpu_made, " CPU tensor(s) while running on the test device");

  CHECK(y_dev.device() == kDev);
  CHECK(y_dev.dtype() == y_cpu.dtype());
  REQUIRE(y_dev.shape() == y_cpu.shape());
  CHECK_MESSAGE(max_abs_diff(y_dev, y_cpu) == 0.0, name, " forward differs from the CPU");
  CHECK(y_dev.requires_grad() == differentiable);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    CAPTURE(i);
    const Tensor g_cpu = cpu_in[i].grad(), g_dev = dev_in[i].grad();
    REQUIRE(g_cpu.defined() == g_dev.defined());
    if (!g_cpu.defined()) continue;
    CHECK(g_dev.device() == kDev);
    CHECK_MESSAGE(max_abs_diff(g_dev, g_cpu) == 0.0, name, " gradient of input ", i, " differs from the CPU");
  }
}

Tensor leaf(const Shape& shape, DType dtype = kFloat32) { return randn(shape, dtype).requires_grad_(true); }
Tensor positive_leaf(const Shape& shape) { return (rand(shape) + 0.5).detach().requires_grad_(true); }
Tensor labels(int64_t n, int64_t classes) { return randint(0, classes, {n}); }

}  // namespace

TEST_CASE("test device: factories, copies and item() stay where they are asked to") {
  const int64_t before = Storage::created(DeviceType::CPU);
  Tensor z = zeros({3, 4}, TensorOptions(kFloat32).device(kDev));
  Tensor f = full({5}, 2.5, TensorOptions(kFloat64).device(kDev));
  Tensor o = ones_like(z);
  CHECK(Storage::created(DeviceType::CPU) == before);
  // Random factories draw on the host (the Generator lives there) and copy.
  Tensor r = randn({2, 2}, TensorOptions(kFloat32).device(kDev));
  CHECK(z.device() == kDev);
  CHECK(f.device() == kDev);
  CHECK(o.device() == kDev);
  CHECK(r.device() == kDev);
  CHECK(f.sum().item<double>() == 12.5);  // item() copies to the host on purpose
  CHECK(z.to(kCPU).device() == kCPU);
  CHECK(Device("test").is_test());
  CHECK(Device("test:0") == kDev);
  CHECK(kDev.str() == "test:0");
}

TEST_CASE("test device: a kernel refuses tensors from two devices") {
  Tensor a = randn({4}).to(kDev), b = randn({4});
  CHECK_THROWS_CONTAINS(a + b, "same device");
  CHECK_THROWS_CONTAINS(matmul(randn({2, 3}).to(kDev), randn({3, 2})), "same device");
  CHECK_THROWS_CONTAINS(conv2d(randn({1, 2, 5, 5}).to(kDev), randn({3, 2, 3, 3})), "same device");
}

TEST_CASE("test device: elementwise ops") {
  manual_seed(1);
  const Tensor a = leaf({3, 4}), b = leaf({3, 4}), row = leaf({4}), p = positive_leaf({3, 4});
  check_op("add", {a, b}, [](auto& t) { return add(t[0], t[1], 0.5); });
  check_op("sub broadcast", {a, row}, [](auto& t) { return t[0] - t[1]; });
  check_op("mul", {a, b}, [](auto& t) { return t[0] * t[1]; });
  check_op("div", {a, p}, [](auto& t) { return t[0] / t[1]; });
  check_op("maximum", {a, b}, [](auto& t) { return maximum(t[0], t[1]); });
  check_op("scalar ops", {a}, [](auto& t) { return ((t[0] * 0.5 + 1.0) - 2.0) / 3.0; });
  check_op("rsub rdiv", {p}, [](auto& t) { return 1.0 - (2.0 / t[0]); });
  check_op("neg exp", {a}, [](auto& t) { return exp(-t[0]); });
  check_op("log sqrt rsqrt", {p}, [](auto& t) { return log(t[0]) + sqrt(t[0]) + rsqrt(t[0]); });
  check_op("pow abs", {a}, [](auto& t) { return pow(abs(t[0]), 1.5); });
  check_op("clamp", {a}, [](auto& t) { return clamp(t[0], -0.5, 0.5); });
  check_op("activations", {a}, [](auto& t) {
    return relu(t[0]) + leaky_relu(t[0], 0.1) + sigmoid(t[0]) + tanh(t[0]) + gelu(t[0]) + gelu(t[0], "tanh");
  });
  check_op("comparisons", {a, b}, [](auto& t) { return eq(t[0], t[1]) + gt(t[0], 0.1) + lt(t[1], 0.2); });
  // Integer tensors promoted to float32 (floating scalars, true division, the
  // float unary ops), integer powers in int64, and an int64 scalar past 2^53
  // taken as a one-element tensor: all on the device.
  const Tensor n = randint(-50, 50, {3, 4}), m = randint(1, 9, {3, 4});
  check_op("integer promotion", {n, m}, [](auto& t) { return t[0] * 2.5 + t[0] / t[1] + gt(t[1], 4.5); });
  check_op("int64 scalar past 2^53", {n}, [](auto& t) { return (t[0] + ((int64_t{1} << 60) + 1)) * 3; });
  check_op("clamp with int64 bounds past 2^53", {n}, [](auto& t) {
    return clamp(t[0] * (int64_t{1} << 55), -(int64_t{1} << 60) - 1, (int64_t{1} << 58) + 3);
  });
  check_op("integer unary ops and pow", {n, m}, [](auto& t) {
    return exp(t[1]) + sqrt(t[1]) + pow(t[1], 0.5) + pow(t[0], 3) * 1.0 + sigmoid(t[0]);
  });
}

TEST_CASE("test device: in-place ops") {
  manual_seed(2);
  const Tensor a = randn({6}), b = randn({6});
  check_op("add_ mul_ div_ fill_ copy_", {a, b}, [](auto& t) {
    Tensor x = t[0].clone();
    x.add_(t[1], 2.0).add_(1.5).mul_(t[1]).mul_(0.5).div_(4.0).sub_(t[1]);
    Tensor y = empty_like(x);
    y.fill_(3.0);
    y.copy_(x);
    return y;
  });
}

TEST_CASE("test device: reductions") {
  manual_seed(3);
  const Tensor x = leaf({3, 4, 5});
  check_op("sum", {x}, [](auto& t) { return t[0].sum(); });
  check_op("sum dims", {x}, [](auto& t) { return t[0].sum({0, 2}, true); });
  check_op("mean", {x}, [](auto& t) { return t[0].mean({1}); });
  check_op("var", {x}, [](auto& t) { return var(t[0], {2}, true); });
  check_op("max min", {x}, [](auto& t) { return t[0].max() + t[0].min(); });
  check_op("max dim", {x}, [](auto& t) { return max(t[0], 1).values; });
  check_op("argmax", {x}, [](auto& t) { return argmax(t[0], 2); });
}

TEST_CASE("test device: shape ops") {
  manual_seed(4);
  const Tensor x = leaf({2, 3, 4}), y = leaf({2, 3, 4});
  check_op("views", {x}, [](auto& t) {
    return t[0].permute({2, 0, 1}).reshape({4, 6}).transpose(0, 1).narrow(0, 1, 3).select(1, 2).unsqueeze(0);
  });
  check_op("expand contiguous", {x}, [](auto& t) { return t[0].narrow(1, 0, 1).expand({2, 5, 4}).contiguous(); });
  check_op("cat stack", {x, y}, [](auto& t) { return cat({t[0], t[1]}, 1).narrow(1, 2, 3) + stack({t[0], t[1]}, 0).sum({0}); });
  check_op("index_select", {x, tensor<int64_t>({3, 0, 3})}, [](auto& t) { return t[0].index_select(2, t[1]); });
}

TEST_CASE("test device: matmul, linear, conv2d, pooling, interpolate") {
  manual_seed(5);
  check_op("matmul 2-D", {leaf({3, 5}), leaf({5, 4})}, [](auto& t) { return matmul(t[0], t[1]); });
  check_op("matmul batched", {leaf({2, 3, 5}), leaf({5, 4})}, [](auto& t) { return matmul(t[0], t[1]); });
  check_op("linear", {leaf({4, 6}), leaf({3, 6}), leaf({3})}, [](auto& t) { return linear(t[0], t[1], t[2]); });
  check_op("conv2d", {leaf({2, 3, 7, 6}), leaf({4, 3, 3, 3}), leaf({4})}, [](auto& t) {
    return conv2d(t[0], t[1], t[2], Conv2dParams{.stride = {2, 1}, .padding = {1, 1}});
  });
  // Wide enough for the Winograd and packed-GEMM paths.
  check_op("conv2d 64 channels", {leaf({2, 64, 8, 8}), leaf({64, 64, 3, 3})},
           [](auto& t) { return conv2d(t[0], t[1], Tensor(), Conv2dParams{.padding = {1, 1}}); });
  const Tensor x = leaf({2, 3, 6, 7});
  check_op("max_pool2d", {x}, [](auto& t) { return max_pool2d(t[0], {2, 2}); });
  check_op("avg_pool2d", {x}, [](auto& t) { return avg_pool2d(t[0], {3, 3}, {2, 2}, {1, 1}); });
  check_op("adaptive pools", {x}, [](auto& t) {
    return adaptive_avg_pool2d(t[0], {1, 1}) + adaptive_max_pool2d(t[0], {1, 1});
  });
  check_op("max_pool2d dilation ceil_mode", {x},
           [](auto& t) { return max_pool2d(t[0], {3, 2}, {2, 2}, {1, 1}, {2, 1}, true); });
  check_op("avg_pool2d ceil_mode divisor_override", {x},
           [](auto& t) { return avg_pool2d(t[0], {3, 3}, {2, 2}, {1, 1}, true, false, 4); });
  check_op("max_pool2d indices", {x}, [](auto& t) {
    auto [y, idx] = max_pool2d_with_indices(t[0], {2, 2});
    return y + idx.to(y.dtype());
  });
  const Tensor v = leaf({2, 3, 5, 6, 4});
  check_op("max_pool3d", {v}, [](auto& t) { return max_pool3d(t[0], {2, 2, 2}); });
  check_op("max_pool3d dilation ceil_mode", {v},
           [](auto& t) { return max_pool3d(t[0], {2, 3, 2}, {1, 2, 2}, {1, 1, 0}, {2, 1, 1}, true); });
  check_op("avg_pool3d", {v}, [](auto& t) { return avg_pool3d(t[0], {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, true, false); });
  check_op("avg_pool3d divisor_override", {v},
           [](auto& t) { return avg_pool3d(t[0], {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, false, true, 3); });
  check_op("adaptive 3-D pools", {v}, [](auto& t) {
    return adaptive_avg_pool3d(t[0], {2, 3, 3}) + adaptive_max_pool3d(t[0], {2, 3, 3});
  });
  check_op("interpolate nearest", {v}, [](auto& t) { return interpolate(t[0], {.scale_factor = {2.0}}); });
  check_op("interpolate nearest-exact", {x},
           [](auto& t) { return interpolate(t[0], {.size = {7, 3}, .mode = "nearest-exact"}); });
  check_op("interpolate linear", {leaf({2, 3, 5})}, [](auto& t) {
    return interpolate(t[0], {.size = {8}, .mode = "linear", .align_corners = true});
  });
  check_op("interpolate bilinear", {x},
           [](auto& t) { return interpolate(t[0], {.scale_factor = {1.5, 2.0}, .mode = "bilinear"}); });
  check_op("interpolate trilinear", {v},
           [](auto& t) { return interpolate(t[0], {.scale_factor = {2.0}, .mode = "trilinear"}); });
}

TEST_CASE("test device: conv3d, conv_transpose2d/3d, pad, padding='same'") {
  manual_seed(8);
  check_op("conv3d", {leaf({2, 3, 4, 5, 4}), leaf({4, 3, 3, 2, 3}), leaf({4})}, [](auto& t) {
    return conv3d(t[0], t[1], t[2], Conv3dParams{.stride = {1, 2, 1}, .padding = {1, 0, 1}});
  });
  check_op("conv3d groups, stride-2 depth", {leaf({1, 4, 5, 4, 4}), leaf({4, 2, 3, 3, 3})}, [](auto& t) {
    return conv3d(t[0], t[1], Tensor(), Conv3dParams{.stride = {2, 1, 1}, .padding = {1, 1, 1}, .groups = 2});
  });
  check_op("conv_transpose2d", {leaf({2, 4, 3, 4}), leaf({4, 3, 3, 3}), leaf({3})}, [](auto& t) {
    return conv_transpose2d(t[0], t[1], t[2], {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 0}});
  });
  check_op("conv_transpose2d output_padding >= stride", {leaf({1, 2, 3, 3}), leaf({2, 2, 3, 3}), leaf({2})},
           [](auto& t) { return conv_transpose2d(t[0], t[1], t[2], {.output_padding = {1, 1}, .dilation = {2, 2}}); });
  check_op("conv_transpose3d", {leaf({2, 4, 2, 3, 2}), leaf({4, 3, 2, 2, 2}), leaf({3})}, [](auto& t) {
    return conv_transpose3d(t[0], t[1], t[2], {.stride = {2, 2, 2}});
  });
  const Tensor x = leaf({2, 3, 4, 5});
  for (const char* mode : {"constant", "reflect", "replicate", "circular"})
    check_op(std::string("pad ") + mode, {x}, [mode](auto& t) { return pad(t[0], {2, 1, 1, 3}, mode, 0.5); });
  check_op("conv2d padding='same', even kernel", {x, leaf({2, 3, 2, 4})},
           [](auto& t) { return conv2d(t[0], t[1], Tensor(), "same"); });
  CHECK_THROWS_CONTAINS(conv3d(randn({1, 2, 3, 3, 3}).to(kDev), randn({3, 2, 2, 2, 2})), "same device");
  CHECK_THROWS_CONTAINS(conv_transpose2d(randn({1, 2, 3, 3}).to(kDev), randn({2, 2, 2, 2})), "same device");
}

TEST_CASE("test device: softmax, losses, dropout") {
  manual_seed(6);
  const Tensor logits = leaf({5, 4}), target = labels(5, 4);
  check_op("softmax", {logits}, [](auto& t) { return softmax(t[0], 1) + log_softmax(t[0], 0); });
  check_op("cross_entropy", {logits, target}, [](auto& t) { return cross_entropy(t[0], t[1]); });
  check_op("cross_entropy smoothing ignore_index", {logits, tensor<int64_t>({1, -100, 3, 0, -100})},
           [](auto& t) { return cross_entropy(t[0], t[1], Reduction::Mean, -100, 0.1); });
  check_op("nll_loss sum", {logits, target},
           [](auto& t) { return nll_loss(log_softmax(t[0], 1), t[1], Reduction::Sum); });
  check_op("mse_loss", {logits, leaf({5, 4})}, [](auto& t) { return mse_loss(t[0], t[1]); });
  check_op("dropout", {leaf({64})}, [](auto& t) { return dropout(t[0], 0.3, true); });
}

TEST_CASE("test device: segmentation losses, amax/amin, overlap metrics") {
  manual_seed(16);
  const Tensor logits = leaf({5, 4}), weight = rand({4}) + 0.5;
  const Tensor spatial = leaf({2, 3, 4, 3}), soft = softmax(randn({2, 3, 4, 3}), 1).requires_grad_(true);
  const Tensor ignored = tensor<int64_t>({1, -100, 3, 0, -100});
  check_op("cross_entropy weight smoothing ignore_index", {logits, ignored, weight},
           [](auto& t) { return cross_entropy(t[0], t[1], t[2], Reduction::Mean, -100, 0.1); });
  check_op("cross_entropy weight sum", {logits, labels(5, 4), weight},
           [](auto& t) { return cross_entropy(t[0], t[1], t[2], Reduction::Sum); });
  check_op("nll_loss weight", {logits, ignored, weight}, [](auto& t) { return nll_loss(t[0], t[1], t[2]); });
  check_op("cross_entropy probabilities", {spatial, soft, rand({3}) + 0.5},
           [](auto& t) { return cross_entropy(t[0], t[1], t[2], Reduction::Mean, -100, 0.2); });
  const Tensor ties = randint(0, 3, {3, 4, 5}).to(kFloat32).requires_grad_(true);
  check_op("amax amin", {ties}, [](auto& t) { return amax(t[0], {0, 2}) + amin(t[0], {-1, 0}, false); });
  check_op("amax all keepdim", {ties}, [](auto& t) { return amax(t[0], {}, true); });
  const Tensor probs = (rand({2, 3, 4, 3}) * 0.9 + 0.05).requires_grad_(true);
  const Tensor masks = gt(rand({2, 3, 4, 3}), 0.5).requires_grad_(true);
  check_op("binary_cross_entropy weight", {probs, masks, rand({3, 1, 1})},
           [](auto& t) { return binary_cross_entropy(t[0], t[1], t[2]); });
  check_op("binary_cross_entropy_with_logits pos_weight", {spatial, masks, rand({4, 3}), rand({3, 1, 1}) + 0.5},
           [](auto& t) { return binary_cross_entropy_with_logits(t[0], t[1], t[2], Reduction::Sum, t[3]); });
  check_op("dice_loss", {spatial, masks}, [](auto& t) { return dice_loss(t[0], t[1]); });
  check_op("dice_loss batch", {spatial, masks}, [](auto& t) { return dice_loss(t[0], t[1], 0.5, true); });
  check_op("bce_dice_loss", {spatial, masks}, [](auto& t) { return bce_dice_loss(t[0], t[1], 0.5, 2.0); });
  check_op("dice_score iou_score", {spatial, masks}, [](auto& t) {
    return metrics::dice_score(t[0], t[1], {.from_logits = true}) + metrics::iou_score(t[0], t[1], {.batch = true});
  });
}

TEST_CASE("test device: the five norms and their running statistics") {
  manual_seed(8);
  const Tensor x = leaf({4, 6, 3, 5}, kFloat64), w = leaf({6}, kFloat64), b = leaf({6}, kFloat64);
  const Tensor rm = randn({6}, kFloat64), rv = (rand({6}, kFloat64) + 0.5);
  check_op("batch_norm train", {x, w, b, rm, rv}, [](auto& t) {
    Tensor y = batch_norm(t[0], t[3], t[4], t[1], t[2], true, 0.1, 1e-5);
    // The running statistics are updated on the device: fold them in.
    return y.sum({0, 2, 3}) + t[3] + t[4];
  });
  check_op("batch_norm eval", {x, w, b, rm, rv},
           [](auto& t) { return batch_norm(t[0], t[3], t[4], t[1], t[2], false); });
  check_op("instance_norm with running stats", {x, w, b, rm, rv}, [](auto& t) {
    return instance_norm(t[0], t[3], t[4], t[1], t[2], true, 0.1, 1e-5).sum({0, 2, 3}) + t[3] + t[4];
  });
  check_op("layer_norm", {x, leaf({3, 5}, kFloat64), leaf({3, 5}, kFloat64)},
           [](auto& t) { return layer_norm(t[0], {3, 5}, t[1], t[2]); });
  check_op("group_norm", {x, w, b}, [](auto& t) { return group_norm(t[0], 3, t[1], t[2]); });
  check_op("batch_norm float32", {leaf({8, 6}), leaf({6}), leaf({6}), zeros({6}), ones({6})},
           [](auto& t) { return batch_norm(t[0], t[3], t[4], t[1], t[2], true); });
}

namespace {

// A module built twice from the same seed, one copy moved to the test device:
// forward and backward from the same input in train mode, then a forward in
// eval mode. Outputs, input and parameter gradients and buffers must agree bit
// for bit and live on the test device, with no CPU tensor made on the way.
// `host_reads`: CPU tensors the module makes on purpose (item() copies).
void check_module(const std::string& name, const std::function<nn::AnyModule()>& make, const Tensor& input,
                  int64_t host_reads = 0) {
  CAPTURE(name);
  manual_seed(11);
  nn::AnyModule on_cpu = make();
  manual_seed(11);
  nn::AnyModule on_dev = make();
  on_dev.ptr()->to(kDev);
  Tensor x_cpu = input.clone().requires_grad_(true);
  Tensor x_dev = input.to(kDev).clone().detach().requires_grad_(true);

  on_cpu.ptr()->train();
  on_dev.ptr()->train();
  manual_seed(12);
  Tensor y_cpu = on_cpu(x_cpu);
  Tensor probe = randn(y_cpu.shape(), y_cpu.dtype());
  Tensor probe_dev = probe.to(kDev);
  y_cpu.backward(probe);

  manual_seed(12);
  const int64_t before = Storage::created(DeviceType::CPU);
  Tensor y_dev = on_dev(x_dev);
  y_dev.backward(probe_dev);
  on_cpu.ptr()->eval();
  on_dev.ptr()->eval();
  Tensor e_dev;
  {
    NoGradGuard no_grad;
    e_dev = on_dev(x_dev);
  }
  const int64_t made = Storage::created(DeviceType::CPU) - before;
  CHECK_MESSAGE(made == host_reads, name, " created ", made, " CPU tensor(s) on the test device");
  Tensor e_cpu;
  {
    NoGradGuard no_grad;
    e_cpu = on_cpu(x_cpu);
  }

  CHECK(y_dev.device() == kDev);
  CHECK(max_abs_diff(y_dev, y_cpu) == 0.0);
  CHECK(max_abs_diff(e_dev, e_cpu) == 0.0);
  CHECK(max_abs_diff(x_dev.grad(), x_cpu.grad()) == 0.0);
  const auto p_cpu = on_cpu.ptr()->named_parameters(), p_dev = on_dev.ptr()->named_parameters();
  REQUIRE(p_cpu.size() == p_dev.size());
  for (size_t i = 0; i < p_cpu.size(); ++i) {
    CAPTURE(p_cpu[i].first);
    REQUIRE(p_dev[i].second.grad().defined());
    CHECK(p_dev[i].second.grad().device() == kDev);
    CHECK(max_abs_diff(p_dev[i].second.grad(), p_cpu[i].second.grad()) == 0.0);
  }
  const auto b_cpu = on_cpu.ptr()->named_buffers(), b_dev = on_dev.ptr()->named_buffers();
  REQUIRE(b_cpu.size() == b_dev.size());
  for (size_t i = 0; i < b_cpu.size(); ++i) {
    CAPTURE(b_cpu[i].first);
    CHECK(b_dev[i].second.device() == kDev);
    CHECK(max_abs_diff(b_dev[i].second, b_cpu[i].second) == 0.0);
  }
}

}  // namespace

TEST_CASE("test device: every nn module, the five norms included") {
  manual_seed(13);
  const Tensor img = randn({4, 6, 5, 5}), vec = randn({8, 6}), seq = randn({3, 6, 7}), vol = randn({2, 6, 3, 4, 3});
  check_module("Linear", [] { return nn::AnyModule(nn::Linear(6, 4)); }, vec);
  check_module("Conv2d", [] { return nn::AnyModule(nn::Conv2d(nn::Conv2dOptions(6, 4, 3).padding(1).stride(2))); }, img);
  check_module("BatchNorm1d", [] { return nn::AnyModule(nn::BatchNorm1d(6)); }, vec);
  check_module("BatchNorm2d", [] { return nn::AnyModule(nn::BatchNorm2d(6)); }, img);
  check_module("BatchNorm3d", [] { return nn::AnyModule(nn::BatchNorm3d(6)); }, vol);
  // momentum=None reads num_batches_tracked once after to() (then keeps a
  // host mirror; nn/modules/batch_norm.cpp): one CPU copy, by design.
  check_module("BatchNorm2d cumulative", [] {
    return nn::AnyModule(nn::BatchNorm2d(nn::BatchNormOptions(6).momentum(std::nullopt)));
  }, img, /*host_reads=*/1);
  check_module("InstanceNorm1d", [] { return nn::AnyModule(nn::InstanceNorm1d(6)); }, seq);
  check_module("InstanceNorm2d tracked", [] {
    return nn::AnyModule(nn::InstanceNorm2d(nn::InstanceNormOptions(6).affine(true).track_running_stats(true)));
  }, img);
  check_module("InstanceNorm3d", [] { return nn::AnyModule(nn::InstanceNorm3d(6)); }, vol);
  check_module("LayerNorm", [] { return nn::AnyModule(nn::LayerNorm(Shape{5, 5})); }, img);
  check_module("GroupNorm", [] { return nn::AnyModule(nn::GroupNorm(3, 6)); }, img);
  check_module("activations", [] {
    return nn::AnyModule(nn::Sequential(nn::ReLU(), nn::LeakyReLU(0.2), nn::GELU(), nn::Sigmoid(), nn::Tanh()));
  }, img);
  check_module("pools", [] {
    return nn::AnyModule(nn::Sequential(nn::MaxPool2d(2), nn::AvgPool2d(2), nn::AdaptiveAvgPool2d(1), nn::Flatten()));
  }, img);
  check_module("3-D pools, Upsample", [] {
    return nn::AnyModule(nn::Sequential(nn::Upsample(nn::UpsampleOptions().scale_factor({2}).mode("trilinear")),
                                        nn::MaxPool3d(2), nn::AvgPool3d(nn::AvgPool3dOptions(3).stride(1).padding(1)),
                                        nn::AdaptiveMaxPool3d(2), nn::AdaptiveAvgPool3d(1), nn::Flatten()));
  }, vol);
  check_module("Dropout Identity", [] { return nn::AnyModule(nn::Sequential(nn::Dropout(0.3), nn::Identity())); }, vec);
}
