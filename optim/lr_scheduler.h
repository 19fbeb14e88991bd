// Learning-rate schedulers, as torch.optim.lr_scheduler: the same recurrences
// (PyTorch's "chainable" get_lr, which reads each group's current lr), so the
// lr sequences match torch's to rounding. Call scheduler.step() after
// optimizer.step(), once per epoch or iteration as the schedule counts.
//
//   optim::SGD opt(model->parameters(), 0.1, 0.9);
//   optim::LinearWarmup sched(opt, std::make_unique<optim::CosineAnnealingLR>(opt, 95), 5, 0.1);
//   for (...) { ...; opt.step(); sched.step(); }
//
// Construction does the initial step (last_epoch 0) and sets each group's lr,
// as PyTorch. The first scheduler on an optimizer records each group's lr as
// its initial_lr (kept in the optimizer's state_dict); schedulers count from
// initial_lr. To resume: build optimizer and scheduler as before, then
// load both state dicts.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "minidl/optim/optimizer.h"

namespace minidl::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances one epoch (or iteration) and sets every group's lr.
  virtual void step();
  // The lrs set by the last step (or by construction), one per group.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  Optimizer& optimizer() const { return optimizer_; }

  // The counters (last_epoch, step count, base_lrs, last_lr) as JSON, e.g. for
  // a safetensors metadata entry. Hyper-parameters (gamma, T_max, ...) come
  // from construction and are not part of it.
  virtual nlohmann::json state_dict() const;
  virtual void load_state_dict(const nlohmann::json& state);

 protected:
  explicit LRScheduler(Optimizer& optimizer);

  // The lrs for last_epoch_, PyTorch's chainable get_lr (it may read the
  // groups' current lrs).
  virtual std::vector<double> get_lr() const = 0;
  // PyTorch's _get_closed_form_lr: the lrs for last_epoch_ from base_lrs
  // alone; used when a wrapper restarts this scheduler at epoch 0. The default
  // is get_lr().
  virtual std::vector<double> closed_form_lr() const { return get_lr(); }
  // Every derived constructor ends with this (PyTorch's _initial_step; a base
  // constructor cannot call the derived get_lr).
  void initial_step();
  // Jumps to `epoch` with the closed form (PyTorch's step(epoch)).
  void step_to(int64_t epoch);
  std::vector<double> group_lrs() const;
  void check_group_count() const;
  // Sets every group's lr and last_lr_, then calls on_lrs_applied().
  void apply(const std::vector<double>& lrs);
  // Called after every change of the lrs, for schedulers that also set other
  // options (OneCycleLR's momentum).
  virtual void on_lrs_applied() {}

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = -1;
  int64_t step_count_ = 0;
  bool is_initial_ = false;  // inside initial_step()

  friend class LinearWarmup;
};

// lr = base_lr * gamma^(epoch / step_size)
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  std::vector<double> get_lr() const override;
  std::vector<double> closed_form_lr() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr = base_lr * gamma^(number of milestones <= epoch); a milestone listed
// twice counts twice (as PyTorch's Counter).
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);

 protected:
  std::vector<double> get_lr() const override;
  std::vector<double> closed_form_lr() const override;

 private:
  std::vector<int64_t> milestones_;  // sorted
  double gamma_;
};

// lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2,
// through PyTorch's recurrence (which keeps going past T_max, rising again).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);

 protected:
  std::vector<double> get_lr() const override;
  std::vector<double> closed_form_lr() const override;

 private:
  int64_t T_max_;
  double eta_min_;
};

// lr = base_lr * factor, factor linear from start_factor (epoch 0) to
// end_factor (epoch total_iters), then constant.
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);

 protected:
  std::vector<double> get_lr() const override;
  std::vector<double> closed_form_lr() const override;

 private:
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

// The 1cycle policy, per iteration: from max_lr / div_factor up to max_lr over
// the first pct_start of total_steps, then down to initial / final_div_factor
// (cosine or linear annealing); three_phase comes back to the initial lr
// before the final descent. Stepping past total_steps throws. Sets each
// group's initial_lr, as PyTorch. With cycle_momentum (PyTorch's default) the
// momentum (SGD's momentum, Adam's beta1) moves inversely to the lr, between
// max_momentum and base_momentum; it is set on the groups (starting at
// max_momentum, even for an SGD built without momentum, as PyTorch).
struct OneCycleMomentum {
  bool cycle = true;  // PyTorch's cycle_momentum
  double base = 0.85;
  double max = 0.95;
};

class OneCycleLR : public LRScheduler {
 public:
  enum class Anneal { Cos, Linear };
  using Momentum = OneCycleMomentum;
  OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps, double pct_start = 0.3,
             Anneal anneal_strategy = Anneal::Cos, double div_factor = 25.0, double final_div_factor = 1e4,
             bool three_phase = false, Momentum momentum = {});
  // One max_lr per parameter group.
  OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, int64_t total_steps, double pct_start = 0.3,
             Anneal anneal_strategy = Anneal::Cos, double div_factor = 25.0, double final_div_factor = 1e4,
             bool three_phase = false, Momentum momentum = {});

 protected:
  std::vector<double> get_lr() const override;
  void on_lrs_applied() override;

 private:
  struct Phase {
    double end_step;
    int start, end;                  // lr: 0 initial_lr, 1 max_lr, 2 min_lr
    bool momentum_from_max, momentum_to_max;
  };
  // The phase of last_epoch_ and how far into it (PyTorch's pct).
  std::pair<const Phase*, double> phase_at() const;
  double anneal(double start, double end, double pct) const;
  void set_momentum(ParamGroup& group, double value) const;

  std::vector<Phase> phases_;
  std::vector<std::array<double, 3>> group_lrs_;  // initial, max, min per group
  int64_t total_steps_;
  Anneal anneal_;
  Momentum momentum_;
};

// Linear warmup in front of any scheduler, as PyTorch's
// SequentialLR([LinearLR(start_factor, 1.0, warmup_steps), after], milestones=[warmup_steps]):
// for epoch < warmup_steps, lr = initial_lr * (start_factor + (1 - start_factor) * epoch / warmup_steps);
// at warmup_steps `after` restarts at its epoch 0 (its closed form) and runs from there.
// `after` must be built on the same optimizer (before this wrapper, as in PyTorch).
class LinearWarmup : public LRScheduler {
 public:
  LinearWarmup(Optimizer& optimizer, std::unique_ptr<LRScheduler> after, int64_t warmup_steps,
               double start_factor = 1.0 / 3);
  void step() override;
  nlohmann::json state_dict() const override;  // adds "warmup" and "after"
  void load_state_dict(const nlohmann::json& state) override;
  LRScheduler& after() const { return *after_; }

 protected:
  std::vector<double> get_lr() const override { return last_lr_; }

 private:
  std::unique_ptr<LRScheduler> after_;
  std::unique_ptr<LinearLR> warmup_;
  int64_t warmup_steps_;
};

// The linear scaling rule for large batches (Goyal et al. 2017):
// base_lr * global_batch / base_batch.
double scaled_lr(double base_lr, int64_t global_batch, int64_t base_batch = 256);

}  // namespace minidl::optim
