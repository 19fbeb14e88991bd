// Linear (y = x W^T + b) and Identity, as torch.nn.Linear / nn.Identity.
#pragma once

#include <cstdint>
#include <string>

#include "minidl/nn/module.h"

namespace minidl::nn {

struct LinearOptions {
  LinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  MINIDL_ARG(int64_t, in_features);
  MINIDL_ARG(int64_t, out_features);
  MINIDL_ARG(bool, bias) = true;
};

// weight: (out_features, in_features), bias: (out_features) or undefined.
// Init as PyTorch's reset_parameters: weight ~ kaiming_uniform_(a=sqrt(5)),
// i.e. U(-1/sqrt(in), 1/sqrt(in)); bias ~ U(-1/sqrt(in), 1/sqrt(in)).
class LinearImpl : public Module {
 public:
  explicit LinearImpl(const LinearOptions& options);
  LinearImpl(int64_t in_features, int64_t out_features)
      : LinearImpl(LinearOptions(in_features, out_features)) {}

  void reset_parameters();
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;  // "in_features=4, out_features=10, bias=True"

  LinearOptions options;
  Tensor weight;
  Tensor bias;
};
MINIDL_MODULE(Linear);

// Returns its input (the same handle).
class IdentityImpl : public Module {
 public:
  IdentityImpl() : Module("Identity") {}
  Tensor forward(const Tensor& input) override { return input; }
};
MINIDL_MODULE(Identity);

}  // namespace minidl::nn
