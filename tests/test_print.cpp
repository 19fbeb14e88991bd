// PyTorch-style printing. Every expected string below is what PyTorch 2.x's
// repr() printed for the same values (checked by hand with python3 + torch).
#include <limits>
#include <sstream>

#include "tests/test_util.h"

using namespace minidl;

namespace {

Tensor floats(const std::vector<float>& v, const Shape& shape = {}) { return tensor(v, shape); }

std::vector<float> arange_f(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return v;
}

}  // namespace

TEST_CASE("fixed, integral and scientific notation") {
  CHECK(floats({1.4150f, -1.4102f, 0.3f, 2.0f}, {2, 2}).str() ==
        "tensor([[ 1.4150, -1.4102],\n"
        "        [ 0.3000,  2.0000]])");
  CHECK(tensor(std::vector<int64_t>{1, 2, 3}).str() == "tensor([1, 2, 3])");
  CHECK(tensor(std::vector<int64_t>{-5, 10, 123}).str() == "tensor([ -5,  10, 123])");
  CHECK(floats({1, 2, 3}).str() == "tensor([1., 2., 3.])");
  CHECK(floats({1e5f, 1.0f, 2.5f}).str() == "tensor([1.0000e+05, 1.0000e+00, 2.5000e+00])");
  CHECK(floats({1e5f, 2.0f}).str() == "tensor([1.0000e+05, 2.0000e+00])");  // integral, ratio > 1000
  CHECK(floats({1e-5f, 0.5f}).str() == "tensor([1.0000e-05, 5.0000e-01])");
  CHECK(floats({2e8f, 3e8f}).str() == "tensor([2.0000e+08, 3.0000e+08])");
  CHECK(floats({123456789.0f}).str() == "tensor([1.2346e+08])");
  CHECK(floats({0.12345f, 0.00015f, 2.0f / 3.0f}).str() == "tensor([1.2345e-01, 1.5000e-04, 6.6667e-01])");
  CHECK(floats({0.1f}).str() == "tensor([0.1000])");
  CHECK(tensor(std::vector<double>{1e-10, 2e10, 3.0, -4.5}, {2, 2}).str() ==
        "tensor([[ 1.0000e-10,  2.0000e+10],\n"
        "        [ 3.0000e+00, -4.5000e+00]], dtype=torch.float64)");
}

TEST_CASE("nan, inf, zeros") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  CHECK(floats({nan, inf, -inf, 1.5f}).str() == "tensor([   nan,    inf,   -inf, 1.5000])");
  CHECK(floats({nan, inf, 2.0f}).str() == "tensor([nan, inf, 2.])");
  CHECK(floats({-nan}).str() == "tensor([nan])");
  CHECK(floats({0, 0, 0}).str() == "tensor([0., 0., 0.])");
  CHECK(floats({-0.0f, 1.0f}).str() == "tensor([-0., 1.])");
}

TEST_CASE("0-d, empty and dtype suffixes") {
  CHECK(scalar_tensor(3.5).str() == "tensor(3.5000)");
  CHECK(scalar_tensor(7, kInt64).str() == "tensor(7)");
  CHECK(scalar_tensor(2.5, kFloat64).str() == "tensor(2.5000, dtype=torch.float64)");
  CHECK(zeros({0}).str() == "tensor([])");
  CHECK(zeros({2, 0}).str() == "tensor([], size=(2, 0))");
  CHECK(zeros({0}, kInt64).str() == "tensor([], dtype=torch.int64)");
  CHECK(zeros({2, 0, 3}, kFloat64).str() == "tensor([], size=(2, 0, 3), dtype=torch.float64)");
  CHECK(zeros({0, 3}, kUInt8).str() == "tensor([], size=(0, 3), dtype=torch.uint8)");
  CHECK(tensor(std::vector<double>{0.5, -1.25}).str() == "tensor([ 0.5000, -1.2500], dtype=torch.float64)");
  CHECK(tensor(std::vector<uint8_t>{0, 200, 7}).str() == "tensor([  0, 200,   7], dtype=torch.uint8)");
}

TEST_CASE("nested brackets: blank lines between matrices") {
  std::vector<float> q = arange_f(12);
  for (float& v : q) v /= 4.0f;
  CHECK(floats(q, {2, 2, 3}).str() ==
        "tensor([[[0.0000, 0.2500, 0.5000],\n"
        "         [0.7500, 1.0000, 1.2500]],\n"
        "\n"
        "        [[1.5000, 1.7500, 2.0000],\n"
        "         [2.2500, 2.5000, 2.7500]]])");
  std::vector<int64_t> a(24);
  for (int64_t i = 0; i < 24; ++i) a[i] = i;
  CHECK(tensor(a, {2, 2, 2, 3}).str() ==
        "tensor([[[[ 0,  1,  2],\n"
        "          [ 3,  4,  5]],\n"
        "\n"
        "         [[ 6,  7,  8],\n"
        "          [ 9, 10, 11]]],\n"
        "\n"
        "\n"
        "        [[[12, 13, 14],\n"
        "          [15, 16, 17]],\n"
        "\n"
        "         [[18, 19, 20],\n"
        "          [21, 22, 23]]]])");
}

TEST_CASE("a strided view prints its own element order") {
  std::vector<float> v;
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 7; ++c) v.push_back(r == 7 ? 2.0f : 1.0f);
  const std::string row = "[1., 1., 1., 1., 1., 1., 1., 2.]";
  std::string want = "tensor([" + row;
  for (int k = 1; k < 7; ++k) want += ",\n        " + row;
  CHECK(floats(v, {8, 7}).t().str() == want + "])");
}

TEST_CASE("long rows wrap at 80 columns") {
  std::vector<float> v = arange_f(30);
  for (float& x : v) x /= 3.0f;
  CHECK(floats(v).str() ==
        "tensor([0.0000, 0.3333, 0.6667, 1.0000, 1.3333, 1.6667, 2.0000, 2.3333, 2.6667,\n"
        "        3.0000, 3.3333, 3.6667, 4.0000, 4.3333, 4.6667, 5.0000, 5.3333, 5.6667,\n"
        "        6.0000, 6.3333, 6.6667, 7.0000, 7.3333, 7.6667, 8.0000, 8.3333, 8.6667,\n"
        "        9.0000, 9.3333, 9.6667])");
  std::vector<int64_t> w;
  for (int64_t i = 0; i < 30; ++i) w.push_back(i * 1000);
  CHECK(tensor(w).str() ==
        "tensor([    0,  1000,  2000,  3000,  4000,  5000,  6000,  7000,  8000,  9000,\n"
        "        10000, 11000, 12000, 13000, 14000, 15000, 16000, 17000, 18000, 19000,\n"
        "        20000, 21000, 22000, 23000, 24000, 25000, 26000, 27000, 28000, 29000])");
}

TEST_CASE("summarization with ... beyond 1000 elements") {
  CHECK(floats(arange_f(2000)).str() ==
        "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n"
        "        1.9990e+03])");
  std::vector<float> b = arange_f(2000);
  for (float& x : b) x = (x - 1000.0f) / 7.0f;
  CHECK(floats(b, {40, 50}).str() ==
        "tensor([[-142.8571, -142.7143, -142.5714,  ..., -136.1429, -136.0000,\n"
        "         -135.8571],\n"
        "        [-135.7143, -135.5714, -135.4286,  ..., -129.0000, -128.8571,\n"
        "         -128.7143],\n"
        "        [-128.5714, -128.4286, -128.2857,  ..., -121.8571, -121.7143,\n"
        "         -121.5714],\n"
        "        ...,\n"
        "        [ 121.4286,  121.5714,  121.7143,  ...,  128.1429,  128.2857,\n"
        "          128.4286],\n"
        "        [ 128.5714,  128.7143,  128.8571,  ...,  135.2857,  135.4286,\n"
        "          135.5714],\n"
        "        [ 135.7143,  135.8571,  136.0000,  ...,  142.4286,  142.5714,\n"
        "          142.7143]])");
  std::vector<int64_t> c(1200);
  for (int64_t i = 0; i < 1200; ++i) c[i] = i;
  const std::string s = tensor(c, {10, 10, 12}).str();
  const std::string head =
      "tensor([[[   0,    1,    2,  ...,    9,   10,   11],\n"
      "         [  12,   13,   14,  ...,   21,   22,   23],\n"
      "         [  24,   25,   26,  ...,   33,   34,   35],\n"
      "         ...,\n"
      "         [  84,   85,   86,  ...,   93,   94,   95],\n"
      "         [  96,   97,   98,  ...,  105,  106,  107],\n"
      "         [ 108,  109,  110,  ...,  117,  118,  119]],\n"
      "\n"
      "        [[ 120,  121,  122,  ...,  129,  130,  131],\n";
  const std::string middle =
      "         [ 348,  349,  350,  ...,  357,  358,  359]],\n"
      "\n"
      "        ...,\n"
      "\n"
      "        [[ 840,  841,  842,  ...,  849,  850,  851],\n";
  const std::string tail =
      "         [1176, 1177, 1178,  ..., 1185, 1186, 1187],\n"
      "         [1188, 1189, 1190,  ..., 1197, 1198, 1199]]])";
  CHECK(s.rfind(head, 0) == 0);
  CHECK(s.find(middle) != std::string::npos);
  CHECK(s.size() >= tail.size());
  CHECK(s.compare(s.size() - tail.size(), tail.size(), tail) == 0);
}

TEST_CASE("autograd suffixes, wrapped past 80 columns") {
  CHECK(floats({1, 2}).requires_grad_(true).str() == "tensor([1., 2.], requires_grad=True)");
  std::vector<double> v;
  for (int i = 0; i < 9; ++i) v.push_back(i / 3.0);
  CHECK(tensor(v).requires_grad_(true).str() ==
        "tensor([0.0000, 0.3333, 0.6667, 1.0000, 1.3333, 1.6667, 2.0000, 2.3333, 2.6667],\n"
        "       dtype=torch.float64, requires_grad=True)");
  CHECK(tensor(std::vector<double>{1.5, 2.25, 3.0, 4.5, 5.0, 6.0, 7.25, 8.0, 9.0, 10.5})
            .requires_grad_(true)
            .str() ==
        "tensor([ 1.5000,  2.2500,  3.0000,  4.5000,  5.0000,  6.0000,  7.2500,  8.0000,\n"
        "         9.0000, 10.5000], dtype=torch.float64, requires_grad=True)");
  // PyTorch names the node SumBackward0; minidl's nodes carry no overload number.
  Tensor x = floats({1, 2, 3}).requires_grad_(true);
  CHECK(x.sum().str() == "tensor(6., grad_fn=<SumBackward>)");
}

TEST_CASE("operator<< and undefined tensors") {
  std::ostringstream os;
  os << tensor(std::vector<int64_t>{4, 5});
  CHECK(os.str() == "tensor([4, 5])");
  CHECK(Tensor().str() == "[ Tensor (undefined) ]");
}
