// nn::Conv3d, nn::ConvTranspose2d/3d and the padding options of nn::Conv2d /
// nn::Conv3d: parameter shapes, PyTorch's default init bounds, forward equal
// to the functional op, reprs as PyTorch prints them, and option errors with
// PyTorch's wording. (Values against PyTorch: tests/test_conv3d_goldens.cpp.)
#include <cmath>

#include "minidl/nn/nn.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::allclose;

namespace {

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

// kaiming_uniform_(a=sqrt(5)) and the bias init both draw from +-1/sqrt(fan_in).
void check_init(const Tensor& w, const Tensor& b, int64_t fan_in) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  CHECK(max_abs(w) <= bound);
  CHECK(max_abs(w) > 0.8 * bound);  // spread over the range, not squeezed
  if (b.defined()) CHECK(max_abs(b) <= bound);
}

}  // namespace

TEST_CASE("Conv3d: shapes, init, forward equals conv3d(), repr, errors") {
  manual_seed(1);
  nn::Conv3d conv(nn::Conv3dOptions(4, 8, 3).padding(1));
  CHECK(conv->weight.shape() == Shape{8, 4, 3, 3, 3});
  CHECK(conv->bias.shape() == Shape{8});
  check_init(conv->weight, conv->bias, 4 * 27);
  Tensor x = randn({2, 4, 5, 6, 7});
  CHECK(allclose(conv(x), conv3d(x, conv->weight, conv->bias, {.padding = {1, 1, 1}}), 0, 0));
  CHECK(conv->extra_repr() == "4, 8, kernel_size=(3, 3, 3), stride=(1, 1, 1), padding=(1, 1, 1)");
  nn::Conv3d g(nn::Conv3dOptions(4, 6, {3, 1, 2}).stride({2, 1, 1}).dilation(2).groups(2).bias(false));
  CHECK(g->weight.shape() == Shape{6, 2, 3, 1, 2});
  CHECK(!g->bias.defined());
  CHECK(g->extra_repr() ==
        "4, 6, kernel_size=(3, 1, 2), stride=(2, 1, 1), dilation=(2, 2, 2), groups=2, bias=False");
  CHECK(nn::Conv3d(3, 4, 2)(randn({3, 5, 5, 5})).shape() == Shape{4, 4, 4, 4});  // unbatched
  CHECK_THROWS_CONTAINS(nn::Conv3d(nn::Conv3dOptions(3, 6, 3).groups(2)), "in_channels must be divisible by groups");
  CHECK_THROWS_CONTAINS(nn::Conv3d(nn::Conv3dOptions(4, 6, 3).stride({1, 0, 1})), "non-positive stride is not supported");
  CHECK_THROWS_CONTAINS(conv(randn({2, 3, 4})),
                        "Expected 4D (unbatched) or 5D (batched) input to conv3d, but got input of size: [2, 3, 4]");
}

TEST_CASE("Conv2d / Conv3d padding='same' / 'valid' and padding_mode") {
  manual_seed(2);
  nn::Conv2d same(nn::Conv2dOptions(2, 3, {4, 3}).padding("same").dilation({1, 2}));
  Tensor x = randn({1, 2, 6, 7});
  CHECK(same(x).shape() == Shape{1, 3, 6, 7});
  // PyTorch's split: extra padding on the right (here (1, 2) rows, (2, 2) columns).
  CHECK(allclose(same(x), conv2d(pad(x, {2, 2, 1, 2}), same->weight, same->bias, {.dilation = {1, 2}}), 1e-6, 1e-6));
  CHECK(same->extra_repr() == "2, 3, kernel_size=(4, 3), stride=(1, 1), padding=same, dilation=(1, 2)");
  nn::Conv2d valid(nn::Conv2dOptions(2, 3, 3).padding("valid").stride(2));
  CHECK(valid(x).shape() == Shape{1, 3, 2, 3});
  CHECK(valid->extra_repr() == "2, 3, kernel_size=(3, 3), stride=(2, 2), padding=valid");
  for (const char* mode : {"reflect", "replicate", "circular"}) {
    CAPTURE(mode);
    nn::Conv2d m(nn::Conv2dOptions(2, 3, 3).padding({1, 2}).padding_mode(mode));
    CHECK(allclose(m(x), conv2d(pad(x, {2, 2, 1, 1}, mode), m->weight, m->bias), 1e-6, 1e-6));
    CHECK(m->extra_repr() == std::string("2, 3, kernel_size=(3, 3), stride=(1, 1), padding=(1, 2), padding_mode=") + mode);
    nn::Conv3d m3(nn::Conv3dOptions(2, 2, {3, 2, 3}).padding("same").padding_mode(mode));
    Tensor x3 = randn({1, 2, 4, 5, 4});
    CHECK(allclose(m3(x3), conv3d(pad(x3, {1, 1, 0, 1, 1, 1}, mode), m3->weight, m3->bias), 1e-6, 1e-6));
  }
  CHECK(nn::Conv3d(nn::Conv3dOptions(2, 4, 3).padding("same").padding_mode("circular"))->extra_repr() ==
        "2, 4, kernel_size=(3, 3, 3), stride=(1, 1, 1), padding=same, padding_mode=circular");
  CHECK_THROWS_CONTAINS(nn::Conv2d(nn::Conv2dOptions(2, 2, 3).padding("same").stride(2)),
                        "padding='same' is not supported for strided convolutions");
  CHECK_THROWS_CONTAINS(nn::Conv3d(nn::Conv3dOptions(2, 2, 3).padding("full")),
                        "Invalid padding string 'full', should be one of {'valid', 'same'}");
  CHECK_THROWS_CONTAINS(nn::Conv2d(nn::Conv2dOptions(2, 2, 3).padding_mode("wrap")),
                        "padding_mode must be one of {'circular', 'reflect', 'zeros', 'replicate'}, but got "
                        "padding_mode='wrap'");
  // reflect needs padding < size, as F.pad.
  CHECK_THROWS_CONTAINS(nn::Conv2d(nn::Conv2dOptions(2, 4, 3).padding(1).padding_mode("reflect"))(randn({1, 2, 1, 1})),
                        "Padding size should be less than the corresponding input dimension");
}

TEST_CASE("ConvTranspose2d / ConvTranspose3d: shapes, init, forward, repr, errors") {
  manual_seed(3);
  nn::ConvTranspose3d up(nn::ConvTranspose3dOptions(8, 4, 2).stride(2));
  CHECK(up->weight.shape() == Shape{8, 4, 2, 2, 2});
  CHECK(up->bias.shape() == Shape{4});
  check_init(up->weight, up->bias, 4 * 8);  // fan_in from weight dimension 1, as PyTorch
  Tensor x = randn({2, 8, 3, 4, 5});
  CHECK(up(x).shape() == Shape{2, 4, 6, 8, 10});
  CHECK(allclose(up(x), conv_transpose3d(x, up->weight, up->bias, {.stride = {2, 2, 2}}), 0, 0));
  CHECK(up->extra_repr() == "8, 4, kernel_size=(2, 2, 2), stride=(2, 2, 2)");
  nn::ConvTranspose2d t(nn::ConvTranspose2dOptions(2, 4, 3).stride(2).padding(1).output_padding(1).dilation(2).groups(2).bias(false));
  CHECK(t->weight.shape() == Shape{2, 2, 3, 3});
  CHECK(t->extra_repr() ==
        "2, 4, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(2, 2), output_padding=(1, 1), groups=2, "
        "bias=False");
  CHECK(t(randn({1, 2, 5, 5})).shape() == Shape{1, 4, 12, 12});
  CHECK(nn::ConvTranspose2d(3, 2, 2)(randn({3, 4, 4})).shape() == Shape{2, 5, 5});  // unbatched
  CHECK_THROWS_CONTAINS(nn::ConvTranspose2d(nn::ConvTranspose2dOptions(2, 2, 3).padding_mode("reflect")),
                        "Only \"zeros\" padding mode is supported for ConvTranspose2d");
  CHECK_THROWS_CONTAINS(nn::ConvTranspose3d(nn::ConvTranspose3dOptions(3, 4, 3).groups(2)),
                        "in_channels must be divisible by groups");
  CHECK_THROWS_CONTAINS(nn::ConvTranspose2d(nn::ConvTranspose2dOptions(2, 2, 3).stride(2).output_padding(2))(randn({1, 2, 3, 3})),
                        "output padding must be smaller than either stride or dilation");
}
