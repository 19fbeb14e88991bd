// ModelOptions: what every model constructor in models/ takes.
//
//   auto opts = models::ModelOptions().norm("groupnorm").num_classes(100).width(0.5);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "minidl/nn/options.h"

namespace minidl::models {

struct ModelOptions {
  // A make_norm kind (models/norm_factory.h). Unset: the model's default,
  // "batchnorm" for the conv nets and "none" for the MLP (which has no norm
  // layers and accepts only "none").
  MINIDL_ARG(std::optional<std::string>, norm);
  MINIDL_ARG(int64_t, num_classes) = 10;
  MINIDL_ARG(int64_t, in_channels) = 3;  // 3 for CIFAR, 1 for (Fashion-)MNIST
  // Multiplies every layer width (channels, MLP hidden sizes); each width is
  // rounded to the nearest integer, at least 1. 1.0: the published model.
  MINIDL_ARG(double, width) = 1.0;
  // MLP only: images are input_size x input_size (32 for CIFAR, 28 for MNIST),
  // so in_features = in_channels * input_size^2; and its hidden layer sizes.
  MINIDL_ARG(int64_t, input_size) = 32;
  MINIDL_ARG(std::vector<int64_t>, hidden_sizes) = std::vector<int64_t>{512, 256};

  // The norm kind to use given the model's default.
  std::string norm_or(const std::string& fallback) const { return norm_ ? *norm_ : fallback; }
};

// round(base * width), at least 1; throws unless width > 0 and the result fits int64.
int64_t scaled_width(int64_t base, double width);

}  // namespace minidl::models
