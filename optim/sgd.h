// SGD with momentum, dampening, weight decay and Nesterov momentum, as
// torch.optim.SGD (the same defaults, update order and error messages).
#pragma once

#include "minidl/optim/optimizer.h"

namespace minidl::optim {

struct SGDOptions : OptionsBase<SGDOptions> {
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;

  explicit SGDOptions(double lr = 1e-3) { this->lr = lr; }
  void to_json(nlohmann::json& j) const override;
  void from_json(const nlohmann::json& j) override;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, double lr = 1e-3, double momentum = 0.0, double dampening = 0.0,
      double weight_decay = 0.0, bool nesterov = false);
  SGD(std::vector<ParamGroup> groups, const SGDOptions& defaults);

 protected:
  void check_options(const ParamGroup& group) const override;
  void step_group(ParamGroup& group) override;
};

}  // namespace minidl::optim
