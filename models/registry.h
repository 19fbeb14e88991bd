// Models by name, for training scripts and command lines:
//   auto model = models::create_model("resnet20", models::ModelOptions().norm("groupnorm"));
// names: resnet18 (CIFAR ResNet-18), resnet20, resnet56, smallnet, mlp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "minidl/models/model_options.h"
#include "minidl/nn/module.h"

namespace minidl::models {

const std::vector<std::string>& model_names();

// Throws for an unknown name, listing the choices. The MLP takes
// in_channels * input_size^2 features, options.hidden_sizes scaled by width,
// and accepts only norm "none" (or unset).
std::shared_ptr<nn::Module> create_model(const std::string& name, const ModelOptions& options = {});

}  // namespace minidl::models
