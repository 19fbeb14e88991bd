// Learning-rate schedulers: PyTorch's recurrences (get_lr) and closed forms
// (_get_closed_form_lr), transcribed term by term so the float64 sequences
// match torch.optim.lr_scheduler to rounding. See lr_scheduler.h.
#include "minidl/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "minidl/core/check.h"
#include "minidl/core/json_int.h"
#include "minidl/optim/adam.h"
#include "minidl/optim/sgd.h"

namespace minidl::optim {

using json = nlohmann::json;

// ---- LRScheduler --------------------------------------------------------------

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (ParamGroup& g : optimizer_.param_groups()) {
    if (!g.options->initial_lr) g.options->initial_lr = g.options->lr;
    base_lrs_.push_back(*g.options->initial_lr);
  }
}

std::vector<double> LRScheduler::group_lrs() const {
  std::vector<double> lrs;
  for (const ParamGroup& g : optimizer_.param_groups()) lrs.push_back(g.lr());
  return lrs;
}

void LRScheduler::apply(const std::vector<double>& lrs) {
  auto& groups = optimizer_.param_groups();
  MINIDL_CHECK(lrs.size() == groups.size(), "LRScheduler: the optimizer has ", groups.size(),
               " parameter groups, the scheduler was built for ", lrs.size());
  for (size_t i = 0; i < groups.size(); ++i) groups[i].set_lr(lrs[i]);
  last_lr_ = group_lrs();
  on_lrs_applied();
}

void LRScheduler::check_group_count() const {
  MINIDL_CHECK(optimizer_.param_groups().size() == base_lrs_.size(), "LRScheduler: the optimizer has ",
               optimizer_.param_groups().size(), " parameter groups, the scheduler was built for ", base_lrs_.size(),
               " (add parameter groups before creating the scheduler)");
}

void LRScheduler::step() {
  check_group_count();
  ++step_count_;
  ++last_epoch_;
  apply(get_lr());
}

void LRScheduler::initial_step() {
  step_count_ = 0;
  is_initial_ = true;
  LRScheduler::step();
  is_initial_ = false;
}

void LRScheduler::step_to(int64_t epoch) {
  check_group_count();
  last_epoch_ = epoch;
  apply(closed_form_lr());
}

json LRScheduler::state_dict() const {
  return json{{"last_epoch", last_epoch_}, {"_step_count", step_count_}, {"base_lrs", base_lrs_},
              {"_last_lr", last_lr_}};
}

void LRScheduler::load_state_dict(const json& state) {
  try {
    auto base_lrs = state.at("base_lrs").get<std::vector<double>>();
    auto last_lr = state.at("_last_lr").get<std::vector<double>>();
    MINIDL_CHECK(base_lrs.size() == optimizer_.param_groups().size() && last_lr.size() == base_lrs.size(),
                 "LRScheduler.load_state_dict: the state is for ", base_lrs.size(),
                 " parameter groups, the optimizer has ", optimizer_.param_groups().size());
    last_epoch_ = json_int64(state.at("last_epoch"), "LRScheduler.load_state_dict: last_epoch");
    step_count_ = json_int64(state.at("_step_count"), "LRScheduler.load_state_dict: _step_count");
    base_lrs_ = std::move(base_lrs);
    last_lr_ = std::move(last_lr);
  } catch (const json::exception& e) {
    MINIDL_FAIL("LRScheduler.load_state_dict: bad state: ", e.what());
  }
}

// ---- StepLR ---------------------------------------------------------------------

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  MINIDL_CHECK(step_size > 0, "StepLR: expected a positive step_size, got ", step_size);
  initial_step();
}

std::vector<double> StepLR::get_lr() const {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return lrs;
  for (double& lr : lrs) lr *= gamma_;
  return lrs;
}

std::vector<double> StepLR::closed_form_lr() const {
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * std::pow(gamma_, static_cast<double>(last_epoch_ / step_size_)));
  return lrs;
}

// ---- MultiStepLR ----------------------------------------------------------------

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  initial_step();
}

std::vector<double> MultiStepLR::get_lr() const {
  std::vector<double> lrs = group_lrs();
  const auto hits = std::count(milestones_.begin(), milestones_.end(), last_epoch_);
  if (hits == 0) return lrs;
  for (double& lr : lrs) lr *= std::pow(gamma_, static_cast<double>(hits));
  return lrs;
}

std::vector<double> MultiStepLR::closed_form_lr() const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin();
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * std::pow(gamma_, static_cast<double>(passed)));
  return lrs;
}

// ---- CosineAnnealingLR ----------------------------------------------------------

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), T_max_(T_max), eta_min_(eta_min) {
  MINIDL_CHECK(T_max > 0, "CosineAnnealingLR: expected a positive T_max, got ", T_max);
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() const {
  constexpr double pi = std::numbers::pi;
  std::vector<double> lrs = group_lrs();
  const double e = static_cast<double>(last_epoch_), T = static_cast<double>(T_max_);
  if (is_initial_) return lrs;
  for (size_t i = 0; i < lrs.size(); ++i) {
    if (step_count_ == 1 && last_epoch_ > 0)
      lrs[i] = eta_min_ + (base_lrs_[i] - eta_min_) * (1 + std::cos(e * pi / T)) / 2;
    else if ((last_epoch_ - 1 - T_max_) % (2 * T_max_) == 0)  // the bottom of a cycle: the ratio below is 0/0
      lrs[i] = lrs[i] + (base_lrs_[i] - eta_min_) * (1 - std::cos(pi / T)) / 2;
    else
      lrs[i] = (1 + std::cos(pi * e / T)) / (1 + std::cos(pi * (e - 1) / T)) * (lrs[i] - eta_min_) + eta_min_;
  }
  return lrs;
}

std::vector<double> CosineAnnealingLR::closed_form_lr() const {
  constexpr double pi = std::numbers::pi;
  std::vector<double> lrs;
  for (double base : base_lrs_)
    lrs.push_back(eta_min_ + (base - eta_min_) *
                                 (1 + std::cos(pi * static_cast<double>(last_epoch_) / static_cast<double>(T_max_))) /
                                 2);
  return lrs;
}

// ---- LinearLR -------------------------------------------------------------------

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer), start_factor_(start_factor), end_factor_(end_factor), total_iters_(total_iters) {
  MINIDL_CHECK(start_factor > 0.0 && start_factor <= 1.0,
               "Starting multiplicative factor expected to be greater than 0 and less or equal to 1.");
  MINIDL_CHECK(end_factor >= 0.0 && end_factor <= 1.0, "Ending multiplicative factor expected to be between 0 and 1.");
  MINIDL_CHECK(total_iters > 0, "LinearLR: expected a positive total_iters, got ", total_iters);
  initial_step();
}

std::vector<double> LinearLR::get_lr() const {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) {
    for (double& lr : lrs) lr *= start_factor_;
    return lrs;
  }
  if (is_initial_ || last_epoch_ > total_iters_) return lrs;
  const double slope = end_factor_ - start_factor_;
  for (double& lr : lrs)
    lr *= 1.0 + slope / (static_cast<double>(total_iters_) * start_factor_ +
                         static_cast<double>(last_epoch_ - 1) * slope);
  return lrs;
}

std::vector<double> LinearLR::closed_form_lr() const {
  std::vector<double> lrs;
  const double done = static_cast<double>(std::min(total_iters_, last_epoch_));
  for (double base : base_lrs_)
    lrs.push_back(base * (start_factor_ + (end_factor_ - start_factor_) * done / static_cast<double>(total_iters_)));
  return lrs;
}

// ---- OneCycleLR -----------------------------------------------------------------

OneCycleLR::OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps, double pct_start,
                       Anneal anneal_strategy, double div_factor, double final_div_factor, bool three_phase,
                       Momentum momentum)
    : OneCycleLR(optimizer, std::vector<double>(optimizer.param_groups().size(), max_lr), total_steps, pct_start,
                 anneal_strategy, div_factor, final_div_factor, three_phase, momentum) {}

namespace {
// OneCycleLR sets initial_lr before the base constructor reads it (as
// PyTorch); the argument checks come first too.
Optimizer& set_one_cycle_initial_lrs(Optimizer& optimizer, const std::vector<double>& max_lrs, double div_factor,
                                     double final_div_factor, int64_t total_steps, double pct_start,
                                     bool cycle_momentum) {
  MINIDL_CHECK(total_steps > 0, "Expected positive integer total_steps, but got ", total_steps);
  // PyTorch divides by both at construction (ZeroDivisionError); here a 0
  // gave an inf or NaN learning rate that the optimizer then used.
  MINIDL_CHECK(div_factor != 0.0, "OneCycleLR: float division by zero (div_factor is 0)");
  MINIDL_CHECK(final_div_factor != 0.0, "OneCycleLR: float division by zero (final_div_factor is 0)");
  MINIDL_CHECK(pct_start >= 0.0 && pct_start <= 1.0, "Expected float between 0 and 1 pct_start, but got ",
               pct_start);
  auto& groups = optimizer.param_groups();
  for (const ParamGroup& g : groups)
    MINIDL_CHECK(!cycle_momentum || dynamic_cast<const SGDOptions*>(g.options.get()) ||
                     dynamic_cast<const AdamOptions*>(g.options.get()),
                 "optimizer must support momentum or beta1 with `cycle_momentum` option enabled");
  MINIDL_CHECK(max_lrs.size() == groups.size(), "expected ", groups.size(), " values for max_lr, got ",
               max_lrs.size());
  for (size_t i = 0; i < groups.size(); ++i) groups[i].options->initial_lr = max_lrs[i] / div_factor;
  return optimizer;
}
}  // namespace

OneCycleLR::OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, int64_t total_steps, double pct_start,
                       Anneal anneal_strategy, double div_factor, double final_div_factor, bool three_phase,
                       Momentum momentum)
    : LRScheduler(set_one_cycle_initial_lrs(optimizer, max_lrs, div_factor, final_div_factor, total_steps,
                                            pct_start, momentum.cycle)),
      total_steps_(total_steps),
      anneal_(anneal_strategy),
      momentum_(momentum) {
  const double total = static_cast<double>(total_steps);
  if (three_phase) {
    phases_ = {{pct_start * total - 1, 0, 1, true, false},
               {2 * pct_start * total - 2, 1, 0, false, true},
               {total - 1, 0, 2, true, true}};
  } else {
    phases_ = {{pct_start * total - 1, 0, 1, true, false}, {total - 1, 1, 2, false, true}};
  }
  for (size_t i = 0; i < max_lrs.size(); ++i) {
    const double initial = max_lrs[i] / div_factor;
    group_lrs_.push_back({initial, max_lrs[i], initial / final_div_factor});
  }
  if (momentum_.cycle)
    for (ParamGroup& g : optimizer.param_groups()) set_momentum(g, momentum_.max);
  initial_step();
}

void OneCycleLR::set_momentum(ParamGroup& group, double value) const {
  if (auto* sgd = dynamic_cast<SGDOptions*>(group.options.get()))
    sgd->momentum = value;
  else if (auto* adam = dynamic_cast<AdamOptions*>(group.options.get()))
    adam->beta1 = value;
  else
    MINIDL_FAIL("optimizer must support momentum or beta1 with `cycle_momentum` option enabled");
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (anneal_ == Anneal::Cos) return end + (start - end) / 2.0 * (std::cos(std::numbers::pi * pct) + 1);
  return (end - start) * pct + start;
}

std::pair<const OneCycleLR::Phase*, double> OneCycleLR::phase_at() const {
  const int64_t step_num = last_epoch_;
  MINIDL_CHECK(step_num <= total_steps_, "Tried to step ", step_num, " times. The specified number of total steps is ",
               total_steps_);
  double start_step = 0.0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& phase = phases_[i];
    if (static_cast<double>(step_num) <= phase.end_step || i + 1 == phases_.size()) {
      // A phase of no steps (e.g. pct_start 1, or 0.1 of 10 steps): PyTorch
      // raises ZeroDivisionError on reaching it; here it wrote NaN lrs.
      MINIDL_CHECK(phase.end_step != start_step, "OneCycleLR: float division by zero at step ", step_num,
                   ": phase ", i + 1, " of the schedule has no steps (total_steps ", total_steps_, ")");
      return {&phase, (static_cast<double>(step_num) - start_step) / (phase.end_step - start_step)};
    }
    start_step = phase.end_step;
  }
  MINIDL_ASSERT(false, "OneCycleLR: no phase");
  return {nullptr, 0.0};
}

std::vector<double> OneCycleLR::get_lr() const {
  const auto [phase, pct] = phase_at();
  std::vector<double> lrs;
  for (const auto& lr_of : group_lrs_) lrs.push_back(anneal(lr_of[phase->start], lr_of[phase->end], pct));
  return lrs;
}

void OneCycleLR::on_lrs_applied() {
  if (!momentum_.cycle) return;
  const auto [phase, pct] = phase_at();
  const double from = phase->momentum_from_max ? momentum_.max : momentum_.base;
  const double to = phase->momentum_to_max ? momentum_.max : momentum_.base;
  for (ParamGroup& g : optimizer_.param_groups()) set_momentum(g, anneal(from, to, pct));
}

// ---- LinearWarmup ---------------------------------------------------------------

LinearWarmup::LinearWarmup(Optimizer& optimizer, std::unique_ptr<LRScheduler> after, int64_t warmup_steps,
                           double start_factor)
    : LRScheduler(optimizer), after_(std::move(after)), warmup_steps_(warmup_steps) {
  MINIDL_CHECK(after_ != nullptr, "LinearWarmup: got no scheduler to run after the warmup");
  MINIDL_CHECK(&after_->optimizer() == &optimizer,
               "LinearWarmup expects all schedulers to belong to the same optimizer");
  MINIDL_CHECK(warmup_steps > 0, "LinearWarmup: expected a positive number of warmup steps, got ", warmup_steps);
  // As SequentialLR: back to the initial lrs, undo `after`'s initial step, and
  // let the warmup take epoch 0.
  for (ParamGroup& g : optimizer.param_groups()) g.set_lr(*g.options->initial_lr);
  after_->last_epoch_ -= 1;
  warmup_ = std::make_unique<LinearLR>(optimizer, start_factor, 1.0, warmup_steps);
  last_epoch_ = 0;
  step_count_ = 1;
  last_lr_ = warmup_->get_last_lr();
}

void LinearWarmup::step() {
  ++step_count_;
  ++last_epoch_;
  if (last_epoch_ < warmup_steps_) {
    warmup_->step();
    last_lr_ = warmup_->get_last_lr();
    return;
  }
  if (last_epoch_ == warmup_steps_)
    after_->step_to(0);
  else
    after_->step();
  last_lr_ = after_->get_last_lr();
}

json LinearWarmup::state_dict() const {
  json j = LRScheduler::state_dict();
  j["warmup"] = warmup_->state_dict();
  j["after"] = after_->state_dict();
  return j;
}

void LinearWarmup::load_state_dict(const json& state) {
  MINIDL_CHECK(state.contains("warmup") && state.contains("after"),
               "LinearWarmup.load_state_dict: expected \"warmup\" and \"after\" entries");
  LRScheduler::load_state_dict(state);
  warmup_->load_state_dict(state.at("warmup"));
  after_->load_state_dict(state.at("after"));
}

double scaled_lr(double base_lr, int64_t global_batch, int64_t base_batch) {
  MINIDL_CHECK(global_batch > 0 && base_batch > 0, "scaled_lr: expected positive batch sizes, got global_batch=",
               global_batch, " and base_batch=", base_batch);
  return base_lr * static_cast<double>(global_batch) / static_cast<double>(base_batch);
}

}  // namespace minidl::optim
