// train_cifar10: trains a CIFAR-10 (or Fashion-MNIST) classifier end to end on
// the CPU, with progress bars, per-epoch metrics (CSV, TensorBoard, SVG curves)
// and exact checkpoint/resume.
//
//   build/examples/train_cifar10 --epochs 5 --log-dir runs/c10 --checkpoint-dir runs/c10/ckpt
//   build/examples/train_cifar10 --epochs 10 --resume runs/c10/ckpt   # continues at epoch 6
//
// Data: --data DIR with data_batch_{1..5}.bin and test_batch.bin (the official
// binary release). Without test_batch.bin (the shared subset) it trains on
// batches 1-4 and tests on batch 5. --train-files/--test-files pick files.
//
// Exact resume: the model init comes from --seed; each epoch's batch order and
// augmentation are a function of (seed, epoch, sample index) in the DataLoader,
// so a checkpoint needs only the model, optimizer and scheduler state, the
// epoch and the default generator's state. A run of 4 epochs and a run of
// 2 + resume + 2 give the same bits with --threads 1.
//
// Checkpoints are committed by checkpoint.json (written temp + rename): it
// names the epoch's model and optimizer files, which are written first; so a
// crash at any point leaves the previous epoch's checkpoint usable.
//
// --amp bf16: forward passes under autocast in bfloat16 (the loss in float32;
// BatchNorm keeps float32 statistics); --amp fp16: float16 with a GradScaler
// whose state is checkpointed and whose scale is logged (CUDA only).
// --cuda-graph: one step captured into a CUDA graph and replayed for every
// full batch (examples/common/cuda_graph_step.h; on an H100 it ended with the
// eager run's loss, 2026-11-27). --memory-format channels-last: NHWC images,
// activations and conv weights (core/memory_format.h); the default, auto,
// picks it on CUDA for the conv nets with BatchNorm (channels_last_pays).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "minidl/core/json_int.h"
#include "minidl/dist/batch_norm_report.h"
#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/sync_batch_norm.h"
#include "examples/common/backend_choice.h"
#include "examples/common/checkpoint.h"
#include "examples/common/classifier_data.h"
#include "examples/common/classifier_metrics.h"
#include "examples/common/cli_checks.h"
#include "examples/common/csv_log.h"
#include "examples/common/cuda_graph_step.h"
#include "examples/common/device_choice.h"
#include "examples/common/distributed_run.h"
#include "examples/common/example_data.h"
#include "examples/common/lr_scaling.h"
#include "examples/common/main_guard.h"
#include "examples/common/mixed_precision.h"
#include "examples/common/progress.h"
#include "examples/common/running_metrics.h"
#include "examples/common/svg_plot.h"
#include "examples/common/tensorboard.h"
#include "minidl/minidl.h"

namespace fs = std::filesystem;
using namespace minidl;
using nlohmann::json;
using examples::fmt;
using examples::EpochMetrics;

namespace {

struct Args {
  std::string data, dataset = "cifar10", model = "smallnet", norm;  // norm "": the model's default
  std::vector<std::string> train_files, test_files;
  double width = 1.0;
  int64_t epochs = 10, stop_after = 0, batch_size = 128, limit_train = 0, limit_test = 0;
  double lr = 0.05, momentum = 0.9, weight_decay = 5e-4;
  std::string scale_lr = "none";  // examples/common/lr_scaling.h
  int64_t scale_lr_ref_batch = 128;
  std::string optimizer = "sgd", schedule = "cosine";
  int64_t warmup_epochs = 0, step_size = 0;
  int workers = 2, threads = 0, eval_every = 1;
  int64_t log_every = 10;
  bool deterministic = false;
  std::string device = "auto", amp = "off", backend = "auto";
  uint64_t seed = 0;
  std::string checkpoint_dir, resume, log_dir = "runs/train_cifar10", save_final;
  double expect_train_acc = -1.0, expect_test_acc = -1.0;
  bool no_augment = false, cuda_graph = false, channels_last = false;
  std::string memory_format = "auto";  // auto, contiguous or channels-last (--channels-last: the last)
};

// --memory-format auto: channels-last where it was measured faster: CUDA and
// a conv net whose norms are BatchNorm (on an H100, 2026-11-28, ResNet-18
// b128 6.08 against 7.94 ms NCHW, b512 18.1 against 23.7, SmallNet 2.03
// against 2.46, float16 5.80 against 7.85). Not on the CPU, whose convs
// compute NCHW through copies (12-20% slower), nor for GroupNorm, LayerNorm
// and InstanceNorm, which compute NCHW (a copy each way, as in PyTorch).
bool channels_last_pays(const Args& a, Device device) {
  if (a.memory_format != "auto") return a.memory_format == "channels-last";
  const bool batch_norm = a.norm.empty() || a.norm == "batchnorm" || a.norm == "syncbatchnorm";
  return device.is_cuda() && a.model != "mlp" && batch_norm;
}

// --cuda-graph: capturable (the lr, and Adam's steps, in device memory).
std::unique_ptr<optim::Optimizer> make_optimizer(const Args& a, nn::Module& model) {
  const std::vector<optim::ParamGroup> groups{model.parameters()};
  optim::SGDOptions sgd(a.lr);
  optim::AdamOptions adam(a.lr);  // betas (0.9, 0.999), eps 1e-8
  sgd.momentum = a.momentum;
  sgd.weight_decay = adam.weight_decay = a.weight_decay;
  sgd.capturable = adam.capturable = a.cuda_graph;
  if (a.optimizer == "sgd") return std::make_unique<optim::SGD>(groups, sgd);
  if (a.optimizer == "adam") return std::make_unique<optim::Adam>(groups, adam);
  return std::make_unique<optim::AdamW>(groups, adam);
}

// All schedules count iterations (scheduler.step() after every optimizer step).
std::unique_ptr<optim::LRScheduler> make_scheduler(const Args& a, optim::Optimizer& opt, int64_t steps_per_epoch) {
  const int64_t warmup = a.warmup_epochs * steps_per_epoch;
  const int64_t total = a.epochs * steps_per_epoch;
  if (a.schedule == "onecycle") return std::make_unique<optim::OneCycleLR>(opt, a.lr, total);
  std::unique_ptr<optim::LRScheduler> after;
  if (a.schedule == "cosine")
    after = std::make_unique<optim::CosineAnnealingLR>(opt, std::max<int64_t>(1, total - warmup));
  else if (a.schedule == "step")  // lr / 10 every step_size epochs (default: a third of the run)
    after = std::make_unique<optim::StepLR>(
        opt, std::max<int64_t>(1, (a.step_size > 0 ? a.step_size : std::max<int64_t>(1, a.epochs / 3)) * steps_per_epoch),
        0.1);
  else  // constant
    after = std::make_unique<optim::StepLR>(opt, std::numeric_limits<int32_t>::max(), 1.0);
  if (warmup > 0) return std::make_unique<optim::LinearWarmup>(opt, std::move(after), warmup, 0.1);
  return after;
}

// Summed loss, correct predictions and sample count; under DDP each rank sums
// its share and total() adds the ranks' sums, on the model's device (NCCL
// takes only tensors of its GPU; Gloo takes any).
struct Totals {
  double loss_sum = 0, correct = 0, seen = 0;
  Totals total(bool distributed, Device device) const {
    if (!distributed) return *this;
    Tensor t = tensor({loss_sum, correct, seen}, {3}, kFloat64).to(device);
    dist::all_reduce(t, dist::ReduceOp::SUM);
    auto v = t.to_vector<double>();
    return {v[0], v[1], v[2]};
  }
  double loss() const { return loss_sum / std::max(seen, 1.0); }
  double acc() const { return correct / std::max(seen, 1.0); }
};

// Loss and accuracy over a loader, under no_grad, in the model's current mode.
Totals evaluate(nn::Module& model, data::DataLoader& loader, bool distributed, Device device,
                const examples::MixedPrecision& amp, MemoryFormat fmt) {
  NoGradGuard no_grad;
  Totals t;
  for (data::Batch& b : loader) {
    b.data = b.data.to(device, /*non_blocking=*/true);
    b.targets = b.targets.to(device, /*non_blocking=*/true);
    const Tensor logits = [&] {
      auto region = amp.autocast();
      return model.forward(b.data.contiguous(fmt));
    }().to(kFloat32);
    const double n = static_cast<double>(b.targets.numel());
    t.loss_sum += cross_entropy(logits, b.targets).item<float>() * n;
    t.correct += static_cast<double>(examples::count_correct(logits, b.targets));
    t.seen += n;
  }
  return t.total(distributed, device);
}

// Test accuracy with batch statistics (train mode), the number that shows the
// train/eval gap of BatchNorm. Train-mode BN updates its running stats even
// under no_grad, so the buffers are copied before and restored after. Under
// DDP the loader must give every rank the same number of batches (SyncBN
// communicates in train mode).
double evaluate_train_mode(nn::Module& model, data::DataLoader& loader, bool distributed, Device device,
                           const examples::MixedPrecision& amp, MemoryFormat fmt) {
  NoGradGuard no_grad;
  std::vector<std::pair<Tensor, Tensor>> saved;
  for (auto& [name, buf] : model.named_buffers()) saved.emplace_back(buf, buf.clone());
  model.train();
  const double acc = evaluate(model, loader, distributed, device, amp, fmt).acc();
  for (auto& [buf, copy] : saved) buf.copy_(copy);
  return acc;
}

// ---- checkpoints ----------------------------------------------------------

// What a resumed run must share with the checkpoint's (epochs and lr may differ).
json run_config(const Args& a) {
  return {{"dataset", a.dataset},     {"model", a.model},       {"norm", a.norm},
          {"width", a.width},         {"optimizer", a.optimizer}, {"schedule", a.schedule},
          {"epochs", a.epochs},       {"batch_size", a.batch_size}, {"lr", a.lr},
          {"limit_train", a.limit_train}, {"amp", a.amp}};
}

void save_checkpoint(const fs::path& dir, int64_t epoch, const Args& a, nn::Module& model, const optim::Optimizer& opt,
                     const optim::LRScheduler& sched, const examples::MixedPrecision& amp,
                     const std::vector<EpochMetrics>& history) {
  json j;
  j["program"] = "train_cifar10";  // read_checkpoint refuses another program's checkpoint
  j["scheduler"] = sched.state_dict();
  j["scaler"] = amp.state_dict();
  j["generator_state"] = default_generator().state();
  j["loader"] = {{"seed", a.seed}, {"next_epoch", epoch}};
  j["config"] = run_config(a);
  json h = json::array();
  for (const auto& m : history) h.push_back(examples::to_json(m));
  j["history"] = h;
  examples::save_epoch_checkpoint(dir, epoch, model, opt, std::move(j));
}

struct Resumed {
  int64_t epoch = 0;
  std::vector<EpochMetrics> history;
};

Resumed load_checkpoint_from(const examples::LoadedCheckpoint& c, const Args& a, nn::Module& model,
                             optim::Optimizer& opt, optim::LRScheduler& sched, examples::MixedPrecision& amp);

Resumed load_checkpoint(const std::string& path, const Args& a, nn::Module& model, optim::Optimizer& opt,
                        optim::LRScheduler& sched, examples::MixedPrecision& amp) {
  const examples::LoadedCheckpoint c = examples::read_checkpoint(path, "train_cifar10");
  try {  // every error (a missing key, another model's tensors) names the file
    return load_checkpoint_from(c, a, model, opt, sched, amp);
  } catch (const std::exception& e) {
    MINIDL_FAIL("train_cifar10: cannot resume from ", c.file.string(), ": ", e.what());
  }
}

Resumed load_checkpoint_from(const examples::LoadedCheckpoint& c, const Args& a, nn::Module& model,
                             optim::Optimizer& opt, optim::LRScheduler& sched, examples::MixedPrecision& amp) {
  const json& j = c.json;
  const json& cfg = j.at("config");
  const json now = run_config(a);
  for (const char* key : {"dataset", "model", "norm", "optimizer", "schedule", "batch_size", "width", "limit_train",
                          "amp"}) {
    // Checkpoints from before --amp lack it (off); one without the other keys
    // is another program's (older checkpoints carry no "program" entry).
    MINIDL_CHECK(cfg.contains(key) || std::string(key) == "amp", "train_cifar10: its config has no '", key,
                 "': not a train_cifar10 checkpoint");
    const json was = cfg.contains(key) ? cfg.at(key) : json("off");
    std::string flag = key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    // An empty string is a flag left at its default (--norm: the model's own).
    auto shown = [](const json& v) {
      return !v.is_string() ? v.dump() : v.get<std::string>().empty() ? "(not given)" : v.get<std::string>();
    };
    MINIDL_CHECK(was == now.at(key), "train_cifar10: the checkpoint was made with --", flag, " ", shown(was),
                 ", this run has --", flag, " ", shown(now.at(key)));
  }
  // The loader's order and augmentation come from (seed, epoch, index).
  const uint64_t seed = json_uint64(j.at("loader").at("seed"), "train_cifar10: the checkpoint's loader seed");
  MINIDL_CHECK(seed == a.seed, "train_cifar10: the checkpoint was made with --seed ", seed,
               "; resume with the same seed to continue the same run");
  const int64_t epochs = json_int64(cfg.at("epochs"), "train_cifar10: the checkpoint's epochs");
  if (epochs != a.epochs && a.schedule != "none")
    std::cerr << "warning: the checkpoint's run had --epochs " << epochs
              << "; the lr schedule continues from its saved state, not as a fresh " << a.epochs << "-epoch schedule\n";
  examples::load_model_and_optimizer(c, model, opt);
  sched.load_state_dict(j.at("scheduler"));
  amp.load_state_dict(j.value("scaler", json()));
  default_generator().set_state(j.at("generator_state").get<std::string>());
  Resumed r;
  r.epoch = c.epoch;
  for (const auto& m : j.at("history")) r.history.push_back(examples::metrics_from_json(m));
  return r;
}

int run(Args a) {
  if (a.threads > 0) set_num_threads(a.threads);
  manual_seed(a.seed);
  // The device, then the process group's backend (NCCL needs the device known).
  const bool distributed = examples::DistributedRun::launched();
  const auto [device, device_note] = examples::choose_device(a.device, distributed);
  const examples::ChosenBackend backend =
      examples::choose_backend(a.backend, distributed, device, a.device, examples::backend_facts());
  const examples::DistributedRun ddp_run(backend.name);
  // --lr is for --scale-lr-ref-batch images per step; scale it to the global batch.
  const examples::ScaledLr scaled_lr =
      examples::scale_lr(a.lr, a.scale_lr, a.batch_size * ddp_run.world, a.scale_lr_ref_batch);
  a.lr = scaled_lr.lr;
  // Only rank 0 prints, logs and saves; the other ranks' output goes nowhere.
  std::ostringstream quiet;
  std::ostream& out = ddp_run.main() ? std::cout : quiet;
  if (ddp_run.main()) examples::check_output_paths(a.checkpoint_dir, a.save_final);

  const examples::ClassifierData d =
      examples::load_classifier_data({a.dataset, a.data, a.train_files, a.test_files, a.limit_train, a.limit_test});
  auto [train_tf, test_tf] = examples::classifier_transforms(d, !a.no_augment);
  // Data-parallel: each rank takes its strided share of a common (seed, epoch)
  // permutation; the test set is split without padding so every image counts
  // once, and the train-mode evaluation uses the padded split so all ranks run
  // the same number of batches.
  std::shared_ptr<data::Sampler> train_sampler, test_sampler, test_sampler_padded;
  if (distributed) {
    train_sampler = std::make_shared<data::DistributedSampler>(d.train->size(), ddp_run.world, ddp_run.rank, true, a.seed);
    test_sampler = std::make_shared<data::DistributedEvalSampler>(d.test->size(), ddp_run.world, ddp_run.rank);
    test_sampler_padded =
        std::make_shared<data::DistributedSampler>(d.test->size(), ddp_run.world, ddp_run.rank, false);
  }
  const int64_t test_batch = std::max<int64_t>(a.batch_size, 256);
  data::DataLoader train_loader(d.train, {.batch_size = a.batch_size, .shuffle = !distributed, .sampler = train_sampler,
                                          .num_workers = a.workers, .seed = a.seed, .transform = train_tf});
  data::DataLoader test_loader(d.test, {.batch_size = test_batch, .shuffle = false, .sampler = test_sampler,
                                        .num_workers = a.workers, .seed = a.seed, .transform = test_tf});
  data::DataLoader test_loader_train_mode(
      d.test, {.batch_size = test_batch, .shuffle = false, .sampler = distributed ? test_sampler_padded : test_sampler,
               .num_workers = a.workers, .seed = a.seed, .transform = test_tf});

  auto model_options = models::ModelOptions().width(a.width).in_channels(d.channels).input_size(d.size);
  // SyncBN, as in PyTorch: build with BatchNorm, then convert every BN layer.
  const bool sync_bn = a.norm == "syncbatchnorm";
  if (!a.norm.empty()) model_options.norm(sync_bn ? "batchnorm" : a.norm);
  auto model = models::create_model(a.model, model_options);
  if (sync_bn) model = nn::convert_sync_batch_norm(model);
  const std::string backend_note = examples::configure_backends(device, a.deterministic);
  examples::MixedPrecision amp(a.amp, device);  // refuses fp16 off CUDA
  model->to(device);  // before DDP and the optimizer, which keep the model's tensors
  // --channels-last: the conv weights NHWC too (PyTorch's model.to(memory_format=...)), so
  // conv2d converts none per call; optimizer state and checkpoints follow (core/memory_format.h).
  const bool channels_last = channels_last_pays(a, device);
  if (channels_last) model->to(MemoryFormat::ChannelsLast);
  // DDP broadcasts rank 0's parameters and buffers, then averages gradients.
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  if (distributed) ddp = std::make_unique<dist::DistributedDataParallel>(model);
  int64_t n_params = 0;
  for (const Tensor& p : model->parameters()) n_params += p.numel();
  auto opt = make_optimizer(a, *model);
  if (a.cuda_graph) examples::check_cuda_graph_supported(device, a.amp, distributed, *model, *opt);
  const int64_t steps_per_epoch = train_loader.size();
  auto sched = make_scheduler(a, *opt, steps_per_epoch);

  std::vector<EpochMetrics> history;
  int64_t start_epoch = 0;
  if (!a.resume.empty()) {
    Resumed r = load_checkpoint(a.resume, a, *model, *opt, *sched, amp);
    start_epoch = r.epoch;
    history = std::move(r.history);
    out << "resumed from " << a.resume << " after epoch " << start_epoch << "\n";
  }

  if (a.scale_lr != "none") out << "lr scaling: " << scaled_lr.describe() << "\n";
  out << "data:  " << d.description << ": " << d.train->size() << " train, " << d.test->size() << " test images\n"
            << "model: " << a.model << " (norm " << (a.norm.empty() ? "default" : a.norm) << ", width " << a.width << "), " << n_params
            << " parameters\n"
            << "optim: " << a.optimizer << " lr " << a.lr << " momentum " << a.momentum << " weight decay "
            << a.weight_decay << ", schedule " << a.schedule << " (warmup " << a.warmup_epochs << " epochs)\n"
            << "run:   " << a.epochs << " epochs of " << steps_per_epoch << " batches of " << a.batch_size << ", "
            << get_num_threads() << " threads, " << a.workers << " loader workers, seed " << a.seed << "\n"
            << "device: " << device.str() << device_note << backend_note
            << (channels_last ? ", channels-last activations and conv weights" : ", NCHW (contiguous)")
            << (a.memory_format == "auto" ? " (--memory-format auto)" : "") << "\n";
  if (distributed)
    out << "ddp:   " << ddp_run.world << " processes, backend " << backend.name << backend.note << ", batch " << a.batch_size << " per process = "
        << a.batch_size * ddp_run.world << " global; " << train_sampler->size() << " training images per process\n";

  const fs::path log_dir = a.log_dir;
  std::optional<examples::CsvLog> csv;
  std::optional<examples::TensorBoardWriter> tb;
  if (ddp_run.main()) {
    examples::create_output_dir("--log-dir", a.log_dir);
    csv.emplace((log_dir / "metrics.csv").string(),
                std::vector<std::string>{"epoch", "lr", "train_loss", "train_acc", "test_loss", "test_acc",
                                         "test_acc_train_mode", "epoch_seconds", "images_per_s"},
                /*append=*/start_epoch > 0);
    tb.emplace(a.log_dir);
    out << "logs:  " << (log_dir / "metrics.csv").string() << ", " << (log_dir / "curves.svg").string() << ", "
        << tb->path() << "\n";
    if (!a.checkpoint_dir.empty()) out << "checkpoints: " << a.checkpoint_dir << "/checkpoint.json\n";
  }

  const std::string title = a.model + " on " + (a.dataset == "fashion-mnist" ? "Fashion-MNIST" : "CIFAR-10");
  const int64_t end_epoch = a.stop_after > 0 ? std::min(a.stop_after, a.epochs) : a.epochs;
  examples::RunningMetrics metrics(a.log_every);  // reset each epoch; a graph adds into its device sums
  // One step on device tensors, eager or captured (sched and count outside).
  // Channels-last: the images go NHWC on the device (inside the step, so a
  // CUDA graph captures the conversion); every activation follows.
  const MemoryFormat images_format = channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  auto train_step = [&](const Tensor& x_in, const Tensor& y) {
    const Tensor x = x_in.contiguous(images_format);
    const Tensor logits = [&] {  // the forward under autocast, the loss outside it
      auto region = amp.autocast();
      return ddp ? ddp->forward(x) : model->forward(x);
    }();
    Tensor loss = cross_entropy(logits.to(kFloat32), y);
    opt->zero_grad();
    amp.backward(loss);
    amp.step(*opt);
    metrics.accumulate(loss, logits, y);
  };
  std::optional<examples::GraphedStep> graphed;
  if (a.cuda_graph) graphed.emplace(train_step, *opt, device);
  for (int64_t epoch = start_epoch; epoch < end_epoch; ++epoch) {
    model->train();
    train_loader.set_epoch(epoch);
    std::optional<examples::ProgressBar> bar;
    if (ddp_run.main())
      bar.emplace(distributed ? train_sampler->size() : d.train->size(),
                  "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(a.epochs));
    const auto t0 = std::chrono::steady_clock::now();
    metrics.reset();
    // The loss is checked when it comes back to the host (every --log-every steps).
    auto check_and_show = [&] {
      MINIDL_CHECK(std::isfinite(metrics.loss_sum()), "train_cifar10: the loss is ", metrics.loss_sum() / metrics.seen(),
                   " at epoch ", epoch + 1, "; lower --lr");
      if (bar)
        bar->update(metrics.seen(), "loss " + fmt("%.3f", metrics.loss_sum() / metrics.seen()) + " acc " +
                                        fmt("%.1f%%", 100.0 * metrics.correct() / metrics.seen()));
    };
    const double lr = opt->param_groups()[0].lr();
    for (data::Batch& b : train_loader) {
      if (graphed && b.data.size(0) == a.batch_size) {
        graphed->run(b.data, b.targets);  // the lr goes to the device before the replay
      } else {
        train_step(b.data.to(device, /*non_blocking=*/true), b.targets.to(device, /*non_blocking=*/true));
      }
      sched->step();
      metrics.count(b.targets.numel());
      if (metrics.fresh()) check_and_show();
    }
    metrics.read();
    check_and_show();
    const Totals train = Totals{metrics.loss_sum(), static_cast<double>(metrics.correct()),
                                static_cast<double>(metrics.seen())}.total(distributed, device);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EpochMetrics m;
    m.epoch = epoch + 1;
    m.lr = lr;
    m.train_loss = train.loss();
    m.train_acc = train.acc();
    m.seconds = seconds;
    m.images_per_s = train.seen / seconds;  // all ranks together
    if (bar) bar->finish("train loss " + fmt("%.4f", m.train_loss) + " acc " + fmt("%.2f%%", 100 * m.train_acc));

    if ((epoch + 1) % a.eval_every == 0 || epoch + 1 == end_epoch) {
      model->eval();
      Totals r = evaluate(*model, test_loader, distributed, device, amp, images_format);
      m.test_loss = r.loss();
      m.test_acc = r.acc();
      m.test_acc_train_mode =
          evaluate_train_mode(*model, test_loader_train_mode, distributed, device, amp, images_format);
      model->train();
    }
    history.push_back(m);
    out << "epoch " << m.epoch << "/" << a.epochs << ": train loss " << fmt("%.4f", m.train_loss) << " acc "
              << fmt("%.2f%%", 100 * m.train_acc) << " | test loss " << fmt("%.4f", m.test_loss) << " acc "
              << fmt("%.2f%%", 100 * m.test_acc) << " (train mode " << fmt("%.2f%%", 100 * m.test_acc_train_mode)
              << ") | lr " << fmt("%.4g", lr) << " | " << fmt("%.1f", seconds) << " s, "
              << fmt("%.1f", m.images_per_s) << " images/s" << std::endl;
    if (graphed) out << "cuda graph: " << graphed->replays() << " replays so far\n";

    if (!ddp_run.main()) continue;
    csv->row({static_cast<double>(m.epoch), m.lr, m.train_loss, m.train_acc, m.test_loss, m.test_acc,
             m.test_acc_train_mode, m.seconds, m.images_per_s});
    const std::vector<std::pair<std::string, double>> scalars = {
        {"train/loss", m.train_loss},          {"train/accuracy", m.train_acc},
        {"test/loss", m.test_loss},            {"test/accuracy", m.test_acc},
        {"test/accuracy_train_mode", m.test_acc_train_mode}, {"lr", m.lr},
        {"perf/images_per_s", m.images_per_s}};
    if (amp.has_scaler()) {
      tb->add_scalar("amp/loss_scale", amp.loss_scale(), m.epoch);
      tb->add_scalar("amp/skipped_steps", static_cast<double>(amp.skipped_steps()), m.epoch);
    }
    for (const auto& [tag, v] : scalars)
      if (std::isfinite(v)) tb->add_scalar(tag, v, m.epoch);
    tb->flush();
    examples::write_curves(log_dir / "curves.svg", history, title);
    if (!a.checkpoint_dir.empty()) save_checkpoint(a.checkpoint_dir, epoch + 1, a, *model, *opt, *sched, amp, history);
  }

  // Plain BatchNorm under DDP keeps per-rank running statistics (DDP's buffer
  // broadcast copies rank 0's before each training forward, but the last
  // forward's update stays local); SyncBatchNorm keeps them identical.
  if (distributed) {
    auto report = dist::batch_norm_report_across_ranks(*model);
    if (!report.layers.empty()) out << "running statistics across ranks:\n" << report;
  }
  if (!a.save_final.empty() && ddp_run.main()) {
    nn::save_state_dict(*model, a.save_final);
    out << "final model: " << a.save_final << "\n";
  }
  if (history.empty()) {
    out << "nothing to do: the checkpoint is already at epoch " << start_epoch << "\n";
    return 0;
  }
  const EpochMetrics& last = history.back();
  int rc = 0;
  if (a.expect_train_acc >= 0 && !(last.train_acc >= a.expect_train_acc)) {
    std::cerr << "FAILED: final train accuracy " << last.train_acc << " < expected " << a.expect_train_acc << "\n";
    rc = 3;
  }
  if (a.expect_test_acc >= 0 && !(last.test_acc >= a.expect_test_acc)) {
    std::cerr << "FAILED: final test accuracy " << last.test_acc << " < expected " << a.expect_test_acc << "\n";
    rc = 3;
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Train a CIFAR-10 / Fashion-MNIST classifier with minidl"};
  app.add_option("--data", a.data, "dataset folder (default: data/cifar-10-batches-bin, else ../shared/data/cifar10-subset; "
                                   "/usr/share/datasets/fashion-mnist for fashion-mnist)");
  app.add_option("--dataset", a.dataset)->check(CLI::IsMember({"cifar10", "fashion-mnist"}))->capture_default_str();
  app.add_option("--train-files", a.train_files, "CIFAR-10 training files (names in --data, or paths)");
  app.add_option("--test-files", a.test_files, "CIFAR-10 test files (default test_batch.bin, else data_batch_5.bin)");
  app.add_option("--limit-train", a.limit_train, "use only the first N training images (0: all)")->check(minidl::examples::kNonNegative);
  app.add_option("--limit-test", a.limit_test, "use only the first N test images (0: all)")->check(minidl::examples::kNonNegative);
  app.add_option("--model", a.model)->check(CLI::IsMember(models::model_names()))->capture_default_str();
  app.add_option("--norm", a.norm, "normalization layers (default: batchnorm; none for the mlp)")
      ->check(CLI::IsMember({"batchnorm", "syncbatchnorm", "groupnorm", "layernorm", "instancenorm", "none"}));
  app.add_option("--width", a.width, "width multiplier of every layer")->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--epochs", a.epochs)->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--stop-after", a.stop_after,
                 "stop after this epoch as if interrupted (the schedule still spans --epochs); for resume tests")
      ->check(minidl::examples::kNonNegative);
  app.add_option("--batch-size", a.batch_size)->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--lr", a.lr, "peak learning rate")->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--momentum", a.momentum, "SGD momentum")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--weight-decay", a.weight_decay)->check(minidl::examples::kNonNegative)->capture_default_str();
  app.add_option("--scale-lr", a.scale_lr, "scale --lr with the total batch across ranks: linear, sqrt or none")
      ->check(CLI::IsMember(examples::lr_scaling_modes()))->capture_default_str();
  app.add_option("--scale-lr-ref-batch", a.scale_lr_ref_batch, "the total batch size --lr is meant for")
      ->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--optimizer", a.optimizer)->check(CLI::IsMember({"sgd", "adam", "adamw"}))->capture_default_str();
  app.add_option("--schedule", a.schedule, "per-iteration lr schedule")
      ->check(CLI::IsMember({"none", "step", "cosine", "onecycle"}))
      ->capture_default_str();
  app.add_option("--step-size", a.step_size, "epochs between lr drops of --schedule step (default epochs/3)")
      ->check(minidl::examples::kNonNegative);
  app.add_option("--warmup-epochs", a.warmup_epochs, "linear warm-up (not with onecycle, which has its own)")
      ->check(minidl::examples::kNonNegative)
      ->capture_default_str();
  app.add_option("--workers", a.workers, "data loader threads (0: load on the training thread)")
      ->check(minidl::examples::kNonNegative)
      ->capture_default_str();
  app.add_option("--threads", a.threads, "compute threads (0: MINIDL_NUM_THREADS/OMP_NUM_THREADS or all cores)")
      ->check(minidl::examples::kNonNegative);
  app.add_option("--seed", a.seed)->capture_default_str();
  app.add_option("--device", a.device,
                 "where the model trains: auto (cuda when a GPU is usable, else cpu), cpu, cuda[:N] (a CUDA "
                 "build) or test (the test device of CI, core/test_device.h)")
      ->capture_default_str();
  app.add_option("--backend", a.backend,
                 "process group of a distributed run (minidl-launch): auto (nccl on CUDA devices in a build with "
                 "NCCL, one GPU per process; else gloo), gloo or nccl")
      ->capture_default_str();
  app.add_flag("--deterministic", a.deterministic,
               "bit-identical runs on a GPU: deterministic cuDNN algorithms, no cuDNN benchmark search "
               "(minidl's own kernels are deterministic always)");
  app.add_option("--log-every", a.log_every,
                 "read the loss back to the host (progress bar, divergence check) every N steps: each read "
                 "waits for the GPU")
      ->check(minidl::examples::kPositive)
      ->capture_default_str();
  app.add_option("--amp", a.amp, "mixed precision: off, bf16 (autocast to bfloat16) or fp16 (float16 + GradScaler, "
                 "CUDA only)")->check(CLI::IsMember(examples::amp_modes()))->capture_default_str();
  app.add_flag("--no-augment", a.no_augment, "no random crop/flip");
  auto* format_opt =
      app.add_option("--memory-format", a.memory_format,
                     "activations and conv weights: contiguous (NCHW), channels-last (NHWC: cuDNN computes "
                     "convolutions in it without transposing) or auto (channels-last on CUDA for the conv nets "
                     "with BatchNorm, where it measured 1.2-1.35x faster on an H100; else contiguous)")
          ->check(CLI::IsMember({"auto", "contiguous", "channels-last"}))
          ->capture_default_str();
  app.add_flag("--channels-last", a.channels_last, "the same as --memory-format channels-last")->excludes(format_opt);
  app.add_flag("--cuda-graph", a.cuda_graph, "replay one captured CUDA graph per full batch after 3 warm-up "
               "steps (partial batches run eagerly); CUDA only, not with --amp fp16 or distributed");
  app.add_option("--eval-every", a.eval_every, "evaluate on the test set every N epochs (and after the last)")
      ->check(minidl::examples::kPositive)
      ->capture_default_str();
  app.add_option("--log-dir", a.log_dir, "metrics.csv, curves.svg and TensorBoard events")->capture_default_str();
  app.add_option("--checkpoint-dir", a.checkpoint_dir, "save a checkpoint here after every epoch");
  app.add_option("--resume", a.resume, "continue from a checkpoint folder or its checkpoint.json");
  app.add_option("--save-final", a.save_final, "write the final model state dict (safetensors) here");
  app.add_option("--expect-train-acc", a.expect_train_acc, "exit 3 unless the last epoch's train accuracy is >= this")
      ->check(minidl::examples::kNonNegative);  // nan or < 0 turned the check off
  app.add_option("--expect-test-acc", a.expect_test_acc, "exit 3 unless the last test accuracy is >= this")
      ->check(minidl::examples::kNonNegative);
  MINIDL_CLI_PARSE(app, argc, argv);
  if (a.schedule == "onecycle" && a.warmup_epochs > 0) {
    std::cerr << "--warmup-epochs does not combine with --schedule onecycle (which warms up itself)\n";
    return 2;
  }
  if (a.channels_last) a.memory_format = "channels-last";
  if (a.data.empty()) a.data = examples::default_data_dir(a.dataset);
  return examples::run_main("train_cifar10", [&] { return run(a); });
}
