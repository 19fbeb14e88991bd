// Flatten, as torch.nn.Flatten: flattens dims start_dim..end_dim (default 1..-1).
#pragma once

#include <cstdint>
#include <string>

#include "minidl/nn/module.h"

namespace minidl::nn {

struct FlattenOptions {
  MINIDL_ARG(int64_t, start_dim) = 1;
  MINIDL_ARG(int64_t, end_dim) = -1;
};

class FlattenImpl : public Module {
 public:
  explicit FlattenImpl(const FlattenOptions& options = {}) : Module("Flatten"), options(options) {}
  Tensor forward(const Tensor& input) override { return input.flatten(options.start_dim(), options.end_dim()); }
  std::string extra_repr() const override {
    return "start_dim=" + std::to_string(options.start_dim()) + ", end_dim=" + std::to_string(options.end_dim());
  }
  FlattenOptions options;
};
MINIDL_MODULE(Flatten);

}  // namespace minidl::nn
