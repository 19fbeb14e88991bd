// grad_accumulation_bn: gradient accumulation does not enlarge BatchNorm's
// batch; SyncBatchNorm across ranks does.
//
//   build/examples/grad_accumulation_bn                                   # parts 1 and 2
//   build/bin/minidl-launch --nproc-per-node 4 build/examples/grad_accumulation_bn   # all three parts
//
// 8 real CIFAR-10 images, a small conv net in float64, one gradient:
//   1. Without BatchNorm, accumulating 4 micro-batches of 2 (each loss / 4)
//      gives the gradient of one batch of 8: the loss is a mean over samples
//      and each sample's term depends on that sample only. Differences are
//      rounding, ~1e-17.
//   2. With BatchNorm, each micro-batch is normalized with ITS OWN mean and
//      variance (2 images), so every sample's output depends on which other
//      image shares its micro-batch: the accumulated gradient is a different
//      gradient, not a noisier estimate of the batch-8 one. The running stats
//      also get 4 updates from 2-image batches instead of one from 8.
//   3. (4 ranks x 2 images, under minidl-launch) SyncBatchNorm normalizes with
//      the statistics of all 8 images, and DDP averages the gradients: the
//      result IS the batch-8 BatchNorm gradient, and the running stats are the
//      batch-8 ones. Plain BN under DDP gives exactly the accumulated gradient
//      of part 2.
// The program checks every claim and exits non-zero if one fails (--smoke:
// also fails when part 3 could not run, i.e. without the launcher).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/sync_batch_norm.h"
#include "examples/common/example_data.h"
#include "examples/common/main_guard.h"
#include "minidl/minidl.h"

namespace fs = std::filesystem;
using namespace minidl;

namespace {

constexpr int64_t kMicro = 2;        // images per micro-batch / per rank
constexpr int64_t kAccumulate = 4;   // micro-batches in parts 1 and 2
constexpr double kSameTol = 1e-12;   // "the same gradient" in float64
constexpr double kDifferTol = 1e-3;  // "a different gradient"

// conv 3->8 -> [BN] -> ReLU -> conv 8->16 stride 2 -> [BN] -> ReLU -> avg pool -> linear 16->10,
// float64, the same weights for the same seed.
std::shared_ptr<nn::Module> make_net(bool batch_norm) {
  manual_seed(7);
  nn::Sequential net;
  net->push_back(nn::Conv2d(nn::Conv2dOptions(3, 8, 3).padding(1).bias(!batch_norm)));
  if (batch_norm) net->push_back(nn::BatchNorm2d(8));
  net->push_back(nn::ReLU());
  net->push_back(nn::Conv2d(nn::Conv2dOptions(8, 16, 3).stride(2).bias(!batch_norm)));
  if (batch_norm) net->push_back(nn::BatchNorm2d(16));
  net->push_back(nn::ReLU());
  net->push_back(nn::AdaptiveAvgPool2d(1));
  net->push_back(nn::Flatten());
  net->push_back(nn::Linear(16, 10));
  net->to(kFloat64);
  net->train();
  return net.ptr();
}

// Every parameter's gradient, concatenated in named_parameters() order.
std::vector<double> flat_grad(const nn::Module& model) {
  std::vector<double> g;
  for (const auto& [name, p] : model.named_parameters()) {
    auto v = p.grad().to_vector<double>();
    g.insert(g.end(), v.begin(), v.end());
  }
  return g;
}

// running_mean and running_var of every BN layer, concatenated.
std::vector<double> flat_running_stats(nn::Module& model) {
  std::vector<double> s;
  for (const auto& m : model.modules())
    if (auto* bn = dynamic_cast<nn::BatchNormImplBase*>(m.get())) {
      for (const Tensor& t : {bn->running_mean, bn->running_var}) {
        auto v = t.to_vector<double>();
        s.insert(s.end(), v.begin(), v.end());
      }
    }
  return s;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  MINIDL_CHECK(a.size() == b.size(), "grad_accumulation_bn: sizes differ: ", a.size(), " vs ", b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double v : a) m = std::max(m, std::abs(v));
  return m;
}

struct Step {
  std::vector<double> grad, stats;
};

// One backward of the mean loss over the whole batch.
Step full_batch(bool batch_norm, const Tensor& x, const Tensor& y) {
  auto net = make_net(batch_norm);
  cross_entropy(net->forward(x), y).backward();
  return {flat_grad(*net), flat_running_stats(*net)};
}

// Gradient accumulation: k micro-batches, each loss / k, gradients summed by backward.
Step accumulated(bool batch_norm, const Tensor& x, const Tensor& y, int64_t k) {
  auto net = make_net(batch_norm);
  const int64_t m = x.size(0) / k;
  for (int64_t i = 0; i < k; ++i) {
    Tensor loss = cross_entropy(net->forward(x.narrow(0, i * m, m)), y.narrow(0, i * m, m));
    (loss / static_cast<double>(k)).backward();
  }
  return {flat_grad(*net), flat_running_stats(*net)};
}

// Under DDP: this rank's 2 images; DDP averages the gradients over ranks.
Step data_parallel(bool sync_batch_norm, const Tensor& x, const Tensor& y, int rank) {
  auto net = make_net(true);
  if (sync_batch_norm) net = nn::convert_sync_batch_norm(net);
  dist::DistributedDataParallel ddp(net);
  cross_entropy(ddp.forward(x.narrow(0, rank * kMicro, kMicro)), y.narrow(0, rank * kMicro, kMicro)).backward();
  return {flat_grad(*net), flat_running_stats(*net)};
}

// The largest value over all ranks.
double max_over_ranks(double v) {
  Tensor t = tensor({v}, {1}, kFloat64);
  dist::all_reduce(t, dist::ReduceOp::MAX);
  return t.item<double>();
}

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", v);
  return buf;
}

struct Row {
  std::string what, against;
  double diff, scale;
  bool expect_same;
  bool ok() const { return expect_same ? diff <= kSameTol * std::max(1.0, scale) : diff > kDifferTol * scale; }
};

// The launcher next to this build: <build>/examples/grad_accumulation_bn -> <build>/bin/minidl-launch.
std::string launch_command() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "minidl-launch --nproc-per-node 4 grad_accumulation_bn";
  fs::path launcher = exe.parent_path().parent_path() / "bin" / "minidl-launch";
  auto rel = [](const fs::path& p) {
    std::error_code e;
    fs::path r = fs::relative(p, fs::current_path(), e);
    return (e || r.empty() || r.string().rfind("../..", 0) == 0) ? p.string() : r.string();
  };
  return rel(launcher) + " --nproc-per-node 4 " + rel(exe);
}

int run(const std::string& data_file, bool smoke) {
  set_num_threads(1);
  const bool launched = std::getenv("RANK") && std::getenv("WORLD_SIZE");
  int rank = 0, world = 1;
  if (launched) {
    dist::init_process_group("gloo", "env://");
    rank = dist::get_rank();
    world = dist::get_world_size();
  }
  std::ostringstream quiet;
  std::ostream& out = rank == 0 ? std::cout : quiet;

  // Real images, normalized, in float64. Part 3 needs 2 per rank.
  const int64_t n = std::max<int64_t>(kMicro * kAccumulate, kMicro * world);
  auto cifar = data::CIFAR10::from_files({data_file});
  MINIDL_CHECK(cifar.size() >= n, "grad_accumulation_bn: ", data_file, " holds fewer than ", n, " images");
  data::Normalize normalize({0.4914, 0.4822, 0.4465}, {0.2470, 0.2435, 0.2616});
  data::ToFloat to_float;
  Generator unused;  // the transforms are deterministic
  std::vector<Tensor> images;
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < n; ++i) {
    data::Example e = cifar.get(i);
    images.push_back(normalize(to_float(e.data, unused), unused).unsqueeze(0));
    labels.push_back(e.target);
  }
  const Tensor x = cat(images, 0).to(kFloat64);
  const Tensor y = tensor(labels, {n});
  const Tensor x8 = x.narrow(0, 0, kMicro * kAccumulate), y8 = y.narrow(0, 0, kMicro * kAccumulate);

  out << "8 CIFAR-10 images from " << data_file << "; conv-BN-ReLU-conv-BN-ReLU-pool-linear net in float64;\n"
      << "one gradient of the mean cross-entropy, compared parameter by parameter (max |diff| over all of them).\n\n";

  std::vector<Row> rows;
  const Step plain8 = full_batch(false, x8, y8);
  const Step plain_acc = accumulated(false, x8, y8, kAccumulate);
  rows.push_back({"no BN: 4 micro-batches of 2, accumulated", "no BN, batch 8", max_abs_diff(plain_acc.grad, plain8.grad),
                  max_abs(plain8.grad), true});
  const Step bn8 = full_batch(true, x8, y8);
  const Step bn_acc = accumulated(true, x8, y8, kAccumulate);
  rows.push_back({"BN: 4 micro-batches of 2, accumulated", "BN, batch 8", max_abs_diff(bn_acc.grad, bn8.grad),
                  max_abs(bn8.grad), false});
  rows.push_back({"  its running_mean/var (4 updates)", "BN, batch 8 (1 update)", max_abs_diff(bn_acc.stats, bn8.stats),
                  max_abs(bn8.stats), false});

  bool part3 = false;
  if (launched && world > 1) {
    part3 = true;
    const int64_t global = kMicro * world;
    const std::string batch = std::to_string(global), ranks = std::to_string(world) + " ranks x 2";
    const Tensor xg = x.narrow(0, 0, global), yg = y.narrow(0, 0, global);
    const Step bn_global = world == kAccumulate ? bn8 : full_batch(true, xg, yg);
    const Step bn_acc_global = world == kAccumulate ? bn_acc : accumulated(true, xg, yg, world);
    const Step sync = data_parallel(true, x, y, rank);
    const Step ddp_bn = data_parallel(false, x, y, rank);
    // Every rank compares its own copy (DDP leaves the same averaged gradient
    // on every rank); the table shows the worst rank.
    rows.push_back({"SyncBN + DDP: " + ranks + ", averaged", "BN, batch " + batch,
                    max_over_ranks(max_abs_diff(sync.grad, bn_global.grad)), max_abs(bn_global.grad), true});
    rows.push_back({"  its running_mean/var", "BN, batch " + batch,
                    max_over_ranks(max_abs_diff(sync.stats, bn_global.stats)), max_abs(bn_global.stats), true});
    rows.push_back({"plain BN + DDP: " + ranks + ", averaged", "BN, batch " + batch,
                    max_over_ranks(max_abs_diff(ddp_bn.grad, bn_global.grad)), max_abs(bn_global.grad), false});
    rows.push_back({"plain BN + DDP: " + ranks + ", averaged", "BN, " + std::to_string(world) + "x2 accumulated",
                    max_over_ranks(max_abs_diff(ddp_bn.grad, bn_acc_global.grad)), max_abs(bn_acc_global.grad), true});
  }

  char line[256];
  std::snprintf(line, sizeof line, "%-44s %-26s %11s %11s  %s\n", "gradient of", "compared with", "max |diff|",
                "max |value|", "verdict");
  out << line;
  bool all_ok = true;
  for (const Row& r : rows) {
    const char* verdict = r.expect_same ? (r.ok() ? "same (rounding)" : "DIFFERENT: claim fails")
                                        : (r.ok() ? "different" : "SAME: claim fails");
    std::snprintf(line, sizeof line, "%-44s %-26s %11s %11s  %s\n", r.what.c_str(), r.against.c_str(),
                  sci(r.diff).c_str(), sci(r.scale).c_str(), verdict);
    out << line;
    all_ok = all_ok && r.ok();
  }
  out << "(same: max |diff| <= " << kSameTol << " x max(1, max |value|); different: max |diff| > " << kDifferTol
      << " x max |value|)\n";
  if (!part3) {
    out << "\nPart 3 (SyncBatchNorm over 4 ranks x 2 images == BatchNorm over 8) needs 4 processes:\n  "
        << launch_command() << "\n";
    if (smoke) {
      out << "FAILED: --smoke checks all three parts; run it under the launcher\n";
      all_ok = false;
    }
  }
  out << (all_ok ? "\nall claims hold\n" : "\nA CLAIM FAILED\n");
  if (launched) dist::destroy_process_group();
  return all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string data_file;
  bool smoke = false;
  CLI::App app{"Gradient accumulation vs BatchNorm vs SyncBatchNorm, on one gradient (float64)"};
  app.add_option("--data", data_file, "a CIFAR-10 binary file (default: the shared subset's data_batch_1.bin)");
  app.add_flag("--smoke", smoke, "exit non-zero unless all three parts ran and every claim held");
  MINIDL_CLI_PARSE(app, argc, argv);
  if (data_file.empty()) data_file = examples::shared_cifar10_subset_dir() + "/data_batch_1.bin";
  return examples::run_main("grad_accumulation_bn", [&] { return run(data_file, smoke); });
}
