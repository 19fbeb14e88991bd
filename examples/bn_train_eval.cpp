// bn_train_eval: why BatchNorm gives different answers in train mode and in
// eval mode, measured on real CIFAR-10 images with a SmallNet that the program
// trains first.
//
//   build/examples/bn_train_eval                   # ~2.5 min (2-core EPYC, other jobs running)
//   build/examples/bn_train_eval --smoke           # seconds; asserts the claims (make test)
//
// Four sections, each a printed table, <out>/<name>.csv and <out>/<name>.svg:
//  1. by_hand          train mode normalizes with the batch's mean and biased
//                      variance, eval mode with running_mean/running_var: one
//                      layer's output recomputed in float64 with tensor ops.
//  2. running_stats    train-mode forwards move the running statistics even
//                      under NoGradGuard, with no backward and no optimizer
//                      step; eval-mode forwards leave them alone.
//  3. batch_size_eval  eval-mode outputs do not depend on the batch size;
//                      "evaluating" in train mode does, and the accuracy falls
//                      as the batch shrinks.
//  4. batch_stat_gap   the larger the batch, the closer its statistics are to
//                      the running statistics that eval mode will use.
// Every check is printed with "ok" or "FAILED"; the exit status is 1 if one
// failed. Deterministic for a given --seed and --threads.
//
// Data: data_batch_1..4 train, data_batch_5 tests (the official binary format;
// by default the shared 5,085-image subset, see its SOURCE.md).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "examples/common/batch_eval.h"
#include "examples/common/cli_checks.h"
#include "examples/common/csv_log.h"
#include "examples/common/demo_checks.h"
#include "examples/common/example_data.h"
#include "examples/common/main_guard.h"
#include "examples/common/svg_plot.h"
#include "minidl/minidl.h"

namespace fs = std::filesystem;
using namespace minidl;
using examples::BufferSnapshot;
using examples::Checks;
using examples::CsvLog;
using examples::Eval;
using examples::Images;
using examples::Panel;
using examples::run_batches;
using examples::run_batches_train_mode;
using examples::seconds_since;
using examples::Series;

namespace {

struct Args {
  std::string data, out = "runs/bn_train_eval";
  int64_t epochs = 10, batch_size = 64, limit_train = 0, limit_test = 0;
  double width = 0.25, lr = 0.05;
  // One thread: the tensors here are small (and many batches tiny), so OpenMP's
  // barriers cost more than a second core gives, far more when other
  // processes load the cores (2 threads: 648 s instead of 77 s for --epochs 1
  // on a busy 2-core machine).
  int threads = 1;
  uint64_t seed = 0;
  bool smoke = false;
};

// ---- small helpers ---------------------------------------------------------------

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return (a.to(kFloat64) - b.to(kFloat64)).abs().max().item<double>();
}

// Calls fn(input) every time the BN layer runs (a forward pre-hook); removed
// when the probe goes out of scope.
struct Probe {
  std::shared_ptr<nn::BatchNormImplBase> bn;
  HookId id;
  Probe(std::shared_ptr<nn::BatchNormImplBase> layer, std::function<void(const Tensor&)> fn) : bn(std::move(layer)) {
    id = bn->register_forward_pre_hook([fn](nn::Module&, const Tensor& x) { fn(x); });
  }
  ~Probe() { bn->remove_forward_pre_hook(id); }
};

// Per-channel batch mean and biased variance of a BN input (N, C, H, W), in float64.
std::pair<Tensor, Tensor> channel_stats(const Tensor& x) {
  Tensor xd = x.detach().to(kFloat64);
  return {xd.mean({0, 2, 3}), xd.var({0, 2, 3}, /*unbiased=*/false)};
}

std::shared_ptr<nn::BatchNormImplBase> bn_layer(nn::Module& model, const std::string& name) {
  auto bn = std::dynamic_pointer_cast<nn::BatchNormImplBase>(model.child(name));
  MINIDL_CHECK(bn != nullptr, "bn_train_eval: ", name, " is not a BatchNorm layer");
  return bn;
}

const std::vector<std::string> kBnLayers = {"bn1", "bn2", "bn3", "bn4"};  // SmallNet's

// The logits and what entered each BN layer, for `data` in batches of `batch`.
struct Activations {
  Tensor logits;
  std::vector<Tensor> bn_inputs;  // one (N, C, H, W) per layer
};

Activations forward_in_batches(nn::Module& model, const Images& data, int64_t batch, bool train_mode) {
  std::vector<std::vector<Tensor>> parts(kBnLayers.size());
  std::vector<std::unique_ptr<Probe>> probes;
  for (size_t l = 0; l < kBnLayers.size(); ++l)
    probes.push_back(std::make_unique<Probe>(
        bn_layer(model, kBnLayers[l]), [&parts, l](const Tensor& x) { parts[l].push_back(x.detach().clone()); }));
  Activations a;
  a.logits = (train_mode ? run_batches_train_mode(model, data, batch, true) : run_batches(model, data, batch, true)).logits;
  for (auto& p : parts) a.bn_inputs.push_back(cat(p, 0));
  return a;
}

// ---- training ------------------------------------------------------------------

// SGD (momentum 0.9, weight decay 5e-4) with a per-iteration cosine schedule,
// random crop + flip; prints one line per epoch.
void train(nn::Module& model, std::shared_ptr<const data::Dataset> train_set, data::TransformPtr augment,
           const Images& test, const Args& a) {
  data::DataLoader loader(train_set, {.batch_size = a.batch_size, .shuffle = true, .num_workers = 1, .seed = a.seed,
                                      .transform = std::move(augment)});
  optim::SGD opt(model.parameters(), a.lr, 0.9, 0.0, 5e-4);
  optim::CosineAnnealingLR sched(opt, a.epochs * loader.size());
  for (int64_t epoch = 0; epoch < a.epochs; ++epoch) {
    const auto t0 = std::chrono::steady_clock::now();
    model.train();
    loader.set_epoch(epoch);
    double loss_sum = 0;
    int64_t correct = 0, seen = 0;
    for (data::Batch& b : loader) {
      Tensor logits = model.forward(b.data);
      Tensor loss = cross_entropy(logits, b.targets);
      opt.zero_grad();
      loss.backward();
      opt.step();
      sched.step();
      const int64_t n = b.targets.numel();
      loss_sum += loss.item<double>() * static_cast<double>(n);
      correct += examples::count_correct(logits, b.targets);
      seen += n;
    }
    MINIDL_CHECK(std::isfinite(loss_sum), "bn_train_eval: the loss diverged; lower --lr");
    model.eval();
    const Eval e = run_batches(model, test, 256);
    std::printf("  epoch %2lld/%lld: train loss %.3f acc %5.1f%% | test (eval mode) acc %5.1f%% | %.1f s\n",
                static_cast<long long>(epoch + 1), static_cast<long long>(a.epochs), loss_sum / seen,
                100.0 * correct / seen, 100.0 * e.correct / test.size(), seconds_since(t0));
  }
  model.eval();
}

// ---- 1. one layer by hand -----------------------------------------------------------

void section_by_hand(nn::Module& model, const Images& test, const fs::path& out, Checks& check) {
  std::printf("\n1. BatchNorm by hand: which statistics normalize in each mode (layer bn2)\n");
  auto bn = bn_layer(model, "bn2");
  const int64_t n_images = std::min<int64_t>(64, test.size());
  // The real activations entering bn2 for the first test images.
  Tensor x;
  {
    Probe probe(bn, [&](const Tensor& in) { x = in.detach().clone(); });
    model.eval();
    run_batches(model, {test.x.narrow(0, 0, n_images), test.y.narrow(0, 0, n_images)}, n_images);
  }
  const int64_t C = x.size(1), per_channel = x.numel() / C;
  const double eps = bn->options.eps();

  Tensor y_train, y_eval;
  {
    NoGradGuard no_grad;
    BufferSnapshot snapshot(*bn);
    bn->train();
    y_train = bn->forward(x);
    snapshot.restore();  // the train-mode call moved the running stats
    bn->eval();
    y_eval = bn->forward(x);
  }

  // The same two formulas with tensor ops in float64.
  auto per_c = [&](const Tensor& t) { return t.detach().to(kFloat64).reshape({1, C, 1, 1}); };
  auto [batch_mean, batch_var] = channel_stats(x);
  Tensor xd = x.to(kFloat64), w = per_c(bn->weight), b = per_c(bn->bias);
  Tensor by_batch = (xd - per_c(batch_mean)) / (per_c(batch_var) + eps).sqrt() * w + b;
  Tensor by_running = (xd - per_c(bn->running_mean)) / (per_c(bn->running_var) + eps).sqrt() * w + b;

  const double train_batch = max_abs_diff(y_train, by_batch), train_running = max_abs_diff(y_train, by_running);
  const double eval_batch = max_abs_diff(y_eval, by_batch), eval_running = max_abs_diff(y_eval, by_running);
  std::printf("input: %lld test images -> bn2 input (%lld, %lld, %lld, %lld): n = N*H*W = %lld values per channel\n",
              static_cast<long long>(n_images), static_cast<long long>(x.size(0)), static_cast<long long>(C),
              static_cast<long long>(x.size(2)), static_cast<long long>(x.size(3)), static_cast<long long>(per_channel));
  std::printf("max |minidl output - hand formula| (float32 output vs float64 formula):\n");
  std::printf("  %-17s %36s %36s\n", "", "(x - batch mean) / sqrt(var_b + eps)", "(x - running_mean) / sqrt(rv + eps)");
  std::printf("  %-17s %36.2e %36.2e\n", "train-mode output", train_batch, train_running);
  std::printf("  %-17s %36.2e %36.2e\n", "eval-mode output", eval_batch, eval_running);
  std::printf("  (var_b: the biased batch variance, sum (x - mean)^2 / n; each formula times weight, plus bias)\n");

  const std::vector<double> bm = batch_mean.to_vector<double>(), bv = batch_var.to_vector<double>();
  const std::vector<double> rm = bn->running_mean.to_vector<double>(), rv = bn->running_var.to_vector<double>();
  std::printf("the statistics, first channels of %lld:\n  %7s %12s %13s %16s %12s\n", static_cast<long long>(C),
              "channel", "batch mean", "running_mean", "batch var_b", "running_var");
  CsvLog csv((out / "by_hand.csv").string(), {"channel", "batch_mean", "running_mean", "batch_var_biased", "running_var"});
  Series s_bm{"batch mean (train mode)", {}, {}}, s_rm{"running_mean (eval mode)", {}, {}};
  Series s_bv{"batch variance, biased (train mode)", {}, {}}, s_rv{"running_var (eval mode)", {}, {}};
  for (int64_t c = 0; c < C; ++c) {
    if (c < 6)
      std::printf("  %7lld %12.4f %13.4f %16.4f %12.4f\n", static_cast<long long>(c), bm[c], rm[c], bv[c], rv[c]);
    csv.row({static_cast<double>(c), bm[c], rm[c], bv[c], rv[c]});
    for (auto [s, v] : std::initializer_list<std::pair<Series*, double>>{{&s_bm, bm[c]}, {&s_rm, rm[c]}, {&s_bv, bv[c]}, {&s_rv, rv[c]}}) {
      s->x.push_back(static_cast<double>(c));
      s->y.push_back(v);
    }
  }
  Panel means{"per-channel mean", "channel of bn2", "mean", {s_bm, s_rm}};
  Panel vars{"per-channel variance", "channel of bn2", "variance", {s_bv, s_rv}, true};
  for (int64_t t = 0; t <= C; t += std::max<int64_t>(1, C / 4)) means.x_ticks.push_back(t), vars.x_ticks.push_back(t);
  examples::write_svg_plot((out / "by_hand.svg").string(), {means, vars},
                           "bn2 on " + std::to_string(n_images) + " test images: batch vs running statistics");

  // float32 outputs of magnitude ~1-10 against float64: rounding leaves ~1e-6.
  check(train_batch <= 1e-4, "train-mode output == batch-statistics formula (max |diff| " + fmt("%.1e", train_batch) + " <= 1e-4)");
  check(eval_running <= 1e-4, "eval-mode output == running-statistics formula (max |diff| " + fmt("%.1e", eval_running) + " <= 1e-4)");
  check(train_running > 1e-2 && eval_batch > 1e-2, "the two modes give different outputs (max |diff| > 1e-2)");
}

// ---- 2. running stats move under no_grad -----------------------------------------------

void section_running_stats(nn::Module& model, const Images& test, const fs::path& out, Checks& check) {
  std::printf("\n2. Train-mode forwards update the running statistics, even under NoGradGuard\n");
  auto bn = bn_layer(model, "bn2");
  const int64_t c = 0, batch = std::min<int64_t>(64, test.size() / 9);  // forwards 1..8 use batches 1..8
  const double momentum = bn->options.momentum().value();
  std::printf("bn2 channel %lld, batches of %lld test images, momentum %.1f; no backward, no optimizer step\n",
              static_cast<long long>(c), static_cast<long long>(batch), momentum);

  BufferSnapshot snapshot(model);
  model.zero_grad();  // drop the gradients the training's last backward left
  std::vector<Tensor> params_before;
  for (const Tensor& p : model.parameters()) params_before.push_back(p.detach().clone());
  double batch_mean = NAN, batch_var_unbiased = NAN;
  Probe probe(bn, [&](const Tensor& in) {
    Tensor xd = in.detach().to(kFloat64).select(1, c);
    batch_mean = xd.mean().item<double>();
    batch_var_unbiased = xd.var(/*unbiased=*/true).item<double>();
  });
  auto rm = [&] { return bn->running_mean.to_vector<double>()[c]; };
  auto rv = [&] { return bn->running_var.to_vector<double>()[c]; };
  auto nbt = [&] { return bn->num_batches_tracked.item<int64_t>(); };

  CsvLog csv((out / "running_stats.csv").string(), {"forward", "train_mode", "batch_mean", "running_mean",
                                                    "expected_running_mean", "running_var", "expected_running_var",
                                                    "num_batches_tracked"});
  // Plots: running_mean and running_var, each as a train-mode and an eval-mode segment.
  Series m_train{"train-mode forwards", {0}, {rm()}}, m_eval{"eval-mode forwards", {}, {}};
  Series v_train{"train-mode forwards", {0}, {rv()}}, v_eval{"eval-mode forwards", {}, {}};
  std::printf("  %7s %5s %11s %13s %24s %12s %19s\n", "forward", "mode", "batch mean", "running_mean",
              "(1-m)*previous + m*batch", "running_var", "num_batches_tracked");
  std::printf("  %7d %5s %11s %13.6f %24s %12.6f %19lld\n", 0, "-", "-", rm(), "-", rv(), static_cast<long long>(nbt()));
  bool train_moves = true, train_matches = true, eval_still = true;
  NoGradGuard no_grad;
  for (int k = 1; k <= 8; ++k) {
    const bool train_mode = k <= 5;
    model.train(train_mode);
    const double prev_m = rm(), prev_v = rv();
    const int64_t prev_n = nbt();
    const std::vector<float> all_rm_before = bn->running_mean.to_vector<float>();
    model.forward(test.x.narrow(0, k * batch, batch));
    // PyTorch's update: the batch mean, and the UNBIASED batch variance.
    const double expect_m = train_mode ? (1 - momentum) * prev_m + momentum * batch_mean : prev_m;
    const double expect_v = train_mode ? (1 - momentum) * prev_v + momentum * batch_var_unbiased : prev_v;
    std::printf("  %7d %5s %11.6f %13.6f %24.6f %12.6f %19lld\n", k, train_mode ? "train" : "eval", batch_mean, rm(),
                expect_m, rv(), static_cast<long long>(nbt()));
    csv.row({static_cast<double>(k), train_mode ? 1.0 : 0.0, batch_mean, rm(), expect_m, rv(), expect_v,
             static_cast<double>(nbt())});
    auto add = [&](Series& m, Series& v) {
      m.x.push_back(k), m.y.push_back(rm());
      v.x.push_back(k), v.y.push_back(rv());
    };
    if (train_mode) add(m_train, v_train);
    if (!train_mode || k == 5) add(m_eval, v_eval);  // the eval segment starts where the train one ends
    if (train_mode) {
      train_moves = train_moves && rm() != prev_m && nbt() == prev_n + 1;
      train_matches = train_matches && std::abs(rm() - expect_m) <= 1e-5 * (1 + std::abs(expect_m)) &&
                      std::abs(rv() - expect_v) <= 1e-5 * (1 + std::abs(expect_v));
    } else {
      eval_still = eval_still && bn->running_mean.to_vector<float>() == all_rm_before && rv() == prev_v && nbt() == prev_n;
    }
  }
  bool params_same = true, no_grads = true;
  const std::vector<Tensor> params = model.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    params_same = params_same && max_abs_diff(params[i], params_before[i]) == 0;
    no_grads = no_grads && !params[i].grad().defined();
  }
  std::printf("parameters after the 8 forwards: %s; gradients: %s\n", params_same ? "unchanged" : "CHANGED",
              no_grads ? "none" : "SOME");
  examples::write_svg_plot((out / "running_stats.svg").string(),
                           {{"running_mean[0] of bn2", "forward call (under NoGradGuard)", "running_mean[0]", {m_train, m_eval}},
                            {"running_var[0] of bn2", "forward call (under NoGradGuard)", "running_var[0]", {v_train, v_eval}}},
                           "The running statistics move in train-mode forwards, even under no_grad (5 train, then 3 eval)");
  model.eval();
  snapshot.restore();

  check(train_moves, "every train-mode forward under no_grad moved running_mean and counted num_batches_tracked");
  check(train_matches, "running_mean/var == (1-m)*previous + m*(batch mean / unbiased batch var)");
  check(eval_still, "eval-mode forwards left running_mean, running_var and num_batches_tracked unchanged");
  check(params_same && no_grads, "no parameter changed and no gradient appeared");
}

// ---- 3. batch size at evaluation ------------------------------------------------------

void section_batch_size_eval(nn::Module& model, const Images& test, const fs::path& out, Checks& check) {
  std::printf("\n3. Evaluation batch size: eval mode does not care, train mode does\n");
  const int64_t n_same = std::min<int64_t>(128, test.size());
  const Images same{test.x.narrow(0, 0, n_same), test.y.narrow(0, 0, n_same)};
  std::printf("the same %lld test images in batches of 1, 8 and %lld; max |difference| from one batch of %lld:\n",
              static_cast<long long>(n_same), static_cast<long long>(n_same), static_cast<long long>(n_same));
  std::printf("  %10s %26s %18s %18s\n", "batch size", "eval: inputs of bn1..bn4", "eval: logits", "train: logits");
  CsvLog csv_outputs((out / "batch_size_outputs.csv").string(),
                     {"batch_size", "eval_bn_inputs_max_abs_diff", "eval_logits_max_abs_diff", "train_logits_max_abs_diff"});
  model.eval();
  const Activations ref_eval = forward_in_batches(model, same, n_same, false);
  const Activations ref_train = forward_in_batches(model, same, n_same, true);
  double eval_bn_worst = 0, eval_logits_worst = 0, train_least = INFINITY;
  for (int64_t b : {int64_t{1}, int64_t{8}, n_same}) {
    const Activations e = forward_in_batches(model, same, b, false);
    double d_bn = 0;
    for (size_t l = 0; l < e.bn_inputs.size(); ++l) d_bn = std::max(d_bn, max_abs_diff(e.bn_inputs[l], ref_eval.bn_inputs[l]));
    const double d_eval = max_abs_diff(e.logits, ref_eval.logits);
    const double d_train = max_abs_diff(forward_in_batches(model, same, b, true).logits, ref_train.logits);
    std::printf("  %10lld %26.3g %18.3g %18.3g\n", static_cast<long long>(b), d_bn, d_eval, d_train);
    csv_outputs.row({static_cast<double>(b), d_bn, d_eval, d_train});
    eval_bn_worst = std::max(eval_bn_worst, d_bn);
    eval_logits_worst = std::max(eval_logits_worst, d_eval);
    if (b != n_same) train_least = std::min(train_least, d_train);
  }
  std::printf("  (eval mode: the activations are identical to the bit; a nonzero logit difference for a single\n"
              "   image comes from the last Linear layer, whose 1-row matrix product takes Eigen's matrix-vector\n"
              "   kernel, which adds the products in another order than the matrix-matrix kernel: float32 rounding)\n");

  std::printf("test accuracy over all %lld test images vs batch size (the last batch holds the remainder):\n",
              static_cast<long long>(test.size()));
  std::printf("  %10s %22s %22s\n", "batch size", "train mode (batch stats)", "eval mode (running)");
  CsvLog csv((out / "batch_size_eval.csv").string(),
             {"batch_size", "train_mode_acc", "eval_mode_acc", "train_mode_loss", "eval_mode_loss"});
  Series s_train{"train mode: batch statistics", {}, {}}, s_eval{"eval mode: running statistics", {}, {}};
  std::vector<double> sizes;
  int64_t eval_min = INT64_MAX, eval_max = 0;
  for (int64_t b = 1; b <= 256; b *= 2) {
    const Eval t = run_batches_train_mode(model, test, b);
    const Eval e = run_batches(model, test, b);
    const double n = static_cast<double>(test.size()), ta = 100.0 * t.correct / n, ea = 100.0 * e.correct / n;
    std::printf("  %10lld %21.2f%% %21.2f%%\n", static_cast<long long>(b), ta, ea);
    csv.row({static_cast<double>(b), ta, ea, t.loss_sum / n, e.loss_sum / n});
    for (auto [s, v] : std::initializer_list<std::pair<Series*, double>>{{&s_train, ta}, {&s_eval, ea}}) {
      s->x.push_back(static_cast<double>(b));
      s->y.push_back(v);
    }
    sizes.push_back(static_cast<double>(b));
    eval_min = std::min(eval_min, e.correct), eval_max = std::max(eval_max, e.correct);
  }
  Panel panel{"test accuracy on " + std::to_string(test.size()) + " images of data_batch_5",
              "evaluation batch size (log scale)", "test accuracy (%); chance is 10", {s_train, s_eval}, true};
  panel.log_x = true;
  panel.x_ticks = sizes;
  examples::write_svg_plot((out / "batch_size_eval.svg").string(), {panel},
                           "Evaluation batch size: train mode vs eval mode");

  std::printf("  (with batches of 1, train mode normalizes each image by its own per-channel mean and\n"
              "   variance over H x W, removing its overall colour and contrast at every BN layer)\n");

  // Without putting the buffers back, a train-mode "evaluation" leaves its
  // own batch statistics in running_mean/var (momentum 0.1 per batch).
  {
    BufferSnapshot snapshot(model);
    model.train();
    run_batches(model, test, 1);
    model.eval();
    const Eval after = run_batches(model, test, 256);
    snapshot.restore();
    std::printf("  eval-mode accuracy after one train-mode pass in batches of 1 that was NOT undone: %.2f%%\n"
                "  (that pass replaced the running statistics by those of single images)\n",
                100.0 * after.correct / static_cast<double>(test.size()));
  }

  // In eval mode every layer treats each image on its own.
  check(eval_bn_worst == 0, "eval mode: the inputs of every BN layer are bitwise identical for batch sizes 1, 8, " +
                                std::to_string(n_same));
  check(eval_logits_worst <= 1e-5, "eval mode: logits agree for batch sizes 1, 8, " + std::to_string(n_same) +
                                       " (max |diff| " + fmt("%.3g", eval_logits_worst) + " <= 1e-5, float32 rounding)");
  check(eval_min == eval_max, "eval-mode accuracy identical for every batch size");
  check(train_least > 1e-3, "train-mode logits differ across batch sizes (min over sizes of max |diff| " +
                                fmt("%.3g", train_least) + " > 1e-3)");
}

// ---- 4. batch statistics vs running statistics -------------------------------------------

void section_batch_stat_gap(nn::Module& model, const Images& train_images, const fs::path& out, Checks& check) {
  std::printf("\n4. The larger the training batch, the closer its statistics are to the running statistics\n");
  const std::vector<std::string>& layers = kBnLayers;
  const int64_t n_images = train_images.size() >= 2048 ? 2048 : 256;
  // A fixed random sample of the (augmented) training images.
  Tensor order = randperm(train_images.size()).narrow(0, 0, n_images);
  const Tensor images = train_images.x.index_select(0, order);
  BufferSnapshot snapshot(model);
  // The reference: the running statistics eval mode would use, fixed before
  // these train-mode forwards start moving them.
  std::vector<Tensor> run_mean, run_std, run_var;
  std::vector<std::shared_ptr<nn::BatchNormImplBase>> bns;
  for (const auto& name : layers) {
    bns.push_back(bn_layer(model, name));
    run_mean.push_back(bns.back()->running_mean.to(kFloat64).clone());
    run_var.push_back(bns.back()->running_var.to(kFloat64).clone());
    run_std.push_back((run_var.back() + bns.back()->options.eps()).sqrt());
  }
  const size_t L = layers.size();
  std::printf("%lld training images (random crop + flip, as in training), train mode, no_grad;\n"
              "per batch and layer, averaged over the channels and then over the batches:\n"
              "  mean gap = |batch mean - running_mean| / sqrt(running_var + eps)\n"
              "  var gap  = |batch var_b / running_var - 1|   (var_b: the biased variance that normalizes)\n",
              static_cast<long long>(n_images));
  std::printf("  %10s |", "batch size");
  for (const auto& l : layers) std::printf(" %8s", ("mean " + l).c_str());
  std::printf(" |");
  for (const auto& l : layers) std::printf(" %8s", ("var " + l).c_str());
  std::printf("\n");
  std::vector<std::string> columns = {"batch_size", "batches"};
  for (const auto& l : layers) columns.push_back("mean_gap_" + l);
  for (const auto& l : layers) columns.push_back("var_gap_" + l);
  CsvLog csv((out / "batch_stat_gap.csv").string(), columns);
  std::vector<Series> mean_series, var_series;
  for (const auto& l : layers) {
    mean_series.push_back({l, {}, {}});
    var_series.push_back({l, {}, {}});
  }
  std::vector<double> sizes;
  std::vector<std::vector<double>> mean_gap_by_size, var_gap_by_size;
  model.train();
  NoGradGuard no_grad;
  for (int64_t b = 2; b <= 256; b *= 2) {
    std::vector<double> mean_gap(L, 0.0), var_gap(L, 0.0);
    std::vector<std::unique_ptr<Probe>> probes;
    for (size_t l = 0; l < L; ++l)
      probes.push_back(std::make_unique<Probe>(bns[l], [&, l](const Tensor& x) {
        auto [m, v] = channel_stats(x);
        mean_gap[l] += ((m - run_mean[l]).abs() / run_std[l]).mean().item<double>();
        var_gap[l] += (v / run_var[l] - 1.0).abs().mean().item<double>();
      }));
    const int64_t batches = n_images / b;
    for (int64_t i = 0; i < batches; ++i) model.forward(images.narrow(0, i * b, b));
    probes.clear();
    std::vector<double> row = {static_cast<double>(b), static_cast<double>(batches)};
    std::printf("  %10lld |", static_cast<long long>(b));
    for (size_t l = 0; l < L; ++l) std::printf(" %8.4f", mean_gap[l] /= batches);
    std::printf(" |");
    for (size_t l = 0; l < L; ++l) std::printf(" %8.4f", var_gap[l] /= batches);
    std::printf("\n");
    for (size_t l = 0; l < L; ++l) {
      row.push_back(mean_gap[l]);
      mean_series[l].x.push_back(b), mean_series[l].y.push_back(mean_gap[l]);
      var_series[l].x.push_back(b), var_series[l].y.push_back(var_gap[l]);
    }
    for (size_t l = 0; l < L; ++l) row.push_back(var_gap[l]);
    csv.row(row);
    sizes.push_back(static_cast<double>(b));
    mean_gap_by_size.push_back(mean_gap);
    var_gap_by_size.push_back(var_gap);
  }
  std::printf("  (sampling noise makes the gap shrink roughly like 1/sqrt(batch size); what it cannot remove is\n"
              "   the difference between the running statistics, an exponential average over the last training\n"
              "   batches taken while the weights still moved, and these images' statistics)\n");
  // A 1/sqrt(B) guide through the first layer's smallest batch: sampling noise alone.
  Series guide{"slope 1/sqrt(batch)", {}, {}, true};
  for (double b : sizes) guide.x.push_back(b), guide.y.push_back(mean_gap_by_size[0][0] * std::sqrt(sizes[0] / b));
  mean_series.push_back(guide);
  Panel mean_panel{"mean gap", "training batch size (log scale)", "|batch mean - running_mean| / running std", mean_series};
  Panel var_panel{"variance gap", "training batch size (log scale)", "|batch var / running_var - 1|", var_series};
  for (Panel* p : {&mean_panel, &var_panel}) p->log_x = p->log_y = true, p->x_ticks = sizes;
  examples::write_svg_plot((out / "batch_stat_gap.svg").string(), {mean_panel, var_panel},
                           "Batch statistics vs running statistics, per BN layer (mean over channels and batches)");
  model.eval();
  snapshot.restore();

  bool shrinks = true;
  const size_t at128 = std::find(sizes.begin(), sizes.end(), 128.0) - sizes.begin();
  for (size_t l = 0; l < L; ++l)
    shrinks = shrinks && mean_gap_by_size[at128][l] < mean_gap_by_size[0][l] && var_gap_by_size[at128][l] < var_gap_by_size[0][l];
  check(shrinks, "every layer's mean and variance gap is smaller at batch 128 than at batch 2");
}

int run(const Args& a) {
  const auto t_start = std::chrono::steady_clock::now();
  if (a.threads > 0) set_num_threads(a.threads);
  manual_seed(a.seed);
  const fs::path out = a.out;
  examples::create_output_dir("--out", a.out);

  std::vector<std::string> train_files;
  for (int i = 1; i <= 4; ++i) train_files.push_back(a.data + "/data_batch_" + std::to_string(i) + ".bin");
  std::shared_ptr<const data::Dataset> train_set =
      std::make_shared<data::CIFAR10>(data::CIFAR10::from_files(train_files));
  std::shared_ptr<const data::Dataset> test_set =
      std::make_shared<data::CIFAR10>(data::CIFAR10::from_files({a.data + "/data_batch_5.bin"}));
  if (a.limit_train > 0) train_set = std::make_shared<data::Subset>(data::Subset::first(train_set, a.limit_train));
  if (a.limit_test > 0) test_set = std::make_shared<data::Subset>(data::Subset::first(test_set, a.limit_test));

  auto normalize = std::make_shared<data::Normalize>(std::vector<double>{0.4914, 0.4822, 0.4465},
                                                     std::vector<double>{0.2470, 0.2435, 0.2616});
  auto to_float = std::make_shared<data::ToFloat>();
  auto plain = std::make_shared<data::Compose>(std::vector<data::TransformPtr>{to_float, normalize});
  auto augment = std::make_shared<data::Compose>(std::vector<data::TransformPtr>{
      std::make_shared<data::RandomCrop>(32, 4), std::make_shared<data::RandomHorizontalFlip>(), to_float, normalize});
  // Section 4 looks at training batches: augmented as in training (one fixed draw).
  const Images test = examples::load_all(test_set, plain, "bn_train_eval"),
               train_augmented = examples::load_all(train_set, augment, "bn_train_eval");

  auto model = models::create_model("smallnet", models::ModelOptions().width(a.width));
  int64_t n_params = 0;
  for (const Tensor& p : model->parameters()) n_params += p.numel();
  std::printf("data:  CIFAR-10 from %s: %lld training images (data_batch_1..4), %lld test images (data_batch_5)\n",
              a.data.c_str(), static_cast<long long>(train_set->size()), static_cast<long long>(test_set->size()));
  std::printf("model: smallnet, width %g (channels %lld-%lld-%lld-%lld), BatchNorm2d, %lld parameters\n", a.width,
              static_cast<long long>(models::scaled_width(64, a.width)), static_cast<long long>(models::scaled_width(128, a.width)),
              static_cast<long long>(models::scaled_width(256, a.width)), static_cast<long long>(models::scaled_width(512, a.width)),
              static_cast<long long>(n_params));
  std::printf("train: %lld epochs, batch %lld, SGD lr %g momentum 0.9 wd 5e-4, cosine; crop + flip; %d threads, seed %llu\n",
              static_cast<long long>(a.epochs), static_cast<long long>(a.batch_size), a.lr, get_num_threads(),
              static_cast<unsigned long long>(a.seed));
  auto t0 = std::chrono::steady_clock::now();
  train(*model, train_set, augment, test, a);
  const Eval final_eval = run_batches(*model, test, 256);
  std::printf("trained in %.1f s: test accuracy (eval mode) %.2f%% on %lld images\n", seconds_since(t0),
              100.0 * final_eval.correct / test.size(), static_cast<long long>(test.size()));

  Checks check;
  using Section = void (*)(nn::Module&, const Images&, const fs::path&, Checks&);
  for (auto [section, images] : std::initializer_list<std::pair<Section, const Images*>>{
           {section_by_hand, &test},
           {section_running_stats, &test},
           {section_batch_size_eval, &test},
           {section_batch_stat_gap, &train_augmented}}) {
    t0 = std::chrono::steady_clock::now();
    section(*model, *images, out, check);
    std::printf("  (%.1f s)\n", seconds_since(t0));
  }
  std::printf("\nwrote %s/{by_hand,running_stats,batch_size_outputs,batch_size_eval,batch_stat_gap}.csv and the .svg plots\n",
              out.string().c_str());
  return check.finish(seconds_since(t_start));
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"BatchNorm in train mode vs eval mode, measured on CIFAR-10"};
  app.add_option("--data", a.data, "folder with data_batch_1..5.bin (default: the shared subset)");
  app.add_option("--out", a.out, "where the CSVs and SVGs go")->capture_default_str();
  app.add_option("--epochs", a.epochs)->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--width", a.width, "SmallNet width multiplier")->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--batch-size", a.batch_size, "training batch size")->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--lr", a.lr)->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--threads", a.threads, "compute threads (0: OMP_NUM_THREADS or all cores)")
      ->check(minidl::examples::kNonNegative)
      ->capture_default_str();
  app.add_option("--seed", a.seed)->capture_default_str();
  app.add_flag("--smoke", a.smoke, "seconds: 500 training images, 1 epoch, width 0.125, 256 test images (make test)");
  MINIDL_CLI_PARSE(app, argc, argv);
  if (a.data.empty()) a.data = examples::shared_cifar10_subset_dir();
  if (a.smoke) a.epochs = 1, a.width = 0.125, a.limit_train = 500, a.limit_test = 256;
  return examples::run_main("bn_train_eval", [&] { return run(a); });
}
