// train_unet3d: binary 3-D segmentation with a UNet3d, the training template
// of the DDP / SyncBN / AMP article made a real program:
//
//   build/examples/train_unet3d --epochs 10                      # one process
//   build/bin/minidl-launch --nproc-per-node 2 build/examples/train_unet3d --sync-bn --epochs 10
//   build/examples/train_unet3d --epochs 20 --resume runs/train_unet3d/ckpt   # continues
//   build/examples/train_unet3d --smoke                          # make test: seconds
//
// What it does, as the template: UNet3d (1 input channel, 1 class) on random
// volumetric patches (random flips); BatchNorm converted to SyncBatchNorm with
// --sync-bn; DistributedDataParallel under minidl-launch, each rank drawing
// its share of the volumes from a DistributedSampler; Adam (lr 2e-4, weight
// decay 1e-4) with MultiStepLR (milestones 25/50/75, gamma 0.2, per epoch);
// BCE + Dice loss; a progress bar per epoch; the loss averaged across ranks
// (an all-reduce of the sums: the template's reduce_tensor); Dice and IoU of
// sigmoid(logits) > 0.5 on whole validation volumes; rank 0 alone writes
// TensorBoard scalars (train/val loss, dice, iou, lr) and images (a depth
// slice of the first validation volume: image, ground truth, predicted mask),
// metrics.csv and curves.svg, and a checkpoint per epoch (model, optimizer,
// scheduler, GradScaler state with --amp fp16, history).
//
// AMP (the template's amp O1): --amp bf16 runs the forward passes under
// autocast in bfloat16 (CPU or CUDA; no loss scaling needed), --amp fp16 in
// float16 with a GradScaler whose state goes into the checkpoint (CUDA only);
// the loss is computed in float32 and BatchNorm keeps float32 statistics.
// examples/common/mixed_precision.h.
//
// Data (examples/common/segmentation_data.h): --data DIR with train/ and val/
// folders of images/ and labels/ .npy volumes; when DIR is absent or empty
// the synthetic grain set (data/grain_volumes.h) is generated there first.
//
// Exact resume: patches come from a Generator seeded by (seed, epoch, rank)
// and the volume order from the sampler's (seed, epoch) permutation, so a
// checkpoint needs only the model, optimizer, scheduler and epoch.
#include <CLI/CLI.hpp>
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

#include "examples/common/backend_choice.h"
#include "examples/common/checkpoint.h"
#include "examples/common/cli_checks.h"
#include "examples/common/csv_log.h"
#include "examples/common/device_choice.h"
#include "examples/common/distributed_run.h"
#include "examples/common/example_data.h"
#include "examples/common/main_guard.h"
#include "examples/common/mixed_precision.h"
#include "examples/common/progress.h"
#include "examples/common/segmentation_data.h"
#include "examples/common/svg_plot.h"
#include "examples/common/tensorboard.h"
#include "minidl/core/json_int.h"
#include "minidl/dist/batch_norm_report.h"
#include "minidl/dist/ddp.h"
#include "minidl/dist/sync_batch_norm.h"
#include "minidl/minidl.h"

namespace fs = std::filesystem;
using namespace minidl;
using examples::fmt;
using nlohmann::json;

namespace {

struct Args {
  std::string data, val_data;
  int64_t generate = 16, generate_val = 4, volume_size = 64;
  int64_t patch = 32, batch_size = 2, samples_per_volume = 4;
  int64_t epochs = 100, stop_after = 0;
  double lr = 2e-4, weight_decay = 1e-4, gamma = 0.2;
  std::vector<int64_t> milestones{25, 50, 75};
  int64_t base_width = 16, levels = 4, tb_slice = 0;
  std::string norm = "batchnorm", upsample = "transpose", amp = "off", device = "auto", backend = "auto";
  bool sync_bn = false, smoke = false;
  int threads = 0;
  uint64_t seed = 0;
  std::string log_dir = "runs/train_unet3d", checkpoint_dir, resume;
  double expect_dice = -1.0;
};

// Per-epoch numbers; kept in the checkpoint so resumed runs plot whole curves.
struct EpochMetrics {
  int64_t epoch = 0;
  double lr = 0, train_loss = NAN, val_loss = NAN, val_dice = NAN, val_iou = NAN, seconds = 0;
};

json to_json(const EpochMetrics& m) {
  auto num = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  return {{"epoch", m.epoch},           {"lr", m.lr},           {"train_loss", num(m.train_loss)},
          {"val_loss", num(m.val_loss)}, {"val_dice", num(m.val_dice)}, {"val_iou", num(m.val_iou)},
          {"seconds", m.seconds}};
}

EpochMetrics metrics_from_json(const json& j) {
  auto num = [&](const char* k) { return j.at(k).is_null() ? NAN : j.at(k).get<double>(); };
  return {json_int64(j.at("epoch"), "metrics: epoch"), num("lr"), num("train_loss"), num("val_loss"),
          num("val_dice"), num("val_iou"), num("seconds")};
}

// Sums over samples on this rank; total() adds the ranks' sums (the
// template's reduce_tensor, which averages the loss across ranks).
struct Sums {
  double loss = 0, dice = 0, iou = 0, count = 0;
  Sums total(bool distributed, Device device) const {  // on the model's device: NCCL takes only its GPU's tensors
    if (!distributed) return *this;
    Tensor t = tensor({loss, dice, iou, count}, {4}, kFloat64).to(device);
    dist::all_reduce(t, dist::ReduceOp::SUM);
    const auto v = t.to_vector<double>();
    return {v[0], v[1], v[2], v[3]};
  }
  double mean(double s) const { return count > 0 ? s / count : NAN; }
};

// The patches of one rank for one epoch come from this seed.
uint64_t patch_seed(uint64_t seed, int64_t epoch, int rank) {
  return seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(epoch) * 1000003ULL + static_cast<uint64_t>(rank) + 1;
}

// A 2-D slice as a [0, 1] image: min-max scaled (the volumes are normalized).
Tensor to_unit_range(const Tensor& slice) {
  Tensor s = slice.to(kFloat32).contiguous();
  const double lo = s.min().item<float>(), hi = s.max().item<float>();
  return hi > lo ? (s - lo) / (hi - lo) : zeros_like(s);
}

struct Validation {
  Sums sums;
  Tensor image, label, mask;  // rank 0's first volume, depth slice tb_slice (H, W), for TensorBoard
};

// Whole validation volumes in eval mode: BCE + Dice loss, Dice and IoU of
// sigmoid(logits) > 0.5, one number per volume, summed over ranks.
Validation validate(nn::Module& model, nn::BCEDiceLossImpl& criterion, const data::VolumeDataset& val,
                    const data::Sampler& sampler, bool distributed, Device device, int64_t tb_slice,
                    const examples::MixedPrecision& amp) {
  NoGradGuard no_grad;
  model.eval();
  Validation v;
  for (int64_t i : sampler.indices(0)) {
    const data::VolumeSample s = val.volume(i);
    const Tensor x = s.image.unsqueeze(0).to(device), y = s.label.unsqueeze(0).to(device);
    Tensor logits;
    {
      auto region = amp.autocast();
      logits = model.forward(x);
    }
    logits = logits.to(kFloat32);  // loss and metrics in float32
    v.sums.loss += criterion.forward(logits, y).item<float>();
    metrics::OverlapOptions o;
    o.from_logits = true;
    v.sums.dice += metrics::dice_score(logits, y, o).item<double>();
    v.sums.iou += metrics::iou_score(logits, y, o).item<double>();
    v.sums.count += 1;
    if (!v.image.defined()) {
      const int64_t z = std::min<int64_t>(tb_slice, x.size(2) - 1);
      v.image = to_unit_range(x.select(0, 0).select(0, 0).select(0, z));
      v.label = y.select(0, 0).select(0, 0).select(0, z).contiguous();
      v.mask = gt(sigmoid(logits.select(0, 0).select(0, 0).select(0, z)), 0.5);
    }
  }
  model.train();
  v.sums = v.sums.total(distributed, device);
  return v;
}

void write_curves(const fs::path& path, const std::vector<EpochMetrics>& history) {
  using examples::Series;
  Series train{"train", {}, {}}, val{"val", {}, {}}, dice{"val Dice", {}, {}}, iou{"val IoU", {}, {}};
  for (const auto& m : history) {
    const double x = static_cast<double>(m.epoch);
    for (auto [s, y] : {std::pair{&train, m.train_loss}, {&val, m.val_loss}, {&dice, m.val_dice}, {&iou, m.val_iou}}) {
      s->x.push_back(x);
      s->y.push_back(y);
    }
  }
  examples::write_svg_plot(path.string(),
                           {{"BCE + Dice loss", "epoch", "loss", {train, val}, true},
                            {"overlap (sigmoid > 0.5)", "epoch", "score", {dice, iou}, true}},
                           "UNet3d on 3-D segmentation");
}

json run_config(const Args& a) {
  return {{"patch", a.patch},           {"batch_size", a.batch_size}, {"samples_per_volume", a.samples_per_volume},
          {"base_width", a.base_width}, {"levels", a.levels},         {"norm", a.norm},
          {"upsample", a.upsample},     {"sync_bn", a.sync_bn},       {"amp", a.amp},
          {"seed", a.seed},             {"epochs", a.epochs}};
}

int run(const Args& a) {
  if (a.threads > 0) set_num_threads(a.threads);
  manual_seed(a.seed);
  // The device, then the process group's backend (NCCL needs the device known).
  const bool distributed = examples::DistributedRun::launched();
  const auto [device, device_note] = examples::choose_device(a.device, distributed);
  const examples::ChosenBackend backend =
      examples::choose_backend(a.backend, distributed, device, a.device, examples::backend_facts());
  const examples::DistributedRun ddp_run(backend.name);
  std::ostringstream quiet;  // only rank 0 prints, logs and saves
  std::ostream& out = ddp_run.main() ? std::cout : quiet;
  if (ddp_run.main()) examples::check_output_paths(a.checkpoint_dir);
  MINIDL_CHECK(!a.sync_bn || a.norm == "batchnorm", "train_unet3d: --sync-bn converts BatchNorm layers; it needs --norm "
               "batchnorm, got --norm ", a.norm);

  examples::SegmentationDataOptions data_options;
  data_options.dir = a.data;
  data_options.val_dir = a.val_data;
  data_options.generate_train = a.generate;
  data_options.generate_val = a.generate_val;
  data_options.volume_size = a.volume_size;
  data_options.seed = a.seed;
  data_options.patch_size = {a.patch, a.patch, a.patch};
  data_options.main_rank = ddp_run.main();
  data_options.distributed = distributed;
  const examples::SegmentationData d = examples::load_segmentation_data(data_options, out);
  // Each volume is visited samples_per_volume times per epoch (a random patch each time).
  const data::DistributedSampler train_sampler(d.train->size() * a.samples_per_volume, ddp_run.world, ddp_run.rank,
                                               true, a.seed);
  const data::DistributedEvalSampler val_sampler(d.val->size(), ddp_run.world, ddp_run.rank);

  auto model_ptr = models::UNet3d(models::UNetOptions()
                                      .in_channels(1)
                                      .classes(1)
                                      .base_width(a.base_width)
                                      .levels(a.levels)
                                      .norm(a.norm)
                                      .upsample(a.upsample))
                       .ptr();
  std::shared_ptr<nn::Module> model = model_ptr;
  if (a.sync_bn) model = nn::convert_sync_batch_norm(model);  // the template's convert_syncbn_model
  const std::string backend_note = examples::configure_backends(device, /*deterministic=*/false);
  examples::MixedPrecision amp(a.amp, device);  // throws for fp16 off CUDA
  model->to(device);
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  if (distributed) ddp = std::make_unique<dist::DistributedDataParallel>(model);
  int64_t n_params = 0;
  for (const Tensor& p : model->parameters()) n_params += p.numel();
  nn::BCEDiceLoss criterion;
  optim::Adam opt(model->parameters(), a.lr, {0.9, 0.999}, 1e-8, a.weight_decay);
  optim::MultiStepLR sched(opt, a.milestones, a.gamma);  // stepped once per epoch

  std::vector<EpochMetrics> history;
  int64_t start_epoch = 0;
  if (!a.resume.empty()) {
    const examples::LoadedCheckpoint c = examples::read_checkpoint(a.resume, "train_unet3d");
    try {  // every error (a missing key, another model's tensors) names the file
      const json& cfg = c.json.at("config");
      const json config = run_config(a);
      for (const auto& [key, value] : config.items())
        if (key != "epochs") {
          MINIDL_CHECK(cfg.contains(key), "its config has no '", key, "': not a train_unet3d checkpoint");
          MINIDL_CHECK(cfg.at(key) == value, "the checkpoint was made with ", key, " ", cfg.at(key).dump(),
                       ", this run has ", value.dump());
        }
      examples::load_model_and_optimizer(c, *model, opt);
      sched.load_state_dict(c.json.at("scheduler"));
      amp.load_state_dict(c.json.at("scaler"));
      for (const auto& m : c.json.at("history")) history.push_back(metrics_from_json(m));
    } catch (const std::exception& e) {
      MINIDL_FAIL("train_unet3d: cannot resume from ", c.file.string(), ": ", e.what());
    }
    start_epoch = c.epoch;
    out << "resumed from " << a.resume << " after epoch " << start_epoch << "\n";
  }
  const int64_t steps = (train_sampler.size() + a.batch_size - 1) / a.batch_size;
  out << "data:  " << d.description << "\n"
      << "model: UNet3d (base width " << a.base_width << ", " << a.levels << " levels, norm "
      << (a.sync_bn ? "syncbatchnorm" : a.norm) << ", upsample " << a.upsample << "), " << n_params << " parameters\n"
      << "optim: Adam lr " << a.lr << " weight decay " << a.weight_decay << ", MultiStepLR gamma " << a.gamma
      << " at epochs";
  for (int64_t m : a.milestones) out << " " << m;
  out << "; loss BCE + Dice; amp " << a.amp << "\n"
      << "run:   " << a.epochs << " epochs of " << steps << " steps of " << a.batch_size << " patches of " << a.patch
      << "^3 per process, " << get_num_threads() << " threads, seed " << a.seed << ", device " << device.str() << device_note << backend_note << "\n";
  if (distributed)
    out << "ddp:   " << ddp_run.world << " processes, backend " << backend.name << backend.note << ", " << a.batch_size * ddp_run.world
        << " patches per step in all" << (a.sync_bn ? "; BatchNorm statistics synchronized (SyncBatchNorm)" : "")
        << "\n";

  std::optional<examples::CsvLog> csv;
  std::optional<examples::TensorBoardWriter> tb;
  const fs::path log_dir = a.log_dir;
  if (ddp_run.main()) {
    examples::create_output_dir("--log-dir", a.log_dir);
    csv.emplace((log_dir / "metrics.csv").string(),
                std::vector<std::string>{"epoch", "lr", "train_loss", "val_loss", "val_dice", "val_iou", "seconds"},
                start_epoch > 0);
    tb.emplace(a.log_dir);
    out << "logs:  " << (log_dir / "metrics.csv").string() << ", " << (log_dir / "curves.svg").string() << ", "
        << tb->path() << "\n";
    if (!a.checkpoint_dir.empty()) out << "checkpoints: " << a.checkpoint_dir << "/checkpoint.json\n";
  }

  const int64_t end_epoch = a.stop_after > 0 ? std::min(a.stop_after, a.epochs) : a.epochs;
  for (int64_t epoch = start_epoch; epoch < end_epoch; ++epoch) {
    model->train();
    const std::vector<int64_t> order = train_sampler.indices(epoch);
    Generator gen(patch_seed(a.seed, epoch, ddp_run.rank));
    std::optional<examples::ProgressBar> bar;
    if (ddp_run.main())
      bar.emplace(static_cast<int64_t>(order.size()), "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(a.epochs));
    const auto t0 = std::chrono::steady_clock::now();
    const double lr = opt.param_groups()[0].lr();
    Sums train;
    for (size_t begin = 0; begin < order.size(); begin += a.batch_size) {
      const size_t end = std::min(order.size(), begin + static_cast<size_t>(a.batch_size));
      const data::VolumeBatch b = examples::patch_batch(*d.train, order, begin, end, gen);
      const Tensor x = b.images.to(device, true), y = b.labels.to(device, true);
      Tensor logits;
      {
        auto region = amp.autocast();
        logits = ddp ? ddp->forward(x) : model->forward(x);
      }
      const Tensor loss = criterion(logits.to(kFloat32), y);
      opt.zero_grad();
      amp.backward(loss);
      amp.step(opt);
      const double l = loss.item<float>();
      MINIDL_CHECK(std::isfinite(l), "train_unet3d: the loss is ", l, " at epoch ", epoch + 1, "; lower --lr");
      train.loss += l * static_cast<double>(end - begin);
      train.count += static_cast<double>(end - begin);
      if (bar) bar->update(static_cast<int64_t>(end), "loss " + fmt("%.4f", train.mean(train.loss)));
    }
    sched.step();
    const Sums train_all = train.total(distributed, device);
    const Validation v = validate(*model, *criterion, *d.val, val_sampler, distributed, device, a.tb_slice, amp);
    EpochMetrics m;
    m.epoch = epoch + 1;
    m.lr = lr;
    m.train_loss = train_all.mean(train_all.loss);
    m.val_loss = v.sums.mean(v.sums.loss);
    m.val_dice = v.sums.mean(v.sums.dice);
    m.val_iou = v.sums.mean(v.sums.iou);
    m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    history.push_back(m);
    if (bar) bar->finish("train loss " + fmt("%.4f", m.train_loss));
    out << "epoch " << m.epoch << "/" << a.epochs << ": train loss " << fmt("%.4f", m.train_loss) << " | val loss "
        << fmt("%.4f", m.val_loss) << " dice " << fmt("%.4f", m.val_dice) << " iou " << fmt("%.4f", m.val_iou)
        << " | lr " << fmt("%.3g", lr) << " | " << fmt("%.1f", m.seconds) << " s" << std::endl;

    if (!ddp_run.main()) continue;
    csv->row({static_cast<double>(m.epoch), m.lr, m.train_loss, m.val_loss, m.val_dice, m.val_iou, m.seconds});
    for (const auto& [tag, value] : {std::pair<const char*, double>{"train/loss", m.train_loss},
                                     {"val/loss", m.val_loss}, {"val/dice", m.val_dice}, {"val/iou", m.val_iou},
                                     {"lr", m.lr}})
      if (std::isfinite(value)) tb->add_scalar(tag, value, m.epoch);
    if (amp.has_scaler()) {
      tb->add_scalar("amp/loss_scale", amp.loss_scale(), m.epoch);
      tb->add_scalar("amp/skipped_steps", static_cast<double>(amp.skipped_steps()), m.epoch);
    }
    if (v.image.defined()) {  // rank 0 always holds validation volume 0
      tb->add_image("val/image", v.image, m.epoch);
      tb->add_image("val/ground_truth", v.label, m.epoch);
      tb->add_image("val/prediction", v.mask, m.epoch);
    }
    tb->flush();
    write_curves(log_dir / "curves.svg", history);
    if (!a.checkpoint_dir.empty()) {
      json meta;
      meta["program"] = "train_unet3d";  // read_checkpoint refuses another program's checkpoint
      meta["config"] = run_config(a);
      meta["scheduler"] = sched.state_dict();
      meta["scaler"] = amp.state_dict();
      json h = json::array();
      for (const auto& e : history) h.push_back(to_json(e));
      meta["history"] = h;
      examples::save_epoch_checkpoint(a.checkpoint_dir, m.epoch, *model, opt, std::move(meta));
    }
  }
  // Plain BatchNorm under DDP ends with per-rank running statistics (each
  // rank's last forward updates its own); SyncBatchNorm keeps them identical.
  if (distributed) {
    const dist::CrossRankBatchNormReport report = dist::batch_norm_report_across_ranks(*model);
    if (!report.layers.empty())
      out << "BatchNorm running statistics across ranks (" << report.layers.size()
          << " layers): largest difference running_mean " << report.max_running_mean_diff() << ", running_var "
          << report.max_running_var_diff() << "\n";
  }
  if (history.empty()) {
    out << "nothing to do: the checkpoint is already at epoch " << start_epoch << "\n";
    return 0;
  }
  const EpochMetrics& first = history.front();
  const EpochMetrics& last = history.back();
  int rc = 0;
  if (a.smoke && history.size() >= 2 && !(last.train_loss < first.train_loss)) {
    std::cerr << "FAILED: the training loss did not decrease (" << first.train_loss << " -> " << last.train_loss << ")\n";
    rc = 3;
  }
  if (a.expect_dice >= 0 && !(last.val_dice >= a.expect_dice)) {
    std::cerr << "FAILED: final validation Dice " << last.val_dice << " < expected " << a.expect_dice << "\n";
    rc = 3;
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Train a UNet3d for binary 3-D segmentation with minidl (single process or under minidl-launch)"};
  app.add_option("--data", a.data, "data folder: train/ and val/ with images/ and labels/ .npy volumes; generated "
                                   "when absent or empty (default <repo>/runs/data/grain3d, git-ignored)");
  app.add_option("--val-data", a.val_data, "validation folder (images/, labels/) when --data is one flat folder");
  app.add_option("--generate", a.generate, "synthetic training volumes to write when --data has none")
      ->check(minidl::examples::kNonNegative)->capture_default_str();
  app.add_option("--generate-val", a.generate_val, "synthetic validation volumes")
      ->check(minidl::examples::kNonNegative)->capture_default_str();
  app.add_option("--volume-size", a.volume_size, "edge of each synthetic volume")
      ->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--patch", a.patch, "edge of the cubic training patches")->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--batch-size", a.batch_size, "patches per step per process")->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--samples-per-volume", a.samples_per_volume, "patches drawn from each volume per epoch")
      ->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--epochs", a.epochs)->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--stop-after", a.stop_after, "stop after this epoch as if interrupted (for resume tests)")
      ->check(minidl::examples::kNonNegative);
  app.add_option("--lr", a.lr)->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--weight-decay", a.weight_decay)->check(minidl::examples::kNonNegative)->capture_default_str();
  app.add_option("--milestones", a.milestones, "MultiStepLR epochs")->capture_default_str();
  app.add_option("--gamma", a.gamma, "MultiStepLR factor")->check(minidl::examples::kNonNegative)->capture_default_str();
  app.add_option("--base-width", a.base_width, "channels of the first level")->check(minidl::examples::kPositive)->capture_default_str();
  app.add_option("--levels", a.levels, "resolutions (levels - 1 poolings)")->check(CLI::Range(1, 8))->capture_default_str();
  app.add_option("--norm", a.norm)->check(CLI::IsMember(models::norm_kinds()))->capture_default_str();
  app.add_flag("--sync-bn", a.sync_bn, "convert BatchNorm to SyncBatchNorm (statistics over all ranks)");
  app.add_option("--upsample", a.upsample)->check(CLI::IsMember({"transpose", "interpolate"}))->capture_default_str();
  app.add_option("--amp", a.amp, "mixed precision: off, bf16 (autocast to bfloat16) or fp16 (float16 + GradScaler, CUDA only)")
      ->check(CLI::IsMember(examples::amp_modes()))->capture_default_str();
  app.add_option("--device", a.device, "auto (cuda when a GPU is usable, else cpu), cpu, cuda[:N] (a CUDA build) or test")
      ->capture_default_str();
  app.add_option("--backend", a.backend,
                 "process group of a distributed run (minidl-launch): auto (nccl on CUDA devices in a build with "
                 "NCCL, one GPU per process; else gloo), gloo or nccl")
      ->capture_default_str();
  app.add_option("--threads", a.threads, "compute threads (0: MINIDL_NUM_THREADS/OMP_NUM_THREADS or all cores)")
      ->check(minidl::examples::kNonNegative);
  app.add_option("--seed", a.seed)->capture_default_str();
  app.add_option("--tb-slice", a.tb_slice, "depth slice of validation volume 0 logged as TensorBoard images")
      ->check(minidl::examples::kNonNegative)->capture_default_str();
  app.add_option("--log-dir", a.log_dir, "metrics.csv, curves.svg and TensorBoard events")->capture_default_str();
  app.add_option("--checkpoint-dir", a.checkpoint_dir, "save a checkpoint here after every epoch");
  app.add_option("--resume", a.resume, "continue from a checkpoint folder or its checkpoint.json");
  app.add_option("--expect-dice", a.expect_dice, "exit 3 unless the last validation Dice is >= this")
      ->check(minidl::examples::kNonNegative);  // nan or < 0 turned the check off
  app.add_flag("--smoke", a.smoke,
               "a seconds-long check for make test: tiny synthetic volumes, base width 4, 2 epochs; fails unless "
               "the training loss decreases and the validation Dice reaches --expect-dice (default set by --smoke)");
  MINIDL_CLI_PARSE(app, argc, argv);
  return examples::run_main("train_unet3d", [&] {
    if (a.smoke) {
      // Small enough for seconds; options given on the command line win. The
      // Dice floor is set from measured runs (see examples/README.md).
      auto set = [&](const char* option, auto& field, auto value) {
        if (app.count(option) == 0) field = value;
      };
      if (a.data.empty()) a.data = (fs::path(a.log_dir) / "data").string();
      set("--generate", a.generate, int64_t{6});
      set("--generate-val", a.generate_val, int64_t{2});
      set("--volume-size", a.volume_size, int64_t{24});
      set("--patch", a.patch, int64_t{16});
      set("--samples-per-volume", a.samples_per_volume, int64_t{4});
      set("--epochs", a.epochs, int64_t{2});
      set("--base-width", a.base_width, int64_t{4});
      set("--lr", a.lr, 1e-2);
      set("--expect-dice", a.expect_dice, 0.5);
    }
    if (a.data.empty()) a.data = (examples::repo_root() / "runs" / "data" / "grain3d").string();
    return run(a);
  });
}
