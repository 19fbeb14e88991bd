// One BatchNorm2d training step, by minidl and by hand.
//
// Input x of shape (1, 2, 2, 2), BatchNorm2d(2, eps=1e-5, momentum=0.1) in
// train mode, with running_mean = [2, 2] and running_var = [1, 1]. PyTorch
// gives (published numbers, 4 decimals):
//   y            = [[[[ 1.4150, -1.4102], [ 0.0257, -0.0305]],
//                    [[-0.9276, -0.1964], [ 1.6731, -0.5491]]]]
//   running_mean = [1.8233, 1.8065]
//   running_var  = [0.9007, 1.1187]
// The program runs minidl's nn::BatchNorm2d, then recomputes every number from the
// formulas, printing each intermediate, and exits non-zero unless both agree
// with the published numbers to 4 decimals.
//
// x is torch.manual_seed(42); torch.randn(1, 2, 2, 2), written out in full.
// Printed to 4 decimals it reads [0.3367, 0.1288, 0.2345, 0.2303, ...], but
// those rounded values do NOT give the published y: channel 0's standard
// deviation is only ~0.074, so normalizing multiplies the rounding error
// (up to 5e-5) by 1/std ~ 13. The last section shows this.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "examples/common/main_guard.h"
#include "minidl/minidl.h"
#include "minidl/nn/modules/batch_norm.h"

using namespace minidl;

namespace {

constexpr int64_t kChannels = 2;
constexpr int kPerChannel = 4;  // n = N*H*W = 1*2*2
constexpr double kEps = 1e-5, kMomentum = 0.1;

const std::vector<float> kInput = {0.33669036626815796f,  0.12880940735340118f, 0.23446236550807953f,
                                   0.23033303022384644f,  -1.1228563785552979f, -0.18632829189300537f,
                                   2.2082014083862305f,   -0.637997031211853f};
const std::vector<double> kPublishedY = {1.4150, -1.4102, 0.0257, -0.0305, -0.9276, -0.1964, 1.6731, -0.5491};
const std::vector<double> kPublishedMean = {1.8233, 1.8065};
const std::vector<double> kPublishedVar = {0.9007, 1.1187};

std::string list(const std::vector<double>& v, int decimals = 4) {
  std::string s = "[";
  char buf[32];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.*f", i ? ", " : "", decimals, v[i]);
    s += buf;
  }
  return s + "]";
}

template <class T>
std::vector<double> as_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

struct Result {
  std::vector<double> y, running_mean, running_var;
  std::vector<double> batch_var;  // biased, per channel (by_hand only)
};

// One training forward of minidl's BatchNorm2d (float32, weight 1, bias 0).
Result run_minidl(const std::vector<float>& input) {
  nn::BatchNorm2d bn(nn::BatchNormOptions(kChannels).eps(kEps).momentum(kMomentum));
  {
    NoGradGuard no_grad;
    bn->running_mean.fill_(2.0);
    bn->running_var.fill_(1.0);
  }
  bn->train();
  Tensor y = bn(tensor(input, {1, kChannels, 2, 2}));
  return {y.to_vector<double>(), bn->running_mean.to_vector<double>(), bn->running_var.to_vector<double>(), {}};
}

// The same step from the formulas, in double, printing every intermediate.
// With one sample, channel c's n values are x[4c .. 4c+3].
Result by_hand(const std::vector<float>& input, bool verbose) {
  Result r{std::vector<double>(input.size()), {}, {}, {}};
  const double n = kPerChannel;
  for (int64_t c = 0; c < kChannels; ++c) {
    const std::vector<double> v(input.begin() + c * kPerChannel, input.begin() + (c + 1) * kPerChannel);
    double sum = 0.0;
    for (double e : v) sum += e;
    const double mean = sum / n;
    std::vector<double> dev, dev2;
    double ss = 0.0;
    for (double e : v) {
      dev.push_back(e - mean);
      dev2.push_back((e - mean) * (e - mean));
      ss += (e - mean) * (e - mean);
    }
    const double var_biased = ss / n;
    const double invstd = 1.0 / std::sqrt(var_biased + kEps);
    std::vector<double> y;
    for (double d : dev) y.push_back(d * invstd);
    const double var_unbiased = var_biased * n / (n - 1);
    const double new_mean = (1 - kMomentum) * 2.0 + kMomentum * mean;
    const double new_var = (1 - kMomentum) * 1.0 + kMomentum * var_unbiased;
    for (int64_t k = 0; k < kPerChannel; ++k) r.y[c * kPerChannel + k] = y[k];
    r.running_mean.push_back(new_mean);
    r.running_var.push_back(new_var);
    r.batch_var.push_back(var_biased);
    if (!verbose) continue;
    std::printf("channel %lld: its n = N*H*W = %d values x = %s\n", static_cast<long long>(c), kPerChannel,
                list(v, 6).c_str());
    std::printf("  batch mean         mean = sum(x) / n = %.6f / %d = %.6f\n", sum, kPerChannel, mean);
    std::printf("  deviations         x - mean = %s\n", list(dev, 6).c_str());
    std::printf("  squared            (x - mean)^2 = %s\n", list(dev2, 6).c_str());
    std::printf("  biased variance    var = sum((x - mean)^2) / n = %.6f / %d = %.6f   <- normalizes\n", ss,
                kPerChannel, var_biased);
    std::printf("  inverse std        invstd = 1 / sqrt(var + eps) = 1 / sqrt(%.6f + %g) = %.6f\n", var_biased,
                kEps, invstd);
    std::printf("  output             y = (x - mean) * invstd (weight 1, bias 0) = %s\n", list(y).c_str());
    std::printf("  unbiased variance  var * n / (n - 1) = %.6f * %d / %d = %.6f   <- goes into running_var\n",
                var_biased, kPerChannel, kPerChannel - 1, var_unbiased);
    std::printf("  running_mean       (1 - m) * 2 + m * mean = 0.9 * 2 + 0.1 * %.6f = %.6f\n", mean, new_mean);
    std::printf("  running_var        (1 - m) * 1 + m * unbiased = 0.9 * 1 + 0.1 * %.6f = %.6f\n\n", var_unbiased,
                new_var);
  }
  return r;
}

// Agrees with a 4-decimal published number: within half a unit of the 4th decimal.
bool check(const char* what, const std::vector<double>& got, const std::vector<double>& published) {
  bool ok = got.size() == published.size();
  for (size_t i = 0; ok && i < got.size(); ++i) ok = std::abs(got[i] - published[i]) <= 0.5e-4 + 1e-9;
  std::printf("  %-26s %s  published %s  %s\n", what, list(got).c_str(), list(published).c_str(),
              ok ? "ok" : "MISMATCH");
  return ok;
}

}  // namespace

static int program() {
  std::printf("BatchNorm2d(2, eps=1e-05, momentum=0.1), train mode, running_mean = [2, 2], running_var = [1, 1]\n");
  std::printf("x (1, 2, 2, 2) = %s (full float32 values: %s)\n\n", list(as_double(kInput)).c_str(),
              list(as_double(kInput), 8).c_str());

  std::printf("1. minidl's nn::BatchNorm2d (float32)\n");
  const Result lib = run_minidl(kInput);
  std::printf("  y            = %s\n  running_mean = %s\n  running_var  = %s\n\n", list(lib.y).c_str(),
              list(lib.running_mean).c_str(), list(lib.running_var).c_str());

  std::printf("2. By hand, per channel (float64)\n");
  const Result hand = by_hand(kInput, /*verbose=*/true);

  std::printf("3. Both against the published numbers (4 decimals)\n");
  bool ok = true;
  ok &= check("minidl y", lib.y, kPublishedY);
  ok &= check("minidl running_mean", lib.running_mean, kPublishedMean);
  ok &= check("minidl running_var", lib.running_var, kPublishedVar);
  ok &= check("by hand y", hand.y, kPublishedY);
  ok &= check("by hand running_mean", hand.running_mean, kPublishedMean);
  ok &= check("by hand running_var", hand.running_var, kPublishedVar);

  // Why x must be given in full: the 4-decimal input moves channel 0's output
  // in the 4th decimal, while the running stats do not notice.
  std::vector<float> rounded;
  for (float e : kInput) rounded.push_back(static_cast<float>(std::round(e * 1e4) / 1e4));
  const Result r = run_minidl(rounded);
  std::printf("\n4. Aside: the input rounded to 4 decimals, %s, gives\n", list(as_double(rounded)).c_str());
  const double std0 = std::sqrt(hand.batch_var[0] + kEps);
  std::printf("  y = %s\n  (channel 0's std is %.4f: every input error is multiplied by 1/std = %.1f)\n",
              list(r.y).c_str(), std0, 1.0 / std0);
  std::printf("  running_mean = %s, running_var = %s\n", list(r.running_mean).c_str(), list(r.running_var).c_str());

  std::printf("\n%s\n", ok ? "minidl and the hand computation both reproduce PyTorch's numbers"
                           : "MISMATCH: see above");
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  return minidl::examples::run_main_without_arguments(
      "bn_by_hand", "The published BatchNorm2d example run through minidl and recomputed by hand.", argc, argv, program);
}
