// BatchNorm utilities: freeze BN layers, convert BN to GroupNorm, recompute
// running statistics precisely (PreciseBN), and report the BN statistics.
//
//   nn::freeze_batch_norm(*model);                       // BN layers stay in eval, even after train()
//   auto report = nn::convert_batch_norm_to_group_norm(*model);   // 48 channels -> GroupNorm(24, 48)
//   std::cout << report;
//   auto result = nn::precise_bn(*model, batches);       // population mean/var over the batches
//   std::cout << nn::batch_norm_report(*model);          // one row per BN layer
//
// "BatchNorm layer" means BatchNorm1d/2d/3d (modules derived from
// BatchNormImplBase), never InstanceNorm, although both share NormBaseImpl.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "minidl/core/tensor.h"
#include "minidl/nn/module.h"
#include "minidl/nn/modules/batch_norm.h"

namespace minidl::nn {

// True for BatchNorm1d/2d/3d (and any module derived from BatchNormImplBase).
bool is_batch_norm(const Module& module);

// ---- freezing ------------------------------------------------------------------
// Puts every BatchNorm layer in eval mode and keeps it there: the running
// statistics are used to normalize and no longer updated, num_batches_tracked
// stops counting. Other modules (Dropout, InstanceNorm, ...) are untouched.
// Unlike PyTorch's `bn.eval()`, the freeze survives a later model.train() (the
// layers are eval-locked, Module::set_eval_locked), because the usual training
// loop calls model.train() every epoch and silently unfreezes them in PyTorch.
// gamma/beta stay trainable (set requires_grad_(false) yourself to fix them).
// Returns the dotted names of the frozen layers ("" for the root).
std::vector<std::string> freeze_batch_norm(Module& model);
// Undoes freeze_batch_norm: unlocks every eval-locked BatchNorm layer and
// gives it its parent's current mode (a root BN stays in eval). Returns the
// names of the layers it unfroze.
std::vector<std::string> unfreeze_batch_norm(Module& model);

// ---- BatchNorm -> GroupNorm ------------------------------------------------------
// The largest divisor of num_channels not above max_groups: 48 -> 24 (Opacus'
// min(32, C) would fail), 64 -> 32, 7 -> 7, and a prime above max_groups -> 1.
// num_channels 0 gives 1.
int64_t group_norm_groups_for(int64_t num_channels, int64_t max_groups = 32);

// One converted layer. A BN shared under several names is converted once (the
// new GroupNorm is shared the same way) and listed under its first name.
struct GroupNormConversion {
  std::string name;           // dotted, "" for the root
  std::string from;           // "BatchNorm2d"
  int64_t num_channels = 0;
  int64_t num_groups = 0;
  double eps = 1e-5;
  bool affine = true;         // gamma (and beta, if bias) copied when true
  bool bias = true;           // the BN had a beta (BatchNormOptions::bias); so does the GroupNorm
  // What GroupNorm has no place for: the running statistics.
  bool dropped_running_stats = false;              // running_mean and running_var
  std::optional<int64_t> dropped_num_batches_tracked;
  // Something besides the registry still held the old BN after the swap,
  // typically a typed member (`nn::BatchNorm2d bn1`) whose forward keeps
  // calling the BatchNorm. Hold swappable children as nn::AnyModule.
  bool still_referenced = false;
};
struct GroupNormConversionReport {
  std::vector<GroupNormConversion> layers;
  bool root_replaced = false;  // the model itself was a BN (shared_ptr overload)
};
// A table, plus one warning line per still_referenced layer.
std::ostream& operator<<(std::ostream& os, const GroupNormConversionReport& report);

// Replaces every BatchNorm layer by GroupNorm(G, C, eps, affine, bias), G =
// group_norm_groups_for(C, max_groups), with gamma/beta copied (values,
// requires_grad), the dtype and device of the BN, and the parent's mode. The
// registry changes and so do nn::AnyModule members (Module::replace_module);
// see still_referenced for typed members. Optimizers made before hold the old
// parameters: make them after converting. BN layers inside a BN are dropped
// with it. The model itself cannot be replaced through Module&: if it is a BN
// this throws and the shared_ptr overload must be used, which reassigns
// `model` to the new GroupNorm (PyTorch's converters return the new root).
GroupNormConversionReport convert_batch_norm_to_group_norm(Module& model, int64_t max_groups = 32);
GroupNormConversionReport convert_batch_norm_to_group_norm(std::shared_ptr<Module>& model,
                                                           int64_t max_groups = 32);

// ---- PreciseBN (fvcore's update_bn_stats) ----------------------------------------
enum class PreciseBNEstimator {
  // Batch-size weighted population statistics ("Rethinking Batch in
  // BatchNorm", fvcore's default): running_mean = mean over all values,
  // running_var = their biased population variance, i.e. Bessel's correction
  // of each batch variance undone (E[x^2] = mean^2 + var (b-1)/b).
  Population,
  // The BN paper's simple average of the batch means and of the unbiased
  // batch variances (one weight per forward call, whatever its size).
  MeanOfBatchVariance,
};
const char* estimator_name(PreciseBNEstimator estimator);  // "population", "mean_of_batch_variance"

struct PreciseBNLayer {
  std::string name;
  int64_t calls = 0;    // forward calls seen (0: unused, stats left as they were)
  int64_t samples = 0;  // values per channel counted, sum over calls of numel / C
};
struct PreciseBNResult {
  PreciseBNEstimator estimator = PreciseBNEstimator::Population;
  int64_t batches_requested = 0;
  int64_t batches_run = 0;
  std::vector<PreciseBNLayer> layers;  // the BN layers recomputed (training mode, running stats)
  // BN layers in training mode without running stats (track_running_stats=False).
  std::vector<std::string> skipped;
  // Empty when all went as asked; otherwise why nothing was done, or that the
  // data ran out early (also printed to std::cerr).
  std::string message;
  bool nothing_to_do() const { return layers.empty(); }
  bool ran_out_early() const { return batches_run < batches_requested && !nothing_to_do(); }
};
std::ostream& operator<<(std::ostream& os, const PreciseBNResult& result);

// Returns the next batch for model.forward, or std::nullopt when the data ends.
using BatchSource = std::function<std::optional<Tensor>()>;

// Recomputes running_mean / running_var of every BatchNorm layer that is in
// training mode (and tracks running stats) from up to num_batches batches of
// next_batch, as fvcore's update_bn_stats: under no_grad, momentum set to 1.0
// so each forward leaves that batch's mean and unbiased variance in the
// buffers, and a forward pre-hook records the batch size numel / C; the
// estimator combines them (merged in float64). Frozen (eval) layers are left
// alone, and so is every other module: run it with the model in training mode;
// Dropout etc. run as they are. If no BN layer is in training mode it does
// nothing, reads no batch, and says so in the result.
// Afterwards momentum, num_batches_tracked (unlike fvcore, which lets it
// count on) and the modes are as before; a layer that no batch reached keeps
// its statistics. A BN called several times in one forward counts each call.
// If the data ends early the batches seen are used and a warning is printed
// (fvcore asserts). If a forward throws, the model is restored and the error
// propagates.
PreciseBNResult precise_bn(Module& model, const BatchSource& next_batch, int64_t num_batches = 200,
                           PreciseBNEstimator estimator = PreciseBNEstimator::Population);
// The same over a list of batches; num_batches -1 means all of them.
PreciseBNResult precise_bn(Module& model, const std::vector<Tensor>& batches, int64_t num_batches = -1,
                           PreciseBNEstimator estimator = PreciseBNEstimator::Population);

// ---- statistics report -------------------------------------------------------------
struct ValueSummary {
  bool defined = false;  // false: no tensor (track_running_stats=False)
  double min = 0.0, mean = 0.0, max = 0.0;
};
// The state of one BN layer (reusable for reports across ranks).
struct BatchNormLayerStats {
  std::string name;  // dotted, "" for the root
  std::string type;  // "BatchNorm2d"
  int64_t num_features = 0;
  ValueSummary running_mean, running_var;
  std::optional<int64_t> num_batches_tracked;
  std::optional<double> momentum;  // nullopt: None (cumulative moving average)
  double eps = 1e-5;
  bool training = false;
  bool frozen = false;  // eval-locked (freeze_batch_norm)
};
BatchNormLayerStats batch_norm_layer_stats(const std::string& name, const NormBaseImpl& bn);

struct BatchNormReport {
  std::vector<BatchNormLayerStats> layers;  // preorder, each module once
};
BatchNormReport batch_norm_report(const Module& model);
// A table: layer, type, C, running_mean and running_var min/mean/max,
// num_batches_tracked, momentum, mode ("train", "eval", "frozen").
std::ostream& operator<<(std::ostream& os, const BatchNormReport& report);

}  // namespace minidl::nn
