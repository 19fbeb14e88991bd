// The host/device parts of the multi-tensor optimizer kernels
// (ops/cuda/multi_tensor_apply.cuh, ops/cuda/fused_optim_multi.cu), in plain
// C++ so the CPU tests run them: how many tensors go into few launches
// (PyTorch's multi_tensor_apply), and the per-element functors that apply
// ops/cuda/optim_math.h's SGD / Adam updates with a tensor's own scalars.
//
// Packing: every tensor is cut into chunks of kMultiTensorChunk elements, one
// block per chunk. A launch carries, in its kernel arguments, the addresses,
// sizes and per-tensor scalars of at most max_tensors tensors and a
// block -> (tensor slot, chunk) table of at most kMultiTensorBlocks entries;
// a tensor whose chunks do not fit continues in the next launch (same slot
// data, re-sent). Kernel arguments rather than a device table uploaded from
// pinned memory: nothing to allocate, keep alive until the copy has run or
// free, and a CUDA graph captures the arguments by value. The price is one
// launch per ~30 tensors (Adam), as PyTorch pays.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "minidl/core/half.h"  // MINIDL_HOST_DEVICE
#include "minidl/ops/cuda/optim_math.h"
#include "minidl/ops/fused_optim.h"

namespace minidl::cuda_math {

inline constexpr int64_t kMultiTensorChunk = 65536;  // PyTorch's kChunkSize
inline constexpr int kMultiTensorBlocks = 320;       // PyTorch's depth_to_max_blocks
inline constexpr int kMultiTensorThreads = 512;      // PyTorch's kBlockSize

// Tensors per launch for `depth` lists (1..5): PyTorch's depth_to_max_tensors,
// which keeps the argument struct under the 4 KB kernel-parameter limit.
constexpr int multi_tensor_max_tensors(int depth) {
  constexpr int table[] = {110, 64, 48, 36, 30};
  return table[depth - 1];
}

struct MultiTensorLaunch {
  std::vector<int64_t> tensors;                 // slot -> index in the caller's list
  std::vector<std::pair<int, int64_t>> blocks;  // block -> (slot, chunk)
};

// The launches that cover every element of tensors with these sizes exactly
// once; empty tensors take no slot, and no tensors give no launch.
inline std::vector<MultiTensorLaunch> plan_multi_tensor(const std::vector<int64_t>& numels, int max_tensors,
                                                        int max_blocks, int64_t chunk) {
  std::vector<MultiTensorLaunch> launches;
  MultiTensorLaunch cur;
  for (size_t k = 0; k < numels.size(); ++k) {
    if (numels[k] == 0) continue;
    if (static_cast<int>(cur.tensors.size()) == max_tensors) launches.push_back(std::exchange(cur, {}));
    cur.tensors.push_back(static_cast<int64_t>(k));
    const int64_t chunks = (numels[k] + chunk - 1) / chunk;
    for (int64_t c = 0; c < chunks; ++c) {
      if (static_cast<int>(cur.blocks.size()) == max_blocks) {  // full: this tensor goes on in slot 0
        launches.push_back(std::exchange(cur, {}));
        cur.tensors.push_back(static_cast<int64_t>(k));
      }
      cur.blocks.emplace_back(static_cast<int>(cur.tensors.size()) - 1, c);
    }
  }
  if (!cur.blocks.empty()) launches.push_back(std::move(cur));
  return launches;
}

// Element range [begin, end) of chunk c of a tensor of n elements.
MINIDL_HOST_DEVICE inline int64_t chunk_begin(int64_t c, int64_t chunk) { return c * chunk; }
MINIDL_HOST_DEVICE inline int64_t chunk_end(int64_t c, int64_t chunk, int64_t n) {
  return (c + 1) * chunk < n ? (c + 1) * chunk : n;
}

// Each op below is bound to one tensor's scalar (its Extra) by
// op.bind(extra), which gives the function of an element, f(ptr, i): what
// depends on the tensor only (the capturable optimizers' bias corrections from
// device memory, the clip coefficient) is computed once a block in the kernel,
// not once an element.

// SGD over one tensor's elements with its scalars.
template <class T>
struct SgdElement {
  SgdScalars<opmath_t<T>> s;
  MINIDL_HOST_DEVICE void operator()(void* const* ptr, int64_t i) const {
    T* buf = s.has_buf ? static_cast<T*>(ptr[2]) + i : nullptr;
    sgd_update(s, static_cast<T*>(ptr[0])[i], static_cast<const T*>(ptr[1])[i], buf);
  }
};

// SGD over lists (param, grad, momentum_buffer); a tensor's own scalar: first_step.
template <class T>
struct SgdMultiOp {
  static constexpr int kDepth = 3;
  using Extra = bool;
  SgdScalars<opmath_t<T>> s;  // shared hyperparameters; s.first_step is ignored
  MINIDL_HOST_DEVICE SgdElement<T> bind(Extra first_step) const {
    SgdElement<T> e{s};
    e.s.first_step = first_step;
    return e;
  }
};

// A parameter's step-dependent Adam scalars, rounded to the compute type as
// the CPU kernel does.
template <class T>
struct AdamTensorScalars {
  opmath_t<T> neg_step, bc2;
};

// Adam over one tensor's elements with its scalars.
template <class T>
struct AdamElement {
  AdamScalars<opmath_t<T>> s;
  MINIDL_HOST_DEVICE void operator()(void* const* ptr, int64_t i) const {
    T* v_max = s.amsgrad ? static_cast<T*>(ptr[4]) + i : nullptr;
    adam_update(s, static_cast<T*>(ptr[0])[i], static_cast<const T*>(ptr[1])[i], static_cast<T*>(ptr[2])[i],
                static_cast<T*>(ptr[3])[i], v_max);
  }
};

// Adam over lists (param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq).
template <class T>
struct AdamMultiOp {
  static constexpr int kDepth = 5;
  using Extra = AdamTensorScalars<T>;
  AdamScalars<opmath_t<T>> s;  // shared hyperparameters; s.neg_step and s.bc2 are ignored
  MINIDL_HOST_DEVICE AdamElement<T> bind(Extra e) const {
    AdamElement<T> a{s};
    a.s.neg_step = e.neg_step;
    a.s.bc2 = e.bc2;
    return a;
  }
};

// The functors' scalars from the (checked) args of a multi-tensor call, each
// rounded to the compute type C from the double the CPU kernel rounds
// (ops/cpu/fused_optim.cpp; float for a 16-bit T, as its widened path).
template <class T, class C = opmath_t<T>>
SgdMultiOp<T> make_sgd_multi_op(const SgdStepArgs& h) {
  return {{static_cast<C>(h.weight_decay), static_cast<C>(h.momentum), static_cast<C>(1.0 - h.dampening),
           static_cast<C>(-h.lr), h.weight_decay != 0.0, h.nesterov, false, h.momentum_buffer.defined()}};
}

template <class T, class C = opmath_t<T>>
AdamMultiOp<T> make_adam_multi_op(const AdamStepArgs& h) {
  return {{static_cast<C>(h.weight_decay), static_cast<C>(1.0 - h.lr * h.weight_decay), static_cast<C>(1.0 - h.beta1),
           static_cast<C>(h.beta2), static_cast<C>(1.0 - h.beta2), C(1), static_cast<C>(h.eps), C(0),
           h.weight_decay != 0.0, h.decoupled_weight_decay, h.max_exp_avg_sq.defined()}};
}

template <class T, class C = opmath_t<T>>
AdamTensorScalars<T> adam_tensor_scalars(const AdamStepArgs& a) {
  return {static_cast<C>(-a.step_size), static_cast<C>(a.bias_correction2_sqrt)};
}

// ---- capturable (ops/fused_optim.h): the lr and Adam's steps read on the device ----

// SgdMultiOp with -lr read from *lr (a 0-d float64) at run time.
template <class T>
struct SgdCapturableOp {
  static constexpr int kDepth = 3;
  using Extra = bool;
  SgdScalars<opmath_t<T>> s;  // as SgdMultiOp's; s.neg_lr is ignored
  const double* lr;
  MINIDL_HOST_DEVICE SgdElement<T> bind(Extra first_step) const {
    SgdElement<T> e{s};
    e.s.first_step = first_step;
    e.s.neg_lr = static_cast<opmath_t<T>>(-*lr);
    return e;
  }
};

// The step-dependent Adam scalars from lr and the step t, in double and
// rounded to the compute type C, as optim/adam.cpp computes them on the host.
template <class C>
MINIDL_HOST_DEVICE inline void adam_capturable_scalars(AdamScalars<C>& s, double lr, double t, double beta1,
                                                       double beta2, double weight_decay) {
  s.neg_step = static_cast<C>(-(lr / (1.0 - std::pow(beta1, t))));
  s.bc2 = static_cast<C>(std::sqrt(1.0 - std::pow(beta2, t)));
  s.shrink = static_cast<C>(1.0 - lr * weight_decay);
}

// AdamMultiOp with the lr from *lr and each tensor's step from its own
// float32 counter (its Extra), already incremented by StepIncrementOp.
template <class T>
struct AdamCapturableOp {
  static constexpr int kDepth = 5;
  using Extra = const float*;
  AdamScalars<opmath_t<T>> s;  // as AdamMultiOp's; neg_step, bc2 and shrink are computed here
  const double* lr;
  double beta1, beta2, weight_decay;
  MINIDL_HOST_DEVICE AdamElement<T> bind(Extra step) const {
    AdamElement<T> a{s};
    adam_capturable_scalars(a.s, *lr, static_cast<double>(*step), beta1, beta2, weight_decay);
    return a;
  }
};

// step += 1 over a list of one-element float32 counters (Adam's "step").
struct StepIncrementOp {
  static constexpr int kDepth = 1;
  using Extra = unsigned char;  // none
  MINIDL_HOST_DEVICE StepIncrementOp bind(Extra) const { return *this; }
  MINIDL_HOST_DEVICE void operator()(void* const* ptr, int64_t i) const { static_cast<float*>(ptr[0])[i] += 1.0f; }
};

// The lists of a call as the kernel takes them: per tensor, its buffers in
// list order (nullptr for an absent list), its size and its own scalar.
template <int L, class Extra>
struct MultiTensorLists {
  std::vector<std::array<void*, L>> ptrs;
  std::vector<int64_t> numels;
  std::vector<Extra> extras;
};
template <class Op>
using OpLists = MultiTensorLists<Op::kDepth, typename Op::Extra>;

template <class T>
OpLists<SgdMultiOp<T>> sgd_lists(const MultiStepArgs<SgdStepArgs>& args) {
  OpLists<SgdMultiOp<T>> l;
  for (const SgdStepArgs& a : args.tensors) {
    l.ptrs.push_back({a.param.data_ptr<T>(), a.grad.data_ptr<T>(),
                      a.momentum_buffer.defined() ? a.momentum_buffer.data_ptr<T>() : nullptr});
    l.numels.push_back(a.param.numel());
    l.extras.push_back(a.first_step);
  }
  return l;
}

template <class T>
OpLists<SgdCapturableOp<T>> sgd_capturable_lists(const MultiStepArgs<SgdStepArgs>& args) {
  const OpLists<SgdMultiOp<T>> plain = sgd_lists<T>(args);
  return {plain.ptrs, plain.numels, plain.extras};
}

template <class T>
SgdCapturableOp<T> make_sgd_capturable_op(const SgdStepArgs& h) {
  return {make_sgd_multi_op<T>(h).s, h.lr_tensor.data_ptr<double>()};
}

template <class T>
AdamCapturableOp<T> make_adam_capturable_op(const AdamStepArgs& h) {
  return {make_adam_multi_op<T>(h).s, h.lr_tensor.data_ptr<double>(), h.beta1, h.beta2, h.weight_decay};
}

// The parameters' lists, each tensor's Extra its step counter.
template <class T>
OpLists<AdamCapturableOp<T>> adam_capturable_lists(const MultiStepArgs<AdamStepArgs>& args);

// The step counters as one list for StepIncrementOp.
inline OpLists<StepIncrementOp> step_increment_lists(const MultiStepArgs<AdamStepArgs>& args) {
  OpLists<StepIncrementOp> l;
  for (const AdamStepArgs& a : args.tensors) {
    l.ptrs.push_back({a.step_tensor.data_ptr<float>()});
    l.numels.push_back(1);
    l.extras.push_back(0);
  }
  return l;
}

template <class T>
OpLists<AdamMultiOp<T>> adam_lists(const MultiStepArgs<AdamStepArgs>& args) {
  OpLists<AdamMultiOp<T>> l;
  for (const AdamStepArgs& a : args.tensors) {
    l.ptrs.push_back({a.param.data_ptr<T>(), a.grad.data_ptr<T>(), a.exp_avg.data_ptr<T>(), a.exp_avg_sq.data_ptr<T>(),
                      a.max_exp_avg_sq.defined() ? a.max_exp_avg_sq.data_ptr<T>() : nullptr});
    l.numels.push_back(a.param.numel());
    l.extras.push_back(adam_tensor_scalars<T>(a));
  }
  return l;
}

template <class T>
OpLists<AdamCapturableOp<T>> adam_capturable_lists(const MultiStepArgs<AdamStepArgs>& args) {
  OpLists<AdamCapturableOp<T>> l;
  for (const AdamStepArgs& a : args.tensors) {
    l.ptrs.push_back({a.param.data_ptr<T>(), a.grad.data_ptr<T>(), a.exp_avg.data_ptr<T>(), a.exp_avg_sq.data_ptr<T>(),
                      a.max_exp_avg_sq.defined() ? a.max_exp_avg_sq.data_ptr<T>() : nullptr});
    l.numels.push_back(a.param.numel());
    l.extras.push_back(a.step_tensor.data_ptr<float>());
  }
  return l;
}

// ---- clip_grad_norm_ over many gradients ----------------------------------
// _foreach_norm in two deterministic steps: every (tensor, chunk) block
// reduces its chunk to one partial (CUB's BlockReduce on the device) stored at
// partial_offsets[tensor] + chunk; then one thread per tensor combines its
// partials in chunk order and finishes the norm. Fixed assignment and
// order: the same bits on every run (not the CPU's serial order, so compare
// with a tolerance).

// Where each tensor's chunk partials start, and (last entry) how many there are.
inline std::vector<int64_t> partial_offsets(const std::vector<int64_t>& numels, int64_t chunk) {
  std::vector<int64_t> offsets{0};
  for (int64_t n : numels) offsets.push_back(offsets.back() + (n + chunk - 1) / chunk);
  return offsets;
}

// The accumulator of norm_term's values: a sum, or a max for p = inf.
struct NormCombine {
  bool is_max;
  MINIDL_HOST_DEVICE double operator()(double a, double b) const { return norm_combine(a, b, is_max); }
};

// One tensor's norm from its partials, in chunk order.
MINIDL_HOST_DEVICE inline double finish_from_partials(const double* partials, int64_t count, double p) {
  const NormCombine combine{std::isinf(p)};
  double acc = 0.0;
  for (int64_t c = 0; c < count; ++c) acc = combine(acc, partials[c]);
  return norm_finish(acc, p);
}

// grad *= clip_coefficient(max_norm, *total) rounded to the compute type
// (clip_grad_scale's per-element math), over one list.
template <class T>
MINIDL_HOST_DEVICE inline opmath_t<T> clip_factor(double max_norm, double total) {
  return static_cast<opmath_t<T>>(clip_coefficient(max_norm, total));
}

template <class T>
MINIDL_HOST_DEVICE inline void clip_scale(T& g, opmath_t<T> factor) {
  g = from_opmath<T>(to_opmath(g) * factor);
}

template <class T>
struct ClipElement {
  opmath_t<T> factor;
  MINIDL_HOST_DEVICE void operator()(void* const* ptr, int64_t i) const { clip_scale(static_cast<T*>(ptr[0])[i], factor); }
};

template <class T>
struct ClipScaleOp {
  static constexpr int kDepth = 1;
  using Extra = unsigned char;  // none
  const double* total;
  double max_norm;
  MINIDL_HOST_DEVICE ClipElement<T> bind(Extra) const { return {clip_factor<T>(max_norm, *total)}; }
};

}  // namespace minidl::cuda_math
