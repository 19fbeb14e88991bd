// CPU kernels of the losses (ops/loss.h's kernel interface, and
// ops/cross_entropy_probs.h's): loops over the (n, s) positions of the
// (N, C, S) view, parallel when large. The class losses (cross_entropy with
// class indices or probabilities, nll_loss) go over blocks of positions; their
// forwards sum the per-position losses and the weights of the non-ignored
// targets (ReductionInfo::total_weight) in float64 per block, then the blocks
// in order (reduce_position_blocks), so results do not depend on the thread
// count; targets are in range (the op checked CPU ones).
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "minidl/ops/binary_cross_entropy.h"
#include "minidl/ops/cpu/float32_compute.h"
#include "minidl/ops/cpu/softmax_rows.h"
#include "minidl/ops/cross_entropy_probs.h"
#include "minidl/ops/loss.h"

namespace minidl {

namespace {

using cpu::softmax_rows::add_widened;
using cpu::softmax_rows::ConstRun;
using cpu::softmax_rows::exp_for_sum;
using cpu::softmax_rows::exp_into;
using cpu::softmax_rows::short_rows_exp_sums;
using cpu::softmax_rows::kShortRow;
using cpu::softmax_rows::kShortRowsBlock;
using cpu::softmax_rows::run_max;
using cpu::softmax_rows::Run;
using cpu::softmax_rows::spread_rows;
using cpu::softmax_rows::widened_dot;
using cpu::softmax_rows::widened_sum;

constexpr int64_t kParallelWork = 32768;

// weight[c] (1 without class weights).
template <class T>
inline double class_weight(const T* weight, int64_t c) {
  return weight ? static_cast<double>(weight[c]) : 1.0;
}

template <class T>
const T* weight_or_null(const ReductionInfo& r) {
  return r.weight.defined() ? r.weight.data_ptr<T>() : nullptr;
}

// dL/dloss at a non-ignored position i given the upstream gradient of the
// (reduced) output; total is the forward's total weight (read once per call;
// 0 makes it inf, and the gradient nan where the class weight is 0, as PyTorch).
template <class T>
inline double position_weight(const T* grad_out, int64_t i, Reduction reduction, double total) {
  if (reduction == Reduction::None) return grad_out[i];
  if (reduction == Reduction::Sum) return grad_out[0];
  return grad_out[0] / total;
}

// ---- cross_entropy kernels ------------------------------------------------------------
//
// Positions go in blocks: adjacent s of one sample (S > 1: each class is then
// a contiguous run of the block's positions) or adjacent rows (S == 1: each
// row is a contiguous run of C classes). exp/log run as Eigen packet math over
// those runs (ops/cpu/softmax_rows.h). The forward sums each block's losses
// and weights in float64, then the blocks' sums in block order: blocks are
// fixed by the shape, not by the threads.

constexpr int64_t kPositionBlock = 1024;  // the longest block (stack buffers)
constexpr int64_t kRowBlock = 128;        // rows a block (S == 1)

struct PositionBlocks {
  const ClassGeometry& g;
  // Runs of up to 1024 positions (long runs keep the hardware prefetchers
  // streaming C runs at stride S), shorter while that leaves under 16 blocks.
  int64_t len = g.S == 1 ? kRowBlock : run_length(g);
  static int64_t run_length(const ClassGeometry& g) {
    int64_t len = kPositionBlock;
    while (len > 128 && g.N * ((g.S + len - 1) / len) < 16) len /= 2;
    return len;
  }
  int64_t per_sample() const { return g.S == 1 ? 1 : (g.S + len - 1) / len; }
  int64_t count() const { return g.S == 1 ? (g.N + len - 1) / len : g.N * per_sample(); }
  // The first position of block b and its number of positions.
  std::pair<int64_t, int64_t> operator[](int64_t b) const {
    if (g.S == 1) return {b * len, std::min(len, g.N - b * len)};
    const int64_t n = b / per_sample(), s0 = (b % per_sample()) * len;
    return {n * g.S + s0, std::min(len, g.S - s0)};
  }
};

// x's class 0 at position i: class c is at offset c * S from it.
inline int64_t class_base(const ClassGeometry& g, int64_t i) { return (i / g.S) * g.C * g.S + i % g.S; }

// class_base of the positions first + i of one block without a division per position.
struct BlockOffsets {
  int64_t base, step;  // rows: (first + i) * C; runs: class_base(first) + i
  BlockOffsets(const ClassGeometry& g, int64_t first)
      : base(g.S == 1 ? first * g.C : class_base(g, first)), step(g.S == 1 ? g.C : 1) {}
  int64_t operator[](int64_t i) const { return base + i * step; }
};

// Runs fill(first, n, loss, wt) for every block of positions (parallel when
// work is large), which writes the block's per-position losses and target
// weights (0 at ignored positions); writes the losses to out (None) or their
// sum / mean to out[0], and the total weight to r.total_weight. Sums: per block,
// then the blocks in order.
template <class T, class Fill>
void reduce_position_blocks(const ClassGeometry& g, T* out, const ReductionInfo& r, int64_t work, Fill&& fill) {
  const PositionBlocks blocks{g};
  std::vector<double> block_loss(static_cast<size_t>(blocks.count())), block_weight(block_loss.size());
#pragma omp parallel for schedule(static) if (work >= kParallelWork)
  for (int64_t b = 0; b < blocks.count(); ++b) {
    const auto [first, n] = blocks[b];
    alignas(64) double loss[kPositionBlock], wt[kPositionBlock];
    fill(first, n, loss, wt);
    if (r.reduction == Reduction::None)
      for (int64_t i = 0; i < n; ++i) out[first + i] = static_cast<T>(loss[i]);
    block_loss[b] = widened_sum(loss, n);
    block_weight[b] = widened_sum(wt, n);
  }
  double total = 0.0, total_weight = 0.0;
  for (size_t b = 0; b < block_loss.size(); ++b) {
    total += block_loss[b];
    total_weight += block_weight[b];
  }
  *r.total_weight.data_ptr<double>() = total_weight;
  if (r.reduction == Reduction::Sum) out[0] = static_cast<T>(total);
  if (r.reduction == Reduction::Mean) out[0] = static_cast<T>(total / total_weight);  // 0 weight: nan
}

// lse of the block's positions (float64): rows of C (S == 1) or C runs of n (S > 1).
template <class T>
void block_lse(const T* x, const ClassGeometry& g, int64_t first, int64_t n, double* lse) {
  const int64_t C = g.C, S = g.S;
  alignas(64) T buf[kPositionBlock];
  if (S == 1 && C < kShortRow) {
    // Short rows: sub-blocks of rows through the vector math at once.
    alignas(64) T mx[kPositionBlock], spread[kShortRowsBlock], e[kShortRowsBlock];
    alignas(64) double sums[kShortRowsBlock];
    for (int64_t r0 = 0; r0 < n; r0 += kShortRowsBlock / C) {
      const int64_t rows = std::min(kShortRowsBlock / C, n - r0);
      short_rows_exp_sums(x + (first + r0) * C, rows, C, mx, spread, e, sums);
      for (int64_t r = 0; r < rows; ++r) buf[r] = static_cast<T>(sums[r]);
      Run<T>(buf, rows) = Run<T>(buf, rows).log();
      for (int64_t r = 0; r < rows; ++r) lse[r0 + r] = static_cast<double>(mx[r]) + static_cast<double>(buf[r]);
    }
    return;
  }
  if (S == 1) {
    for (int64_t r = 0; r < n; ++r) {
      const T* row = x + (first + r) * C;
      const T mx = run_max(row, C);
      double sum = 0.0;
      for (int64_t c0 = 0; c0 < C; c0 += kPositionBlock) {
        const int64_t m = std::min(kPositionBlock, C - c0);
        exp_for_sum(buf, m, ConstRun<T>(row + c0, m) - mx);
        sum += widened_sum(buf, m);
      }
      lse[r] = static_cast<double>(mx) + std::log(sum);
    }
    return;
  }
  const T* xc = x + class_base(g, first);
  alignas(64) T mx[kPositionBlock];
  for (int64_t i = 0; i < n; ++i) {
    mx[i] = -std::numeric_limits<T>::infinity();
    lse[i] = 0.0;  // the sum of exps first
  }
  for (int64_t c = 0; c < C; ++c) Run<T>(mx, n) = Run<T>(mx, n).max(ConstRun<T>(xc + c * S, n));
  for (int64_t c = 0; c < C; ++c) {
    exp_for_sum(buf, n, ConstRun<T>(xc + c * S, n) - ConstRun<T>(mx, n));
    add_widened(lse, buf, n);
  }
  // log(sum) in T: for float, its error (sum is in [1, C]) is below lse's own float rounding.
  for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<T>(lse[i]);
  Run<T>(buf, n) = Run<T>(buf, n).log();
  for (int64_t i = 0; i < n; ++i) lse[i] = static_cast<double>(mx[i]) + static_cast<double>(buf[i]);
}

// sum_c w_c * (lse - x_c) (-sum_c w_c logp_c, label smoothing's term) of the block's positions.
template <class T>
void block_smoothing(const T* x, const T* weight, const ClassGeometry& g, int64_t first, int64_t n, const double* lse,
                     double* smooth) {
  const int64_t C = g.C, S = g.S;
  if (S == 1) {
    // W * lse - sum_c w_c x_c (the products rounded to T), W = sum_c w_c.
    const double W = weight ? widened_sum(weight, C) : static_cast<double>(C);
    for (int64_t r = 0; r < n; ++r) {
      const T* row = x + (first + r) * C;
      smooth[r] = W * lse[r] - (weight ? widened_dot(weight, row, C) : widened_sum(row, C));
    }
    return;
  }
  const T* xc = x + class_base(g, first);
  for (int64_t i = 0; i < n; ++i) smooth[i] = 0.0;
  for (int64_t c = 0; c < C; ++c) {
    const double w = class_weight(weight, c);
    for (int64_t i = 0; i < n; ++i) smooth[i] += w * (lse[i] - static_cast<double>(xc[c * S + i]));
  }
}

template <class T>
void cross_entropy_forward_kernel(const T* x, const int64_t* target, T* lse_out, T* out, const ClassGeometry g,
                                  int64_t ignore_index, double eps, const ReductionInfo& r) {
  const T* weight = weight_or_null<T>(r);
  reduce_position_blocks(g, out, r, g.positions() * g.C, [&](int64_t first, int64_t n, double* loss, double* wt) {
    alignas(64) double lse[kPositionBlock], smooth[kPositionBlock];
    block_lse(x, g, first, n, lse);
    if (eps > 0.0) block_smoothing(x, weight, g, first, n, lse, smooth);
    const BlockOffsets offset(g, first);
    for (int64_t i = 0; i < n; ++i) {
      lse_out[first + i] = static_cast<T>(lse[i]);
      const int64_t t = target[first + i];
      if (t == ignore_index) {
        loss[i] = wt[i] = 0.0;
        continue;
      }
      wt[i] = class_weight(weight, t);
      const double xt = static_cast<double>(x[offset[i] + t * g.S]);
      loss[i] = (1.0 - eps) * wt[i] * (lse[i] - xt);
      if (eps > 0.0) loss[i] += eps * smooth[i] / static_cast<double>(g.C);
    }
  });
}

template <class T>
void cross_entropy_backward_kernel(const T* grad_out, const T* x, const int64_t* target, const T* lse, T* gx,
                                   const ClassGeometry g, int64_t ignore_index, double eps, const ReductionInfo& r) {
  const int64_t C = g.C, S = g.S;
  const double uniform = C > 0 ? eps / static_cast<double>(C) : 0.0;
  const double total = *r.total_weight.data_ptr<double>();
  const T* weight = weight_or_null<T>(r);
  const double weight_sum = weight ? widened_sum(weight, C) : static_cast<double>(C);  // sum_k w_k
  const PositionBlocks blocks{g};
#pragma omp parallel for schedule(static) if (g.positions() * C >= kParallelWork)
  for (int64_t b = 0; b < blocks.count(); ++b) {
    const auto [first, n] = blocks[b];
    // dx_c = a * softmax_c - u * w_c - h [c == t] with a = w * ((1 - eps) w_t + u sum_k w_k),
    // u = w * eps / C, h = w * (1 - eps) w_t (w: dL/dloss); all 0 at ignored positions.
    alignas(64) T a[kPositionBlock], u[kPositionBlock], h[kPositionBlock];
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = target[first + i];
      if (t == ignore_index) {
        a[i] = u[i] = h[i] = T(0);
        continue;
      }
      const double w = position_weight(grad_out, first + i, r.reduction, total);
      const double hard = (1.0 - eps) * class_weight(weight, t);  // weight of the target's one-hot
      a[i] = static_cast<T>(w * (hard + uniform * weight_sum));
      u[i] = static_cast<T>(w * uniform);
      h[i] = static_cast<T>(w * hard);
    }
    if (S == 1 && C < kShortRow) {
      // Short rows: exp over sub-blocks of rows at once, then each row's affine map.
      alignas(64) T spread[kShortRowsBlock];
      for (int64_t r0 = 0; r0 < n; r0 += kShortRowsBlock / C) {
        const int64_t rows = std::min(kShortRowsBlock / C, n - r0), m = rows * C;
        T* gr = gx + (first + r0) * C;
        spread_rows(lse + first + r0, rows, C, spread);
        exp_into(gr, m, ConstRun<T>(x + (first + r0) * C, m) - ConstRun<T>(spread, m));
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < C; ++c)
            gr[r * C + c] = gr[r * C + c] * a[r0 + r] -
                            (eps == 0.0 ? T(0) : u[r0 + r] * static_cast<T>(class_weight(weight, c)));
      }
    } else if (S == 1) {
      for (int64_t row = 0; row < n; ++row) {
        const T* xr = x + (first + row) * C;
        T* gr = gx + (first + row) * C;
        exp_into(gr, C, ConstRun<T>(xr, C) - lse[first + row]);
        if (eps == 0.0) Run<T>(gr, C) *= a[row];
        else if (weight) Run<T>(gr, C) = Run<T>(gr, C) * a[row] - ConstRun<T>(weight, C) * u[row];
        else Run<T>(gr, C) = Run<T>(gr, C) * a[row] - u[row];
      }
    } else {
      const int64_t base = class_base(g, first);
      const ConstRun<T> lse_run(lse + first, n), a_run(a, n), u_run(u, n);
      for (int64_t c = 0; c < C; ++c) {
        T* gc = gx + base + c * S;
        exp_into(gc, n, ConstRun<T>(x + base + c * S, n) - lse_run);
        if (eps == 0.0) Run<T>(gc, n) *= a_run;
        else Run<T>(gc, n) = Run<T>(gc, n) * a_run - u_run * static_cast<T>(class_weight(weight, c));
      }
    }
    // The target's one-hot term; ignored positions get exact zeros (even where x is not finite).
    const BlockOffsets offset(g, first);
    for (int64_t i = 0; i < n; ++i) {
      T* gc = gx + offset[i];
      const int64_t t = target[first + i];
      if (t != ignore_index) {
        gc[t * S] -= h[i];
        continue;
      }
      for (int64_t c = 0; c < C; ++c) gc[c * S] = T(0);
    }
  }
}

// ---- cross_entropy with probability targets (ops/cross_entropy_probs.h) ----------------
// The same position blocks; q'_c = (1 - eps) q_c + eps / C; every position weighs 1.

template <class T>
void cross_entropy_probs_forward_kernel(const T* x, const T* q, T* lse_out, T* out, const ClassGeometry g, double eps,
                                        const ReductionInfo& r) {
  const int64_t C = g.C, S = g.S;
  const T* weight = weight_or_null<T>(r);
  const double uniform = C > 0 ? eps / static_cast<double>(C) : 0.0;
  reduce_position_blocks(g, out, r, g.positions() * C, [&](int64_t first, int64_t n, double* loss, double* wt) {
    alignas(64) double lse[kPositionBlock];
    block_lse(x, g, first, n, lse);
    for (int64_t i = 0; i < n; ++i) {
      lse_out[first + i] = static_cast<T>(lse[i]);
      loss[i] = 0.0;
      wt[i] = 1.0;
    }
    if (S == 1) {
      // Per row: sum_c w_c q'_c d_c with d = lse - x rounded to T. With
      // smoothing, q' itself (positive): a class at -inf gives the loss inf,
      // as PyTorch; (1 - eps) sum q w d + eps / C sum w d made 0 * inf NaN.
      alignas(64) T d[kPositionBlock], wd[kPositionBlock], qs[kPositionBlock];
      for (int64_t row = 0; row < n; ++row) {
        const T* xr = x + (first + row) * C;
        const T* qr = q + (first + row) * C;
        double sum = 0.0;  // sum_c q'_c w_c d_c
        for (int64_t c0 = 0; c0 < C; c0 += kPositionBlock) {
          const int64_t m = std::min(kPositionBlock, C - c0);
          Run<T>(d, m) = static_cast<T>(lse[row]) - ConstRun<T>(xr + c0, m);
          if (weight) Run<T>(wd, m) = Run<T>(d, m) * ConstRun<T>(weight + c0, m);
          const T* w_d = weight ? wd : d;
          const T* q_used = qr + c0;
          if (eps > 0.0) {
            Run<T>(qs, m) = ConstRun<T>(qr + c0, m) * static_cast<T>(1.0 - eps) + static_cast<T>(uniform);
            q_used = qs;
          }
          sum += widened_dot(q_used, w_d, m);
        }
        loss[row] = sum;
      }
      return;
    }
    const int64_t base = class_base(g, first);
    for (int64_t c = 0; c < C; ++c) {
      const T* xc = x + base + c * S;
      const T* qc = q + base + c * S;
      const double w = class_weight(weight, c);
      for (int64_t i = 0; i < n; ++i)
        loss[i] += w * ((1.0 - eps) * static_cast<double>(qc[i]) + uniform) * (lse[i] - static_cast<double>(xc[i]));
    }
  });
}

template <class T>
void cross_entropy_probs_backward_kernel(const T* grad_out, const T* x, const T* q, const T* lse, T* gx, T* gq,
                                         const ClassGeometry g, double eps, const ReductionInfo& r) {
  const int64_t C = g.C, S = g.S;
  const double uniform = C > 0 ? eps / static_cast<double>(C) : 0.0;
  const double total = *r.total_weight.data_ptr<double>();
  const T* weight = weight_or_null<T>(r);
  const double weight_sum = weight ? widened_sum(weight, C) : static_cast<double>(C);
  const T hard = static_cast<T>(1.0 - eps), soft = static_cast<T>(uniform);
  const PositionBlocks blocks{g};
#pragma omp parallel for schedule(static) if (g.positions() * C >= kParallelWork)
  for (int64_t b = 0; b < blocks.count(); ++b) {
    const auto [first, n] = blocks[b];
    // dx_c = a softmax_c - u w_c q'_c with a = u sum_k w_k q'_k; dq_c = -u (1 - eps) w_c (x_c - lse); u = dL/dloss.
    alignas(64) T a[kPositionBlock], u[kPositionBlock];
    alignas(64) double wq[kPositionBlock];  // sum_k w_k q_k
    for (int64_t i = 0; i < n; ++i) wq[i] = 0.0;
    if (S == 1) {
      for (int64_t row = 0; row < n; ++row)
        wq[row] = weight ? widened_dot(weight, q + (first + row) * C, C) : widened_sum(q + (first + row) * C, C);
    } else {
      for (int64_t c = 0; c < C; ++c) {
        const T* qc = q + class_base(g, first) + c * S;
        const double w = class_weight(weight, c);
        for (int64_t i = 0; i < n; ++i) wq[i] += w * static_cast<double>(qc[i]);
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      const double up = position_weight(grad_out, first + i, r.reduction, total);
      a[i] = static_cast<T>(up * ((1.0 - eps) * wq[i] + uniform * weight_sum));
      u[i] = static_cast<T>(up);
    }
    if (S == 1) {
      for (int64_t row = 0; row < n; ++row) {
        const int64_t k = (first + row) * C;
        const T l = lse[first + row];
        exp_into(gx + k, C, ConstRun<T>(x + k, C) - l);
        if (weight) {
          const ConstRun<T> w(weight, C);
          Run<T>(gx + k, C) = Run<T>(gx + k, C) * a[row] - (ConstRun<T>(q + k, C) * hard + soft) * w * u[row];
          if (gq) Run<T>(gq + k, C) = (ConstRun<T>(x + k, C) - l) * w * (-hard * u[row]);
        } else {
          Run<T>(gx + k, C) = Run<T>(gx + k, C) * a[row] - (ConstRun<T>(q + k, C) * hard + soft) * u[row];
          if (gq) Run<T>(gq + k, C) = (ConstRun<T>(x + k, C) - l) * (-hard * u[row]);
        }
      }
      continue;
    }
    const int64_t base = class_base(g, first);
    const ConstRun<T> lse_run(lse + first, n), a_run(a, n), u_run(u, n);
    for (int64_t c = 0; c < C; ++c) {
      const int64_t k = base + c * S;
      const T w = static_cast<T>(class_weight(weight, c));
      exp_into(gx + k, n, ConstRun<T>(x + k, n) - lse_run);
      Run<T>(gx + k, n) = Run<T>(gx + k, n) * a_run - (ConstRun<T>(q + k, n) * (hard * w) + soft * w) * u_run;
      if (gq) Run<T>(gq + k, n) = (ConstRun<T>(x + k, n) - lse_run) * u_run * (-hard * w);
    }
  }
}

// ---- nll_loss kernels -------------------------------------------------------------------

template <class T>
void nll_loss_forward_kernel(const T* x, const int64_t* target, T* out, const ClassGeometry g, int64_t ignore_index,
                             const ReductionInfo& r) {
  const T* weight = weight_or_null<T>(r);
  reduce_position_blocks(g, out, r, g.positions(), [&](int64_t first, int64_t n, double* loss, double* wt) {
    const BlockOffsets offset(g, first);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = target[first + i];
      wt[i] = t == ignore_index ? 0.0 : class_weight(weight, t);
      loss[i] = t == ignore_index ? 0.0 : -wt[i] * static_cast<double>(x[offset[i] + t * g.S]);
    }
  });
}

template <class T>
void nll_loss_backward_kernel(const T* grad_out, const int64_t* target, T* gx, const ClassGeometry g,
                              int64_t ignore_index, const ReductionInfo& r) {
  const double total = *r.total_weight.data_ptr<double>();
  const T* weight = weight_or_null<T>(r);
  const PositionBlocks blocks{g};
#pragma omp parallel for schedule(static) if (g.positions() * g.C >= kParallelWork)
  for (int64_t b = 0; b < blocks.count(); ++b) {
    const auto [first, n] = blocks[b];
    const BlockOffsets offset(g, first);
    if (g.S == 1) std::fill(gx + offset[0], gx + offset[0] + n * g.C, T(0));
    else
      for (int64_t c = 0; c < g.C; ++c) std::fill(gx + offset[0] + c * g.S, gx + offset[0] + c * g.S + n, T(0));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = target[first + i];
      if (t == ignore_index) continue;
      gx[offset[i] + t * g.S] =
          static_cast<T>(-class_weight(weight, t) * position_weight(grad_out, first + i, r.reduction, total));
    }
  }
}

// ---- mse_loss kernels ---------------------------------------------------------------------

template <class T>
void mse_loss_forward_kernel(const T* x, const T* y, T* out, int64_t n, Reduction reduction) {
  if (reduction == Reduction::None) {
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
    for (int64_t i = 0; i < n; ++i) out[i] = (x[i] - y[i]) * (x[i] - y[i]);
    return;
  }
  // Fixed-size blocks summed in order: the result does not depend on the thread count.
  constexpr int64_t kBlock = 4096;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
  for (int64_t b = 0; b < blocks; ++b) {
    double s = 0.0;
    for (int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) {
      const double d = static_cast<double>(x[i]) - static_cast<double>(y[i]);
      s += d * d;
    }
    partial[b] = s;
  }
  double s = 0.0;
  for (double p : partial) s += p;
  if (reduction == Reduction::Mean) s = n > 0 ? s / static_cast<double>(n) : std::numeric_limits<double>::quiet_NaN();
  out[0] = static_cast<T>(s);
}

// gx = 2 (x - y) * w (when gx != nullptr), gy = -2 (x - y) * w (when gy != nullptr).
template <class T>
void mse_loss_backward_kernel(const T* grad_out, const T* x, const T* y, T* gx, T* gy, int64_t n, Reduction reduction) {
  if (n == 0) return;
  const T scale = reduction == Reduction::Mean ? static_cast<T>(2.0 / static_cast<double>(n)) : T(2);
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const T w = (reduction == Reduction::None ? grad_out[i] : grad_out[0]) * scale;
    const T d = (x[i] - y[i]) * w;
    if (gx) gx[i] = d;
    if (gy) gy[i] = -d;
  }
}

template <class T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

void cross_entropy_forward_cpu(const Tensor& x, const Tensor& target, const Tensor& lse, const Tensor& out,
                               const ClassGeometry& g, int64_t ignore_index, double eps, const ReductionInfo& r) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "cross_entropy", [&] {
    cross_entropy_forward_kernel(x.data_ptr<scalar_t>(), target.data_ptr<int64_t>(), lse.data_ptr<scalar_t>(),
                                 out.data_ptr<scalar_t>(), g, ignore_index, eps, r);
  });
}

void cross_entropy_backward_cpu(const Tensor& grad_out, const Tensor& x, const Tensor& target, const Tensor& lse,
                                const Tensor& gx, const ClassGeometry& g, int64_t ignore_index, double eps,
                                const ReductionInfo& r) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "cross_entropy_backward", [&] {
    cross_entropy_backward_kernel(grad_out.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), target.data_ptr<int64_t>(),
                                  lse.data_ptr<scalar_t>(), gx.data_ptr<scalar_t>(), g, ignore_index, eps, r);
  });
}

void cross_entropy_probs_forward_cpu(const Tensor& x, const Tensor& q, const Tensor& lse, const Tensor& out,
                                     const ClassGeometry& g, double eps, const ReductionInfo& r) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "cross_entropy", [&] {
    cross_entropy_probs_forward_kernel(x.data_ptr<scalar_t>(), q.data_ptr<scalar_t>(), lse.data_ptr<scalar_t>(),
                                       out.data_ptr<scalar_t>(), g, eps, r);
  });
}

void cross_entropy_probs_backward_cpu(const Tensor& grad_out, const Tensor& x, const Tensor& q, const Tensor& lse,
                                      const Tensor& gx, const Tensor& gq, const ClassGeometry& g, double eps,
                                      const ReductionInfo& r) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "cross_entropy_backward", [&] {
    cross_entropy_probs_backward_kernel(grad_out.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), q.data_ptr<scalar_t>(),
                                        lse.data_ptr<scalar_t>(), gx.data_ptr<scalar_t>(), data_or_null<scalar_t>(gq),
                                        g, eps, r);
  });
}

void nll_loss_forward_cpu(const Tensor& x, const Tensor& target, const Tensor& out, const ClassGeometry& g,
                          int64_t ignore_index, const ReductionInfo& r) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "nll_loss", [&] {
    nll_loss_forward_kernel(x.data_ptr<scalar_t>(), target.data_ptr<int64_t>(), out.data_ptr<scalar_t>(), g,
                            ignore_index, r);
  });
}

void nll_loss_backward_cpu(const Tensor& grad_out, const Tensor& target, const Tensor& gx, const ClassGeometry& g,
                           int64_t ignore_index, const ReductionInfo& r) {
  MINIDL_DISPATCH_FLOATING(gx.dtype(), "nll_loss_backward", [&] {
    nll_loss_backward_kernel(grad_out.data_ptr<scalar_t>(), target.data_ptr<int64_t>(), gx.data_ptr<scalar_t>(), g,
                             ignore_index, r);
  });
}

void mse_loss_forward_cpu(const Tensor& x, const Tensor& y, const Tensor& out, Reduction reduction) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "mse_loss", [&] {
    mse_loss_forward_kernel(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), x.numel(),
                            reduction);
  });
}

void mse_loss_backward_cpu(const Tensor& grad_out, const Tensor& x, const Tensor& y, const Tensor& gx, const Tensor& gy,
                           Reduction reduction) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "mse_loss_backward", [&] {
    mse_loss_backward_kernel(grad_out.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
                             data_or_null<scalar_t>(gx), data_or_null<scalar_t>(gy), x.numel(), reduction);
  });
}

}  // namespace

void register_loss_cpu_kernels() {
  cross_entropy_forward_stub.set(DeviceType::CPU, cpu::Float32Compute<cross_entropy_forward_cpu, 2, 3>::run);
  cross_entropy_backward_stub.set(DeviceType::CPU, cpu::Float32Compute<cross_entropy_backward_cpu, 4>::run);
  cross_entropy_probs_forward_stub.set(DeviceType::CPU,
                                       cpu::Float32Compute<cross_entropy_probs_forward_cpu, 2, 3>::run);
  cross_entropy_probs_backward_stub.set(DeviceType::CPU,
                                        cpu::Float32Compute<cross_entropy_probs_backward_cpu, 4, 5>::run);
  nll_loss_forward_stub.set(DeviceType::CPU, cpu::Float32Compute<nll_loss_forward_cpu, 2>::run);
  nll_loss_backward_stub.set(DeviceType::CPU, cpu::Float32Compute<nll_loss_backward_cpu, 2>::run);
  mse_loss_forward_stub.set(DeviceType::CPU, cpu::Float32Compute<mse_loss_forward_cpu, 2>::run);
  mse_loss_backward_stub.set(DeviceType::CPU, cpu::Float32Compute<mse_loss_backward_cpu, 3, 4>::run);
  register_bce_cpu_kernels();  // ops/cpu/binary_cross_entropy.cpp
}

}  // namespace minidl
