// batch_norm_report_across_ranks: gathers every BN layer's running statistics
// from all ranks and reports, per layer, the largest difference between two
// ranks (max over ranks minus min over ranks, per channel, then the max over
// channels). See dist/batch_norm_report.h.
#include "minidl/dist/batch_norm_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <ostream>
#include <set>
#include <sstream>

#include "minidl/core/check.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/non_group_member.h"
#include "minidl/nn/norm_utils.h"
#include "minidl/ops/shape_ops.h"

namespace minidl::dist {

namespace {

struct LayerRef {
  std::string name;
  const nn::NormBaseImpl* bn;
};

// BatchNorm and SyncBatchNorm layers (nn::is_batch_norm), preorder, each once.
std::vector<LayerRef> batch_norm_layers(const nn::Module& root) {
  std::vector<LayerRef> layers;
  std::set<const nn::Module*> seen{&root};
  auto add = [&](const std::string& name, const nn::Module& m) {
    if (nn::is_batch_norm(m)) layers.push_back({name, dynamic_cast<const nn::NormBaseImpl*>(&m)});
  };
  add("", root);
  std::function<void(const nn::Module&, const std::string&)> visit = [&](const nn::Module& parent,
                                                                         const std::string& prefix) {
    for (const auto& [name, child] : parent.named_children()) {
      if (!seen.insert(child.get()).second) continue;
      const std::string full = prefix.empty() ? name : prefix + "." + name;
      add(full, *child);
      visit(*child, full);
    }
  };
  visit(root, "");
  return layers;
}

bool has_running_stats(const nn::NormBaseImpl& bn) { return bn.running_mean.defined() && bn.running_var.defined(); }

// Largest (max - min) over ranks of values[r * stride + offset + c], over c < C.
void spread(const std::vector<double>& values, int world, int64_t stride, int64_t offset, int64_t C, double& diff,
            int64_t& channel) {
  diff = 0.0;
  channel = C > 0 ? 0 : -1;
  for (int64_t c = 0; c < C; ++c) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    bool nan = false;
    for (int r = 0; r < world; ++r) {
      const double v = values[static_cast<size_t>(r * stride + offset + c)];
      nan = nan || std::isnan(v);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    const double d = nan ? std::numeric_limits<double>::quiet_NaN() : (lo == hi ? 0.0 : hi - lo);
    if (std::isnan(d)) {
      diff = d, channel = c;
      return;
    }
    if (d > diff) diff = d, channel = c;
  }
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

}  // namespace

double CrossRankBatchNormReport::max_running_mean_diff() const {
  double m = 0.0;
  for (const auto& l : layers)
    if (l.has_running_stats && (std::isnan(l.running_mean_diff) || l.running_mean_diff > m)) m = l.running_mean_diff;
  return m;
}

double CrossRankBatchNormReport::max_running_var_diff() const {
  double m = 0.0;
  for (const auto& l : layers)
    if (l.has_running_stats && (std::isnan(l.running_var_diff) || l.running_var_diff > m)) m = l.running_var_diff;
  return m;
}

CrossRankBatchNormReport batch_norm_report_across_ranks(const nn::Module& model, const ProcessGroupPtr& group_) {
  const ProcessGroupPtr group = group_ ? group_ : default_group();
  MINIDL_CHECK(!is_non_group_member(group), "batch_norm_report_across_ranks: global rank ", get_rank(),
               " is not a member of the given process group");
  const int W = group->size();
  const std::vector<LayerRef> refs = batch_norm_layers(model);

  // This rank's statistics, layer after layer: [running_mean(C), running_var(C), num_batches_tracked],
  // gathered on the statistics' device (a device backend needs device tensors).
  Device device = kCPU;
  for (const LayerRef& ref : refs)
    if (has_running_stats(*ref.bn)) {
      device = ref.bn->running_mean.device();
      break;
    }
  const TensorOptions f64 = TensorOptions(kFloat64).device(device);
  std::vector<Tensor> parts;
  int64_t length = 0, signature = 0;
  for (size_t i = 0; i < refs.size(); ++i) {
    const nn::NormBaseImpl& bn = *refs[i].bn;
    const int64_t C = bn.options.num_features();
    if (!has_running_stats(bn)) continue;
    MINIDL_CHECK(bn.running_mean.numel() == C && bn.running_var.numel() == C, "batch_norm_report_across_ranks: ",
                 refs[i].name, " has running stats of ", bn.running_mean.numel(), " and ", bn.running_var.numel(),
                 " values for ", C, " channels");
    parts.push_back(bn.running_mean.to(kFloat64).to(device).reshape({C}));
    parts.push_back(bn.running_var.to(kFloat64).to(device).reshape({C}));
    const double tracked = bn.num_batches_tracked.defined() ? bn.num_batches_tracked.item<double>()
                                                            : std::numeric_limits<double>::quiet_NaN();
    parts.push_back(full({1}, tracked, f64));
    length += 2 * C + 1;
    signature += static_cast<int64_t>(i + 1) * (2 * C + 1);
  }

  // The layouts must agree before the statistics can be gathered.
  const int64_t n_layers = static_cast<int64_t>(refs.size());
  const TensorOptions i64 = TensorOptions(kInt64).device(device);
  Tensor layout = tensor(std::vector<int64_t>{n_layers, length, signature}, {3}, i64);
  Tensor layouts = empty({3 * static_cast<int64_t>(W)}, i64);
  group->all_gather_into_tensor(layouts, layout)->wait();
  const std::vector<int64_t> all_layouts = layouts.to_vector<int64_t>();
  for (int r = 0; r < W; ++r) {
    const int64_t* l = &all_layouts[static_cast<size_t>(3 * r)];
    MINIDL_CHECK(l[0] == n_layers && l[1] == length && l[2] == signature,
                 "batch_norm_report_across_ranks: the ranks' models differ: rank ", r, " has ", l[0],
                 " BatchNorm layer(s) with ", l[1], " statistics, rank ", group->rank(), " has ", n_layers,
                 " with ", length, " (every rank must pass the same model structure)");
  }

  CrossRankBatchNormReport report;
  report.world_size = W;
  std::vector<double> values;
  if (length > 0) {
    Tensor gathered = empty({W * length}, f64);
    group->all_gather_into_tensor(gathered, cat(parts))->wait();
    values = gathered.to_vector<double>();
  }
  int64_t offset = 0;
  for (const LayerRef& ref : refs) {
    const nn::NormBaseImpl& bn = *ref.bn;
    CrossRankBatchNormLayer layer;
    layer.name = ref.name;
    layer.type = bn.name();
    layer.num_features = bn.options.num_features();
    layer.has_running_stats = has_running_stats(bn);
    if (layer.has_running_stats) {
      const int64_t C = layer.num_features;
      spread(values, W, length, offset, C, layer.running_mean_diff, layer.running_mean_channel);
      spread(values, W, length, offset + C, C, layer.running_var_diff, layer.running_var_channel);
      if (bn.num_batches_tracked.defined()) {
        for (int r = 0; r < W; ++r) {
          const double v = values[static_cast<size_t>(r * length + offset + 2 * C)];
          if (std::isnan(v)) continue;  // no counter on that rank
          const auto t = static_cast<int64_t>(v);
          layer.min_batches_tracked = std::min(layer.min_batches_tracked.value_or(t), t);
          layer.max_batches_tracked = std::max(layer.max_batches_tracked.value_or(t), t);
        }
      }
      offset += 2 * C + 1;
    }
    report.layers.push_back(layer);
  }
  return report;
}

std::ostream& operator<<(std::ostream& os, const CrossRankBatchNormReport& report) {
  os << "BatchNorm statistics across " << report.world_size << " rank(s): " << report.layers.size() << " layer(s)";
  if (!report.layers.empty())
    os << ", largest difference: running_mean " << num(report.max_running_mean_diff()) << ", running_var "
       << num(report.max_running_var_diff());
  os << "\n";
  if (report.layers.empty()) return os;
  std::vector<std::vector<std::string>> rows{
      {"layer", "type", "C", "max |diff| running_mean", "max |diff| running_var", "batches", "ranks"}};
  for (const auto& l : report.layers) {
    std::vector<std::string> row{l.name.empty() ? "(root)" : l.name, l.type, std::to_string(l.num_features)};
    if (!l.has_running_stats) {
      row.insert(row.end(), {"-", "-", "-", "no running stats"});
    } else {
      std::string batches = "-";
      if (l.min_batches_tracked)
        batches = *l.min_batches_tracked == *l.max_batches_tracked
                      ? std::to_string(*l.min_batches_tracked)
                      : std::to_string(*l.min_batches_tracked) + ".." + std::to_string(*l.max_batches_tracked);
      const bool same = l.running_mean_diff == 0.0 && l.running_var_diff == 0.0 &&
                        l.min_batches_tracked == l.max_batches_tracked;
      row.insert(row.end(), {num(l.running_mean_diff), num(l.running_var_diff), batches,
                             same ? "identical" : "differ"});
    }
    rows.push_back(row);
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  for (const auto& row : rows) {
    std::string line = "  ";
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    os << line << "\n";
  }
  return os;
}

std::string to_string(const CrossRankBatchNormReport& report) {
  std::ostringstream os;
  os << report;
  return os.str();
}

}  // namespace minidl::dist
