// The equivalence oracles of DDP and SyncBatchNorm, on any device and over any
// process group, so the same checks run on the three backends (issue 15):
// Gloo with CPU tensors (tests/test_ddp.cpp, tests/test_sync_batch_norm.cpp),
// Gloo with test-device tensors (tests/test_dist_oracles_device.cpp, CPU CI's
// stand-in for device tensors), and Gloo with CUDA tensors on one shared GPU
// and NCCL (tests/test_cuda_dist_oracles.cpp, GPU only).
//
//   DDP:     `world` ranks x `per_rank` samples == one process x world*per_rank
//            samples, after 3 SGD-with-momentum steps (mean-reduced loss).
//   SyncBN:  SyncBatchNorm over W ranks (uneven and empty slices included) ==
//            BatchNorm over the whole batch in one process: output, input
//            gradient, local and summed weight/bias gradients, running stats.
//
// The single-process reference always runs on the CPU in the rank itself, and
// the data and initial weights come from the CPU generator, so every backend
// is compared with the same numbers. Call these inside forked ranks only
// (tests/dist_test_util.h); they throw RankFailure on a mismatch.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "minidl/dist/ddp.h"
#include "minidl/dist/sync_batch_norm.h"
#include "tests/dist_test_util.h"
#include "tests/test_util.h"

namespace minidl::testing {

// Conv2d [+ BatchNorm2d] + ReLU + Linear + ReLU + Linear in float64,
// initialized from `seed` (CPU generator), then moved to `device`.
inline std::shared_ptr<nn::Module> conv_net(uint64_t seed, Device device = kCPU, bool batch_norm = false) {
  manual_seed(seed);
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(2, 4, 3).padding(1)));
  if (batch_norm) net->push_back(nn::BatchNorm2d(4));
  net->push_back(nn::ReLU());
  net->push_back(nn::Flatten());
  net->push_back(nn::Linear(4 * 5 * 5, 8));
  net->push_back(nn::ReLU());
  net->push_back(nn::Linear(8, 3));
  net->to(kFloat64);
  if (!device.is_cpu()) net->to(device);
  return net.ptr();
}

// Samples [start, start + n) of a batch.
inline Tensor rows(const Tensor& t, int64_t start, int64_t n) { return t.narrow(0, start, n); }

inline void require_params_close(nn::Module& a, nn::Module& b, double tol, const std::string& what) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  DIST_REQUIRE(pa.size() == pb.size(), << what);
  for (size_t i = 0; i < pa.size(); ++i)
    dist_require_close(pa[i].second, pb[i].second, tol, tol, (what + " " + pa[i].first).c_str());
}

inline void require_grads_close(nn::Module& a, nn::Module& b, double tol, const std::string& what) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    DIST_REQUIRE(pa[i].second.grad().defined() == pb[i].second.grad().defined(), << what << " " << pa[i].first);
    if (pa[i].second.grad().defined())
      dist_require_close(pa[i].second.grad(), pb[i].second.grad(), tol, tol,
                         (what + " grad of " + pa[i].first).c_str());
  }
}

inline bool params_equal(nn::Module& a, nn::Module& b) {
  auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    if (pa[i].to_vector<double>() != pb[i].to_vector<double>()) return false;
  return true;
}

// ---- DDP ----------------------------------------------------------------

struct DdpOracle {
  int64_t per_rank = 2;
  dist::DDPOptions options;
  bool expect_several_buckets = false;
  Device device = kCPU;
  double tol = 1e-12;  // float64; a GPU's kernels sum in other orders than the CPU's
  dist::ProcessGroupPtr group = nullptr;  // the default group when null
  // A BatchNorm2d after the conv, a SyncBatchNorm under DDP: W x B with
  // SyncBN == one process x W*B with BatchNorm (gradients, parameters and
  // running stats); needs equal per-rank batches (DDP averages rank means).
  bool sync_bn = false;
  // The DDP model's conv weight and its input channels-last (Module::to): the
  // gradients (bucket views too) and the optimizer state follow the layout.
  bool channels_last = false;
};

inline void ddp_oracle(int rank, int world, const DdpOracle& o) {
  const Device dev = o.device;
  auto ref = conv_net(7, kCPU, o.sync_bn);  // the single-process reference, on the CPU
  // Different initial parameters on every rank.
  std::shared_ptr<nn::Module> model = conv_net(7 + rank, kCPU, o.sync_bn);
  if (o.sync_bn) model = nn::convert_sync_batch_norm(model, o.group);
  if (!dev.is_cpu()) model->to(dev);
  if (o.channels_last) model->to(MemoryFormat::ChannelsLast);
  DIST_REQUIRE(rank == 0 || !params_equal(*model, *ref), << "ranks should start different");
  dist::DistributedDataParallel ddp(model, o.options, o.group);
  DIST_REQUIRE(params_equal(*model, *ref), << "construction must broadcast rank 0's parameters");
  if (o.expect_several_buckets)
    DIST_REQUIRE(ddp.reducer().num_buckets() > 1, << ddp.reducer().num_buckets());
  else
    DIST_REQUIRE(ddp.reducer().num_buckets() == 1, << ddp.reducer().num_buckets());
  for (size_t b = 0; b < ddp.reducer().num_buckets(); ++b)
    DIST_REQUIRE(ddp.reducer().bucket_device(b) == dev, << "bucket " << b << " on " << ddp.reducer().bucket_device(b));

  optim::SGD opt(model->parameters(), 0.05, 0.9), ref_opt(ref->parameters(), 0.05, 0.9);
  const int64_t batch = world * o.per_rank;
  const std::string on = " on " + dev.str();
  for (int step = 0; step < 3; ++step) {
    manual_seed(1000 + step);  // the same data on every rank
    Tensor x = randn({batch, 2, 5, 5}, kFloat64), y = randn({batch, 3}, kFloat64);
    opt.zero_grad();
    Tensor xl = rows(x, rank * o.per_rank, o.per_rank).to(dev);
    const Tensor yl = rows(y, rank * o.per_rank, o.per_rank).to(dev);
    if (o.channels_last) xl = xl.contiguous(MemoryFormat::ChannelsLast);
    mse_loss(ddp(xl), yl).backward();
    ref_opt.zero_grad();
    mse_loss(ref->forward(x), y).backward();
    require_grads_close(*model, *ref, o.tol, "averaged gradient" + on);
    for (const Tensor& p : model->parameters()) {
      DIST_REQUIRE(p.grad().device() == dev);
      bool in_a_bucket = false;  // gradient_as_bucket_view: .grad shares a bucket's storage
      for (size_t b = 0; b < ddp.reducer().num_buckets(); ++b)
        in_a_bucket = in_a_bucket || p.grad().impl()->storage == ddp.reducer().bucket_tensor(b).impl()->storage;
      DIST_REQUIRE(in_a_bucket == o.options.gradient_as_bucket_view(), << "step " << step << on);
      if (o.channels_last && p.dim() == 4)
        DIST_REQUIRE(p.is_contiguous(MemoryFormat::ChannelsLast) && p.grad().is_contiguous(MemoryFormat::ChannelsLast),
                     << "step " << step << on << ": a channels-last weight and its gradient");
    }
    opt.step();
    ref_opt.step();
  }
  require_params_close(*model, *ref, o.tol, "after 3 steps" + on);
  const auto buffers = model->named_buffers(), ref_buffers = ref->named_buffers();
  DIST_REQUIRE(buffers.size() == ref_buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i)  // SyncBN's running stats == BatchNorm's over the whole batch
    dist_require_close(buffers[i].second, ref_buffers[i].second, o.tol, o.tol, (buffers[i].first + on).c_str());

  // The state dict has the plain model's keys (no "module." prefix).
  auto plain = conv_net(99, dev, o.sync_bn);
  plain->load_state_dict(ddp.module()->state_dict());
  require_params_close(*plain, *model, 0.0, "state_dict round trip" + on);
}

// ---- SyncBatchNorm -------------------------------------------------------

struct SyncBnCase {
  std::string label;
  std::vector<int64_t> split;  // each rank's batch size; split.size() == world
  Shape rest;                  // (C, *)
  DType dtype = kFloat64;
  std::optional<double> momentum = 0.1;
  bool affine = true;
  bool track = true;
  int steps = 3;
};

inline std::pair<double, double> sync_bn_tolerances(DType dtype) {
  return dtype == kFloat64 ? std::make_pair(1e-10, 1e-10) : std::make_pair(1e-4, 1e-5);
}

// The landed 4-rank cases: 4 x 2 and uneven 3, 2, 1, 0 (float64 and float32).
inline std::vector<SyncBnCase> sync_bn_four_rank_cases() {
  return {
      {"4 x 2, float64", {2, 2, 2, 2}, {3, 5, 4}},
      {"4 x 2, float32", {2, 2, 2, 2}, {3, 5, 4}, kFloat32},
      {"uneven 3, 2, 1, 0, float64", {3, 2, 1, 0}, {3, 5, 4}},
      {"uneven 3, 2, 1, 0, float32", {3, 2, 1, 0}, {3, 5, 4}, kFloat32},
  };
}

inline std::shared_ptr<nn::BatchNormImplBase> batch_norm_reference(const nn::BatchNormOptions& o, size_t input_dim) {
  if (input_dim <= 3) return std::make_shared<nn::BatchNorm1dImpl>(o);
  if (input_dim == 4) return std::make_shared<nn::BatchNorm2dImpl>(o);
  return std::make_shared<nn::BatchNorm3dImpl>(o);
}

// SyncBatchNorm on `device` over the default group against BatchNorm over the
// whole batch on the CPU (see the header comment).
inline void sync_bn_oracle(int rank, int world, const SyncBnCase& c, Device device = kCPU) {
  DIST_REQUIRE(static_cast<int>(c.split.size()) == world, << c.label);
  const int64_t C = c.rest[0];
  int64_t N = 0, offset = 0;
  for (int r = 0; r < world; ++r) {
    if (r < rank) offset += c.split[r];
    N += c.split[r];
  }
  const int64_t n = c.split[rank];
  Shape full{N};
  full.insert(full.end(), c.rest.begin(), c.rest.end());
  Shape dims{0};  // every dim but the channel dim
  for (size_t d = 2; d < full.size(); ++d) dims.push_back(static_cast<int64_t>(d));
  const auto [rtol, atol] = sync_bn_tolerances(c.dtype);
  const std::string label = c.label + " on " + device.str();
  auto close = [&, rtol = rtol, atol = atol](const Tensor& a, const Tensor& b, const std::string& what) {
    dist_require_close(a, b, rtol, atol, (label + ": " + what).c_str());
  };

  const auto options = nn::BatchNormOptions(C).momentum(c.momentum).affine(c.affine).track_running_stats(c.track);
  auto ref = batch_norm_reference(options, full.size());
  auto sync = std::make_shared<nn::SyncBatchNormImpl>(options);
  ref->to(c.dtype);
  sync->to(c.dtype);
  if (c.affine) {
    manual_seed(1000);
    const Tensor w = randn({C}, c.dtype) * 0.5 + 1.0, b = randn({C}, c.dtype);
    NoGradGuard no_grad;
    ref->weight.copy_(w), ref->bias.copy_(b);
    sync->weight.copy_(w), sync->bias.copy_(b);
  }
  if (!device.is_cpu()) sync->to(device);

  for (int step = 0; step < c.steps; ++step) {
    const std::string at = " (step " + std::to_string(step) + ")";
    manual_seed(2000 + step);  // the same full batch on every rank
    const Tensor x = randn(full, c.dtype) * 1.5 + 0.3 * step;
    const Tensor g = randn(full, c.dtype);
    ref->zero_grad();
    sync->zero_grad();

    Tensor xr = x.clone();
    xr.requires_grad_();
    const Tensor yr = ref->forward(xr);
    (yr * g).sum().backward();

    Tensor xl = x.narrow(0, offset, n).clone().to(device);
    xl.requires_grad_();
    const Tensor gl = g.narrow(0, offset, n).to(device);
    const Tensor yl = sync->forward(xl);
    (yl * gl).sum().backward();

    DIST_REQUIRE(yl.shape() == xl.shape() && yl.device() == device, << label << at);
    close(yl, yr.narrow(0, offset, n), "output" + at);
    DIST_REQUIRE(xl.grad().defined() && xl.grad().device() == device, << label << at);
    close(xl.grad(), xr.grad().narrow(0, offset, n), "input gradient" + at);

    if (c.affine) {
      // Local gradients: this rank's share, from an independent xhat.
      const Tensor mean = x.mean(dims, true), var = x.var(dims, false, true);
      const Tensor xhat = ((x - mean) / (var + 1e-5).sqrt()).narrow(0, offset, n);
      const Tensor gc = g.narrow(0, offset, n);
      DIST_REQUIRE(sync->weight.grad().defined() && sync->bias.grad().defined(), << label << at);
      DIST_REQUIRE(sync->weight.grad().device() == device, << label << at);
      close(sync->weight.grad(), (gc * xhat).sum(dims), "local weight gradient" + at);
      close(sync->bias.grad(), gc.sum(dims), "local bias gradient" + at);
      // Summed over ranks (what DDP's all-reduce does, before averaging): the global gradient.
      Tensor gw = sync->weight.grad().clone(), gb = sync->bias.grad().clone();
      dist::all_reduce(gw);
      dist::all_reduce(gb);
      close(gw, ref->weight.grad(), "weight gradient summed over ranks" + at);
      close(gb, ref->bias.grad(), "bias gradient summed over ranks" + at);
    } else {
      DIST_REQUIRE(!sync->weight.defined() && !sync->bias.defined(), << label);
    }

    if (c.track) {
      DIST_REQUIRE(sync->running_mean.device() == device, << label << at);
      close(sync->running_mean, ref->running_mean, "running_mean" + at);
      close(sync->running_var, ref->running_var, "running_var" + at);
      DIST_REQUIRE(sync->num_batches_tracked.item<int64_t>() == step + 1, << label << at);
      DIST_REQUIRE(ref->num_batches_tracked.item<int64_t>() == step + 1, << label << at);
    } else {
      DIST_REQUIRE(!sync->running_mean.defined() && !sync->running_var.defined(), << label);
      DIST_REQUIRE(!sync->num_batches_tracked.defined(), << label);
    }
  }

  int64_t per_channel = n;
  for (size_t d = 2; d < full.size(); ++d) per_channel *= full[d];
  if (!c.track && per_channel > 1) {
    // Without running stats, eval normalizes with batch statistics too, but
    // with this rank's own: eval never synchronizes (PyTorch's need_sync).
    sync->eval();
    manual_seed(3000);
    const Tensor x = randn(full, c.dtype).narrow(0, offset, n).to(device);
    const Tensor local = batch_norm(x, Tensor(), Tensor(), sync->weight, sync->bias, true, 0.0, 1e-5);
    close(sync->forward(x), local, "eval without running stats = local batch statistics");
  }
}

}  // namespace minidl::testing
