// Hostile arguments (not sizes of a tensor made directly, see
// test_hostile_sizes.cpp): an empty pad list, empty images in convolutions,
// pads, strides and bounds near int64's limits. Each once was undefined
// behaviour (a read of an empty vector, a division by zero, signed overflow);
// now each gives PyTorch's result or a minidl::Error naming the op.
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "tests/test_util.h"

using namespace minidl;

namespace {

constexpr int64_t kH = int64_t{1} << 62;
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

std::vector<float> values(const Tensor& t) { return t.detach().contiguous().to_vector<float>(); }

}  // namespace

TEST_CASE("pad with an empty pad list returns a copy of the input") {
  const Tensor x = randn({2, 3}).requires_grad_(true);
  const Tensor y = pad(x, {}, "constant");
  CHECK(y.shape() == x.shape());
  CHECK(values(y) == values(x));
  CHECK(y.data_ptr<float>() != x.data_ptr<float>());  // a new tensor, as PyTorch's
  sum(y).backward();
  CHECK(values(x.grad()) == std::vector<float>(6, 1.0f));
  const Tensor s = scalar_tensor(2.5);
  CHECK(pad(s, {}).item<double>() == 2.5);
  CHECK_THROWS_CONTAINS(pad(x, {}, "circular"), "Padding size 0 is not supported for 2D input tensor");
}

TEST_CASE("pad refuses pads whose output size overflows int64") {
  CHECK_THROWS_CONTAINS(pad(randn({1, 3}), {kH, 0}),
                        "pad: Storage size calculation overflowed with sizes=[1, 4611686018427387907]");
  CHECK_THROWS_CONTAINS(pad(randn({2, 3}), {int64_t{1} << 40, 0, int64_t{1} << 40, 0}),
                        "pad: Storage size calculation overflowed with sizes=[1099511627778, 1099511627779]");
  CHECK_THROWS_CONTAINS(pad(randn({1, 3}), {kH, kH}), "pad: Storage size calculation overflowed");
  CHECK_THROWS_CONTAINS(pad(randn({1, 3}), {kMax, kMax}, "replicate"), "pad: Storage size calculation overflowed");
  CHECK_THROWS_CONTAINS(pad(randn({1, 1, 3}), {kH, kH}, "circular"),
                        "Padding value causes wrapping around more than once.");
  CHECK_THROWS_CONTAINS(pad(randn({1, 3}), {kH, kH}, "reflect"),
                        "Padding size should be less than the corresponding input dimension");
  CHECK_THROWS_CONTAINS(pad(randn({1, 3}), {kMin, kMin}), "resulted in a negative output size");
  CHECK(pad(randn({1, 3}), {kMax, kMin + 1}).shape() == Shape{1, 3});  // fits once both pads count
}

TEST_CASE("convolutions refuse an empty image unless the batch or channels are empty") {
  const std::string only = "Only zero batch or zero channel inputs are supported, but got input shape: ";
  ConvTranspose2dParams t;
  t.stride = {2, 2};
  CHECK_THROWS_CONTAINS(conv_transpose2d(randn({1, 2, 0, 3}), randn({2, 3, 3, 3}), Tensor(), t),
                        "conv_transpose2d: " + only + "[1, 2, 0, 3]");
  CHECK_THROWS_CONTAINS(conv_transpose2d(randn({2, 3, 0}), randn({2, 3, 3, 3})),
                        "conv_transpose2d: " + only + "[1, 2, 3, 0]");
  CHECK_THROWS_CONTAINS(conv_transpose3d(randn({1, 2, 0, 3, 3}), randn({2, 3, 3, 3, 3})),
                        "conv_transpose3d: " + only + "[1, 2, 0, 3, 3]");
  Conv2dParams c;
  c.padding = {1, 1};
  CHECK_THROWS_CONTAINS(conv2d(randn({1, 2, 0, 5}), randn({3, 2, 1, 1}), Tensor(), c),
                        "conv2d: " + only + "[1, 2, 0, 5]");
  CHECK_THROWS_CONTAINS(conv2d(randn({1, 2, 0, 5}), randn({3, 2, 1, 1})),
                        "Kernel size can't be greater than actual input size");
  Conv3dParams c3;
  c3.padding = {1, 1, 1};
  CHECK_THROWS_CONTAINS(conv3d(randn({1, 2, 0, 5, 5}), randn({3, 2, 1, 1, 1}), Tensor(), c3),
                        "conv3d: " + only + "[1, 2, 0, 5, 5]");
  // An empty batch is fine: an empty output of PyTorch's shape, zero grads.
  const Tensor x = randn({0, 2, 0, 3}).requires_grad_(true), w = randn({2, 3, 3, 3}).requires_grad_(true);
  const Tensor y = conv_transpose2d(x, w, Tensor(), t);
  CHECK(y.shape() == Shape{0, 3, 1, 7});
  sum(y).backward();
  CHECK(w.grad().abs().sum().item<double>() == 0.0);
  const Tensor xc = randn({0, 2, 0, 5}).requires_grad_(true), wc = randn({3, 2, 1, 1}).requires_grad_(true);
  const Tensor yc = conv2d(xc, wc, Tensor(), c);
  CHECK(yc.shape() == Shape{0, 3, 2, 7});
  sum(yc).backward();
  CHECK(wc.grad().abs().sum().item<double>() == 0.0);
  CHECK(conv3d(randn({0, 2, 0, 5, 5}), randn({3, 2, 1, 1, 1}), Tensor(), c3).shape() == Shape{0, 3, 2, 7, 7});
}

TEST_CASE("convolutions refuse padding, strides and dilations that overflow int64") {
  Conv2dParams c;
  c.padding = {kH, 0};
  CHECK_THROWS_CONTAINS(conv2d(randn({1, 1, 3, 3}), randn({1, 1, 1, 1}), Tensor(), c),
                        "conv2d: Given padding=4611686018427387904 at dimension 0 , expected padding to be at most "
                        "4611686018427387903");
  c.padding = {kH - 1, 0};  // 2 * padding fits, plus the input size does not
  CHECK_THROWS_CONTAINS(conv2d(randn({1, 1, 3, 3}), randn({1, 1, 1, 1}), Tensor(), c),
                        "conv2d: the padded input size");
  c.padding = {0, 0};
  c.dilation = {kH, 1};
  CHECK_THROWS_CONTAINS(conv2d(randn({1, 1, 3, 3}), randn({1, 1, 3, 1}), Tensor(), c),
                        "conv2d: the dilated kernel size");
  Conv3dParams c3;
  c3.padding = {0, 0, kH};
  CHECK_THROWS_CONTAINS(conv3d(randn({1, 1, 3, 3, 3}), randn({1, 1, 1, 1, 1}), Tensor(), c3),
                        "conv3d: Given padding=4611686018427387904 at dimension 2");
  ConvTranspose2dParams t;
  t.padding = {kH, 0};
  CHECK_THROWS_CONTAINS(conv_transpose2d(randn({1, 1, 3, 3}), randn({1, 1, 1, 1}), Tensor(), t),
                        "conv_transpose2d: Given padding=4611686018427387904 at dimension 0 , expected padding to "
                        "be at most 4611686018427387903");
  t.padding = {0, 0};
  t.stride = {kH, 1};
  CHECK_THROWS_CONTAINS(conv_transpose2d(randn({1, 1, 3, 3}), randn({1, 1, 1, 1}), Tensor(), t),
                        "conv_transpose2d: the calculated output size");
  t.output_padding = {kH - 1, 0};
  CHECK_THROWS_CONTAINS(conv_transpose2d(randn({1, 1, 3, 3}), randn({1, 1, 1, 1}), Tensor(), t),
                        "conv_transpose2d: the calculated output size");
  t.stride = {1, 1};
  t.output_padding = {0, 0};
  t.dilation = {kH, 1};
  CHECK_THROWS_CONTAINS(conv_transpose2d(randn({1, 1, 3, 3}), randn({1, 1, 3, 1}), Tensor(), t),
                        "conv_transpose2d: the calculated output size");
  ConvTranspose3dParams t3;
  t3.stride = {1, kH, 1};
  CHECK_THROWS_CONTAINS(conv_transpose3d(randn({1, 1, 3, 3, 3}), randn({1, 1, 1, 1, 1}), Tensor(), t3),
                        "conv_transpose3d: the calculated output size");
}

TEST_CASE("randint takes any int64 bounds and keeps its stream for ordinary ones") {
  for (int64_t v : randint(kMin, kMax, {64}, TensorOptions(kInt64)).to_vector<int64_t>()) CHECK(v < kMax);
  Generator g(5);
  for (int i = 0; i < 64; ++i) {
    const int64_t v = g.randint(kMin, kMax);
    CHECK(v < kMax);
  }
  // The same values as low + r % (high - low) with rejection sampling.
  Generator a(11), b(11);
  const std::vector<std::pair<int64_t, int64_t>> ranges{{-5, 1000}, {0, 10}, {-3, -1}, {kMin / 2, kMax / 2}};
  for (const auto& [low, high] : ranges) {
    for (int i = 0; i < 32; ++i) {
      const auto range = static_cast<uint64_t>(high - low);
      const uint64_t limit = UINT64_MAX - UINT64_MAX % range;
      uint64_t r;
      do r = b.next_u64(); while (r >= limit);
      CHECK(a.randint(low, high) == low + static_cast<int64_t>(r % range));
    }
  }
}

TEST_CASE("integer sum wraps around as PyTorch's") {
  // 4 * 4.6e18 mod 2^64, as torch.full((4,), 4600000000000000000).sum()
  CHECK(sum(full({4}, 4.6e18, kInt64)).item<int64_t>() == int64_t{-46744073709551616});
  CHECK(sum(tensor<int64_t>({kMax, 1}, {2})).item<int64_t>() == kMin);
  CHECK(sum(tensor<int64_t>({kMax, 1, -1}, {3})).item<int64_t>() == kMax);
  // Past one 16384-element chunk (partial sums combined) and down columns: the
  // same wrap-around as torch.full((40000,), 4600000000000000000).sum().
  CHECK(sum(full({40000}, 4.6e18, kInt64)).item<int64_t>() == int64_t{-6272135252777369600});
  const Tensor columns = sum(full({3, 40000, 2}, 4.6e18, kInt64), {1});
  CHECK(columns.to_vector<int64_t>() == std::vector<int64_t>(6, int64_t{-6272135252777369600}));
}
