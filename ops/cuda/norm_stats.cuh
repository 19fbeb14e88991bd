// Group statistics for ops/cuda/norm_core.cu, two selectable kernels:
//  - "shifted" (default): per element a plain double sum of x - shift and of
//    its square (ops/cuda/norm_math.h ShiftedSums), shift = the group's first
//    value; the row reduction (ops/cuda/row_reduce.cuh: a block per group, or
//    chunks across blocks for BatchNorm's few long groups, merged in a fixed
//    order; the tiled column reduction of ops/cuda/column_reduce.cuh when
//    groups are columns, channels-last BatchNorm) only adds; one thread turns
//    the sums into mean and M2 at the end.
//  - "legacy" (env MINIDL_CUDA_NORM_KERNELS=legacy): per-element Welford in
//    double, a double division per element.
// Both deterministic, no atomics. Both checked against the CPU kernels on an
// H100 (tests/test_cuda_ops, the legacy one under MINIDL_CUDA_NORM_KERNELS=legacy,
// 2026-11-27); the shifted math is also tested on the CPU (tests/test_cuda_kernel_math).
#pragma once

#include <cstdlib>
#include <cstring>

#include "minidl/ops/cuda/column_reduce.cuh"
#include "minidl/ops/cuda/norm_math.h"
#include "minidl/ops/cuda/row_reduce.cuh"

namespace minidl::norm::stats {

using cuda_math::NormShape;
using cuda_math::ShiftedSums;
using cuda_math::Welford;

// Read once per process: a GPU session compares both by running twice.
// "legacy" means every H100-checked norm kernel (2026-11-26): it also turns
// off the fused kernels, BatchNorm's one-reduction backward sums, the tiled
// column reduction of the parameter gradients and the 16-byte vector passes
// (ops/cuda/norm_core.cu).
inline bool legacy_kernels() {
  static const bool legacy = [] {
    const char* v = std::getenv("MINIDL_CUDA_NORM_KERNELS");
    return v != nullptr && std::strcmp(v, "legacy") == 0;
  }();
  return legacy;
}

// LayerNorm's backward (S == 1) writes dx inside the tiled column reduction
// of the parameter gradients (ops/cuda/norm_core.cu's ChannelDyDxLoader)
// rather than in a pass of its own: one read of dy and x less. On an H100
// (2026-11-27, three runs) LayerNorm (C, H, W) on (128, 64, 32, 32) forward +
// backward took 0.220, 0.207 and 0.207 ms this way against 0.226, 0.215 and
// 0.214 with the separate pass. MINIDL_CUDA_NORM_KERNELS=separate-dx (read
// once per process) keeps the separate pass.
inline bool dx_in_column_pass() {
  static const bool on = [] {
    const char* v = std::getenv("MINIDL_CUDA_NORM_KERNELS");
    return v == nullptr || std::strcmp(v, "separate-dx") != 0;
  }();
  return on;
}

// Where a group's statistics go, once per group. A Store for the launch
// below is this or wraps it (ops/cuda/norm_factors.cuh's factors::StatsStore:
// also the normalize factors).
struct StatsStore {
  double *mean, *invstd, *var;  // var optional
  double eps;
  __device__ cuda_math::GroupStatistics store(int64_t g, const Welford& w) const {
    const cuda_math::GroupStatistics s = cuda_math::statistics_of(w, eps);
    mean[g] = s.mean;
    invstd[g] = s.invstd;
    if (var) var[g] = s.var;
    return s;
  }
};

// ---- legacy: per-element Welford ----
template <class T>
struct WelfordLoader {
  const T* x;
  NormShape shape;
  using Row = int64_t;
  __device__ Row row(int64_t g) const { return g; }
  __device__ Welford operator()(Row g, int64_t j) const {
    return cuda_math::welford_of(convert<double>(x[shape.group_offset(g, j)]));
  }
};

struct WelfordMerge {
  __device__ Welford operator()(const Welford& a, const Welford& b) const { return cuda_math::welford_merge(a, b); }
};

template <class Store>
struct WelfordFinish {
  Store out;
  __device__ void operator()(int64_t g, int64_t, const Welford& w) const { out.store(g, w); }
};

// ---- shifted sums ----
template <class T>
struct ShiftedLoader {
  const T* x;
  NormShape shape;
  struct Row {
    int64_t g;
    double shift;
  };
  __device__ Row row(int64_t g) const {
    return Row{g, shape.group_size() > 0 ? convert<double>(x[shape.group_offset(g, 0)]) : 0.0};
  }
  __device__ ShiftedSums operator()(const Row& r, int64_t j) const {
    return cuda_math::shifted_of(convert<double>(x[shape.group_offset(r.g, j)]), r.shift);
  }
};

struct ShiftedAdd {
  __device__ ShiftedSums operator()(const ShiftedSums& a, const ShiftedSums& b) const {
    return cuda_math::shifted_add(a, b);
  }
};

template <class Store>
struct ShiftedFinish {
  Store out;
  double n;
  template <class Row>
  __device__ void operator()(int64_t g, const Row& r, const ShiftedSums& s) const {
    out.store(g, cuda_math::welford_from_shifted(s, n, r.shift));
  }
};

// ShiftedFinish for the column reduction, whose second pass hands over the
// column index instead of the loader's row: the shift is read again.
template <class T, class Store>
struct ShiftedColumnFinish {
  ShiftedLoader<T> load;
  ShiftedFinish<Store> finish;
  __device__ void operator()(int64_t g, const typename ShiftedLoader<T>::Row& r, const ShiftedSums& s) const {
    finish(g, r, s);
  }
  __device__ void operator()(int64_t g, int64_t, const ShiftedSums& s) const { finish(g, load.row(g), s); }
};

template <class T, class Store>
void launch_group_stats(const cuda_kernels::LaunchContext& ctx, const NormShape& shape, const T* x, const Store& out) {
  const ShiftedFinish<Store> finish{out, static_cast<double>(shape.group_size())};
  // Groups that are columns (K == S == 1: channels-last BatchNorm's N*H*W
  // rows of C values): value j of neighbouring groups are neighbours, so the
  // tiled column reduction reads coalesced where a block per group would
  // read one value per 4*C bytes.
  if (!legacy_kernels() && shape.K == 1 && shape.S == 1 && shape.A > 1 &&
      cuda_kernels::column_reduce_applies(shape.G, shape.group_size())) {
    const ShiftedLoader<T> load{x, shape};
    cuda_kernels::launch_column_reduce(ctx, shape.G, shape.group_size(), ShiftedSums{}, load, ShiftedAdd(),
                                       ShiftedColumnFinish<T, Store>{load, finish}, "normalization");
    return;
  }
  if (legacy_kernels()) {
    cuda_kernels::launch_row_reduce(ctx, shape.G, shape.group_size(), Welford{}, WelfordLoader<T>{x, shape},
                                    WelfordMerge(), WelfordFinish<Store>{out}, "normalization");
    return;
  }
  cuda_kernels::launch_row_reduce(ctx, shape.G, shape.group_size(), ShiftedSums{}, ShiftedLoader<T>{x, shape},
                                  ShiftedAdd(), finish, "normalization");
}

}  // namespace minidl::norm::stats
