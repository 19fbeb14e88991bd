// Ops given input a new user could give them, each once a crash, undefined
// behaviour or a silently wrong answer (found by an ASan/UBSan probe of the
// CPU ops against PyTorch 2.15, issue 18): 0-d tensors where a dimension is
// needed, a view reaching past its storage, copy_ from a tensor that
// requires grad, BatchNorm without channels, and three factories' values.
#include <cmath>
#include <limits>
#include <vector>

#include "minidl/minidl.h"
#include "tests/test_util.h"

using namespace minidl;

TEST_CASE("0-d tensors: index_select with several indices, cat, size(0) are refused in PyTorch's words") {
  const Tensor s = scalar_tensor(5.0, kFloat64);
  // index_select wrote 64 elements into a 1-element output (heap-buffer-overflow).
  CHECK_THROWS_WITH_AS(index_select(s, 0, zeros({64}, kInt64)),
                       doctest::Contains("index_select(): Index to scalar can have only 1 value, got 64 value(s)"),
                       minidl::Error);
  CHECK_THROWS_WITH_AS(index_select(s, 0, zeros({0}, kInt64)),
                       doctest::Contains("index_select(): Index to scalar can have only 1 value, got 0 value(s)"),
                       minidl::Error);
  CHECK(index_select(s, 0, zeros({1}, kInt64)).item<double>() == 5.0);
  // cat wrote into shape[0] of an empty shape (a null write).
  CHECK_THROWS_WITH_AS(cat({scalar_tensor(1.0), scalar_tensor(2.0)}, 0),
                       doctest::Contains("zero-dimensional tensor (at position 0) cannot be concatenated"),
                       minidl::Error);
  CHECK_THROWS_WITH_AS(cat({ones({2}), scalar_tensor(2.0)}, 0),
                       doctest::Contains("zero-dimensional tensor (at position 1) cannot be concatenated"),
                       minidl::Error);
  // size(0) and stride(0) read element 0 of an empty vector.
  CHECK_THROWS_WITH_AS((void)s.size(0), doctest::Contains("Dimension specified as 0 but tensor has no dimensions"),
                       minidl::Error);
  CHECK_THROWS_WITH_AS((void)s.size(-1), doctest::Contains("Dimension specified as -1 but tensor has no dimensions"),
                       minidl::Error);
  CHECK_THROWS_WITH_AS((void)s.stride(0), doctest::Contains("Dimension specified as 0 but tensor has no dimensions"),
                       minidl::Error);
  CHECK(sum(s, {0}).item<double>() == 5.0);  // ops still take dim 0 / -1 of a 0-d tensor, as PyTorch's
}

TEST_CASE("make_view refuses a geometry outside its storage (PyTorch's as_strided checks)") {
  const Tensor base = arange(4.0);  // 16 bytes
  // This read two elements past the storage without an error.
  CHECK_THROWS_WITH_AS(
      make_view(base, {4}, {1}, 2),
      doctest::Contains("setStorage: sizes [4], strides [1], storage offset 2, and itemsize 4 requiring a storage "
                        "size of 24 are out of bounds for storage of size 16"),
      minidl::Error);
  CHECK_THROWS_WITH_AS(make_view(base, {4, 2}, {1}, 0), doctest::Contains("mismatch in length of strides and shape"),
                       minidl::Error);
  CHECK_THROWS_WITH_AS(
      make_view(base, {4}, {-1}, 3),
      doctest::Contains("as_strided: Negative strides are not supported at the moment, got strides: [-1]"),
      minidl::Error);
  CHECK_THROWS_AS(make_view(base, {2, 2}, {int64_t{1} << 62, 1}, 0), minidl::Error);  // reach overflows int64
  CHECK(make_view(base, {2}, {2}, 1).to_vector<float>() == std::vector<float>{1, 3});
  CHECK(make_view(base, {3, 0}, {5, 1}, 9).numel() == 0);  // no element: nothing to reach
  CHECK(make_view(base, {3, 2}, {0, 1}, 2).to_vector<float>() == std::vector<float>{2, 3, 2, 3, 2, 3});
}

TEST_CASE("copy_ from a tensor that requires grad is refused instead of dropping its gradient") {
  // y.copy_(x) kept no history: x.grad() came out 1 instead of PyTorch's 2x + 1.
  const Tensor x = tensor({1.0, 2.0, 3.0}).requires_grad_();
  Tensor y = zeros({3});
  CHECK_THROWS_WITH_AS(y.copy_(x), doctest::Contains("copy_: the source requires grad"), minidl::Error);
  {
    NoGradGuard no_grad;  // what optimizers, state dicts and DDP do
    y.copy_(x);
  }
  CHECK(y.to_vector<float>() == std::vector<float>{1, 2, 3});
  CHECK_FALSE(y.requires_grad());
  Tensor z = zeros({3});
  z.copy_(x.detach());  // a detached source: no gradient to lose
  CHECK(z.to_vector<float>() == std::vector<float>{1, 2, 3});
}

TEST_CASE("BatchNorm in training with no channels gives empty results") {
  // Undefined behaviour (&v[0] of empty vectors) in the CPU backward.
  const Tensor x = randn({3, 0, 2, 2}).requires_grad_();
  const Tensor w = ones({0}).requires_grad_(), b = zeros({0}).requires_grad_();
  Tensor rm = zeros({0}), rv = ones({0});
  const Tensor y = batch_norm(x, rm, rv, w, b, true);
  CHECK(y.shape() == Shape{3, 0, 2, 2});
  sum(y).backward();
  CHECK(x.grad().shape() == Shape{3, 0, 2, 2});
  CHECK(w.grad().numel() == 0);
}

TEST_CASE("factories: integer arange steps by the truncated step, full refuses what the type cannot hold") {
  // arange(0, 5, 1.5) as int64 was 0, 1, 3, 4 (rounded multiples); PyTorch counts
  // with the given bounds and steps from trunc(start) by trunc(step).
  CHECK(arange(0, 5, 1.5, kInt64).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(arange(2.7, 9, 2.5, kInt64).to_vector<int64_t>() == std::vector<int64_t>{2, 4, 6});
  CHECK(arange(5, 0, -1.5, kInt64).to_vector<int64_t>() == std::vector<int64_t>{5, 4, 3, 2});
  CHECK(arange(0, 5, 1.5).to_vector<float>() == std::vector<float>{0, 1.5, 3, 4.5});
  // full(NaN) as int64 was INT64_MIN (an undefined conversion).
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH_AS(full({2}, nan, kInt64),
                       doctest::Contains("full: value cannot be converted to type int64_t without overflow"),
                       minidl::Error);
  CHECK_THROWS_AS(full({2}, 1e30, kInt64), minidl::Error);
  CHECK_THROWS_AS(full({2}, std::numeric_limits<double>::infinity(), kInt64), minidl::Error);
  CHECK_THROWS_WITH_AS(full({2}, 300, kUInt8),
                       doctest::Contains("full: value cannot be converted to type uint8_t without overflow"),
                       minidl::Error);
  CHECK_THROWS_AS(full({2}, -0.5, kUInt8), minidl::Error);
  CHECK(full({2}, -2.5, kInt64).to_vector<int64_t>() == std::vector<int64_t>{-2, -2});
  CHECK(full({1}, 255.9, kUInt8).to_vector<int64_t>() == std::vector<int64_t>{255});
}

TEST_CASE("clamp with a NaN bound gives NaN everywhere and a zero gradient, as PyTorch") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = tensor({-1.0, 0.5, 2.0}, {3}, kFloat64).requires_grad_();
  const Tensor lo = clamp(x, nan, std::nullopt), hi = clamp(x, std::nullopt, nan);
  for (double v : lo.to_vector<double>()) CHECK(std::isnan(v));
  for (double v : hi.to_vector<double>()) CHECK(std::isnan(v));
  sum(add(lo, hi)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0, 0});
}
