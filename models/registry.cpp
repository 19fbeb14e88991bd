// create_model: the models of models/ by name. See models/registry.h.
#include "minidl/models/registry.h"

#include "minidl/core/check.h"
#include "minidl/models/mlp.h"
#include "minidl/models/resnet_cifar.h"
#include "minidl/models/small_net.h"

namespace minidl::models {

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names{"resnet18", "resnet20", "resnet56", "smallnet", "mlp"};
  return names;
}

std::shared_ptr<nn::Module> create_model(const std::string& name, const ModelOptions& options) {
  if (name == "resnet18") return resnet18_cifar(options).ptr();
  if (name == "resnet20") return resnet20(options).ptr();
  if (name == "resnet56") return resnet56(options).ptr();
  if (name == "smallnet") return SmallNet(options).ptr();
  if (name == "mlp") {
    const std::string norm = options.norm_or("none");
    MINIDL_CHECK(norm == "none", "create_model: the mlp has no normalization layers; expected norm 'none' (or unset), got '",
                 norm, "'");
    MINIDL_CHECK(options.input_size() > 0, "create_model: expected input_size > 0 for the mlp, got ",
                 options.input_size());
    MINIDL_CHECK(options.in_channels() > 0, "create_model: expected in_channels > 0, got ", options.in_channels());
    std::vector<int64_t> hidden;
    for (int64_t h : options.hidden_sizes()) {
      MINIDL_CHECK(h > 0, "create_model: expected hidden sizes > 0 for the mlp, got ", h);
      hidden.push_back(scaled_width(h, options.width()));
    }
    int64_t in_features = 0;  // in_channels * input_size^2, refused when it overflows (was undefined behaviour)
    MINIDL_CHECK(!__builtin_mul_overflow(options.input_size(), options.input_size(), &in_features) &&
                     !__builtin_mul_overflow(in_features, options.in_channels(), &in_features),
                 "create_model: in_channels ", options.in_channels(), " x input_size ", options.input_size(), "^2 ",
                 "overflows int64 for the mlp");
    return MLP(in_features, hidden, options.num_classes()).ptr();
  }
  std::string choices;
  for (const std::string& n : model_names()) choices += (choices.empty() ? "" : ", ") + n;
  MINIDL_FAIL("create_model: unknown model '", name, "'; expected one of: ", choices);
}

}  // namespace minidl::models
