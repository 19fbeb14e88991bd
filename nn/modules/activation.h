// Activation layers, as torch.nn: ReLU, LeakyReLU, GELU, Sigmoid, Tanh. Each
// forwards to the op of the same name (ops/unary.h).
#pragma once

#include <string>

#include "minidl/nn/module.h"

namespace minidl::nn {

class ReLUImpl : public Module {
 public:
  ReLUImpl() : Module("ReLU") {}
  Tensor forward(const Tensor& input) override;
};
MINIDL_MODULE(ReLU);

struct LeakyReLUOptions {
  MINIDL_ARG(double, negative_slope) = 0.01;
};

class LeakyReLUImpl : public Module {
 public:
  explicit LeakyReLUImpl(const LeakyReLUOptions& options = {});
  explicit LeakyReLUImpl(double negative_slope) : LeakyReLUImpl(LeakyReLUOptions().negative_slope(negative_slope)) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;  // "negative_slope=0.01"
  LeakyReLUOptions options;
};
MINIDL_MODULE(LeakyReLU);

struct GELUOptions {
  MINIDL_ARG(std::string, approximate) = "none";  // "none" | "tanh"
};

class GELUImpl : public Module {
 public:
  explicit GELUImpl(const GELUOptions& options = {});
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;  // "approximate='none'"
  GELUOptions options;
};
MINIDL_MODULE(GELU);

class SigmoidImpl : public Module {
 public:
  SigmoidImpl() : Module("Sigmoid") {}
  Tensor forward(const Tensor& input) override;
};
MINIDL_MODULE(Sigmoid);

class TanhImpl : public Module {
 public:
  TanhImpl() : Module("Tanh") {}
  Tensor forward(const Tensor& input) override;
};
MINIDL_MODULE(Tanh);

}  // namespace minidl::nn
