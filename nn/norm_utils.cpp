// BatchNorm utilities: freezing, BN -> GroupNorm conversion, PreciseBN and the
// statistics report. See nn/norm_utils.h for the semantics.
//
// PreciseBN math, per channel, for calls k with batch size b_k, batch mean m_k
// and unbiased batch variance v_k (what a BN forward with momentum 1.0 leaves
// in its buffers):
//   population:   N = sum b_k, mean = sum b_k m_k / N,
//                 var = (sum (b_k - 1) v_k + sum b_k (m_k - mean)^2) / N
//                 which equals fvcore's E[x^2] - mean^2 with E[x^2] =
//                 sum b_k (m_k^2 + v_k (b_k - 1) / b_k) / N, but is merged
//                 call by call with Chan's formula in float64, so no
//                 cancellation of two large numbers.
//   mean of batch variance: mean = sum m_k / K, var = sum v_k / K.
#include "minidl/nn/norm_utils.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <ostream>
#include <set>
#include <sstream>

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/check.h"
#include "minidl/nn/modules/group_norm.h"

namespace minidl::nn {

namespace {

std::string join_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::string display_name(const std::string& name) { return name.empty() ? "(root)" : name; }

// "%.4g": short numbers for tables.
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

// Preorder, each module once: fn(dotted name, module, parent or nullptr for the root).
// M is Module or const Module.
template <class M, class Fn>
void for_each_module(M& root, Fn&& fn) {
  std::set<const Module*> seen{&root};
  fn(std::string(), root, static_cast<M*>(nullptr));
  std::function<void(M&, const std::string&)> visit = [&](M& parent, const std::string& prefix) {
    for (const auto& [name, child] : parent.named_children()) {
      if (!seen.insert(child.get()).second) continue;
      const std::string full = join_name(prefix, name);
      M& c = *child;
      fn(full, c, &parent);
      visit(c, full);
    }
  };
  visit(root, "");
}

// Left-aligned columns, two spaces apart; rows[0] is the header.
void print_table(std::ostream& os, const std::vector<std::vector<std::string>>& rows, const std::string& indent) {
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  for (const auto& row : rows) {
    std::string line = indent;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    line.erase(line.find_last_not_of(' ') + 1);
    os << line << "\n";
  }
}

}  // namespace

bool is_batch_norm(const Module& module) { return dynamic_cast<const BatchNormImplBase*>(&module) != nullptr; }

// ---- freezing ------------------------------------------------------------------------

std::vector<std::string> freeze_batch_norm(Module& model) {
  std::vector<std::string> frozen;
  for_each_module(model, [&](const std::string& name, Module& m, Module*) {
    if (!is_batch_norm(m)) return;
    m.set_eval_locked(true);
    frozen.push_back(name);
  });
  return frozen;
}

std::vector<std::string> unfreeze_batch_norm(Module& model) {
  std::vector<std::string> unfrozen;
  for_each_module(model, [&](const std::string& name, Module& m, Module* parent) {
    if (!is_batch_norm(m) || !m.is_eval_locked()) return;
    m.set_eval_locked(false);
    if (parent) m.train(parent->is_training());
    unfrozen.push_back(name);
  });
  return unfrozen;
}

// ---- BatchNorm -> GroupNorm ------------------------------------------------------------

int64_t group_norm_groups_for(int64_t num_channels, int64_t max_groups) {
  MINIDL_CHECK(max_groups >= 1, "group_norm_groups_for: expected max_groups >= 1, got ", max_groups);
  MINIDL_CHECK(num_channels >= 0, "group_norm_groups_for: expected num_channels >= 0, got ", num_channels);
  if (num_channels == 0) return 1;
  for (int64_t g = std::min(max_groups, num_channels); g > 1; --g)
    if (num_channels % g == 0) return g;
  return 1;
}

namespace {

// The GroupNorm that takes `module`'s place, and the report line for it.
std::shared_ptr<GroupNormImpl> make_group_norm(const Module& module, int64_t max_groups, bool training,
                                               GroupNormConversion& record) {
  const auto& bn = dynamic_cast<const BatchNormImplBase&>(module);
  const BatchNormOptions& o = bn.options;
  record.from = bn.name();
  record.num_channels = o.num_features();
  record.num_groups = group_norm_groups_for(o.num_features(), max_groups);
  record.eps = o.eps();
  record.affine = bn.weight.defined();
  record.bias = bn.bias.defined();
  record.dropped_running_stats = bn.running_mean.defined() || bn.running_var.defined();
  if (bn.num_batches_tracked.defined())
    record.dropped_num_batches_tracked = bn.num_batches_tracked.to_vector<int64_t>().at(0);  // host copy

  auto gn = std::make_shared<GroupNormImpl>(
      GroupNormOptions(record.num_groups, record.num_channels).eps(record.eps).affine(record.affine).bias(record.bias));
  // Same device and floating dtype as the BN.
  const Tensor& like = bn.weight.defined() ? bn.weight : bn.running_mean;
  if (like.defined()) {
    if (!like.device().is_cpu()) gn->to(like.device());
    if (is_floating(like.dtype()) && like.dtype() != kFloat32) gn->to(like.dtype());
  }
  NoGradGuard no_grad;
  if (gn->weight.defined()) {
    gn->weight.copy_(bn.weight);
    gn->weight.requires_grad_(bn.weight.requires_grad());
  }
  if (gn->bias.defined()) {
    gn->bias.copy_(bn.bias);
    gn->bias.requires_grad_(bn.bias.requires_grad());
  }
  gn->train(training);
  return gn;
}

// A registry entry holding a BN: the parent and the child's name there.
struct BatchNormSlot {
  Module* parent;
  std::string child_name;
  std::string full_name;
};

// Every registry entry under `root` that holds a BN (a shared BN once per
// entry), preorder; BNs are not entered.
std::vector<BatchNormSlot> batch_norm_slots(Module& root) {
  std::vector<BatchNormSlot> slots;
  std::set<const Module*> seen{&root};
  std::function<void(Module&, const std::string&)> visit = [&](Module& parent, const std::string& prefix) {
    for (const auto& [name, child] : parent.named_children()) {
      const std::string full = join_name(prefix, name);
      if (is_batch_norm(*child))
        slots.push_back({&parent, name, full});
      else if (seen.insert(child.get()).second)
        visit(*child, full);
    }
  };
  visit(root, "");
  return slots;
}

}  // namespace

GroupNormConversionReport convert_batch_norm_to_group_norm(Module& model, int64_t max_groups) {
  MINIDL_CHECK(max_groups >= 1, "convert_batch_norm_to_group_norm: expected max_groups >= 1, got ", max_groups);
  MINIDL_CHECK(!is_batch_norm(model), "convert_batch_norm_to_group_norm: the model itself is a ", model.name(),
               ", which cannot be replaced through a Module&; pass it as a std::shared_ptr<Module>&, which is "
               "reassigned to the new GroupNorm");
  GroupNormConversionReport report;
  std::map<const Module*, size_t> index_of;  // old BN -> its report line
  std::vector<std::shared_ptr<Module>> old_bns, new_gns;
  for (const BatchNormSlot& slot : batch_norm_slots(model)) {
    std::shared_ptr<Module> bn = slot.parent->child(slot.child_name);
    auto it = index_of.find(bn.get());
    if (it == index_of.end()) {
      GroupNormConversion record;
      record.name = slot.full_name;
      new_gns.push_back(make_group_norm(*bn, max_groups, slot.parent->is_training(), record));
      report.layers.push_back(record);
      old_bns.push_back(bn);
      it = index_of.emplace(bn.get(), old_bns.size() - 1).first;
    }
    slot.parent->replace_module(slot.child_name, new_gns[it->second]);
  }
  // Every registry entry now holds the GroupNorm; old_bns should be the last owners.
  for (size_t i = 0; i < old_bns.size(); ++i) report.layers[i].still_referenced = old_bns[i].use_count() > 1;
  return report;
}

GroupNormConversionReport convert_batch_norm_to_group_norm(std::shared_ptr<Module>& model, int64_t max_groups) {
  MINIDL_CHECK(model != nullptr, "convert_batch_norm_to_group_norm: the model is empty (nullptr)");
  if (!is_batch_norm(*model)) return convert_batch_norm_to_group_norm(*model, max_groups);
  MINIDL_CHECK(max_groups >= 1, "convert_batch_norm_to_group_norm: expected max_groups >= 1, got ", max_groups);
  GroupNormConversionReport report;
  GroupNormConversion record;  // name "" (the root)
  std::shared_ptr<Module> gn = make_group_norm(*model, max_groups, model->is_training(), record);
  std::weak_ptr<Module> old = model;
  model = std::move(gn);
  record.still_referenced = !old.expired();
  report.layers.push_back(record);
  report.root_replaced = true;
  return report;
}

std::ostream& operator<<(std::ostream& os, const GroupNormConversionReport& report) {
  os << "convert_batch_norm_to_group_norm: " << report.layers.size() << " layer(s) converted"
     << (report.root_replaced ? " (the root module was replaced)" : "") << "\n";
  if (report.layers.empty()) return os;
  std::vector<std::vector<std::string>> rows{{"layer", "from", "C", "groups", "eps", "affine", "bias", "dropped"}};
  for (const auto& l : report.layers) {
    std::string dropped;
    if (l.dropped_running_stats) dropped = "running_mean, running_var";
    if (l.dropped_num_batches_tracked)
      dropped += (dropped.empty() ? "" : ", ") + std::string("num_batches_tracked=") +
                 std::to_string(*l.dropped_num_batches_tracked);
    rows.push_back({display_name(l.name), l.from, std::to_string(l.num_channels), std::to_string(l.num_groups),
                    repr_float(l.eps), repr_bool(l.affine), repr_bool(l.affine && l.bias),
                    dropped.empty() ? "-" : dropped});
  }
  print_table(os, rows, "  ");
  for (const auto& l : report.layers)
    if (l.still_referenced)
      os << "  warning: something besides the registry still holds the old " << display_name(l.name) << " ("
         << l.from << "); if it is a typed member handle, the parent's forward still calls the "
         << l.from << ": hold swappable children as nn::AnyModule\n";
  return os;
}

// ---- PreciseBN ------------------------------------------------------------------------------

const char* estimator_name(PreciseBNEstimator estimator) {
  return estimator == PreciseBNEstimator::Population ? "population" : "mean_of_batch_variance";
}

namespace {

// One BN layer being recomputed: what to restore, and the estimator's state.
struct PreciseLayer {
  BatchNormImplBase* bn = nullptr;
  std::string name;
  bool saved = false;
  std::optional<double> momentum;
  Tensor saved_mean, saved_var, saved_num_batches_tracked;
  HookId hook = -1;
  bool written = false;  // the estimate replaced the running stats
  int64_t pending = 0;   // batch size of a call whose stats still sit in the buffers
  int64_t calls = 0, samples = 0;
  std::vector<double> mean, acc;  // acc: sum of squared deviations (population) or mean variance
};

// Folds the statistics the last call left in the buffers into the estimate.
void fold(PreciseLayer& l, PreciseBNEstimator estimator) {
  const int64_t b = l.pending;
  l.pending = 0;
  if (b <= 0) return;
  const std::vector<double> m = l.bn->running_mean.to_vector<double>();
  const std::vector<double> v = l.bn->running_var.to_vector<double>();  // unbiased, momentum 1
  if (l.mean.empty()) {
    l.mean.assign(m.size(), 0.0);
    l.acc.assign(m.size(), 0.0);
  }
  ++l.calls;
  const double n_old = static_cast<double>(l.samples), nb = static_cast<double>(b);
  l.samples += b;
  const double n = static_cast<double>(l.samples), k = static_cast<double>(l.calls);
  for (size_t c = 0; c < m.size(); ++c) {
    if (estimator == PreciseBNEstimator::Population) {
      const double delta = m[c] - l.mean[c];
      l.mean[c] += delta * nb / n;
      l.acc[c] += v[c] * (nb - 1.0) + delta * delta * n_old * nb / n;
    } else {
      l.mean[c] += (m[c] - l.mean[c]) / k;
      l.acc[c] += (v[c] - l.acc[c]) / k;
    }
  }
}

// Puts momentum, num_batches_tracked and (unless an estimate was written) the
// running stats back, and removes the hooks, however precise_bn ends.
struct PreciseRestorer {
  std::vector<PreciseLayer>& layers;
  ~PreciseRestorer() {
    for (PreciseLayer& l : layers) {
      if (!l.saved) continue;
      try {
        NoGradGuard no_grad;
        BatchNormImplBase& bn = *l.bn;
        if (l.hook >= 0) bn.remove_forward_pre_hook(l.hook);
        bn.options.momentum(l.momentum);
        if (l.saved_num_batches_tracked.defined()) bn.num_batches_tracked.copy_(l.saved_num_batches_tracked);
        if (!l.written) {
          bn.running_mean.copy_(l.saved_mean);
          bn.running_var.copy_(l.saved_var);
        }
      } catch (...) {  // destructors never throw
        std::cerr << "precise_bn: could not restore " << display_name(l.name) << "\n";
      }
    }
  }
};

Tensor host_values(const std::vector<double>& values, const Tensor& like) {
  return tensor(values, {static_cast<int64_t>(values.size())}, kFloat64).to(like.device());
}

}  // namespace

PreciseBNResult precise_bn(Module& model, const BatchSource& next_batch, int64_t num_batches,
                           PreciseBNEstimator estimator) {
  MINIDL_CHECK(num_batches > 0, "precise_bn: num_batches must be positive, got ", num_batches);
  MINIDL_CHECK(next_batch != nullptr, "precise_bn: the batch source is empty");
  PreciseBNResult result;
  result.estimator = estimator;
  result.batches_requested = num_batches;

  std::vector<PreciseLayer> layers;
  for_each_module(model, [&](const std::string& name, Module& m, Module*) {
    if (!is_batch_norm(m) || !m.is_training()) return;
    auto& bn = dynamic_cast<BatchNormImplBase&>(m);
    if (!bn.options.track_running_stats() || !bn.running_mean.defined() || !bn.running_var.defined()) {
      result.skipped.push_back(name);
      return;
    }
    PreciseLayer l;
    l.bn = &bn;
    l.name = name;
    layers.push_back(std::move(l));
  });
  if (layers.empty()) {
    result.message = "precise_bn: no BatchNorm layer with running stats is in training mode; nothing done";
    return result;
  }

  NoGradGuard no_grad;
  PreciseRestorer restorer{layers};  // `layers` does not grow from here on: the hooks point into it
  for (PreciseLayer& l : layers) {
    BatchNormImplBase& bn = *l.bn;
    l.momentum = bn.options.momentum();
    l.saved_mean = bn.running_mean.clone();
    l.saved_var = bn.running_var.clone();
    if (bn.num_batches_tracked.defined()) l.saved_num_batches_tracked = bn.num_batches_tracked.clone();
    l.saved = true;
    bn.options.momentum(1.0);
    // With momentum 1 the old values are multiplied by 0: clear them so a
    // non-finite value cannot leak in (0 * inf = nan).
    bn.running_mean.zero_();
    bn.running_var.fill_(1.0);
    l.hook = bn.register_forward_pre_hook([&l, estimator](Module&, const Tensor& input) {
      fold(l, estimator);  // an earlier call in this forward (a reused BN)
      const int64_t C = input.size(1);
      l.pending = C > 0 ? input.numel() / C : 0;
    });
  }

  while (result.batches_run < num_batches) {
    std::optional<Tensor> batch = next_batch();
    if (!batch) break;
    model.forward(*batch);
    ++result.batches_run;
    for (PreciseLayer& l : layers) fold(l, estimator);
  }

  for (PreciseLayer& l : layers) {
    result.layers.push_back({l.name, l.calls, l.samples});
    if (l.calls == 0) continue;  // unused: the restorer puts the old stats back
    std::vector<double> var = l.acc;
    if (estimator == PreciseBNEstimator::Population)
      for (double& v : var) v /= static_cast<double>(l.samples);
    l.bn->running_mean.copy_(host_values(l.mean, l.bn->running_mean));
    l.bn->running_var.copy_(host_values(var, l.bn->running_var));
    l.written = true;
  }

  if (result.batches_run < num_batches) {
    std::ostringstream msg;
    msg << "precise_bn is meant to run for " << num_batches << " iterations, but the data stops at "
        << result.batches_run << " iterations; ";
    if (result.batches_run == 0)
      msg << "the running statistics are left unchanged";
    else
      msg << "the statistics use those " << result.batches_run << " batches";
    result.message = msg.str();
    std::cerr << "warning: " << result.message << "\n";
  }
  return result;
}

PreciseBNResult precise_bn(Module& model, const std::vector<Tensor>& batches, int64_t num_batches,
                           PreciseBNEstimator estimator) {
  MINIDL_CHECK(num_batches == -1 || num_batches > 0, "precise_bn: num_batches must be positive or -1 (all), got ",
               num_batches);
  if (num_batches == -1) {
    MINIDL_CHECK(!batches.empty(), "precise_bn: the list of batches is empty");
    num_batches = static_cast<int64_t>(batches.size());
  }
  size_t next = 0;
  return precise_bn(
      model,
      [&]() -> std::optional<Tensor> {
        if (next == batches.size()) return std::nullopt;
        return batches[next++];
      },
      num_batches, estimator);
}

std::ostream& operator<<(std::ostream& os, const PreciseBNResult& result) {
  os << "precise_bn (" << estimator_name(result.estimator) << " estimator): " << result.batches_run << " of "
     << result.batches_requested << " batches, " << result.layers.size() << " layer(s)\n";
  if (!result.layers.empty()) {
    std::vector<std::vector<std::string>> rows{{"layer", "calls", "samples", ""}};
    for (const auto& l : result.layers)
      rows.push_back({display_name(l.name), std::to_string(l.calls), std::to_string(l.samples),
                      l.calls == 0 ? "unused: statistics unchanged" : ""});
    print_table(os, rows, "  ");
  }
  for (const auto& name : result.skipped)
    os << "  skipped " << display_name(name) << ": in training mode without running stats\n";
  if (!result.message.empty()) os << "  " << result.message << "\n";
  return os;
}

// ---- statistics report ------------------------------------------------------------------

namespace {
ValueSummary summarize(const Tensor& t) {
  ValueSummary s;
  if (!t.defined()) return s;
  s.defined = true;
  const std::vector<double> v = t.to_vector<double>();
  if (v.empty()) return s;
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  double sum = 0.0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  return s;
}

std::string summary_str(const ValueSummary& s) {
  return s.defined ? num(s.min) + " / " + num(s.mean) + " / " + num(s.max) : "-";
}
}  // namespace

BatchNormLayerStats batch_norm_layer_stats(const std::string& name, const NormBaseImpl& bn) {
  BatchNormLayerStats s;
  s.name = name;
  s.type = bn.name();
  s.num_features = bn.options.num_features();
  s.running_mean = summarize(bn.running_mean);
  s.running_var = summarize(bn.running_var);
  if (bn.num_batches_tracked.defined())
    s.num_batches_tracked = bn.num_batches_tracked.to_vector<int64_t>().at(0);  // host copy
  s.momentum = bn.options.momentum();
  s.eps = bn.options.eps();
  s.training = bn.is_training();
  s.frozen = bn.is_eval_locked();
  return s;
}

BatchNormReport batch_norm_report(const Module& model) {
  BatchNormReport report;
  for_each_module(model, [&](const std::string& name, const Module& m, const Module*) {
    if (is_batch_norm(m)) report.layers.push_back(batch_norm_layer_stats(name, dynamic_cast<const NormBaseImpl&>(m)));
  });
  return report;
}

std::ostream& operator<<(std::ostream& os, const BatchNormReport& report) {
  os << "BatchNorm report: " << report.layers.size() << " layer(s)\n";
  if (report.layers.empty()) return os;
  std::vector<std::vector<std::string>> rows{{"layer", "type", "C", "running_mean min / mean / max",
                                              "running_var min / mean / max", "batches", "momentum", "mode"}};
  for (const auto& l : report.layers)
    rows.push_back({display_name(l.name), l.type, std::to_string(l.num_features), summary_str(l.running_mean),
                    summary_str(l.running_var),
                    l.num_batches_tracked ? std::to_string(*l.num_batches_tracked) : "-",
                    l.momentum ? repr_float(*l.momentum) : "None",
                    l.frozen ? "frozen" : (l.training ? "train" : "eval")});
  print_table(os, rows, "  ");
  return os;
}

}  // namespace minidl::nn
