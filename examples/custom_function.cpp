// A user-defined differentiable op through the public autograd API, trained.
//
// Swish(x) = x * sigmoid(beta * x) with a learnable scalar beta. The op's
// forward and backward are written by hand with autograd::Function, exactly as
// minidl's built-in ops are; a two-layer network using it then learns
// y = sin(3x) on [-1, 1] with plain gradient descent.
#include <cmath>
#include <cstdio>

#include "examples/common/main_guard.h"
#include "minidl/minidl.h"

using namespace minidl;

struct Swish : autograd::Function<Swish> {
  // y = x * s, s = sigmoid(beta * x)
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& beta) {
    Tensor s = sigmoid(x * beta);
    ctx->save_for_backward({x, beta, s});
    return x * s;
  }
  // dy/dx = s + x * beta * s * (1 - s);  dy/dbeta = x^2 * s * (1 - s)
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &beta = saved[1], &s = saved[2];
    Tensor ds = s * (1.0 - s);
    Tensor dx = ctx->needs_input_grad(0) ? grads[0] * (s + x * beta * ds) : Tensor();
    Tensor dbeta = ctx->needs_input_grad(1) ? (grads[0] * x * x * ds).sum().reshape(beta.shape()) : Tensor();
    return {dx, dbeta};
  }
};

// y = sin(3x), computed on the host: minidl needs no sin op for this demo.
Tensor target(const Tensor& x) {
  std::vector<float> v = x.to_vector<float>();
  for (float& e : v) e = std::sin(3.0f * e);
  return tensor(v, x.shape());
}

static int program() {
  manual_seed(0);
  const int64_t n = 256, hidden = 32;
  Tensor x = arange(-1.0, 1.0, 2.0 / n).reshape({n, 1});
  Tensor y = target(x);

  // Parameters of Linear(1, hidden) -> Swish -> Linear(hidden, 1).
  Tensor w1 = (randn({hidden, 1}) * 1.0).requires_grad_();
  Tensor b1 = zeros({hidden}, TensorOptions().requires_grad());
  Tensor beta = ones({1}, TensorOptions().requires_grad());
  Tensor w2 = (randn({1, hidden}) * (1.0 / std::sqrt(hidden))).requires_grad_();
  Tensor b2 = zeros({1}, TensorOptions().requires_grad());
  std::vector<Tensor> params = {w1, b1, beta, w2, b2};

  const double lr = 0.1;
  double first_loss = 0.0, last_loss = 0.0;
  for (int step = 0; step <= 2000; ++step) {
    Tensor h = Swish::apply(linear(x, w1, b1), beta);
    Tensor loss = mse_loss(linear(h, w2, b2), y);
    for (Tensor& p : params) p.set_grad(Tensor());
    loss.backward();
    last_loss = loss.item();
    if (step == 0) first_loss = last_loss;
    {
      NoGradGuard no_grad;
      for (Tensor& p : params) p.add_(p.grad(), -lr);
    }
    if (step % 250 == 0)
      std::printf("step %4d  loss %.5f  beta %.3f\n", step, loss.item(), beta.item());
  }
  // Exit status says whether it learned, so `make test` can run this example.
  const bool learned = last_loss < first_loss / 10.0;
  std::printf("%s: loss %.5f -> %.5f\n", learned ? "learned" : "did NOT learn", first_loss, last_loss);
  return learned ? 0 : 1;
}

int main(int argc, char** argv) {
  return minidl::examples::run_main_without_arguments(
      "custom_function", "A user-written op (Swish with a learnable beta) through autograd::Function, trained in a small network.", argc, argv, program);
}
