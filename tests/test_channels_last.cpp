// Channels-last memory format (core/memory_format.h): the API (strides,
// is_contiguous, suggest_memory_format, contiguous, empty/empty_like/
// empty_strided and their refusals), the ops that keep the layout
// (elementwise, to(dtype), BatchNorm, conv2d) with values and gradients equal
// to the NCHW computation, a float64 gradient check through them, and a small
// ResNet piece on the CPU and on the test device (tests/channels_last_cases.h;
// the GPU runs the same in tests/test_cuda_channels_last.cpp).
#include "minidl/core/test_device.h"
#include "minidl/minidl.h"
#include "tests/channels_last_cases.h"
#include "tests/device_test_util.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::allclose;

namespace {
constexpr MemoryFormat kCL = MemoryFormat::ChannelsLast;
}

TEST_CASE("channels-last strides, is_contiguous, suggest_memory_format") {
  const Tensor x = arange(2.0 * 3 * 4 * 5).reshape({2, 3, 4, 5});
  CHECK(x.is_contiguous(MemoryFormat::Contiguous));
  CHECK_FALSE(x.is_contiguous(kCL));
  CHECK(x.suggest_memory_format() == MemoryFormat::Contiguous);

  const Tensor c = x.contiguous(kCL);
  CHECK(c.strides() == Shape{60, 1, 15, 3});
  CHECK(c.shape() == x.shape());
  CHECK(c.is_contiguous(kCL));
  CHECK_FALSE(c.is_contiguous());
  CHECK(c.suggest_memory_format() == kCL);
  CHECK(c.to_vector<float>() == x.to_vector<float>());  // same values, other order in memory
  CHECK(c.contiguous(kCL).impl() == c.impl());          // already so: the same tensor
  CHECK(c.contiguous().strides() == x.strides());
  // The memory really is NHWC: element (n, c, h, w) at ((n*H + h)*W + w)*C + c.
  const float* p = c.data_ptr<float>();
  CHECK(p[((1 * 4 + 2) * 5 + 3) * 3 + 1] == x.to_vector<float>()[((1 * 3 + 1) * 4 + 2) * 5 + 3]);

  // Both layouts at once: one channel, or 1x1 maps; then the suggestion is contiguous, as PyTorch's.
  const Tensor one_channel = zeros({2, 1, 4, 4});
  CHECK(one_channel.is_contiguous(kCL));
  CHECK(one_channel.suggest_memory_format() == MemoryFormat::Contiguous);
  CHECK(zeros({2, 8, 1, 1}).is_contiguous(kCL));
  CHECK_FALSE(zeros({2, 3, 4}).is_contiguous(kCL));
}

TEST_CASE("channels-last factories and their refusals") {
  const Tensor e = empty({2, 3, 4, 5}, TensorOptions(kFloat64), kCL);
  CHECK(e.is_contiguous(kCL));
  CHECK(e.dtype() == kFloat64);
  CHECK(e.nbytes() == 2 * 3 * 4 * 5 * 8);
  CHECK(empty_like(e, MemoryFormat::Preserve).strides() == e.strides());
  CHECK(empty_like(e, MemoryFormat::Contiguous).is_contiguous());
  CHECK(empty_like(e.narrow(3, 0, 2), MemoryFormat::Preserve).is_contiguous(kCL));  // not dense: suggested format
  CHECK(empty_strided({3, 4}, {1, 3}).strides() == Shape{1, 3});
  CHECK_THROWS_WITH_AS(empty({2, 3, 4}, {}, kCL), doctest::Contains("required rank 4 tensor to use channels_last format"),
                       Error);
  CHECK_THROWS_WITH_AS(zeros({3, 4}).contiguous(kCL), doctest::Contains("required rank 4 tensor"), Error);
  CHECK_THROWS_WITH_AS(empty({2, 2}, {}, MemoryFormat::Preserve), doctest::Contains("only valid for empty_like"),
                       Error);
  CHECK_THROWS_WITH_AS(zeros({2, 2}).contiguous(MemoryFormat::Preserve),
                       doctest::Contains("memory format torch.preserve_format is not supported"), Error);
  CHECK_THROWS_WITH_AS(empty_strided({3, 4}, {8, 1}), doctest::Contains("not a dense layout"), Error);  // gaps
  CHECK_THROWS_WITH_AS(empty_strided({3, 4}, {1, 1}), doctest::Contains("not a dense layout"), Error);  // overlap
  CHECK_THROWS_WITH_AS(empty_strided({3, 4}, {1}), doctest::Contains("expected 2 strides"), Error);
}

TEST_CASE("elementwise ops and to(dtype) keep a channels-last layout; gradients too") {
  manual_seed(3);
  const Tensor a = randn({2, 5, 3, 4}).contiguous(kCL).requires_grad_(true);
  const Tensor b = randn({2, 5, 3, 4}).contiguous(kCL).requires_grad_(true);
  const Tensor bias = randn({5, 1, 1});
  const Tensor nchw = randn({2, 5, 3, 4});
  const Tensor relu_a = relu(a), sum_ab = a + b, bias_a = a + bias, mixed = nchw + a, scaled = a * 0.5;
  for (const Tensor* t : {&relu_a, &sum_ab, &bias_a, &mixed, &scaled}) CHECK(t->is_contiguous(kCL));
  CHECK((nchw + a.detach()).is_contiguous(kCL) == true);  // the channels-last operand decides, as in PyTorch
  CHECK((a.detach().contiguous() + nchw).is_contiguous());
  CHECK(a.to(kFloat64).is_contiguous(kCL));
  CHECK(a.clone().is_contiguous());  // minidl's clone() is contiguous()'s copy

  const Tensor ac = a.detach().contiguous(), bc = b.detach().contiguous();
  CHECK(allclose(relu_a, relu(ac), 0, 0));
  CHECK(allclose(sum_ab, ac + bc, 0, 0));
  CHECK(allclose(bias_a, ac + bias, 0, 0));
  CHECK(allclose(mixed, nchw + ac, 0, 0));
  CHECK(allclose(a.to(kFloat64), ac.to(kFloat64), 0, 0));

  // In place on a channels-last tensor (walked in its memory order), a
  // broadcast operand and a channels-last one; and on a view that is not dense.
  Tensor inplace = ac.contiguous(kCL);
  inplace.add_(bias).mul_(b.detach());
  CHECK(inplace.is_contiguous(kCL));
  CHECK(allclose(inplace, (ac + bias) * bc, 0, 0));
  Tensor part = ac.contiguous(kCL).narrow(3, 1, 2);
  part.add_(bias);
  CHECK(allclose(part, ac.narrow(3, 1, 2) + bias, 0, 0));

  (relu(a * b) * 3.0).sum().backward();
  CHECK(a.grad().is_contiguous(kCL));
  const Tensor expected = gt(ac * bc, 0.0) * bc * 3.0;
  CHECK(allclose(a.grad(), expected, 1e-6, 1e-6));
}

TEST_CASE("BatchNorm on a channels-last input: NCHW's values, statistics and gradients, channels-last out") {
  manual_seed(5);
  // One row block of 6 channels; 3 blocks (the last partial) of 6; 2 blocks of 40 channels (a full
  // column tile of 32 and a partial one: ops/cpu/norm_core.cpp).
  for (const Shape& shape : {Shape{4, 6, 5, 3}, Shape{4, 6, 40, 40}, Shape{2, 40, 20, 20}})
  for (bool training : {true, false}) {
    INFO((training ? "training" : "eval"), " ", shape_str(shape));
    const int64_t C = shape[1];
    const Tensor x = randn(shape, TensorOptions(kFloat64)) * 2.0 + 1.0;
    const Tensor w = rand({C}, TensorOptions(kFloat64)) + 0.5, b = randn({C}, TensorOptions(kFloat64));
    Tensor rm_ref = randn({C}, TensorOptions(kFloat64)), rv_ref = rand({C}, TensorOptions(kFloat64)) + 0.5;
    Tensor rm = rm_ref.clone(), rv = rv_ref.clone();
    const Tensor dy = randn(shape, TensorOptions(kFloat64));
    auto run = [&](MemoryFormat fmt, Tensor& mean, Tensor& var) {
      Tensor xi = x.clone().requires_grad_(true), wi = w.clone().requires_grad_(true), bi = b.clone().requires_grad_(true);
      const Tensor y = batch_norm(xi.contiguous(fmt), mean, var, wi, bi, training, 0.1, 1e-5);
      CHECK(y.is_contiguous(fmt));
      (y * dy).sum().backward();
      return std::vector<Tensor>{y, xi.grad(), wi.grad(), bi.grad()};
    };
    const std::vector<Tensor> ref = run(MemoryFormat::Contiguous, rm_ref, rv_ref);
    const std::vector<Tensor> got = run(kCL, rm, rv);
    for (size_t i = 0; i < ref.size(); ++i) CHECK(allclose(got[i], ref[i], 1e-12, 1e-12));
    CHECK(allclose(rm, rm_ref, 1e-14, 1e-14));
    CHECK(allclose(rv, rv_ref, 1e-14, 1e-14));
  }
}

TEST_CASE("conv2d with a channels-last input or weight: NCHW's values, NHWC out, dw in the weight's layout") {
  manual_seed(9);
  const TensorOptions f64(kFloat64);
  const Tensor x = randn({2, 3, 7, 6}, f64), w = randn({4, 3, 3, 3}, f64), bias = randn({4}, f64);
  const Conv2dParams params{.stride = {2, 1}, .padding = {1, 0}};
  const Tensor ref = conv2d(x, w, bias, params);
  for (int which = 0; which < 2; ++which) {
    INFO((which == 0 ? "channels-last input" : "channels-last weight"));
    Tensor xi = x.clone().requires_grad_(true), wi = w.clone().requires_grad_(true);
    const Tensor x_in = which == 0 ? xi.contiguous(kCL) : xi;
    const Tensor w_in = which == 1 ? wi.contiguous(kCL) : wi;
    const Tensor y = conv2d(x_in, w_in, bias, params);
    CHECK(y.is_contiguous(kCL));
    CHECK(allclose(y, ref, 1e-12, 1e-12));
    y.sum().backward();
    Tensor xr = x.clone().requires_grad_(true), wr = w.clone().requires_grad_(true);
    conv2d(xr, wr, bias, params).sum().backward();
    CHECK(allclose(xi.grad(), xr.grad(), 1e-12, 1e-12));
    CHECK(allclose(wi.grad(), wr.grad(), 1e-12, 1e-12));
    CHECK(wi.grad().is_contiguous());  // the leaf's layout (its channels-last view's grad went back through permute)
  }
  // Unbatched input keeps NCHW (channels-last is a 4-D layout).
  CHECK(conv2d(x[0], w.contiguous(kCL), bias, params).is_contiguous());
}

TEST_CASE("gradient check (float64) through channels-last conv2d, BatchNorm, ReLU and add") {
  manual_seed(13);
  const TensorOptions f64 = TensorOptions(kFloat64).requires_grad();
  const Tensor x = randn({2, 2, 4, 5}, f64), w = randn({3, 2, 3, 3}, f64), g = rand({3}, f64), b = randn({3}, f64);
  minidl::testing::check_gradients(
      [](const std::vector<Tensor>& in) {
        const Tensor xc = in[0].contiguous(kCL);
        const Tensor c = conv2d(xc, in[1], Tensor(), {.padding = {1, 1}});
        const Tensor n = batch_norm(c, Tensor(), Tensor(), in[2] + 0.5, in[3], true, 0.1, 1e-5);
        REQUIRE(n.is_contiguous(kCL));
        return relu(n) + c * 0.25;
      },
      {x, w, g, b});
}

TEST_CASE("a ResNet piece channels-last on the CPU: NCHW's loss, gradients and running statistics") {
  minidl::testing::check_channels_last_piece(kCPU, kFloat64, 1e-10, 1e-10);
  minidl::testing::check_channels_last_piece(kCPU, kFloat32, 2e-4, 2e-5);
}

TEST_CASE("a ResNet piece channels-last on the test device: the same, and no tensor drops to the CPU") {
  register_test_device();
  const Device dev(DeviceType::Test, 0);
  minidl::testing::check_channels_last_piece(dev, kFloat64, 1e-10, 1e-10);
}

TEST_CASE("channels-last BatchNorm with N*H*W = 8192 rows on the CPU and the test device: NCHW's values") {
  register_test_device();
  minidl::testing::check_channels_last_batch_norm(kCPU, 1e-4, 1e-4);
  minidl::testing::check_channels_last_batch_norm(Device(DeviceType::Test, 0), 1e-4, 1e-4);
  // (The test device runs the CPU kernels: this size's longer CUDA column
  // chunks are tested by test_cuda_channels_last on a GPU; here the case itself.)
  minidl::testing::check_channels_last_batch_norm(Device(DeviceType::Test, 0), 1e-4, 1e-4, {3, 40, 59, 113});
}

TEST_CASE("under bfloat16 autocast a channels-last network stays channels-last (autocast's casts keep the layout)") {
  const minidl::testing::ResNetPiece piece(4, 8, kFloat32, 17);
  manual_seed(19);
  const Tensor x = randn({2, 4, 8, 8});
  auto loss_of = [&](MemoryFormat fmt) {
    const minidl::testing::ResNetPiece p = piece.on(kCPU);
    amp::autocast region(DeviceType::CPU, kBFloat16);
    const Tensor logits = p.forward(x.contiguous(fmt), true, [&](const char* what, const Tensor& t) {
      INFO(what, " under autocast, dtype ", dtype_name(t.dtype()), ", strides ", shape_str(t.strides()));
      CHECK(t.is_contiguous(fmt));
    });
    return logits.to(kFloat32).pow(2.0).sum().item<double>();
  };
  CHECK(loss_of(kCL) == doctest::Approx(loss_of(MemoryFormat::Contiguous)).epsilon(2e-2));
}

TEST_CASE("to(device) keeps a channels-last layout both ways (PyTorch's preserve_format), to(dtype) too") {
  register_test_device();
  const Device dev(DeviceType::Test, 0);
  const Tensor x = randn({2, 3, 4, 5}).contiguous(kCL);
  const Tensor on_dev = x.to(dev), back = on_dev.to(kCPU), wide = on_dev.to(kFloat64).to(kCPU);
  for (const Tensor* t : {&on_dev, &back, &wide}) CHECK(t->is_contiguous(kCL));
  CHECK(allclose(back, x, 0, 0));
  CHECK(allclose(wide.to(kFloat32), x, 0, 0));
  // A narrowed channels-last view: still suggested channels-last, copied dense.
  const Tensor part = x.narrow(3, 1, 3).to(dev);
  CHECK(part.is_contiguous(kCL));
  CHECK(allclose(part.to(kCPU), x.narrow(3, 1, 3), 0, 0));
  CHECK(x.contiguous().to(dev).is_contiguous());
}

TEST_CASE("channels-last factories refuse sizes that overflow before computing strides") {
  const int64_t big = int64_t{1} << 62;
  CHECK_THROWS_WITH_AS(empty({big, 4, 1, 1}, {}, kCL), doctest::Contains("Storage size calculation overflowed"), Error);
  CHECK_THROWS_WITH_AS(empty_strided({big, 4}, {4, 1}), doctest::Contains("Storage size calculation overflowed"), Error);
}
