// The bias option of BatchNorm, InstanceNorm and GroupNorm (PyTorch's
// keyword-only bias=True): a weight without a bias when affine and bias=false,
// neither without affine. state_dict keys, values and gradients against
// PyTorch 2.15, loading such a checkpoint, and the converters that carry it
// (BatchNorm -> GroupNorm, BatchNorm -> SyncBatchNorm).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "minidl/dist/sync_batch_norm.h"
#include "minidl/nn/modules/batch_norm.h"
#include "minidl/nn/modules/group_norm.h"
#include "minidl/nn/modules/instance_norm.h"
#include "minidl/nn/norm_utils.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::max_abs_diff;

namespace {

std::vector<std::string> keys(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [name, t] : m.state_dict()) out.push_back(name);
  return out;
}

void check_values(const Tensor& got, const std::vector<double>& want, double tol = 1e-12) {
  const std::vector<double> v = got.to_vector<double>();
  REQUIRE(v.size() >= want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(v[i] - want[i]) <= tol * std::max(1.0, std::abs(want[i])));
  }
}

// x and the output gradient of PyTorch's twin: sin(0.37 k) and cos(0.11 k) over (2, 4, 3), weight as below.
Tensor sample(double step, bool cosine) {
  std::vector<double> v;
  for (int k = 0; k < 24; ++k) v.push_back(cosine ? std::cos(step * k) : std::sin(step * k));
  return tensor(v, {2, 4, 3}, kFloat64);
}
const Tensor& weight_values() {
  static const Tensor w = tensor({0.5, 1.5, -1.0, 2.0}, {4}, kFloat64);
  return w;
}

struct Expected {
  std::vector<double> y_head;  // the first 6 outputs
  double y_last;
  std::vector<double> dx_head, dw;
};

template <class M>
void check_against_pytorch(M& m, const Expected& e) {
  m->to(kFloat64);
  {
    NoGradGuard no_grad;
    m->weight.copy_(weight_values());
  }
  const Tensor x = sample(0.37, false).requires_grad_();
  const Tensor y = m(x);
  mul(y, sample(0.11, true)).sum().backward();
  check_values(y.flatten().narrow(0, 0, 6), e.y_head);
  check_values(y.flatten().narrow(0, 23, 1), {e.y_last});
  check_values(x.grad().flatten().narrow(0, 0, 6), e.dx_head);
  check_values(m->weight.grad(), e.dw);
}

}  // namespace

TEST_CASE("bias=false: a weight and no bias; affine=false ignores bias (PyTorch's parameters and state_dict)") {
  nn::BatchNorm2d bn(nn::BatchNormOptions(4).bias(false));
  CHECK(bn->weight.defined());
  CHECK_FALSE(bn->bias.defined());
  CHECK(keys(*bn) == std::vector<std::string>{"weight", "running_mean", "running_var", "num_batches_tracked"});
  CHECK(keys(*nn::BatchNorm1d(nn::BatchNormOptions(3).bias(false).track_running_stats(false))) ==
        std::vector<std::string>{"weight"});
  CHECK(keys(*nn::InstanceNorm2d(nn::InstanceNormOptions(4).affine(true).bias(false))) ==
        std::vector<std::string>{"weight"});
  CHECK(keys(*nn::GroupNorm(nn::GroupNormOptions(2, 4).bias(false))) == std::vector<std::string>{"weight"});
  // affine=False, bias=True: neither parameter (PyTorch prints bias=False).
  nn::BatchNorm2d plain(nn::BatchNormOptions(4).affine(false).bias(true));
  CHECK(plain->parameters().empty());
  CHECK(keys(*plain) == std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"});
  CHECK(nn::GroupNorm(nn::GroupNormOptions(2, 4).affine(false).bias(true))->parameters().empty());
  CHECK(nn::InstanceNorm1d(nn::InstanceNormOptions(4).bias(true))->parameters().empty());

  // A PyTorch bias=False checkpoint loads (it used to miss "bias").
  nn::BatchNorm2d other(nn::BatchNormOptions(4).bias(false));
  nn::NamedTensors state = bn->state_dict();
  state[0].second = full({4}, 2.0);
  CHECK(other->load_state_dict(state).missing_keys.empty());
  CHECK(other->weight.to_vector<double>() == std::vector<double>(4, 2.0));
  state.emplace_back("bias", zeros({4}));
  CHECK_THROWS_CONTAINS(other->load_state_dict(state), "Unexpected key(s) in state_dict: \"bias\".");
}

TEST_CASE("bias=false forward and backward match PyTorch (BatchNorm1d, InstanceNorm1d, GroupNorm)") {
  // PyTorch: m = nn.BatchNorm1d(4, bias=False).double() (InstanceNorm1d(4, affine=True, bias=False),
  // GroupNorm(2, 4, bias=False)); m.weight = [0.5, 1.5, -1, 2]; x = sin(0.37 * arange(24)).reshape(2, 4, 3);
  // (m(x) * cos(0.11 * arange(24)).reshape(2, 4, 3)).sum().backward().
  nn::BatchNorm1d bn(nn::BatchNormOptions(4).bias(false));
  check_against_pytorch(bn, {{0.223371370375366, 0.490377693891704, 0.721245964103394, 1.311409726794291,
                              1.534149355621233, 1.457209031667237},
                             1.5971053237573865,
                             {0.18842747557284387, 0.025141180276862546, -0.1255204181964787, 0.3347474700693242,
                              0.07731990228349009, 0.01841194617414909},
                             {2.4167977022046654, 3.009964766988053, -1.103211246137622, -3.377267891971512}});
  check_values(bn->running_mean,
               {-0.03025191820296011, 0.030586265933390883, 0.057452989005773704, 0.020508000531912984});
  check_values(bn->running_var, {0.9550253231048114, 0.9546185305484597, 0.9073154491483116, 0.9649166122816585});

  nn::InstanceNorm1d in(nn::InstanceNormOptions(4).affine(true).bias(false));
  check_against_pytorch(in, {{-0.626597441688617, 0.029604623723493, 0.596992817965123, -1.989148989421646,
                              1.617490095929882, 0.37165889349176},
                             -2.7851619198899855,
                             {-0.0038510158801924764, 0.008310972254559096, -0.004459956374366418,
                              0.5404548113000156, 1.0072410998755785, -1.547695911175592},
                             {-0.2083289013662758, -0.3314924935766304, -0.04553083916549791, 0.4032388411561689}});

  nn::GroupNorm gn(nn::GroupNormOptions(2, 4).bias(false));
  check_against_pytorch(gn, {{-0.896958295022117, -0.396509635211871, 0.036205646203851, 1.027864697533746,
                              1.443798499347025, 1.300123655209636},
                             0.094210358853925,
                             {0.5921013978229556, -0.4003461604278707, -1.2762301761687724, 0.6984191357876021,
                              0.2543584922744714, 0.13169731071161528},
                             {-2.8846771159460514, 1.5859843217477063, 2.694073070922269, -2.4429233551524523}});
}

TEST_CASE("the BatchNorm converters carry bias=false") {
  // BatchNorm -> GroupNorm: the weight is copied, no bias appears.
  nn::Sequential net(nn::BatchNorm2d(nn::BatchNormOptions(4).bias(false)));
  {
    NoGradGuard no_grad;
    net->at<nn::BatchNorm2dImpl>(0).weight.copy_(tensor({0.5, 1.5, -1.0, 2.0}, {4}));
  }
  const auto report = nn::convert_batch_norm_to_group_norm(*net);
  REQUIRE(report.layers.size() == 1);
  CHECK(report.layers[0].affine);
  CHECK_FALSE(report.layers[0].bias);
  auto& gn = net->at<nn::GroupNormImpl>(0);
  CHECK(gn.options.affine());
  CHECK_FALSE(gn.options.bias());
  CHECK(gn.weight.to_vector<double>() == std::vector<double>{0.5, 1.5, -1.0, 2.0});
  CHECK_FALSE(gn.bias.defined());
  CHECK(keys(*net) == std::vector<std::string>{"0.weight"});
  // BatchNorm -> SyncBatchNorm: the same options and tensors, still no bias.
  std::shared_ptr<nn::Module> bn = nn::BatchNorm2d(nn::BatchNormOptions(4).bias(false)).ptr();
  auto sync = nn::convert_sync_batch_norm(bn);
  auto& s = dynamic_cast<nn::SyncBatchNormImpl&>(*sync);
  CHECK_FALSE(s.options.bias());
  CHECK_FALSE(s.bias.defined());
  CHECK(keys(s) == std::vector<std::string>{"weight", "running_mean", "running_var", "num_batches_tracked"});
  const Tensor x = randn({3, 4, 2, 2});
  CHECK(max_abs_diff(s.forward(x), dynamic_cast<nn::BatchNorm2dImpl&>(*bn).forward(x)) < 1e-6);
}
