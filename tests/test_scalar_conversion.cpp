// A number stored into a tensor (full, full_like, fill_, scalar_tensor,
// arange, clamp bounds, add's alpha) converts as PyTorch's checked_convert:
// int64 exactly (past 2^53 too), an integer into uint8 wrapped, a floating
// value into an integer dtype truncated, and a finite value past a floating
// dtype's largest refused. Expected values from PyTorch 2.15.
#include <cmath>
#include <limits>
#include <vector>

#include "minidl/minidl.h"
#include "tests/test_util.h"

using namespace minidl;
using I64 = std::vector<int64_t>;

namespace {
constexpr int64_t kBig = (int64_t{1} << 53) + 1;  // 9007199254740993: a double rounds it to ...992
}  // namespace

TEST_CASE("int64 factories and fill_ keep integers past 2^53 exactly") {
  // Each gave 9007199254740992: the value went through a double.
  CHECK(full({2}, kBig, kInt64).to_vector<int64_t>() == I64{kBig, kBig});
  CHECK(zeros({2}, kInt64).fill_(kBig).to_vector<int64_t>() == I64{kBig, kBig});
  CHECK(scalar_tensor(kBig, kInt64).item<int64_t>() == kBig);
  CHECK(full_like(zeros({1}, kInt64), kBig).item<int64_t>() == kBig);
  CHECK(full({1}, INT64_MAX, kInt64).item<int64_t>() == INT64_MAX);
  CHECK(full({1}, INT64_MIN, kInt64).item<int64_t>() == INT64_MIN);
  Tensor strided = zeros({3}, kInt64);
  strided.narrow(0, 1, 2).fill_(-kBig);
  CHECK(strided.to_vector<int64_t>() == I64{0, -kBig, -kBig});
  CHECK_THROWS_CONTAINS(full({1}, uint64_t{1} << 63, kInt64),
                        "full: value cannot be converted to type int64_t without overflow");
  CHECK_THROWS_CONTAINS(zeros({1}, kInt64).fill_(uint64_t{1} << 63),
                        "fill_: value cannot be converted to type int64_t without overflow");
  // A floating value is truncated; 2^63 as a double is past int64.
  CHECK(full({1}, 9.2e18, kInt64).item<int64_t>() == 9200000000000000000);
  CHECK(full({1}, -0x1p63, kInt64).item<int64_t>() == INT64_MIN);
  CHECK_THROWS_CONTAINS(full({1}, 0x1p63, kInt64), "value cannot be converted to type int64_t without overflow");
}

TEST_CASE("int64 arange with integer bounds counts and steps in int64, as PyTorch") {
  // Was [...992, ...992, ...994, ...996]: 4 elements, one repeated.
  CHECK(arange(kBig, kBig + 3, 1, kInt64).to_vector<int64_t>() == I64{kBig, kBig + 1, kBig + 2});
  CHECK(arange(int64_t{0}, int64_t{1} << 62, int64_t{1} << 61, kInt64).to_vector<int64_t>() ==
        I64{0, int64_t{1} << 61});
  CHECK(arange(INT64_MIN, INT64_MIN + 2, 1, kInt64).to_vector<int64_t>() == I64{INT64_MIN, INT64_MIN + 1});
  CHECK(arange(INT64_MAX - 2, INT64_MAX, 1, kInt64).to_vector<int64_t>() == I64{INT64_MAX - 2, INT64_MAX - 1});
  CHECK(arange(10, 0, -3, kInt64).to_vector<int64_t>() == I64{10, 7, 4, 1});
  CHECK(arange(0, 10, 3, kInt64).to_vector<int64_t>() == I64{0, 3, 6, 9});
  CHECK(arange(0, 0, 1, kInt64).numel() == 0);
  CHECK_THROWS_CONTAINS(arange(INT64_MIN, INT64_MAX, 1, kInt64), "arange: invalid size, possible overflow?");
  // A floating bound or step counts in double, as PyTorch's: 4 elements from the exact start.
  CHECK(arange(kBig, kBig + 3, 1.0, kInt64).to_vector<int64_t>() == I64{kBig, kBig + 1, kBig + 2, kBig + 3});
  CHECK(arange(static_cast<double>(kBig), kBig + 3, 1, kInt64).to_vector<int64_t>() ==
        I64{kBig - 1, kBig, kBig + 1, kBig + 2});
  CHECK(arange(0, 5, 0.5, kInt64).to_vector<int64_t>() == I64(10, 0));
  CHECK(arange(10, 0, -3.5, kInt64).to_vector<int64_t>() == I64{10, 7, 4});
  CHECK(arange(-2.7, 2, 1, kInt64).to_vector<int64_t>() == I64{-2, -1, 0, 1, 2});
  CHECK_THROWS_CONTAINS(arange(0, 1e30, 1e29, kInt64), "value cannot be converted to type int64_t without overflow");
  // uint8 counts in int64 and wraps (256.0 into uint8 was undefined behaviour).
  CHECK(arange(250, 260, 1, kUInt8).to_vector<int64_t>() == I64{250, 251, 252, 253, 254, 255, 0, 1, 2, 3});
  CHECK(arange(-3, 2, 1, kUInt8).to_vector<int64_t>() == I64{253, 254, 255, 0, 1});
  CHECK_THROWS_CONTAINS(arange(5, 0, 1), "arange: upper bound and lower bound inconsistent with step sign");
  CHECK_THROWS_CONTAINS(arange(0, 5, 0, kInt64), "arange: step must be nonzero");
}

TEST_CASE("a finite scalar past float32's range is refused where PyTorch refuses it") {
  const std::string msg = "value cannot be converted to type float without overflow";
  CHECK_THROWS_CONTAINS(full({2}, 1e39), "full: " + msg);
  CHECK_THROWS_CONTAINS(full({2}, 3.5e38), msg);
  CHECK_THROWS_CONTAINS(full_like(zeros({2}), -1e39), msg);
  CHECK_THROWS_CONTAINS(zeros({2}).fill_(1e39), "fill_: " + msg);
  CHECK_THROWS_CONTAINS(scalar_tensor(1e39), "scalar_tensor: " + msg);
  CHECK_THROWS_CONTAINS(zeros({2}).add(zeros({2}), 1e39), msg);
  CHECK_THROWS_CONTAINS(sub(zeros({2}), zeros({2}), -1e39), msg);
  CHECK_THROWS_CONTAINS(zeros({2}).add_(zeros({2}), 1e39), msg);
  CHECK_THROWS_CONTAINS(clamp(zeros({2}), 0, 1e39), "clamp: " + msg);
  CHECK_THROWS_CONTAINS(clamp(zeros({2}), -1e39, std::nullopt), msg);
  CHECK_THROWS_CONTAINS(clamp(tensor(std::vector<uint8_t>{1}), -1e39, 5), msg);  // promoted to float32
  CHECK_THROWS_CONTAINS(leaky_relu(zeros({2}), 1e39), "leaky_relu: " + msg);
  CHECK_THROWS_CONTAINS(pad(zeros({2}), {1, 1}, PadMode::kConstant, 1e39), "pad: " + msg);
  // The largest float, inf, float64 tensors, and the wrapped scalars of arithmetic are fine.
  CHECK(full({1}, 0x1.FFFFFEp127).item<double>() == 0x1.FFFFFEp127);
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(std::isinf(full({1}, inf).item<double>()));
  CHECK(clamp(zeros({2}), 0, inf).to_vector<float>() == std::vector<float>{0, 0});
  CHECK(full({1}, 1e39, kFloat64).item<double>() == 1e39);
  CHECK(clamp(zeros({2}, kFloat64), 0, 1e300).to_vector<double>() == std::vector<double>{0, 0});
  CHECK(leaky_relu(zeros({2}, kFloat64), 1e39).to_vector<double>() == std::vector<double>{0, 0});
  CHECK(std::isinf((zeros({2}) + 1e39).to_vector<float>()[0]));
  CHECK(std::isinf((ones({2}) * 1e39).to_vector<float>()[0]));
  CHECK(std::isinf(ones({2}).mul_(1e39).to_vector<float>()[0]));
  CHECK(gt(zeros({2}), 1e39).to_vector<float>() == std::vector<float>{0, 0});
  CHECK(std::isinf((tensor(std::vector<int64_t>{1}) + 1e39).item<double>()));
}

TEST_CASE("fill_ and full on integer tensors truncate and wrap as PyTorch") {
  // fill_ refused these ("cannot be represented exactly"); full truncated already.
  CHECK(zeros({2}, kInt64).fill_(2.5).to_vector<int64_t>() == I64{2, 2});
  CHECK(zeros({2}, kInt64).fill_(-2.7).to_vector<int64_t>() == I64{-2, -2});
  CHECK(zeros({2}, kUInt8).fill_(-1).to_vector<int64_t>() == I64{255, 255});
  CHECK(zeros({2}, kUInt8).fill_(-255).to_vector<int64_t>() == I64{1, 1});
  CHECK(zeros({2}, kUInt8).fill_(2.5).to_vector<int64_t>() == I64{2, 2});
  CHECK(zeros({2}, kUInt8).fill_(255.99).to_vector<int64_t>() == I64{255, 255});
  CHECK(zeros({1}, kUInt8).fill_(true).item<int64_t>() == 1);
  CHECK(full({1}, -1, kUInt8).item<int64_t>() == 255);  // was refused
  CHECK(scalar_tensor(-255, kUInt8).item<int64_t>() == 1);
  CHECK(full({1}, 255.5, kUInt8).item<int64_t>() == 255);
  const std::string u8 = "value cannot be converted to type uint8_t without overflow";
  for (const Scalar v : {Scalar(-256), Scalar(256), Scalar(-0.5), Scalar(-1.0), Scalar(256.0), Scalar(1e30)}) {
    CHECK_THROWS_CONTAINS(zeros({1}, kUInt8).fill_(v), "fill_: " + u8);
    CHECK_THROWS_CONTAINS(full({1}, v, kUInt8), "full: " + u8);
  }
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (const double v : {nan, inf, -inf, 0x1p63})
    CHECK_THROWS_CONTAINS(zeros({1}, kInt64).fill_(v), "fill_: value cannot be converted to type int64_t");
  CHECK(zeros({1}, kInt64).fill_(-0x1p63).item<int64_t>() == INT64_MIN);
}
