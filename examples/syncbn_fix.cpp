// syncbn_fix: BatchNorm with tiny per-rank batches under DDP, and four fixes.
//
//   build/bin/minidl-launch --nproc-per-node 4 build/examples/syncbn_fix [--steps N --eval-every K --width W --out DIR]
//
// The published failure case: 4 GPUs with 2 images each. Each rank's
// BatchNorm normalizes over its own 2 images, so training sees very noisy
// statistics and every rank's running_mean / running_var follow their own
// batches: the validation accuracy of plain BN jumps from one evaluation to
// the next. One run trains five variants in turn, from the same initial
// weights, on the same batches, for the same number of steps:
//   plain BN     BatchNorm2d under DDP (broadcast_buffers on, as PyTorch:
//                every rank starts each step from rank 0's running stats and
//                adds its own batch to them, so they differ after every step)
//   SyncBN       nn::convert_sync_batch_norm: statistics of all 8 images of a
//                step, running stats identical on every rank
//   GroupNorm    nn::convert_batch_norm_to_group_norm: no batch statistics at all
//   PreciseBN    plain BN, and before each evaluation the running stats are
//                recomputed (nn::precise_bn) from --precise-images training
//                images in batches of --precise-batch: each rank takes its
//                DistributedSampler share, then the ranks merge their
//                population statistics exactly (equal counts), so all ranks
//                evaluate with the statistics of all those images
//   frozen BN    plain BN for --freeze-after steps, then nn::freeze_batch_norm
//                (BN uses its running stats in training too; the rest trains).
//                The diagnostic: if the noise goes away, BN was its source.
// Validation: every rank evaluates its DistributedEvalSampler share of the
// test set (each image once) with its OWN running stats and the counts are
// summed. After the last step each rank also evaluates the whole test set
// alone, which gives one accuracy per rank (their spread is what rank-local
// statistics cost).
//
// Data: the real CIFAR-10 subset (batches 1-4 train, batch 5 test), no
// augmentation. Outputs in --out: val_accuracy.svg, curves.csv, summary.csv.
// --smoke: a few steps on a few images; exits non-zero unless SyncBN's running
// stats agree across ranks to 1e-6 while plain BN's differ by more than 1e-4.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "minidl/dist/batch_norm_report.h"
#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/sync_batch_norm.h"
#include "examples/common/cli_checks.h"
#include "examples/common/csv_log.h"
#include "examples/common/example_data.h"
#include "examples/common/main_guard.h"
#include "examples/common/svg_plot.h"
#include "minidl/minidl.h"

namespace fs = std::filesystem;
using namespace minidl;

namespace {

struct Args {
  std::string data, out = "runs/syncbn_fix";
  int64_t steps = 1500, eval_every = 50, batch_size = 2, last_k = 5, freeze_after = 300;
  int64_t precise_images = 1024, precise_batch = 32, limit_train = 0, limit_test = 0;
  double width = 0.125, lr = 0.02;
  int threads = 1;
  uint64_t seed = 0;
  std::vector<std::string> variants = {"bn", "syncbn", "groupnorm", "precisebn", "frozenbn"};
  bool smoke = false;
};

enum class Variant { PlainBN, SyncBN, GroupNorm, PreciseBN, FrozenBN };

struct VariantInfo {
  const char* key;
  Variant variant;
  const char* label;
};
const VariantInfo kVariants[] = {{"bn", Variant::PlainBN, "plain BN"},
                                 {"syncbn", Variant::SyncBN, "SyncBN"},
                                 {"groupnorm", Variant::GroupNorm, "GroupNorm"},
                                 {"precisebn", Variant::PreciseBN, "BN + PreciseBN"},
                                 {"frozenbn", Variant::FrozenBN, "BN frozen"}};

std::string sci(double v) {
  if (std::isnan(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", v);
  return buf;
}

// Sums the values over all ranks.
std::vector<double> sum_over_ranks(const std::vector<double>& values) {
  Tensor t = tensor(values, {static_cast<int64_t>(values.size())}, kFloat64);
  dist::all_reduce(t, dist::ReduceOp::SUM);
  return t.to_vector<double>();
}

// (correct, seen) over a loader, in eval mode with this rank's running stats.
std::pair<double, double> count_on(nn::Module& model, data::DataLoader& loader) {
  NoGradGuard no_grad;
  model.eval();
  double correct = 0, seen = 0;
  for (data::Batch& b : loader) {
    correct += static_cast<double>(examples::count_correct(model.forward(b.data), b.targets));
    seen += static_cast<double>(b.targets.numel());
  }
  model.train();
  return {correct, seen};
}

// The BatchNorm layers of a model (BatchNorm2d and SyncBatchNorm).
std::vector<nn::BatchNormImplBase*> batch_norm_layers(nn::Module& model) {
  std::vector<nn::BatchNormImplBase*> out;
  for (const auto& m : model.modules())
    if (auto* bn = dynamic_cast<nn::BatchNormImplBase*>(m.get()); bn && bn->running_mean.defined())
      out.push_back(bn);
  return out;
}

// PreciseBN across ranks. nn::precise_bn recomputes each rank's running stats
// from its own batches (population estimator: the mean and the biased
// variance of all values seen). Every rank sees the same number of values, so
// the statistics of all ranks' values together are exactly
//   mean = average of the ranks' means,  var = average of (var + mean^2) - mean^2,
// one all-reduce for all layers. Afterwards every rank holds the same stats.
int64_t precise_bn_across_ranks(nn::Module& model, data::DataLoader& loader, int64_t batches_per_rank, int world) {
  auto it = loader.begin();
  auto end = loader.end();
  nn::BatchSource next = [&]() -> std::optional<Tensor> {
    if (it == end) return std::nullopt;
    Tensor x = it->data;
    ++it;
    return x;
  };
  nn::PreciseBNResult r = nn::precise_bn(model, next, batches_per_rank);
  const auto layers = batch_norm_layers(model);
  std::vector<double> sums;
  for (auto* bn : layers) {
    auto mean = bn->running_mean.to_vector<double>();
    auto var = bn->running_var.to_vector<double>();
    for (size_t c = 0; c < mean.size(); ++c) sums.push_back(mean[c]);
    for (size_t c = 0; c < mean.size(); ++c) sums.push_back(var[c] + mean[c] * mean[c]);
  }
  sums = sum_over_ranks(sums);
  NoGradGuard no_grad;
  size_t k = 0;
  for (auto* bn : layers) {
    const size_t C = static_cast<size_t>(bn->running_mean.numel());
    std::vector<double> mean(C), var(C);
    for (size_t c = 0; c < C; ++c) mean[c] = sums[k + c] / world;
    for (size_t c = 0; c < C; ++c) var[c] = sums[k + C + c] / world - mean[c] * mean[c];
    k += 2 * C;
    bn->running_mean.copy_(tensor(mean, {static_cast<int64_t>(C)}, kFloat64));
    bn->running_var.copy_(tensor(var, {static_cast<int64_t>(C)}, kFloat64));
  }
  return r.batches_run;
}

struct EvalPoint {
  int64_t step = 0;
  double val_acc = NAN, train_loss = NAN, bn_mean_diff = NAN, bn_var_diff = NAN;
};

struct VariantResult {
  std::string key, label;
  std::vector<EvalPoint> evals;
  std::vector<double> rank_acc;  // each rank alone on the whole test set, at the end
  double bn_mean_diff = NAN, bn_var_diff = NAN;  // at the end (NaN: no BN layer)
  int bn_layers = 0;
  double seconds = 0, eval_seconds = 0;  // all of it, and the part spent evaluating
  std::string note;
};

struct Data {
  std::shared_ptr<const data::Dataset> train, test;
  data::TransformPtr transform;
};

VariantResult run_variant(const VariantInfo& info, const Args& a, const Data& d, int rank, int world,
                          std::ostream& out) {
  const auto t0 = std::chrono::steady_clock::now();
  VariantResult res;
  res.key = info.key;
  res.label = info.label;
  if (info.variant == Variant::FrozenBN) res.label += " after " + std::to_string(a.freeze_after);

  manual_seed(a.seed);  // the same initial weights for every variant
  std::shared_ptr<nn::Module> model =
      models::create_model("smallnet", models::ModelOptions().width(a.width).norm("batchnorm"));
  if (info.variant == Variant::SyncBN) model = nn::convert_sync_batch_norm(model);
  if (info.variant == Variant::GroupNorm) {
    auto report = nn::convert_batch_norm_to_group_norm(*model);
    std::ostringstream groups;
    for (const auto& l : report.layers) groups << (groups.tellp() ? "," : "") << l.num_groups;
    res.note = "groups " + groups.str();
  }
  model->train();
  dist::DistributedDataParallel ddp(model);
  optim::SGD opt(model->parameters(), a.lr, 0.9, 0.0, 5e-4);
  const int64_t warmup = std::max<int64_t>(1, a.steps / 20);
  optim::LinearWarmup sched(opt, std::make_unique<optim::CosineAnnealingLR>(opt, std::max<int64_t>(1, a.steps - warmup)),
                            warmup, 0.1);

  // The same batches for every variant: a (seed, epoch) permutation split over ranks.
  auto train_sampler = std::make_shared<data::DistributedSampler>(d.train->size(), world, rank, true, a.seed, true);
  data::DataLoader train_loader(d.train, {.batch_size = a.batch_size, .sampler = train_sampler, .drop_last = true,
                                          .seed = a.seed, .transform = d.transform});
  auto test_share = std::make_shared<data::DistributedEvalSampler>(d.test->size(), world, rank);
  data::DataLoader test_loader(d.test, {.batch_size = 256, .sampler = test_share, .transform = d.transform});
  data::DataLoader full_test_loader(d.test, {.batch_size = 256, .sampler = nullptr, .transform = d.transform});
  // PreciseBN's batches: other random training images every time.
  auto precise_sampler =
      std::make_shared<data::DistributedSampler>(d.train->size(), world, rank, true, a.seed + 1, true);
  data::DataLoader precise_loader(d.train, {.batch_size = a.precise_batch, .sampler = precise_sampler,
                                            .drop_last = true, .seed = a.seed + 1, .transform = d.transform});
  const int64_t precise_batches = std::max<int64_t>(1, a.precise_images / (a.precise_batch * world));
  MINIDL_CHECK(train_loader.size() > 0, "syncbn_fix: fewer training images than ranks x batch size");
  if (info.variant == Variant::PreciseBN)
    res.note = "stats from " + std::to_string(precise_batches * a.precise_batch * world) + " images (" +
               std::to_string(precise_batches) + "x" + std::to_string(a.precise_batch) + " per rank)";

  auto evaluate = [&](int64_t step, double train_loss) {
    const auto e0 = std::chrono::steady_clock::now();
    if (info.variant == Variant::PreciseBN) {
      precise_loader.set_epoch(step);
      precise_bn_across_ranks(*model, precise_loader, precise_batches, world);
    }
    EvalPoint p;
    p.step = step;
    p.train_loss = train_loss;
    auto [correct, seen] = count_on(*model, test_loader);
    auto total = sum_over_ranks({correct, seen});
    p.val_acc = 100.0 * total[0] / total[1];
    auto report = dist::batch_norm_report_across_ranks(*model);
    if (!report.layers.empty()) {
      p.bn_mean_diff = report.max_running_mean_diff();
      p.bn_var_diff = report.max_running_var_diff();
    }
    res.evals.push_back(p);
    res.eval_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count();
    char line[200];
    std::snprintf(line, sizeof line, "  %-20s step %5lld  train loss %.3f  val acc %5.2f%%  BN mean diff across ranks %s\n",
                  res.label.c_str(), static_cast<long long>(step), train_loss, p.val_acc, sci(p.bn_mean_diff).c_str());
    out << line << std::flush;
  };

  double loss_sum = 0;
  int64_t loss_n = 0, step = 0;
  for (int64_t epoch = 0; step < a.steps; ++epoch) {
    train_loader.set_epoch(epoch);
    for (data::Batch& b : train_loader) {
      if (info.variant == Variant::FrozenBN && step == a.freeze_after) nn::freeze_batch_norm(*model);
      Tensor loss = cross_entropy(ddp.forward(b.data), b.targets);
      opt.zero_grad();
      loss.backward();
      opt.step();
      sched.step();
      ++step;
      const double l = loss.item<float>();
      MINIDL_CHECK(std::isfinite(l), "syncbn_fix: ", res.label, ": the loss is ", l, " at step ", step, "; lower --lr");
      loss_sum += l;
      ++loss_n;
      if (step % a.eval_every == 0 || step == a.steps) {
        auto s = sum_over_ranks({loss_sum, static_cast<double>(loss_n)});
        evaluate(step, s[0] / s[1]);
        loss_sum = 0;
        loss_n = 0;
      }
      if (step == a.steps) break;
    }
  }

  // The stats the last evaluation used, and each rank alone on all test images.
  res.bn_mean_diff = res.evals.back().bn_mean_diff;
  res.bn_var_diff = res.evals.back().bn_var_diff;
  res.bn_layers = static_cast<int>(batch_norm_layers(*model).size());
  auto [correct, seen] = count_on(*model, full_test_loader);
  std::vector<double> mine(world, 0.0);
  mine[rank] = 100.0 * correct / seen;
  res.rank_acc = sum_over_ranks(mine);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  char line[160];
  std::snprintf(line, sizeof line, "  %.1f s (%.1f s of it evaluating)\n", res.seconds, res.eval_seconds);
  out << line;
  return res;
}

double stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0.0;
  double m = 0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

std::vector<double> last_accuracies(const VariantResult& r, int64_t k) {
  std::vector<double> v;
  const size_t n = r.evals.size();
  for (size_t i = n - std::min<size_t>(n, static_cast<size_t>(k)); i < n; ++i) v.push_back(r.evals[i].val_acc);
  return v;
}

double best_of(const VariantResult& r) {
  double best = 0;
  for (const auto& e : r.evals) best = std::max(best, e.val_acc);
  return best;
}

void print_summary(std::ostream& out, const std::vector<VariantResult>& results, const Args& a, int world) {
  char line[320];
  out << "\nSummary: " << world << " ranks x batch " << a.batch_size << ", " << a.steps << " steps, evaluated every "
      << a.eval_every << " steps\n";
  std::snprintf(line, sizeof line, "%-20s %9s %8s %11s %9s %13s %12s %12s %8s\n", "variant", "final val", "best",
                ("std last " + std::to_string(a.last_k)).c_str(), "rank 0", "ranks min-max", "BN mean diff",
                "BN var diff", "seconds");
  out << line;
  for (const auto& r : results) {
    const auto [lo, hi] = std::minmax_element(r.rank_acc.begin(), r.rank_acc.end());
    char ranks[64];
    std::snprintf(ranks, sizeof ranks, "%.2f-%.2f", *lo, *hi);
    std::snprintf(line, sizeof line, "%-20s %8.2f%% %7.2f%% %8.2f pt %8.2f%% %13s %12s %12s %8.1f\n", r.label.c_str(),
                  r.evals.back().val_acc, best_of(r), stddev(last_accuracies(r, a.last_k)), r.rank_acc[0], ranks,
                  r.bn_layers ? sci(r.bn_mean_diff).c_str() : "no BN", r.bn_layers ? sci(r.bn_var_diff).c_str() : "no BN",
                  r.seconds);
    out << line;
  }
  out << "final val, best: every rank evaluates its share of the " << "test set with its own running stats, counts "
      << "summed (each image once).\nstd last " << a.last_k << ": standard deviation of the last " << a.last_k
      << " evaluations, in accuracy points.\nrank 0, ranks min-max: each rank alone on the whole test set with its "
         "own running stats, after the last step.\nBN mean/var diff: largest |rank a - rank b| of running_mean / "
         "running_var over layers and channels, in the last evaluation.\n";
  for (const auto& r : results)
    if (!r.note.empty()) out << r.label << ": " << r.note << "\n";
}

void write_outputs(const fs::path& dir, const std::vector<VariantResult>& results, const Args& a, int world) {
  fs::create_directories(dir);
  {
    examples::CsvLog curves((dir / "curves.csv").string(),
                            {"variant", "step", "val_acc", "train_loss", "bn_mean_diff", "bn_var_diff"});
    for (size_t v = 0; v < results.size(); ++v)
      for (const auto& e : results[v].evals)
        curves.row({static_cast<double>(v), static_cast<double>(e.step), e.val_acc, e.train_loss, e.bn_mean_diff,
                    e.bn_var_diff});
  }
  {
    std::vector<std::string> cols = {"variant", "final_val_acc", "best_val_acc", "std_last_k", "k",
                                     "bn_mean_diff", "bn_var_diff", "seconds"};
    for (int r = 0; r < world; ++r) cols.push_back("rank" + std::to_string(r) + "_acc");
    examples::CsvLog summary((dir / "summary.csv").string(), cols);
    for (size_t v = 0; v < results.size(); ++v) {
      const auto& r = results[v];
      std::vector<double> row = {static_cast<double>(v), r.evals.back().val_acc, best_of(r),
                                 stddev(last_accuracies(r, a.last_k)), static_cast<double>(a.last_k),
                                 r.bn_mean_diff, r.bn_var_diff, r.seconds};
      row.insert(row.end(), r.rank_acc.begin(), r.rank_acc.end());
      summary.row(row);
    }
  }
  examples::Panel acc;
  acc.title = "validation accuracy (each rank's own BN stats)";
  acc.xlabel = "training step";
  acc.ylabel = "accuracy (%)";
  acc.y_from_zero = true;
  examples::Panel diff;
  diff.title = "running_mean difference across ranks";
  diff.xlabel = "training step";
  diff.ylabel = "max |rank a - rank b|  (0: identical)";
  diff.y_from_zero = true;
  for (const auto& r : results) {
    examples::Series s{r.label, {}, {}}, t{r.bn_layers ? r.label : r.label + " (no BN)", {}, {}};
    for (const auto& e : r.evals) {
      s.x.push_back(static_cast<double>(e.step));
      s.y.push_back(e.val_acc);
      t.x.push_back(static_cast<double>(e.step));
      t.y.push_back(e.bn_mean_diff);  // NaN without BN layers: not drawn
    }
    acc.series.push_back(s);
    diff.series.push_back(t);
  }
  char title[200];
  std::snprintf(title, sizeof title, "SmallNet (width %g) on CIFAR-10 under DDP, %d ranks x batch %lld", a.width, world,
                static_cast<long long>(a.batch_size));
  examples::write_svg_plot((dir / "val_accuracy.svg").string(), {acc, diff}, title);
}

int run(Args a) {
  set_num_threads(a.threads);
  MINIDL_CHECK(std::getenv("RANK") && std::getenv("WORLD_SIZE"),
               "syncbn_fix runs under the launcher: build/bin/minidl-launch --nproc-per-node 4 build/examples/syncbn_fix");
  dist::init_process_group("gloo", "env://");
  const int rank = dist::get_rank(), world = dist::get_world_size();
  if (rank == 0) examples::create_output_dir("--out", a.out);  // before training, not after it
  std::ostringstream quiet;
  std::ostream& out = rank == 0 ? std::cout : quiet;

  Data d;
  std::vector<std::string> train_files;
  for (int i = 1; i <= 4; ++i) train_files.push_back(a.data + "/data_batch_" + std::to_string(i) + ".bin");
  d.train = std::make_shared<data::CIFAR10>(data::CIFAR10::from_files(train_files));
  d.test = std::make_shared<data::CIFAR10>(data::CIFAR10::from_files({a.data + "/data_batch_5.bin"}));
  if (a.limit_train > 0) d.train = std::make_shared<data::Subset>(data::Subset::first(d.train, a.limit_train));
  if (a.limit_test > 0) d.test = std::make_shared<data::Subset>(data::Subset::first(d.test, a.limit_test));
  d.transform = std::make_shared<data::Compose>(std::vector<data::TransformPtr>{
      std::make_shared<data::ToFloat>(),
      std::make_shared<data::Normalize>(std::vector<double>{0.4914, 0.4822, 0.4465},
                                        std::vector<double>{0.2470, 0.2435, 0.2616})});

  out << "data:  CIFAR-10 subset " << a.data << ": " << d.train->size() << " train (batches 1-4), " << d.test->size()
      << " test (batch 5) images\n"
      << "run:   " << world << " ranks x batch " << a.batch_size << " = " << world * a.batch_size
      << " images per step, " << a.steps << " steps, SGD lr " << a.lr << " momentum 0.9 (warm-up + cosine), "
      << "SmallNet width " << a.width << ", " << a.threads << " thread(s) per rank, seed " << a.seed << "\n";

  std::vector<VariantResult> results;
  for (const auto& key : a.variants)
    for (const auto& info : kVariants)
      if (key == info.key) {
        out << info.label << ":\n";
        results.push_back(run_variant(info, a, d, rank, world, out));
      }

  print_summary(out, results, a, world);
  if (rank == 0) {
    write_outputs(a.out, results, a, world);
    out << "wrote " << (fs::path(a.out) / "val_accuracy.svg").string() << ", curves.csv, summary.csv\n";
  }

  // The claims: SyncBN keeps the ranks' running stats equal, plain BN does not.
  int rc = 0;
  for (const auto& r : results) {
    const double diff = std::max(r.bn_mean_diff, r.bn_var_diff);
    if (r.key == "syncbn" && !(diff <= 1e-6)) {
      out << "FAILED: SyncBN running stats differ across ranks by " << diff << " (expected <= 1e-6)\n";
      rc = 1;
    }
    if (r.key == "bn" && world > 1 && !(diff > 1e-4)) {
      out << "FAILED: plain BN running stats differ across ranks by only " << diff << " (expected > 1e-4)\n";
      rc = 1;
    }
    for (const auto& e : r.evals)
      if (!std::isfinite(e.val_acc)) {
        out << "FAILED: " << r.label << ": validation accuracy " << e.val_acc << "\n";
        rc = 1;
      }
  }
  const auto ran = [&](const char* key) {
    return std::any_of(results.begin(), results.end(), [&](const VariantResult& r) { return r.key == key; });
  };
  if (a.smoke && !(ran("bn") && ran("syncbn") && world > 1)) {
    out << "FAILED: --smoke needs the bn and syncbn variants and more than one rank\n";
    rc = 1;
  }
  if (rc == 0 && a.smoke) out << "smoke: SyncBN running stats equal across ranks, plain BN's differ: OK\n";
  dist::destroy_process_group();
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Small per-rank batches under DDP: plain BatchNorm and four fixes (run under minidl-launch)"};
  app.add_option("--data", a.data, "CIFAR-10 folder with data_batch_1..5.bin (default: the shared subset)");
  app.add_option("--out", a.out, "where val_accuracy.svg, curves.csv and summary.csv go")->capture_default_str();
  app.add_option("--steps", a.steps, "training steps per variant")->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--eval-every", a.eval_every, "steps between evaluations")->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--batch-size", a.batch_size, "images per rank per step")->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--width", a.width, "SmallNet width multiplier")->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--lr", a.lr, "peak SGD learning rate")->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--last-k", a.last_k, "evaluations in the spread (std) column")->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--freeze-after", a.freeze_after, "steps of plain BN before freezing (frozen BN variant)")
      ->check(minidl::examples::kNonNegative)->capture_default_str();
  app.add_option("--precise-images", a.precise_images, "training images PreciseBN uses, all ranks together")
      ->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--precise-batch", a.precise_batch, "PreciseBN batch size per rank")->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--limit-train", a.limit_train, "use only the first N training images (0: all)")->check(minidl::examples::kNonNegative);
  app.add_option("--limit-test", a.limit_test, "use only the first N test images (0: all)")->check(minidl::examples::kNonNegative);
  app.add_option("--threads", a.threads, "compute threads per rank")->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--seed", a.seed)->capture_default_str();
  app.add_option("--variants", a.variants, "which variants, in order")
      ->check(CLI::IsMember({"bn", "syncbn", "groupnorm", "precisebn", "frozenbn"}))
      ->delimiter(',')
      ->capture_default_str();
  app.add_flag("--smoke", a.smoke, "a few steps on a few images; checks the cross-rank claims");
  MINIDL_CLI_PARSE(app, argc, argv);
  if (a.smoke) {
    a.steps = 8;
    a.eval_every = 4;
    a.freeze_after = 4;
    a.width = 0.125;
    a.limit_train = 256;
    a.limit_test = 128;
    a.precise_images = 128;
    a.last_k = 2;
  }
  if (a.data.empty()) a.data = examples::default_data_dir();
  return examples::run_main("syncbn_fix", [&] { return run(a); });
}
