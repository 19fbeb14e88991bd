// The autograd engine and the public Function<T> API.
#include "tests/test_util.h"

using namespace minidl;

namespace {

// y = x^2 written with the public API, saving its input.
struct Square : autograd::Function<Square> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x) {
    ctx->save_for_backward({x});
    return x * x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Tensor x = ctx->get_saved_variables()[0];
    return {grads[0] * x * 2.0};
  }
};

// y = a * x + b with a non-tensor scale `a` kept in saved_data.
struct ScaleShift : autograd::Function<ScaleShift> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, double a, const Tensor& b) {
    ctx->saved_data["a"] = a;
    return x * a + b;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const double a = ctx->saved_data["a"].to_double();
    return {ctx->needs_input_grad(0) ? grads[0] * a : Tensor(), Tensor(),
            ctx->needs_input_grad(2) ? grads[0] : Tensor()};
  }
};

// Two outputs, the second one unused by the losses below.
struct SplitTwo : autograd::Function<SplitTwo> {
  static variable_list forward(AutogradContext*, const Tensor& x) { return {x * 2.0, x * 3.0}; }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return {grads[0] * 2.0 + grads[1] * 3.0};
  }
};

struct WrongCount : autograd::Function<WrongCount> {
  static Tensor forward(AutogradContext*, const Tensor& x) { return x.clone(); }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], grads[0]}; }
};

struct WrongShape : autograd::Function<WrongShape> {
  static Tensor forward(AutogradContext*, const Tensor& x) { return x.clone(); }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0].sum()}; }
};

// Returns its input unchanged: the output must not rewrite the input's history.
struct Identity : autograd::Function<Identity> {
  static Tensor forward(AutogradContext*, const Tensor& x) { return x; }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0]}; }
};

Tensor leaf(std::vector<double> v) { return tensor(v, {}, kFloat64).requires_grad_(); }

}  // namespace

TEST_CASE("custom Function: forward, backward and gradcheck") {
  Tensor x = leaf({1.0, -2.0, 3.0});
  Tensor y = Square::apply(x);
  CHECK(y.requires_grad());
  CHECK(y.grad_fn()->name() == "SquareBackward");
  y.sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2.0, -4.0, 6.0});
  minidl::testing::check_gradients([](const std::vector<Tensor>& in) { return Square::apply(in[0]); },
                                   {randn({3, 4}, kFloat64).requires_grad_()});
}

TEST_CASE("custom Function: non-tensor arguments and needs_input_grad") {
  Tensor x = leaf({1.0, 2.0});
  Tensor b = tensor({0.5, 0.5}, {}, kFloat64);  // no grad
  Tensor y = ScaleShift::apply(x, 3.0, b);
  y.sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3.0, 3.0});
  CHECK_FALSE(b.grad().defined());
}

TEST_CASE("unused outputs get zero gradients (materialized)") {
  Tensor x = leaf({1.0, 2.0});
  variable_list ys = SplitTwo::apply(x);
  ys[0].sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2.0, 2.0});
}

TEST_CASE("a Function returning its input does not rewrite the input's history") {
  Tensor x = leaf({1.0, 2.0});
  Tensor y = Identity::apply(x);
  CHECK(x.is_leaf());
  CHECK_FALSE(y.is_leaf());
  (y * 2.0).sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2.0, 2.0});
}

TEST_CASE("bad gradients from a custom backward are refused") {
  Tensor x = leaf({1.0, 2.0});
  CHECK_THROWS_CONTAINS(WrongCount::apply(x).sum().backward(), "returned an incorrect number of gradients");
  Tensor z = leaf({1.0, 2.0});
  CHECK_THROWS_CONTAINS(WrongShape::apply(z).sum().backward(), "returned an invalid gradient at index 0");
}

TEST_CASE("diamond graph sums both paths") {
  Tensor a = leaf({1.5, -0.5});
  Tensor b = a * 2.0, c = a + 1.0;
  Tensor d = b * c;  // d = 2a(a+1) -> dd/da = 4a + 2
  d.sum().backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{8.0, 0.0});
}

TEST_CASE("a tensor used twice in one op") {
  Tensor a = leaf({3.0});
  (a * a).sum().backward();
  CHECK(a.grad().item() == 6.0);
}

TEST_CASE("gradients accumulate across backward calls until reset") {
  Tensor a = leaf({1.0, 2.0});
  (a * 3.0).sum().backward();
  (a * 3.0).sum().backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{6.0, 6.0});
  a.set_grad(Tensor());
  (a * 1.0).sum().backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{1.0, 1.0});
}

TEST_CASE("retain_graph allows a second backward; without it the graph is freed") {
  Tensor a = leaf({2.0});
  Tensor y = Square::apply(a).sum();
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  CHECK(a.grad().item() == 8.0);
  CHECK_THROWS_CONTAINS(y.backward(), "Trying to backward through the graph a second time");
}

TEST_CASE("a saved tensor modified in place is detected") {
  Tensor a = leaf({2.0, 3.0});
  Tensor h = a * 1.0;
  Tensor y = Square::apply(h);
  {
    NoGradGuard g;
    h.mul_(2.0);
  }
  CHECK_THROWS_CONTAINS(y.sum().backward(), "modified by an inplace operation");
}

TEST_CASE("no_grad records nothing; detach cuts history") {
  Tensor a = leaf({1.0});
  {
    NoGradGuard g;
    Tensor y = a * 2.0;
    CHECK_FALSE(y.requires_grad());
    CHECK(autograd::GradMode::is_enabled() == false);
  }
  CHECK(autograd::GradMode::is_enabled());
  Tensor d = (a * 2.0).detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
}

TEST_CASE("backward errors") {
  Tensor a = tensor({1.0, 2.0});
  CHECK_THROWS_CONTAINS(a.sum().backward(), "does not require grad and does not have a grad_fn");
  Tensor b = leaf({1.0, 2.0});
  CHECK_THROWS_CONTAINS((b * 2.0).backward(), "grad can be implicitly created only for scalar outputs");
  CHECK_THROWS_CONTAINS((b * 2.0).backward(tensor({1.0}, {}, kFloat64)), "does not match the tensor's shape");
  CHECK_THROWS_CONTAINS((b * 2.0).requires_grad_(false), "only change requires_grad flags of leaf variables");
  CHECK_THROWS_CONTAINS(tensor(std::vector<int64_t>{1}).requires_grad_(), "floating point dtype");
}

TEST_CASE("backward with an explicit gradient on a non-scalar") {
  Tensor a = leaf({1.0, 2.0, 3.0});
  (a * 2.0).backward(tensor({1.0, 0.0, -1.0}, {}, kFloat64));
  CHECK(a.grad().to_vector<double>() == std::vector<double>{2.0, 0.0, -2.0});
}

TEST_CASE("hooks: order, replacement, post-accumulate") {
  Tensor a = leaf({1.0, 2.0});
  std::vector<std::string> order;
  a.register_hook([&](const Tensor& g) {
    order.push_back("leaf hook");
    return g * 10.0;  // replaces the gradient that gets accumulated
  });
  a.register_post_accumulate_grad_hook([&](Tensor& p) {
    order.push_back("post accumulate");
    CHECK(p.grad().to_vector<double>() == std::vector<double>{30.0, 30.0});
  });
  Tensor h = a * 3.0;
  const HookId id = h.register_hook([&](const Tensor& g) {
    order.push_back("non-leaf hook");
    return Tensor();  // keep
  });
  h.sum().backward();
  CHECK(order == std::vector<std::string>{"non-leaf hook", "leaf hook", "post accumulate"});
  h.remove_hook(id);
  CHECK_THROWS_CONTAINS(h.remove_hook(id), "no hook with id");
  Tensor c = tensor({1.0});
  CHECK_THROWS_CONTAINS(c.register_hook([](const Tensor& g) { return g; }), "doesn't require gradient");
}

TEST_CASE("leaf gradients accumulate as soon as they are complete") {
  // w1 is used only at the end of the chain, w0 at the start: backward reaches
  // w1's accumulator before w0's, and each accumulator runs as soon as ready.
  Tensor w0 = leaf({2.0}), w1 = leaf({3.0});
  std::vector<std::string> order;
  w0.register_post_accumulate_grad_hook([&](Tensor&) { order.push_back("w0"); });
  w1.register_post_accumulate_grad_hook([&](Tensor&) { order.push_back("w1"); });
  Tensor y = ((w0 * 2.0) * 3.0) * w1;
  y.sum().backward();
  CHECK(order == std::vector<std::string>{"w1", "w0"});
}

TEST_CASE("in-place on a leaf that requires grad is refused under grad mode") {
  Tensor a = leaf({1.0});
  CHECK_THROWS_CONTAINS(a.add_(1.0), "a leaf Variable that requires grad is being used in an in-place operation.");
  NoGradGuard g;
  a.add_(1.0);
  CHECK(a.item() == 2.0);
  CHECK(a.version() == 1);
}

TEST_CASE("saved_data: a map by name (insert, overwrite, at, contains)") {
  autograd::SavedData d;
  CHECK(d.empty());
  d["scale"] = 2.5;
  d["shape"] = Shape{2, 3};
  for (int i = 0; i < 6; ++i) d["k" + std::to_string(i)] = i;  // past the first reservation
  d["scale"] = 4.0;                                             // overwrites, no second entry
  CHECK(d.size() == 8);
  CHECK(d.at("scale").to_double() == 4.0);
  CHECK(d["shape"].to_int_list() == Shape{2, 3});
  CHECK(d.at("k5").to_int() == 5);
  CHECK(d.contains("k0"));
  CHECK_FALSE(d.contains("missing"));
  CHECK_THROWS_CONTAINS((void)d.at("missing"), "saved_data: no value saved under \"missing\"");
  CHECK(d.size() == 8);  // at() and contains() insert nothing
  CHECK(d["missing"].is_none());  // operator[] does, as std::map's
  CHECK(d.size() == 9);
}

TEST_CASE("a Function records nothing when no input needs grad, and names its node once") {
  Tensor x = tensor({1.0, 2.0}, {}, kFloat64);
  Tensor y = ScaleShift::apply(x, 3.0, x);
  CHECK_FALSE(y.requires_grad());
  CHECK(y.grad_fn() == nullptr);
  CHECK(y.to_vector<double>() == std::vector<double>{4.0, 8.0});
  Tensor a = leaf({1.0}), b = leaf({2.0});
  CHECK((a + b).grad_fn()->name() == "AddBackward");
  CHECK((a - b).grad_fn()->name() == "SubBackward");
  CHECK(ScaleShift::apply(a, 2.0, b).grad_fn()->name() == "ScaleShiftBackward");
}
