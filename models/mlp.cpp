// MLP. See models/mlp.h.
#include "minidl/models/mlp.h"

#include <string>

#include "minidl/core/check.h"
#include "minidl/nn/modules/activation.h"
#include "minidl/nn/modules/linear.h"

namespace minidl::models {

MLPImpl::MLPImpl(int64_t in_features, const std::vector<int64_t>& hidden_sizes, int64_t num_classes)
    : Module("MLP"), in_features(in_features) {
  MINIDL_CHECK(in_features > 0, "MLP: expected in_features > 0, got ", in_features);
  MINIDL_CHECK(num_classes > 0, "MLP: expected num_classes > 0, got ", num_classes);
  nn::Sequential seq;
  int64_t in = in_features;
  for (int64_t h : hidden_sizes) {
    MINIDL_CHECK(h > 0, "MLP: expected hidden sizes > 0, got ", h);
    seq->push_back(nn::Linear(in, h));
    seq->push_back(nn::ReLU());
    in = h;
  }
  seq->push_back(nn::Linear(in, num_classes));
  layers = register_module("layers", seq);
}

Tensor MLPImpl::forward(const Tensor& input) {
  MINIDL_CHECK(input.defined() && input.dim() >= 2, "MLP: expected an input with a batch dim (N, ...), got ",
               input.defined() ? std::to_string(input.dim()) + "D" : std::string("an undefined tensor"));
  Tensor x = input.dim() > 2 ? input.flatten(1) : input;
  MINIDL_CHECK(x.size(1) == in_features, "MLP: expected ", in_features, " features per sample, got ", x.size(1));
  return layers(x);
}

}  // namespace minidl::models
