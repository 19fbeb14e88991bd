// The host/device parts of the multi-tensor optimizer kernels
// (ops/cuda/multi_tensor_math.h), run on the CPU in every build: the packing
// plan covers every element exactly once within the launch limits; the
// kernel's functors, driven by that plan as the __global__ shell drives them,
// give the CPU optimizer kernels' bits; and the optimizers' multi-tensor path
// (one call per device and dtype of a group) gives the per-parameter bits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "minidl/ops/cuda/multi_tensor_math.h"
#include "minidl/ops/fused_optim.h"
#include "minidl/optim/adam.h"
#include "minidl/optim/clip_grad.h"
#include "minidl/optim/sgd.h"
#include "tests/optim_step_cases.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::cuda_math;
using minidl::testing::random_adam_step;
using minidl::testing::random_sgd_step;

namespace {

// Checks the limits and returns how often each element of each tensor is visited.
std::vector<std::vector<int>> visits(const std::vector<int64_t>& numels, int max_tensors, int max_blocks,
                                     int64_t chunk) {
  std::vector<std::vector<int>> seen;
  for (int64_t n : numels) seen.emplace_back(static_cast<size_t>(n), 0);
  for (const MultiTensorLaunch& l : plan_multi_tensor(numels, max_tensors, max_blocks, chunk)) {
    CHECK(!l.blocks.empty());
    CHECK(static_cast<int>(l.blocks.size()) <= max_blocks);
    CHECK(!l.tensors.empty());
    CHECK(static_cast<int>(l.tensors.size()) <= max_tensors);
    for (const auto& [slot, c] : l.blocks) {
      REQUIRE(slot >= 0);
      REQUIRE(slot < static_cast<int>(l.tensors.size()));
      const auto k = static_cast<size_t>(l.tensors[static_cast<size_t>(slot)]);
      CHECK(numels[k] > 0);
      for (int64_t i = chunk_begin(c, chunk); i < chunk_end(c, chunk, numels[k]); ++i) ++seen[k][static_cast<size_t>(i)];
    }
  }
  return seen;
}

// What multi_tensor_kernel does, block after block, on the host.
template <class Op>
void run_like_the_kernel(const Op& op, const OpLists<Op>& lists) {
  const auto plan = plan_multi_tensor(lists.numels, multi_tensor_max_tensors(Op::kDepth), kMultiTensorBlocks,
                                      kMultiTensorChunk);
  for (const MultiTensorLaunch& l : plan)
    for (const auto& [slot, c] : l.blocks) {
      const auto k = static_cast<size_t>(l.tensors[static_cast<size_t>(slot)]);
      const auto element = op.bind(lists.extras[k]);  // once a block, as the kernel
      for (int64_t i = chunk_begin(c, kMultiTensorChunk); i < chunk_end(c, kMultiTensorChunk, lists.numels[k]); ++i)
        element(lists.ptrs[k].data(), i);
    }
}

// Parameter sizes that take several launches: more tensors than one launch
// holds, an empty one, one over a chunk (65536) long.
std::vector<int64_t> sizes() {
  std::vector<int64_t> s{70000, 0, 1};
  for (int k = 0; k < 40; ++k) s.push_back(1 + (k * 37) % 300);
  return s;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

std::vector<Tensor> clones(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.defined() ? t.clone() : Tensor());
  return out;
}

}  // namespace

TEST_CASE("multi-tensor plan: every element once, within the tensor and block limits") {
  const std::vector<std::vector<int64_t>> cases = {
      {}, {0, 0}, {1}, {4}, {5}, {21}, {3, 0, 7, 1, 1, 1, 1, 30, 2}, {0, 40, 0, 0, 3}, {4, 4, 4, 4, 4, 4, 4}};
  for (const auto& numels : cases) {
    CAPTURE(numels.size());
    for (const auto& per_tensor : visits(numels, 3, 5, 4))
      for (int v : per_tensor) CHECK(v == 1);
  }
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<int64_t> numels(rng() % 12);
    for (int64_t& n : numels) n = rng() % 3 == 0 ? 0 : static_cast<int64_t>(rng() % 50);
    const int max_tensors = 1 + static_cast<int>(rng() % 4), max_blocks = 1 + static_cast<int>(rng() % 6);
    for (const auto& per_tensor : visits(numels, max_tensors, max_blocks, 1 + static_cast<int64_t>(rng() % 8)))
      for (int v : per_tensor) CHECK(v == 1);
  }
  // PyTorch's limits: 100 tensors of 2 chunks under Adam's 30 tensors per launch.
  const auto plan = plan_multi_tensor(std::vector<int64_t>(100, 70000), multi_tensor_max_tensors(5),
                                      kMultiTensorBlocks, kMultiTensorChunk);
  CHECK(plan.size() == 4);
  CHECK(plan.front().blocks.size() == 60);
  // One tensor longer than a launch's blocks continues in the next launch.
  const auto long_one = plan_multi_tensor({kMultiTensorChunk * 700}, 30, kMultiTensorBlocks, kMultiTensorChunk);
  REQUIRE(long_one.size() == 3);
  CHECK(long_one[1].tensors == std::vector<int64_t>{0});
  CHECK(long_one[1].blocks.front() == std::pair<int, int64_t>{0, 320});
  CHECK(long_one[2].blocks.size() == 60);
}

TEST_CASE_TEMPLATE("the SGD multi-tensor functor under the plan gives the CPU kernel's bits", T, float, double, Half,
                   BFloat16) {
  const DType dt = dtype_v<T>;
  for (const bool nesterov : {false, true})
    for (const double momentum : {0.0, 0.9}) {
      if (nesterov && momentum == 0.0) continue;
      CAPTURE(nesterov);
      CAPTURE(momentum);
      MultiStepArgs<SgdStepArgs> mine, cpu;
      int k = 0;
      for (int64_t n : sizes()) {
        // (momentum buffers created at different steps)
        const SgdStepArgs a = random_sgd_step(n, dt, momentum, nesterov, momentum != 0.0 && k++ % 3 == 0);
        SgdStepArgs b = a;
        b.param = a.param.clone();
        b.momentum_buffer = a.momentum_buffer.defined() ? a.momentum_buffer.clone() : Tensor();
        mine.tensors.push_back(a);
        cpu.tensors.push_back(b);
      }
      sgd_multi_step_stub(kCPU)(cpu);
      run_like_the_kernel(make_sgd_multi_op<T>(mine.tensors.front()), sgd_lists<T>(mine));
      for (size_t i = 0; i < mine.tensors.size(); ++i) {
        CAPTURE(i);
        CHECK(same_bits(mine.tensors[i].param, cpu.tensors[i].param));
        if (momentum != 0.0) CHECK(same_bits(mine.tensors[i].momentum_buffer, cpu.tensors[i].momentum_buffer));
      }
    }
}

TEST_CASE_TEMPLATE("the Adam multi-tensor functor under the plan gives the CPU kernel's bits", T, float, double, Half,
                   BFloat16) {
  const DType dt = dtype_v<T>;
  for (const bool decoupled : {false, true})
    for (const bool amsgrad : {false, true}) {
      CAPTURE(decoupled);
      CAPTURE(amsgrad);
      MultiStepArgs<AdamStepArgs> mine, cpu;
      int k = 0;
      for (int64_t n : sizes()) {
        // (parameters at different steps)
        const AdamStepArgs a = random_adam_step(n, dt, decoupled, amsgrad, 1 + k++ % 5);
        AdamStepArgs b = a;
        b.param = a.param.clone();
        b.exp_avg = a.exp_avg.clone();
        b.exp_avg_sq = a.exp_avg_sq.clone();
        b.max_exp_avg_sq = amsgrad ? a.max_exp_avg_sq.clone() : Tensor();
        mine.tensors.push_back(a);
        cpu.tensors.push_back(b);
      }
      adam_multi_step_stub(kCPU)(cpu);
      run_like_the_kernel(make_adam_multi_op<T>(mine.tensors.front()), adam_lists<T>(mine));
      for (size_t i = 0; i < mine.tensors.size(); ++i) {
        CAPTURE(i);
        CHECK(same_bits(mine.tensors[i].param, cpu.tensors[i].param));
        CHECK(same_bits(mine.tensors[i].exp_avg, cpu.tensors[i].exp_avg));
        CHECK(same_bits(mine.tensors[i].exp_avg_sq, cpu.tensors[i].exp_avg_sq));
        if (amsgrad) CHECK(same_bits(mine.tensors[i].max_exp_avg_sq, cpu.tensors[i].max_exp_avg_sq));
      }
    }
}

// Capturable (CUDA graphs): the functors read the lr and each step from
// memory; on the host their double math is the CPU path's, so the bits match.
TEST_CASE_TEMPLATE("the capturable SGD and Adam functors under the plan give the plain kernels' bits", T, float,
                   double, Half, BFloat16) {
  const DType dt = dtype_v<T>;
  const Tensor lr = full({}, 0.037, kFloat64);
  MultiStepArgs<SgdStepArgs> sgd_mine, sgd_cpu;
  for (int64_t n : sizes()) {
    SgdStepArgs s;
    s.param = randn({n}, dt);
    s.grad = randn({n}, dt);
    s.momentum_buffer = randn({n}, dt);
    s.lr = 0.037;
    s.momentum = 0.9;
    s.weight_decay = 1e-2;
    SgdStepArgs sc = s;
    sc.param = s.param.clone();
    sc.momentum_buffer = s.momentum_buffer.clone();
    sc.lr = -1.0;  // must not be read
    sc.lr_tensor = lr;
    sgd_cpu.tensors.push_back(s);
    sgd_mine.tensors.push_back(sc);
  }
  sgd_multi_step_stub(kCPU)(sgd_cpu);
  run_like_the_kernel(make_sgd_capturable_op<T>(sgd_mine.tensors.front()), sgd_capturable_lists<T>(sgd_mine));
  for (size_t i = 0; i < sgd_mine.tensors.size(); ++i) {
    CAPTURE(i);
    CHECK(same_bits(sgd_mine.tensors[i].param, sgd_cpu.tensors[i].param));
    CHECK(same_bits(sgd_mine.tensors[i].momentum_buffer, sgd_cpu.tensors[i].momentum_buffer));
  }

  for (const bool decoupled : {false, true})  // Adam's L2 decay into the gradient; AdamW's 1 - lr * weight_decay
    for (const bool amsgrad : {false, true}) {
      CAPTURE(decoupled);
      CAPTURE(amsgrad);
      MultiStepArgs<AdamStepArgs> adam_mine, adam_cpu;
      int k = 0;
      for (int64_t n : sizes()) {
        const double t = 1 + k++ % 5;  // counters at different steps before the call
        const AdamStepArgs a = random_adam_step(n, dt, decoupled, amsgrad, t + 1, /*lr=*/0.037);
        AdamStepArgs ac = a;
        ac.param = a.param.clone();
        ac.exp_avg = a.exp_avg.clone();
        ac.exp_avg_sq = a.exp_avg_sq.clone();
        ac.max_exp_avg_sq = amsgrad ? a.max_exp_avg_sq.clone() : Tensor();
        ac.lr = -1.0, ac.step_size = -1.0, ac.bias_correction2_sqrt = -1.0;  // must not be read
        ac.lr_tensor = lr;
        ac.step_tensor = full({}, t, kFloat32);
        adam_cpu.tensors.push_back(a);
        adam_mine.tensors.push_back(ac);
      }
      adam_multi_step_stub(kCPU)(adam_cpu);
      run_like_the_kernel(StepIncrementOp{}, step_increment_lists(adam_mine));  // the kernel's first launch
      run_like_the_kernel(make_adam_capturable_op<T>(adam_mine.tensors.front()), adam_capturable_lists<T>(adam_mine));
      for (size_t i = 0; i < adam_mine.tensors.size(); ++i) {
        CAPTURE(i);
        CHECK(same_bits(adam_mine.tensors[i].param, adam_cpu.tensors[i].param));
        CHECK(same_bits(adam_mine.tensors[i].exp_avg, adam_cpu.tensors[i].exp_avg));
        CHECK(same_bits(adam_mine.tensors[i].exp_avg_sq, adam_cpu.tensors[i].exp_avg_sq));
        if (amsgrad) CHECK(same_bits(adam_mine.tensors[i].max_exp_avg_sq, adam_cpu.tensors[i].max_exp_avg_sq));
        CHECK(adam_mine.tensors[i].step_tensor.item<float>() == static_cast<float>(1 + i % 5 + 1));
      }
    }
}

TEST_CASE("optimizers on mixed dtypes: the multi-tensor path equals one single-tensor kernel per parameter") {
  auto make_params = [] {
    std::vector<Tensor> ps;
    for (int k = 0; k < 6; ++k) {
      Tensor p = randn({3 + k, 2}, k % 2 ? kFloat64 : kFloat32);
      p.requires_grad_(true);
      if (k != 4) p.set_grad(randn({3 + k, 2}, p.dtype()));  // one without a gradient: skipped
      ps.push_back(p);
    }
    return ps;
  };
  SUBCASE("SGD, two steps (the buffers' first step, then momentum)") {
    std::vector<Tensor> ps = make_params();
    std::vector<Tensor> ref = clones(ps), bufs(ps.size());
    optim::SGD opt(ps, 0.1, 0.9, 0.0, 1e-3, /*nesterov=*/true);
    for (int step = 0; step < 2; ++step) {
      opt.step();
      for (size_t i = 0; i < ps.size(); ++i) {
        if (!ps[i].grad().defined()) continue;
        SgdStepArgs a;
        a.param = ref[i];
        a.grad = ps[i].grad();
        a.first_step = !bufs[i].defined();
        if (a.first_step) bufs[i] = empty_like(ref[i]);
        a.momentum_buffer = bufs[i];
        a.lr = 0.1;
        a.momentum = 0.9;
        a.weight_decay = 1e-3;
        a.nesterov = true;
        sgd_step_stub(kCPU)(a);
      }
    }
    for (size_t i = 0; i < ps.size(); ++i) CHECK(same_bits(ps[i], ref[i]));
  }
  SUBCASE("AdamW, amsgrad, three steps") {
    std::vector<Tensor> ps = make_params();
    std::vector<Tensor> ref = clones(ps);
    std::vector<Tensor> m, v, vmax;
    for (const Tensor& p : ps) {
      m.push_back(zeros_like(p));
      v.push_back(zeros_like(p));
      vmax.push_back(zeros_like(p));
    }
    optim::AdamW opt(ps, 1e-2, {0.9, 0.99}, 1e-8, 0.1, /*amsgrad=*/true);
    for (int step = 1; step <= 3; ++step) {
      opt.step();
      for (size_t i = 0; i < ps.size(); ++i) {
        if (!ps[i].grad().defined()) continue;
        AdamStepArgs a;
        a.param = ref[i];
        a.grad = ps[i].grad();
        a.exp_avg = m[i];
        a.exp_avg_sq = v[i];
        a.max_exp_avg_sq = vmax[i];
        a.lr = 1e-2;
        a.beta1 = 0.9;
        a.beta2 = 0.99;
        a.eps = 1e-8;
        a.weight_decay = 0.1;
        a.decoupled_weight_decay = true;
        a.step_size = 1e-2 / (1.0 - std::pow(0.9, step));
        a.bias_correction2_sqrt = std::sqrt(1.0 - std::pow(0.99, step));
        adam_step_stub(kCPU)(a);
      }
    }
    for (size_t i = 0; i < ps.size(); ++i) CHECK(same_bits(ps[i], ref[i]));
  }
}

TEST_CASE("multi-tensor calls refuse mixed dtypes and mixed hyperparameters, naming the op") {
  SgdStepArgs a;
  a.param = zeros({3});
  a.grad = zeros({3});
  a.lr = 0.1;
  SgdStepArgs b = a;
  b.param = zeros({3});
  b.lr = 0.2;
  CHECK_THROWS_WITH_AS(sgd_multi_step_stub(kCPU)(MultiStepArgs<SgdStepArgs>{{a, b}}),
                       doctest::Contains("_fused_sgd_: expected all parameters of one call to share the hyperparameters"),
                       Error);
  b.lr = 0.1;
  b.param = zeros({3}, kFloat64);
  b.grad = zeros({3}, kFloat64);
  CHECK_THROWS_WITH_AS(sgd_multi_step_stub(kCPU)(MultiStepArgs<SgdStepArgs>{{a, b}}),
                       doctest::Contains("same dtype and device"), Error);
  AdamStepArgs c;
  c.param = zeros({2});
  c.grad = zeros({3});
  c.exp_avg = zeros({2});
  c.exp_avg_sq = zeros({2});
  CHECK_THROWS_WITH_AS(adam_multi_step_stub(kCPU)(MultiStepArgs<AdamStepArgs>{{c}}),
                       doctest::Contains("_fused_adam_: expected the gradient and state"), Error);
  // Grouping keeps the order of first appearance.
  SgdStepArgs d = a;
  d.param = zeros({1}, kFloat64);
  const auto groups = group_by_device_and_dtype(std::vector<SgdStepArgs>{a, d, a});
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].tensors.size() == 2);
  CHECK(groups[1].tensors.front().param.dtype() == kFloat64);
}

TEST_CASE("_foreach_norm's chunk partials and per-tensor finish give the CPU norms") {
  std::vector<Tensor> xs;
  for (int64_t n : sizes()) xs.push_back(randn({n}, xs.size() % 2 ? kFloat64 : kFloat32).to(kFloat64));
  std::vector<int64_t> numels;
  for (const Tensor& x : xs) numels.push_back(x.numel());
  const std::vector<int64_t> offsets = partial_offsets(numels, kMultiTensorChunk);
  REQUIRE(offsets.size() == xs.size() + 1);
  CHECK(offsets[1] == 2);  // 70000 elements: two chunks
  CHECK(offsets[2] == 2);  // the empty tensor has none
  for (const double p : {1.0, 2.0, 3.0, std::numeric_limits<double>::infinity()}) {
    CAPTURE(p);
    // The partials kernel, block after block (a serial sum per chunk here, CUB's tree on the device).
    std::vector<double> partials(static_cast<size_t>(offsets.back()), -1.0);
    const NormCombine combine{std::isinf(p)};
    for (const MultiTensorLaunch& l : plan_multi_tensor(numels, multi_tensor_max_tensors(1), kMultiTensorBlocks,
                                                        kMultiTensorChunk))
      for (const auto& [slot, c] : l.blocks) {
        const auto k = static_cast<size_t>(l.tensors[static_cast<size_t>(slot)]);
        const double* x = xs[k].data_ptr<double>();
        double acc = 0.0;
        for (int64_t i = chunk_begin(c, kMultiTensorChunk); i < chunk_end(c, kMultiTensorChunk, numels[k]); ++i)
          acc = combine(acc, norm_term(x[i], p));
        partials[static_cast<size_t>(offsets[k] + c)] = acc;
      }
    for (double v : partials) CHECK(v >= 0.0);  // every partial written
    VectorNormsArgs args{{}, xs, p};
    for (size_t k = 0; k < xs.size(); ++k) args.outs.push_back(zeros({}, kFloat64));
    vector_norms_stub(kCPU)(args);
    for (size_t k = 0; k < xs.size(); ++k) {
      CAPTURE(k);
      const double got = finish_from_partials(partials.data() + offsets[k], offsets[k + 1] - offsets[k], p);
      CHECK(got == doctest::Approx(args.outs[k].item<double>()).epsilon(1e-13));
    }
  }
}

TEST_CASE_TEMPLATE("the clip scaling functor under the plan gives clip_grad_scale's bits", T, float, double, Half,
                   BFloat16) {
  std::vector<Tensor> mine, cpu;
  for (int64_t n : sizes()) {
    mine.push_back(randn({n}, dtype_v<T>));
    cpu.push_back(mine.back().clone());
  }
  const Tensor total = full({}, 7.25, kFloat64);
  clip_grad_scale_multi_stub(kCPU)(ClipGradScaleMultiArgs{cpu, total, 2.0});
  OpLists<ClipScaleOp<T>> lists;
  for (const Tensor& g : mine) {
    lists.ptrs.push_back({g.data_ptr<T>()});
    lists.numels.push_back(g.numel());
    lists.extras.push_back(0);
  }
  run_like_the_kernel(ClipScaleOp<T>{total.data_ptr<double>(), 2.0}, lists);
  for (size_t i = 0; i < mine.size(); ++i) CHECK(same_bits(mine[i], cpu[i]));
}

TEST_CASE("clip_grad_norm_ through the multi-tensor stubs keeps the per-tensor results") {
  std::vector<Tensor> params, grads;
  for (int k = 0; k < 7; ++k) {
    Tensor p = zeros({4, 3 + k}, k % 3 ? kFloat32 : kFloat64).requires_grad_(true);
    Tensor g = randn({3 + k, 4}, p.dtype());
    p.set_grad(k == 2 ? g.transpose(0, 1) : g.transpose(0, 1).contiguous());  // one strided gradient
    params.push_back(p);
    grads.push_back(p.grad().contiguous());
  }
  for (const double p : {2.0, std::numeric_limits<double>::infinity()}) {
    std::vector<Tensor> ref = clones(grads), ps = params;
    for (size_t i = 0; i < ps.size(); ++i)  // fresh gradients, the third one strided
      ps[i].set_grad(i == 2 ? grads[i].t().contiguous().t() : grads[i].clone());
    REQUIRE(!ps[2].grad().is_contiguous());
    const Tensor norms = zeros({static_cast<int64_t>(ref.size())}, kFloat64), total = zeros({}, kFloat64);
    for (size_t i = 0; i < ref.size(); ++i) vector_norm_stub(kCPU)(norms.select(0, static_cast<int64_t>(i)), ref[i], p);
    vector_norm_stub(kCPU)(total, norms, p);
    for (const Tensor& g : ref) clip_grad_scale_stub(kCPU)(g, total, 1.0);
    const double got = optim::clip_grad_norm_(ps, 1.0, p);
    CHECK(got == total.item<double>());
    for (size_t i = 0; i < ps.size(); ++i) CHECK(same_bits(ps[i].grad().contiguous(), ref[i]));
  }
}

TEST_CASE("_foreach_norm and the multi clip refuse mismatched lists") {
  CHECK_THROWS_WITH_AS(vector_norms_stub(kCPU)(VectorNormsArgs{{}, {zeros({2})}, 2.0}),
                       doctest::Contains("_foreach_norm: expected one output per tensor"), Error);
  CHECK_THROWS_WITH_AS(
      clip_grad_scale_multi_stub(kCPU)(ClipGradScaleMultiArgs{{zeros({2}), zeros({2}, kFloat64)}, zeros({}, kFloat64), 1.0}),
      doctest::Contains("same dtype and device"), Error);
}

TEST_CASE("norm_combine: the inf-norm's max keeps NaN in either position, as torch.linalg.vector_norm") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(std::isnan(norm_combine(nan, 3.0, true)));
  CHECK(std::isnan(norm_combine(3.0, nan, true)));
  CHECK(norm_combine(2.0, 3.0, true) == 3.0);
  CHECK(norm_combine(3.0, 2.0, true) == 3.0);
  CHECK(norm_combine(2.0, 3.0, false) == 5.0);
  CHECK(std::isnan(finish_from_partials(std::vector<double>{1.0, nan, 0.5}.data(), 3,
                                        std::numeric_limits<double>::infinity())));
}
