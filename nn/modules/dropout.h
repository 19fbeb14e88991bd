// Dropout, as torch.nn.Dropout: in training zeroes each element with
// probability p and scales the rest by 1/(1-p); identity in eval
// (ops/dropout.h; draws from the default Generator).
#pragma once

#include <string>

#include "minidl/nn/module.h"

namespace minidl::nn {

struct DropoutOptions {
  DropoutOptions(double p = 0.5) : p_(p) {}  // NOLINT: Dropout(0.2)
  MINIDL_ARG(double, p);
};

class DropoutImpl : public Module {
 public:
  explicit DropoutImpl(const DropoutOptions& options = {});
  explicit DropoutImpl(double p) : DropoutImpl(DropoutOptions(p)) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;  // "p=0.5, inplace=False"
  DropoutOptions options;
};
MINIDL_MODULE(Dropout);

}  // namespace minidl::nn
