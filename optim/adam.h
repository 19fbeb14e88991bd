// Adam and AdamW, as torch.optim.Adam / torch.optim.AdamW (single-tensor
// path, same defaults, bias correction and error messages). Adam adds
// weight_decay * p to the gradient (L2); AdamW decays the weights directly
// (decoupled: p *= 1 - lr * weight_decay) and defaults weight_decay to 1e-2.
#pragma once

#include <utility>

#include "minidl/optim/optimizer.h"

namespace minidl::optim {

struct AdamOptions : OptionsBase<AdamOptions> {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  bool amsgrad = false;

  explicit AdamOptions(double lr = 1e-3) { this->lr = lr; }
  void to_json(nlohmann::json& j) const override;  // betas as [beta1, beta2], as PyTorch
  void from_json(const nlohmann::json& j) override;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, double lr = 1e-3, std::pair<double, double> betas = {0.9, 0.999},
       double eps = 1e-8, double weight_decay = 0.0, bool amsgrad = false);
  Adam(std::vector<ParamGroup> groups, const AdamOptions& defaults);

 protected:
  Adam(std::string name, std::vector<ParamGroup> groups, const AdamOptions& defaults, bool decoupled);
  void check_options(const ParamGroup& group) const override;
  void step_group(ParamGroup& group) override;

 private:
  bool decoupled_weight_decay_ = false;
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, double lr = 1e-3, std::pair<double, double> betas = {0.9, 0.999},
        double eps = 1e-8, double weight_decay = 1e-2, bool amsgrad = false);
  AdamW(std::vector<ParamGroup> groups, const AdamOptions& defaults);
};

}  // namespace minidl::optim
