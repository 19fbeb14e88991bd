// matmul, bmm and linear: values against loops written here (2-D, batched with
// broadcasting, 3-D x 2-D, 1-D operands, empty sizes, products big enough to
// be split over threads), float64 gradient checks for every shape case,
// linear with and without bias, error paths with PyTorch's wording.
#include <random>

#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::allclose;
using minidl::testing::check_gradients;

namespace {

std::vector<double> random_values(int64_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist;
  std::vector<double> v(static_cast<size_t>(n));
  for (double& e : v) e = dist(gen);
  return v;
}

Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype = kFloat64) {
  return tensor(random_values(numel_of(shape), seed), shape, dtype);
}

// Batched product by loops: a (ba..., m, k) and b (bb..., k, n) with the batch
// dims broadcast; 1-D operands as torch.matmul (promoted, then the dim dropped).
Tensor reference_matmul(const Tensor& a_in, const Tensor& b_in) {
  Shape sa = a_in.shape(), sb = b_in.shape();
  const bool a_vec = sa.size() == 1, b_vec = sb.size() == 1;
  if (a_vec) sa.insert(sa.begin(), 1);
  if (b_vec) sb.push_back(1);
  const int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  const Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  const size_t nd = std::max(ba.size(), bb.size());
  Shape batch(nd);
  for (size_t d = 0; d < nd; ++d) {
    const int64_t x = d + ba.size() >= nd ? ba[d + ba.size() - nd] : 1;
    const int64_t y = d + bb.size() >= nd ? bb[d + bb.size() - nd] : 1;
    batch[d] = std::max(x, y);
  }
  // Index of batch entry i in an operand with batch dims `own` (broadcast).
  auto index_in = [&](int64_t i, const Shape& own) {
    int64_t idx = 0, scale = 1;
    for (size_t d = nd; d-- > 0;) {
      const int64_t coord = i % batch[d];
      i /= batch[d];
      if (d + own.size() < nd) continue;
      const int64_t size = own[d + own.size() - nd];
      idx += (size == 1 ? 0 : coord) * scale;
      scale *= size;
    }
    return idx;
  };
  const std::vector<double> av = a_in.to_vector<double>(), bv = b_in.to_vector<double>();
  const int64_t count = numel_of(batch);
  std::vector<double> out(static_cast<size_t>(count * m * n), 0.0);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t ia = index_in(i, ba), ib = index_in(i, bb);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) {
        double s = 0;
        for (int64_t t = 0; t < k; ++t) s += av[ia * m * k + r * k + t] * bv[ib * k * n + t * n + c];
        out[i * m * n + r * n + c] = s;
      }
  }
  Shape out_shape = batch;
  if (!a_vec) out_shape.push_back(m);
  if (!b_vec) out_shape.push_back(n);
  if (out_shape.empty()) return scalar_tensor(out[0], kFloat64);  // dot: 0-d
  return tensor(out, out_shape, kFloat64);
}

struct ShapePair {
  Shape a, b;
};

const std::vector<ShapePair>& shape_cases() {
  static const std::vector<ShapePair> cases = {
      {{3, 4}, {4, 5}},           // mm
      {{1, 1}, {1, 1}},
      {{2, 3, 4}, {2, 4, 5}},     // bmm
      {{1, 3, 4}, {3, 4, 2}},     // batch broadcast of 1 on a
      {{3, 3, 4}, {1, 4, 2}},     // ... on b
      {{2, 1, 3, 4}, {5, 4, 2}},  // 4-D x 3-D broadcast both ways
      {{3, 3, 4}, {4, 2}},        // 3-D x 2-D (folded into one product)
      {{3, 4}, {2, 4, 5}},        // 2-D x 3-D (a broadcast over the batch)
      {{4}, {4, 3}},              // vector x matrix
      {{3, 4}, {4}},              // matrix x vector
      {{4}, {4}},                 // dot
      {{2, 3, 4}, {4}},           // batch x vector
      {{4}, {2, 4, 3}},           // vector x batch
      {{0, 4}, {4, 3}},           // empty rows
      {{3, 0}, {0, 2}},           // empty inner dim: zeros
  };
  return cases;
}

}  // namespace

TEST_CASE("matmul matches loops for every shape case (float32 and float64)") {
  uint64_t seed = 1;
  for (const ShapePair& s : shape_cases()) {
    INFO("a=", shape_str(s.a), " b=", shape_str(s.b));
    for (DType dtype : {kFloat32, kFloat64}) {
      const Tensor a = random_tensor(s.a, seed, dtype), b = random_tensor(s.b, seed + 1, dtype);
      const Tensor c = matmul(a, b);
      const Tensor expect = reference_matmul(a, b);
      CHECK(c.dtype() == dtype);
      CHECK(c.shape() == expect.shape());
      CHECK(allclose(c, expect, 1e-5, 1e-5));
      CHECK(allclose(a.matmul(b), expect, 1e-5, 1e-5));
    }
    seed += 2;
  }
}

TEST_CASE("matmul of products split over threads, and of non-contiguous operands") {
  // Big enough for gemm_parallel to split rows (tall) or columns (wide).
  for (const ShapePair& s : std::vector<ShapePair>{{{200, 70}, {70, 90}}, {{40, 70}, {70, 300}}, {{3, 100, 64}, {64, 80}}}) {
    INFO("a=", shape_str(s.a), " b=", shape_str(s.b));
    const Tensor a = random_tensor(s.a, 11), b = random_tensor(s.b, 12);
    CHECK(allclose(matmul(a, b), reference_matmul(a, b), 1e-9, 1e-9));
  }
  const Tensor a = random_tensor({5, 3}, 13), b = random_tensor({4, 5}, 14);
  const Tensor at = a.t(), bt = b.t();  // (3, 5) and (5, 4), transposed views
  CHECK(allclose(matmul(at, bt), reference_matmul(at.contiguous(), bt.contiguous()), 1e-12, 1e-12));
}

TEST_CASE("matmul float64 gradient checks (mm, batched, broadcast, 3-D x 2-D, 1-D)") {
  uint64_t seed = 100;
  for (const ShapePair& s : shape_cases()) {
    if (numel_of(s.a) == 0 || numel_of(s.b) == 0) continue;  // nothing to perturb
    INFO("a=", shape_str(s.a), " b=", shape_str(s.b));
    Tensor a = random_tensor(s.a, seed).requires_grad_();
    Tensor b = random_tensor(s.b, seed + 1).requires_grad_();
    // (check_gradients wants an output of at least 1 dim: the dot's 0-d one is reshaped)
    check_gradients([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]).reshape({-1}); }, {a, b});
    seed += 2;
  }
}

TEST_CASE("matmul grads of a broadcast operand sum over the batch") {
  // a (1, 2, 3) broadcast over b's batch of 4: da = sum_i dC_i B_i^T.
  Tensor a = random_tensor({1, 2, 3}, 7).requires_grad_();
  Tensor b = random_tensor({4, 3, 2}, 8).requires_grad_();
  matmul(a, b).sum().backward();
  const std::vector<double> bv = b.to_vector<double>();
  std::vector<double> expect(6, 0.0);  // da[r][t] = sum_i sum_c B_i[t][c]
  for (int i = 0; i < 4; ++i)
    for (int r = 0; r < 2; ++r)
      for (int t = 0; t < 3; ++t)
        for (int c = 0; c < 2; ++c) expect[r * 3 + t] += bv[i * 6 + t * 2 + c];
  CHECK(allclose(a.grad(), tensor(expect, {1, 2, 3}), 1e-12, 1e-12));
}

TEST_CASE("bmm: batched products of 3-D tensors, gradients, and PyTorch's errors") {
  const Tensor a = random_tensor({3, 2, 4}, 41).requires_grad_(), b = random_tensor({3, 4, 5}, 42).requires_grad_();
  const Tensor c = bmm(a, b);
  CHECK(c.shape() == Shape{3, 2, 5});
  CHECK(allclose(c, reference_matmul(a, b), 1e-12, 1e-12));
  check_gradients([](const std::vector<Tensor>& in) { return bmm(in[0], in[1]); }, {a, b});
  CHECK_THROWS_CONTAINS(bmm(random_tensor({2, 4}, 1), b), "batch1 must be a 3D tensor");
  CHECK_THROWS_CONTAINS(bmm(a, random_tensor({4, 5}, 1)), "batch2 must be a 3D tensor");
  CHECK_THROWS_CONTAINS(bmm(a, random_tensor({2, 4, 5}, 1)),
                        "Expected size for first two dimensions of batch2 tensor to be: [3, 4] but got: [2, 4].");
  CHECK_THROWS_CONTAINS(bmm(a, random_tensor({3, 4, 5}, 1, kFloat32)), "expected m1 and m2 to have the same dtype");
}

TEST_CASE("linear matches x W^T + b and its gradients check") {
  for (const Shape& xs : std::vector<Shape>{{5, 3}, {2, 3, 3}, {3}, {0, 3}}) {
    INFO("x=", shape_str(xs));
    const Tensor x = random_tensor(xs, 21), w = random_tensor({4, 3}, 22), b = random_tensor({4}, 23);
    Tensor y = linear(x, w, b);
    Tensor expect = reference_matmul(x, w.t().contiguous()) + b;
    CHECK(allclose(y, expect, 1e-12, 1e-12));
    CHECK(allclose(linear(x, w), reference_matmul(x, w.t().contiguous()), 1e-12, 1e-12));
  }
  for (bool with_bias : {true, false}) {
    Tensor x = random_tensor({2, 5, 3}, 31).requires_grad_();
    Tensor w = random_tensor({7, 3}, 32).requires_grad_();
    Tensor b = random_tensor({7}, 33).requires_grad_();
    std::vector<Tensor> inputs = {x, w};
    if (with_bias) inputs.push_back(b);
    check_gradients(
        [&](const std::vector<Tensor>& in) { return linear(in[0], in[1], with_bias ? in[2] : Tensor()); },
        inputs);
  }
  {  // out_features = 0 (PyTorch's Linear(3, 0)): an empty output, a zero input gradient
    Tensor x = random_tensor({4, 3}, 34).requires_grad_();
    Tensor w = random_tensor({0, 3}, 35).requires_grad_();
    Tensor y = linear(x, w);
    CHECK(y.shape() == Shape{4, 0});
    y.sum().backward();
    CHECK(x.grad().abs().max().item<double>() == 0.0);
    CHECK(w.grad().shape() == Shape{0, 3});
  }
  // A layer big enough for the threaded GEMMs, float32 against float64 loops.
  const Tensor x = random_tensor({130, 90}, 41, kFloat32), w = random_tensor({70, 90}, 42, kFloat32);
  const Tensor b = random_tensor({70}, 43, kFloat32);
  CHECK(allclose(linear(x, w, b), reference_matmul(x, w.t().contiguous()) + b.to(kFloat64), 1e-4, 1e-4));
}

TEST_CASE("linear only computes the grads that are needed") {
  Tensor x = random_tensor({4, 3}, 51);
  Tensor w = random_tensor({2, 3}, 52).requires_grad_();
  linear(x, w).sum().backward();
  CHECK(!x.grad().defined());
  // d(sum(x W^T))/dW[o][i] = sum_r x[r][i]
  const std::vector<double> xv = x.to_vector<double>();
  std::vector<double> expect(6, 0.0);
  for (int o = 0; o < 2; ++o)
    for (int r = 0; r < 4; ++r)
      for (int i = 0; i < 3; ++i) expect[o * 3 + i] += xv[r * 3 + i];
  CHECK(allclose(w.grad(), tensor(expect, {2, 3}), 1e-12, 1e-12));
}

TEST_CASE("matmul and linear errors use PyTorch's wording") {
  CHECK_THROWS_CONTAINS(matmul(zeros({2, 3}), zeros({4, 5})),
                        "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)");
  CHECK_THROWS_CONTAINS(matmul(zeros({3}), zeros({4, 5})), "mat1 and mat2 shapes cannot be multiplied (1x3 and 4x5)");
  CHECK_THROWS_CONTAINS(matmul(zeros({2, 2, 3}), zeros({4, 5})),
                        "mat1 and mat2 shapes cannot be multiplied (4x3 and 4x5)");
  CHECK_THROWS_CONTAINS(matmul(zeros({3}), zeros({4})),
                        "inconsistent tensor size, expected tensor [3] and src [4] to have the same number of "
                        "elements, but got 3 and 4 elements respectively");
  CHECK_THROWS_CONTAINS(matmul(zeros({2, 3}), zeros({4})), "size mismatch, got input (2), mat (2x3), vec (4)");
  CHECK_THROWS_CONTAINS(matmul(zeros({2, 2, 3}), zeros({2, 4, 5})),
                        "Expected size for first two dimensions of batch2 tensor to be: [2, 3] but got: [2, 4].");
  CHECK_THROWS_CONTAINS(matmul(zeros({2, 2, 3}), zeros({3, 3, 5})), "must match the size of tensor b (3)");
  CHECK_THROWS_CONTAINS(matmul(zeros({}), zeros({3})),
                        "both arguments to matmul need to be at least 1D, but they are 0D and 1D");
  CHECK_THROWS_CONTAINS(matmul(zeros({2, 3}), zeros({3, 5}, kFloat64)),
                        "expected m1 and m2 to have the same dtype, but got: float32 != float64");
  CHECK_THROWS_CONTAINS(matmul(zeros({2, 3}, kInt64), zeros({3, 5}, kInt64)), "matmul: expected float32 or float64");
  CHECK_THROWS_CONTAINS(matmul(Tensor(), zeros({3})), "matmul: got an undefined tensor");

  CHECK_THROWS_CONTAINS(linear(zeros({2, 3}), zeros({5, 4})),
                        "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)");
  CHECK_THROWS_CONTAINS(linear(zeros({2, 2, 3}), zeros({5, 4})),
                        "mat1 and mat2 shapes cannot be multiplied (4x3 and 4x5)");
  CHECK_THROWS_CONTAINS(linear(zeros({2, 3}), zeros({5})), "linear: expected weight of size (out_features, in_features)");
  CHECK_THROWS_CONTAINS(linear(zeros({2, 3}), zeros({5, 3}), zeros({4})), "expected bias of size [5]");
  CHECK_THROWS_CONTAINS(linear(zeros({2, 3}), zeros({5, 3}), zeros({5}, kFloat64)),
                        "linear: expected bias to have dtype float32");
  CHECK_THROWS_CONTAINS(linear(zeros({2, 3}), zeros({5, 3}, kFloat64)), "expected m1 and m2 to have the same dtype");
  CHECK_THROWS_CONTAINS(linear(zeros({}), zeros({5, 3})), "linear: expected input with at least 1 dimension");
}
