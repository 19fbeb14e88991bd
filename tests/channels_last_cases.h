// Channels-last (core/memory_format.h) on a device against NCHW on the CPU:
// a small ResNet piece (3x3 conv, BatchNorm, ReLU, a strided 1x1 shortcut
// with its BatchNorm, the residual add, a 3x3 stride-2 max pool, global
// average pooling, a linear head) run forward and backward both ways must give the same loss, input
// gradient, parameter gradients and running statistics, and keep its
// activations channels-last on the way. tests/test_channels_last.cpp runs it
// on the CPU and the test device, tests/test_cuda_channels_last.cpp on a GPU
// (cuDNN's NHWC convolutions, the column statistics of channels-last
// BatchNorm).
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "minidl/core/storage.h"
#include "minidl/minidl.h"
#include "tests/test_util.h"

namespace minidl::testing {

struct ResNetPiece {
  // conv1 3x3 C->K, bn1, conv2 3x3 stride 2 K->K, bn2, shortcut 1x1 stride 2 C->K, bn3, max pool, linear K->3.
  std::vector<Tensor> params;  // w1, g1, b1, w2, g2, b2, w3, g3, b3, wl, bl
  std::vector<Tensor> running;  // mean/var of bn1, bn2, bn3

  ResNetPiece(int64_t C, int64_t K, DType dtype, uint64_t seed) {
    manual_seed(seed);
    const TensorOptions o(dtype);
    params = {randn({K, C, 3, 3}, o) * 0.3, rand({K}, o) + 0.5, randn({K}, o) * 0.1,
              randn({K, K, 3, 3}, o) * 0.2, rand({K}, o) + 0.5, randn({K}, o) * 0.1,
              randn({K, C, 1, 1}, o) * 0.4, rand({K}, o) + 0.5, randn({K}, o) * 0.1,
              randn({3, K}, o) * 0.3,       randn({3}, o) * 0.1};
    for (int i = 0; i < 3; ++i) running.insert(running.end(), {zeros({K}, o), ones({K}, o)});
  }

  // Fresh leaves on `device` (and running statistics there).
  ResNetPiece on(Device device) const {
    ResNetPiece r = *this;
    for (Tensor& p : r.params) p = p.to(device).clone().detach().requires_grad_(true);
    for (Tensor& s : r.running) s = s.to(device).clone().detach();
    return r;
  }

  // Every activation whose layout the ops promise to keep goes through `seen`.
  Tensor forward(const Tensor& x, bool training, const std::function<void(const char*, const Tensor&)>& seen) const {
    const auto& p = params;
    auto bn = [&](const Tensor& t, int i) {
      return batch_norm(t, running[2 * i], running[2 * i + 1], p[3 * i + 1], p[3 * i + 2], training, 0.1, 1e-5);
    };
    const Tensor c1 = conv2d(x, p[0], Tensor(), {.padding = {1, 1}});
    seen("conv1", c1);
    const Tensor a1 = relu(bn(c1, 0));
    seen("relu(bn1)", a1);
    const Tensor c2 = conv2d(a1, p[3], Tensor(), {.stride = {2, 2}, .padding = {1, 1}});
    const Tensor b2 = bn(c2, 1);
    seen("bn2", b2);
    const Tensor s = bn(conv2d(x, p[6], Tensor(), {.stride = {2, 2}}), 2);
    const Tensor out = relu(b2 + s);
    seen("relu(add)", out);
    const Tensor pooled = max_pool2d(out, {3, 3}, {2, 2}, {1, 1});  // overlapping windows
    seen("max_pool2d", pooled);
    const Tensor avg = adaptive_avg_pool2d(pooled, {1, 1});
    return linear(avg.reshape({avg.size(0), avg.size(1)}), p[9], p[10]);
  }
};

struct PieceResult {
  double loss = 0;
  Tensor x_grad;
  std::vector<Tensor> grads, running;
};

// One forward/backward of `piece` on `device`, the input converted to
// `fmt` there; every checked activation must be laid out as `fmt`.
inline PieceResult run_piece(const ResNetPiece& piece, const Tensor& x_host, Device device, MemoryFormat fmt,
                             bool training) {
  const ResNetPiece p = piece.on(device);
  Tensor x = x_host.to(device).clone().detach().requires_grad_(true);
  const int64_t cpu_storages = Storage::created(DeviceType::CPU);
  const Tensor x_in = x.contiguous(fmt);
  CHECK(x_in.is_contiguous(fmt));
  const Tensor logits = p.forward(x_in, training, [&](const char* what, const Tensor& t) {
    INFO(what, " ", memory_format_name(fmt), " on ", device.str(), ", strides ", shape_str(t.strides()));
    CHECK(t.is_contiguous(fmt));
    CHECK(t.device() == device);
  });
  const Tensor loss = (logits * logits).sum();
  loss.backward();
  // Nothing dropped to the CPU on the way (the test device counts as another device).
  if (!device.is_cpu()) CHECK(Storage::created(DeviceType::CPU) == cpu_storages);
  PieceResult r;
  r.loss = loss.item<double>();
  r.x_grad = x.grad().to(kCPU);
  for (const Tensor& t : p.params) {
    // Parameter gradients in the parameters' (contiguous) layout: the optimizers read them so.
    CHECK(t.grad().is_contiguous());
    r.grads.push_back(t.grad().to(kCPU));
  }
  for (const Tensor& s : p.running) r.running.push_back(s.to(kCPU));
  return r;
}

// Channels-last on `device` against contiguous NCHW on the CPU, in `dtype`.
inline void check_channels_last_piece(Device device, DType dtype, double rtol, double atol) {
  const ResNetPiece piece(4, 8, dtype, 7);
  manual_seed(11);
  const Tensor x = randn({3, 4, 9, 10}, TensorOptions(dtype));
  for (bool training : {true, false}) {
    INFO((training ? "training" : "eval"), ", ", dtype_name(dtype), " on ", device.str());
    const PieceResult ref = run_piece(piece, x, kCPU, MemoryFormat::Contiguous, training);
    const PieceResult got = run_piece(piece, x, device, MemoryFormat::ChannelsLast, training);
    CHECK(got.loss == doctest::Approx(ref.loss).epsilon(rtol));
    CHECK(allclose(got.x_grad, ref.x_grad, rtol, atol));
    for (size_t i = 0; i < ref.grads.size(); ++i) {
      INFO("parameter ", i, ", max |diff| ", max_abs_diff(got.grads[i], ref.grads[i]));
      CHECK(allclose(got.grads[i], ref.grads[i], rtol, atol));
    }
    for (size_t i = 0; i < ref.running.size(); ++i) {
      INFO("running statistic ", i);
      CHECK(allclose(got.running[i], ref.running[i], rtol, atol));
    }
  }
}

// A channels-last BatchNorm step on `device` against NCHW on the CPU. The
// default size's N*H*W = 8192 rows of 64 channels span many 128-row column
// chunks of the CUDA column reduction (statistics and backward sums); callers
// pass longer ones (more than 128 x 128 rows: longer chunks, at most 128 of
// them, ops/cuda/reduce_math.h's ColumnTiling). Leaves are detached copies:
// w.to(kCPU) is w itself, so requires_grad_ on it would make the device run's
// w.to(device) a non-leaf without a .grad.
inline void check_channels_last_batch_norm(Device device, double rtol, double atol,
                                           const Shape& shape = {32, 64, 16, 16}) {
  manual_seed(21);
  const int64_t C = shape[1];
  const Tensor x = randn(shape) * 3.0 + 2.0, dy = randn(shape);
  const Tensor w = rand({C}) + 0.5, b = randn({C});
  auto run = [&](Device d, MemoryFormat fmt) {
    Tensor xi = x.to(d).contiguous(fmt).detach().requires_grad_(true);
    Tensor wi = w.to(d).detach().requires_grad_(true), bi = b.to(d).detach().requires_grad_(true);
    Tensor rm = zeros({C}, d), rv = ones({C}, d);
    const Tensor y = batch_norm(xi, rm, rv, wi, bi, true, 0.1, 1e-5);
    CHECK(y.device() == d);
    CHECK(y.is_contiguous(fmt));
    (y * dy.to(d)).sum().backward();
    REQUIRE(xi.grad().defined());
    REQUIRE(wi.grad().defined());
    REQUIRE(bi.grad().defined());
    CHECK(xi.grad().is_contiguous(fmt));
    return std::vector<Tensor>{y.to(kCPU), xi.grad().to(kCPU), wi.grad().to(kCPU), bi.grad().to(kCPU), rm.to(kCPU),
                               rv.to(kCPU)};
  };
  const std::vector<Tensor> ref = run(kCPU, MemoryFormat::Contiguous);
  const std::vector<Tensor> got = run(device, MemoryFormat::ChannelsLast);
  const char* names[] = {"y", "dx", "dweight", "dbias", "running_mean", "running_var"};
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO(names[i], " on ", device.str(), ": max |diff| ", max_abs_diff(got[i], ref[i]));
    CHECK(allclose(got[i], ref[i], rtol, atol));
  }
}

}  // namespace minidl::testing
