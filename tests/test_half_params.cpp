// 16-bit parameters and running statistics on the CPU (a model cast to half
// whole: Apex's O3, amp::initialize): SGD and Adam update a bfloat16/float16
// parameter in float32 and round once, so the result equals the float32 step
// rounded, and an update below half resolution is lost; BatchNorm with
// bfloat16 running statistics updates them in float32 and rounds, equal to a
// float32 BatchNorm's statistics rounded.
#include "tests/test_util.h"

using namespace minidl;
using testing::allclose;

namespace {

// p, g in `dtype` and their float32 copies; one step of `make_opt` on each;
// the 16-bit result must equal the float32 one rounded, bit for bit.
template <class MakeOpt>
void check_step_is_rounded_float32(DType dtype, MakeOpt make_opt) {
  manual_seed(5);
  Tensor p = randn({257}).to(dtype).requires_grad_();
  Tensor p32 = p.detach().to(kFloat32).requires_grad_();
  const Tensor g = (randn({257}) * 0.1).to(dtype);
  p.set_grad(g);
  p32.set_grad(g.to(kFloat32));
  auto opt = make_opt(p), opt32 = make_opt(p32);
  opt->step();
  opt32->step();
  CHECK(p.dtype() == dtype);
  CHECK(allclose(p.to(kFloat32), p32.to(dtype).to(kFloat32), 0, 0));
}

}  // namespace

TEST_CASE("half params: SGD and Adam steps on bfloat16/float16 equal the float32 step rounded") {
  for (DType dtype : {kBFloat16, kFloat16}) {
    INFO(dtype_name(dtype));
    check_step_is_rounded_float32(dtype, [](const Tensor& p) {
      return std::make_unique<optim::SGD>(std::vector<Tensor>{p}, 0.1, 0.9, 0.0, 1e-2);
    });
    check_step_is_rounded_float32(dtype, [](const Tensor& p) {
      return std::make_unique<optim::Adam>(std::vector<Tensor>{p}, 1e-2);
    });
  }
}

TEST_CASE("half params: an SGD update below half of bfloat16's spacing is lost") {
  Tensor p = ones({4}, kBFloat16).requires_grad_();
  p.set_grad(full({4}, 1e-3).to(kBFloat16));
  optim::SGD opt({p}, 1.0);
  opt.step();  // 1 - 0.001: bfloat16's spacing below 1 is 2^-8 = 0.0039
  CHECK(allclose(p.to(kFloat32), ones({4}), 0, 0));
  Tensor q = ones({4}).requires_grad_();
  q.set_grad(full({4}, 1e-3));
  optim::SGD opt32({q}, 1.0);
  opt32.step();
  CHECK(allclose(q, full({4}, 0.999), 1e-6, 0));
}

TEST_CASE("half params: BatchNorm with bfloat16 running statistics equals float32's rounded") {
  manual_seed(2);
  nn::BatchNorm2d bn16(3), bn32(3);
  bn16->to(kBFloat16);
  const Tensor x = (randn({4, 3, 5, 5}) * 2 + 0.5).to(kBFloat16);
  for (int step = 0; step < 3; ++step) {
    {
      NoGradGuard no_grad;  // the float32 layer starts each update from the rounded values
      bn32->running_mean.copy_(bn16->running_mean);
      bn32->running_var.copy_(bn16->running_var);
    }
    const Tensor y16 = bn16(x), y32 = bn32(x.to(kFloat32));
    CHECK(y16.dtype() == kBFloat16);
    CHECK(allclose(y16.to(kFloat32), y32.to(kBFloat16).to(kFloat32), 0, 0));
    CHECK(bn16->running_var.dtype() == kBFloat16);
    CHECK(allclose(bn16->running_mean.to(kFloat32), bn32->running_mean.to(kBFloat16).to(kFloat32), 0, 0));
    CHECK(allclose(bn16->running_var.to(kFloat32), bn32->running_var.to(kBFloat16).to(kFloat32), 0, 0));
  }
  // Eval mode reads the bfloat16 statistics.
  bn16->eval();
  bn32->eval();
  {
    NoGradGuard no_grad;
    bn32->running_mean.copy_(bn16->running_mean);
    bn32->running_var.copy_(bn16->running_var);
  }
  CHECK(allclose(bn16(x).to(kFloat32), bn32(x.to(kFloat32)).to(kBFloat16).to(kFloat32), 0, 0));
}

TEST_CASE("half input, float32 bias, no weight: the bias gradient comes back in float32") {
  // Autocast hands a norm a 16-bit input next to float32 parameters; without a
  // weight, the bias gradient once took the input's dtype, which autograd
  // refused as a dtype mismatch.
  manual_seed(3);
  for (DType dtype : {kBFloat16, kFloat16}) {
    const Tensor x = randn({4, 6, 3}).to(dtype).requires_grad_();
    const Tensor bias = randn({6}).requires_grad_();
    const Tensor y = group_norm(x, 2, Tensor(), bias);
    CHECK(y.dtype() == dtype);
    (y.to(kFloat32) * arange(72).reshape({4, 6, 3}).to(kFloat32)).sum().backward();
    REQUIRE(bias.grad().defined());
    CHECK(bias.grad().dtype() == kFloat32);
    CHECK(x.grad().dtype() == dtype);
    // d/dbias_c of sum(y * w) is the sum of w over channel c's positions.
    const Tensor expected = arange(72).reshape({4, 6, 3}).to(kFloat32).sum({0, 2});
    CHECK(allclose(bias.grad(), expected, 0, 0));
  }
}

TEST_CASE("half params: clip_grad_norm_ on bfloat16/float16 gradients equals float32's, the scaling rounded once") {
  for (DType dtype : {kBFloat16, kFloat16}) {
    INFO(dtype_name(dtype));
    for (const double norm_type : {2.0, 1.0, std::numeric_limits<double>::infinity()}) {
      INFO(norm_type);
      manual_seed(11);
      Tensor a = randn({300}).to(dtype).requires_grad_(), b = randn({7, 5}).to(dtype).requires_grad_();
      Tensor a32 = a.detach().to(kFloat32).requires_grad_(), b32 = b.detach().to(kFloat32).requires_grad_();
      const Tensor ga = (randn({300}) * 3).to(dtype), gb = (randn({7, 5}) * 3).to(dtype);
      a.set_grad(ga.clone()), b.set_grad(gb.clone());
      a32.set_grad(ga.to(kFloat32)), b32.set_grad(gb.to(kFloat32));
      const double total = optim::clip_grad_norm_({a, b}, 1.0, norm_type);
      const double total32 = optim::clip_grad_norm_({a32, b32}, 1.0, norm_type);
      CHECK(total == total32);  // the 16-bit values are exact in float32: the same sums
      CHECK(a.grad().dtype() == dtype);
      CHECK(allclose(a.grad().to(kFloat32), a32.grad().to(dtype).to(kFloat32), 0, 0));
      CHECK(allclose(b.grad().to(kFloat32), b32.grad().to(dtype).to(kFloat32), 0, 0));
    }
  }
}
