// CUDA kernels of the shared normalization core (ops/norm_core.h's kernel
// interface): norm_forward, norm_backward, norm_update_running_stats,
// norm_stats_from_running. Statistics: ops/cuda/norm_stats.cuh (shifted
// double sums by default, per-element Welford when
// MINIDL_CUDA_NORM_KERNELS=legacy), reduced by CUB's BlockReduce (a block
// per group, no atomics, deterministic); small contiguous groups take the
// fused single-pass kernels of ops/cuda/norm_fused.cuh; the per-group and
// per-channel backward sums likewise (one reduction for both when groups are
// channels, BatchNorm; with S == 1 the tiled column reduction of
// ops/cuda/column_reduce.cuh); the rest is elementwise, with 16-byte vector
// loads when aligned (ops/cuda/vectorized.cuh), from per-group factors where a
// group has one weight (K == 1: BatchNorm, InstanceNorm; ops/cuda/norm_factors.cuh;
// compiled, not run on a GPU, 2026-11-28/29). SyncBN's given sums and count
// are read on the device, so the host never waits. Math in
// ops/cuda/norm_math.h, shared with the CPU tests. float16/bfloat16 inputs
// (with grad_out and outputs in that dtype) take float32 or same-dtype weight/bias, as the CPU kernel (autocast's
// BatchNorm, cuDNN's convention); the elementwise math runs in float, rounded
// once; statistics and sums stay double; parameter gradients come in the
// parameters' dtype; running statistics may be float32, float64 or 16-bit
// (updated in double, rounded once). Checked against the CPU kernels on an
// H100 (2026-11-27): float32/float64 with the default kernels and again with
// MINIDL_CUDA_NORM_KERNELS=legacy (tests/test_cuda_ops), float16/bfloat16
// with the default ones (tests/test_cuda_ops_half).
#include "minidl/ops/cuda/column_reduce.cuh"
#include "minidl/ops/cuda/launch.cuh"
#include "minidl/ops/cuda/norm_factors.cuh"
#include "minidl/ops/cuda/norm_fused.cuh"
#include "minidl/ops/cuda/norm_math.h"
#include "minidl/ops/cuda/norm_stats.cuh"
#include "minidl/ops/cuda/row_reduce.cuh"
#include "minidl/ops/cuda/vectorized.cuh"
#include "minidl/ops/norm_core.h"

namespace minidl::norm {

namespace {

using cuda_kernels::LaunchContext;
using cuda_kernels::linear;
using cuda_math::NormShape;
using cuda_math::Offsets;
using cuda_math::from_opmath;
using cuda_math::opmath_t;
using cuda_math::to_opmath;

NormShape shape_of(const NormGeometry& g) { return NormShape{g.A, g.G, g.K, g.S, g.P}.with_dividers(); }

template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}


// ---- forward ------------------------------------------------------------------

// The normalize pass: y[i] = value(i, x[i]), one element or N at a time
// (ops/cuda/vectorized.cuh); y may alias x (the thread loads before it stores).
template <class T, class Value>
struct NormalizePass {
  T* y;
  const T* x;
  Value value;
  __device__ void operator()(const Offsets<1>& o) const { scalar(o.v[0]); }
  __device__ void scalar(int64_t i) const { y[i] = value(i, x[i]); }
  template <int N>
  __device__ void vec(int64_t i0) const {
    const cuda_kernels::Vec<T, N> xv = cuda_kernels::load_vec<T, N>(x + i0);
    cuda_kernels::Vec<T, N> yv;
#pragma unroll
    for (int k = 0; k < N; ++k) yv.v[k] = value(i0 + k, xv.v[k]);
    cuda_kernels::store_vec<T, N>(y + i0, yv);
  }
};

// T: the input's dtype; W: the parameters' (T, or float32 next to a 16-bit input).
template <class T, class W>
struct NormalizeValue {
  const W *w, *b;  // w, b optional
  const double *mean, *invstd;
  NormShape shape;
  __device__ T operator()(int64_t i, T xi) const {
    using C = opmath_t<T>;
    const int64_t g = shape.group_of(i), c = shape.channel_of(i);
    return cuda_math::normalize_value_stored<T>(xi, mean[g], invstd[g], w ? convert<double>(w[c]) : 1.0,
                                                b ? static_cast<C>(to_opmath(b[c])) : C(0));
  }
  // K == 1 (ops/cuda/norm_factors.cuh): group g's factors, the values operator() makes for its elements.
  __device__ factors::Normalize<T> group_factors(int64_t g) const {
    return factors::normalize_of<T, W>(mean[g], invstd[g], w, b, g % shape.P);
  }
};

// The elementwise pass of functor f over n values: 16-byte loads and stores
// when aligned (ops/cuda/vectorized.cuh; not with the legacy kernels).
template <class T, class F>
void launch_norm_pass(const LaunchContext& ctx, int64_t n, std::initializer_list<const void*> ptrs, const F& f,
                      const char* op) {
  if (!stats::legacy_kernels() && cuda_kernels::launch_vectorized<T>(ctx, n, ptrs, f, op)) return;
  cuda_kernels::launch_elementwise(ctx, n, linear(n, op), f, op);
}

// Calls f.template operator()<W>() with the parameters' element type: float
// when the input is 16-bit and `p` (the args' param_dtype_source(), the op has
// checked the combination) is float32, else the input's own.
template <class T, class F>
void with_param_type(const Tensor& p, F&& f) {
  if constexpr (is_half_v<T>) {
    if (p.defined() && p.dtype() == kFloat32) return f.template operator()<float>();
  }
  f.template operator()<T>();
}

template <class T, class W>
void forward_typed(const NormForwardArgs& args) {
  const NormShape shape = shape_of(args.geo);
  const LaunchContext ctx(args.input.device());
  const T* x = args.input.data_ptr<T>();
  double* mean = args.mean.data_ptr<double>();
  double* invstd = args.invstd.data_ptr<double>();
  const stats::StatsStore store{mean, invstd, args.var.defined() ? args.var.data_ptr<double>() : nullptr, args.eps};
  if (args.use_input_stats && args.output.defined() && fused::fused_forward_applies(shape)) {
    fused::launch_fused_forward<T, W>(ctx, shape, args.output.data_ptr<T>(), x, data_or_null<W>(args.weight),
                                      data_or_null<W>(args.bias), store);
    return;
  }
  const int64_t n = args.geo.numel();
  T* y = args.output.defined() ? args.output.data_ptr<T>() : nullptr;
  const NormalizeValue<T, W> value{data_or_null<W>(args.weight), data_or_null<W>(args.bias), mean, invstd, shape};
  if (y && shape.K == 1 && !stats::legacy_kernels()) {  // per-group factors (ops/cuda/norm_factors.cuh)
    const factors::Buffer<factors::Normalize<T>> f(shape.G, ctx.device);
    if (args.use_input_stats)  // the statistics' store makes them
      stats::launch_group_stats<T>(ctx, shape, x, factors::StatsStore<T, W>{store, value.w, value.b, f.data, shape.P});
    else  // eval mode: from the running statistics
      factors::launch_from_memory(ctx, shape.G, value, f.data, "normalization");
    launch_norm_pass<T>(ctx, n, {x, y}, NormalizePass<T, factors::NormalizeValue<T>>{y, x, {f.data, shape}},
                        "normalization");
    return;
  }
  if (args.use_input_stats) stats::launch_group_stats<T>(ctx, shape, x, store);
  if (!y) return;
  launch_norm_pass<T>(ctx, n, {x, y}, NormalizePass<T, NormalizeValue<T, W>>{y, x, value}, "normalization");
}

void forward_cuda(const NormForwardArgs& args) {
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(args.input.dtype(), "normalization", [&] {
    with_param_type<scalar_t>(args.param_dtype_source(), [&]<class W>() { forward_typed<scalar_t, W>(args); });
  });
}

// ---- backward -------------------------------------------------------------------

using DySums = fused::DyPair;  // sum w dy, sum w dy (x - mean); per channel unweighted, times invstd
using AddDySums = fused::AddDyPair;

template <class T, class W>
struct GroupDyLoader {
  const T *dy, *x;
  const W* w;  // optional
  const double* mean;
  NormShape shape;
  struct Row {
    int64_t g;
    double mean;
  };
  __device__ Row row(int64_t g) const { return Row{g, mean[g]}; }
  __device__ DySums operator()(const Row& row, int64_t j) const {
    const int64_t i = shape.group_offset(row.g, j);
    const double wd = convert<double>(dy[i]) * (w ? convert<double>(w[shape.channel_in_group(row.g, j)]) : 1.0);
    return DySums{wd, wd * (convert<double>(x[i]) - row.mean)};
  }
};

struct GroupSumsStore {
  double *s1, *s2;
  template <class Row>
  __device__ void operator()(int64_t g, const Row&, const DySums& s) const {
    s1[g] = s.dy;
    s2[g] = s.dy_xmu;
  }
};

// Per channel: {sum dy, sum dy (x - mean_g) invstd_g} (no weight): the bias and weight gradients.
template <class T>
struct ChannelDyLoader {
  const T *dy, *x;
  const double *mean, *invstd;
  NormShape shape;
  using Row = int64_t;
  __device__ Row row(int64_t c) const { return c; }
  __device__ DySums operator()(Row c, int64_t j) const {
    int64_t g = 0;
    const int64_t i = shape.channel_offset(c, j, g);
    const double d = convert<double>(dy[i]);
    return DySums{d, d * (convert<double>(x[i]) - mean[g]) * invstd[g]};
  }
};

template <class W>
struct ParamGradStore {
  W *dw, *db;  // each optional
  __device__ void operator()(int64_t c, int64_t, const DySums& s) const {
    if (dw) dw[c] = convert<W>(s.dy_xmu);
    if (db) db[c] = convert<W>(s.dy);
  }
};

// The fused backward's per-(group, channel) sums (fused::fused_param_sums_apply),
// summed per channel over its G / P groups g = c / K + q P in order of q.
struct ChannelPartialLoader {
  const DySums* partial;  // G x K
  int64_t K, P;
  using Row = int64_t;
  __device__ Row row(int64_t c) const { return c; }
  __device__ DySums operator()(Row c, int64_t q) const { return partial[(q * P + c / K) * K + c % K]; }
};

// Groups that are channels (BatchNorm): from one reduction's unweighted sums,
// the w-weighted group sums (each optional) and the parameter gradients
// (each optional) in the parameters' dtype (cuda_math::group_param_sums).
template <class W>
struct GroupParamStore {
  const W* w;  // optional
  const double* invstd;
  double *s1, *s2;
  W *dw, *db;
  __device__ cuda_math::GroupParamSums store(int64_t g, const DySums& u) const {
    const cuda_math::GroupParamSums r =
        cuda_math::group_param_sums(u.dy, u.dy_xmu, w ? convert<double>(w[g]) : 1.0, invstd[g]);
    if (s1) s1[g] = r.sum_dy;
    if (s2) s2[g] = r.sum_dy_xmu;
    if (dw) dw[g] = convert<W>(r.grad_weight);
    if (db) db[g] = convert<W>(r.grad_bias);
    return r;
  }
  template <class Row>
  __device__ void operator()(int64_t g, const Row&, const DySums& u) const {
    store(g, u);
  }
};

// GroupParamStore that also makes each group's dx factors from its sums
// (ops/cuda/norm_factors.cuh; the local sums and count, not SyncBN's given ones).
template <class T, class W>
struct FactorParamStore {
  GroupParamStore<W> sums;
  const double* mean;
  bool batch_stats;
  double count;
  factors::Backward<T>* factors;
  template <class Row>
  __device__ void operator()(int64_t g, const Row&, const DySums& u) const {
    const cuda_math::GroupParamSums r = sums.store(g, u);
    factors[g] = factors::backward_of<T, W>(mean[g], sums.invstd[g], sums.w, g, batch_stats, r.sum_dy,
                                            r.sum_dy_xmu, count);
  }
};

template <class T, class W>
struct NormBackwardFunctor {
  T* dx;
  const T *dy, *x;
  const W* w;
  const double *mean, *invstd, *s1, *s2;  // s1, s2 null when !batch_stats
  const double* count_ptr;                // overrides count when set
  double count;
  bool batch_stats;
  NormShape shape;
  __device__ T value(int64_t i, T dyi, T xi, double n) const {
    const int64_t g = shape.group_of(i);
    return cuda_math::norm_backward_value_stored<T>(dyi, xi, mean[g], invstd[g],
                                                    w ? convert<double>(w[shape.channel_of(i)]) : 1.0, batch_stats,
                                                    batch_stats ? s1[g] : 0.0, batch_stats ? s2[g] : 0.0, n);
  }
  // K == 1 (ops/cuda/norm_factors.cuh): group g's factors, the values value() makes for its elements.
  __device__ factors::Backward<T> group_factors(int64_t g) const {
    return factors::backward_of<T, W>(mean[g], invstd[g], w, g % shape.P, batch_stats, batch_stats ? s1[g] : 0.0,
                                      batch_stats ? s2[g] : 0.0, count_ptr ? *count_ptr : count);
  }
  __device__ void operator()(const Offsets<1>& o) const { scalar(o.v[0]); }
  __device__ void scalar(int64_t i) const { dx[i] = value(i, dy[i], x[i], count_ptr ? *count_ptr : count); }
  template <int N>  // ops/cuda/vectorized.cuh
  __device__ void vec(int64_t i0) const {
    const cuda_kernels::Vec<T, N> dyv = cuda_kernels::load_vec<T, N>(dy + i0), xv = cuda_kernels::load_vec<T, N>(x + i0);
    const double n = count_ptr ? *count_ptr : count;
    cuda_kernels::Vec<T, N> dxv;
#pragma unroll
    for (int k = 0; k < N; ++k) dxv.v[k] = value(i0 + k, dyv.v[k], xv.v[k], n);
    cuda_kernels::store_vec<T, N>(dx + i0, dxv);
  }
};

// ChannelDyLoader that also writes dx[i] from the same two loads, for the
// column reduction (LayerNorm, S == 1): it calls each element once, so dx
// needs no pass of its own (one read of dy and x less: 160 MiB instead of
// 224 for LayerNorm (C, H, W) on (128, 64, 32, 32); its backward took 0.165
// ms on an H100 with the separate pass, 2026-11-27). dx from the group
// factors the group sums' store made (ops/cuda/norm_factors.cuh).
template <class T, class W>
struct ChannelDyDxLoader {
  ChannelDyLoader<T> sums;
  T* dx;
  factors::WeightedBackwardValue<T, W> value;
  using Row = int64_t;
  __device__ Row row(int64_t c) const { return c; }
  __device__ DySums operator()(Row c, int64_t j) const {
    int64_t g = 0;
    const int64_t i = sums.shape.channel_offset(c, j, g);
    const T dyi = sums.dy[i], xi = sums.x[i];
    dx[i] = value(i, dyi, xi);
    const double d = convert<double>(dyi), mean = sums.mean[g];
    return DySums{d, d * (convert<double>(xi) - mean) * sums.invstd[g]};
  }
};

template <class T, class W>
void backward_typed(const NormBackwardArgs& args) {
  const NormShape shape = shape_of(args.geo);
  const Device device = args.input.device();
  const LaunchContext ctx(device);
  const T* dy = args.grad_out.data_ptr<T>();
  const T* x = args.input.data_ptr<T>();
  const W* w = data_or_null<W>(args.weight);
  const double* mean = args.mean.data_ptr<double>();
  const double* invstd = args.invstd.data_ptr<double>();
  const bool given = args.given_sum_dy.defined();
  const bool want_dx = args.grad_input.defined();
  const bool need_local = args.out_sum_dy.defined() || args.out_sum_dy_xmu.defined() ||
                          (want_dx && args.batch_stats && !given);

  // A contiguous small group: sums and dx in one kernel (ops/cuda/norm_fused.cuh).
  const bool fuse = want_dx && args.batch_stats && !given && fused::fused_backward_applies(shape);
  W* dw = args.grad_weight.defined() ? args.grad_weight.data_ptr<W>() : nullptr;
  W* db = args.grad_bias.defined() ? args.grad_bias.data_ptr<W>() : nullptr;
  // Groups that are channels (BatchNorm, SyncBN's local sums): one reduction
  // gives the group sums and the parameter gradients. Not with the legacy
  // kernels (MINIDL_CUDA_NORM_KERNELS=legacy keeps the H100-checked two passes);
  // with fuse the fused kernel makes the group sums and the channel pass the rest.
  const bool one_pass = (dw || db) && !fuse && !stats::legacy_kernels() && cuda_math::groups_are_channels(shape);
  // GroupNorm/InstanceNorm on planes of a multiple of 256 values: the fused
  // kernel sums each channel's part of its group on the way (norm_fused.cuh).
  const bool fused_params = (dw || db) && fuse && fused::fused_param_sums_apply(shape);
  // Local per-group sums, into the caller's outputs where given, else temporaries.
  Tensor tmp;
  double *s1 = nullptr, *s2 = nullptr;
  if (need_local) {
    tmp = cuda_kernels::temp_buffer(2 * shape.G * static_cast<int64_t>(sizeof(double)), device);
    s1 = args.out_sum_dy.defined() ? args.out_sum_dy.data_ptr<double>() : static_cast<double*>(tmp.raw_data());
    s2 = args.out_sum_dy_xmu.defined() ? args.out_sum_dy_xmu.data_ptr<double>()
                                       : static_cast<double*>(tmp.raw_data()) + shape.G;
  }
  // The w-weighted group sums by a reduction of their own (LayerNorm,
  // GroupNorm outside the fused kernels); where dx follows, its store also
  // makes the groups' dx factors (ops/cuda/norm_factors.cuh).
  const bool sums_pass = need_local && !fuse && !one_pass;
  const bool sums_factors = sums_pass && want_dx && args.batch_stats && !given && !stats::legacy_kernels();
  const factors::Buffer<factors::Backward<T>> sf(sums_factors ? shape.G : 0, device);
  if (sums_pass) {
    const GroupDyLoader<T, W> load{dy, x, w, mean, shape};
    const GroupSumsStore store{s1, s2};
    if (sums_factors)
      cuda_kernels::launch_row_reduce(
          ctx, shape.G, shape.group_size(), DySums{}, load, AddDySums(),
          factors::SumsStore<T, GroupSumsStore, W>{store, mean, invstd, static_cast<double>(shape.group_size()),
                                                   sf.data, shape.K == 1 ? w : nullptr, shape.P},
          "normalization backward");
    else
      cuda_kernels::launch_row_reduce(ctx, shape.G, shape.group_size(), DySums{}, load, AddDySums(), store,
                                      "normalization backward");
  }
  const factors::WeightedBackwardValue<T, W> weighted{sf.data, w, invstd, shape};
  // dx's function (the dx pass, or inside LayerNorm's column pass).
  const bool given_count = given && args.given_count_tensor.defined();
  const NormBackwardFunctor<T, W> f{want_dx ? args.grad_input.data_ptr<T>() : nullptr, dy, x, w, mean, invstd,
                                    given ? args.given_sum_dy.data_ptr<double>() : s1,
                                    given ? args.given_sum_dy_xmu.data_ptr<double>() : s2,
                                    given_count ? args.given_count_tensor.data_ptr<double>() : nullptr,
                                    given ? args.given_count : static_cast<double>(shape.group_size()),
                                    args.batch_stats, shape};
  if (one_pass) {
    // Unweighted loads (w == nullptr); the store weights the sums per group.
    // BatchNorm1d on (N, C) (S == 1): value j of neighbouring channels are
    // neighbours, so the tiled column reduction reads coalesced.
    const GroupDyLoader<T, W> load{dy, x, nullptr, mean, shape};
    const GroupParamStore<W> store{w, invstd, s1, s2, dw, db};
    auto reduce = [&](const auto& finish) {
      if (shape.S == 1 && cuda_kernels::column_reduce_applies(shape.G, shape.group_size()))
        cuda_kernels::launch_column_reduce(ctx, shape.G, shape.group_size(), DySums{}, load, AddDySums(), finish,
                                           "normalization backward");
      else
        cuda_kernels::launch_row_reduce(ctx, shape.G, shape.group_size(), DySums{}, load, AddDySums(), finish,
                                        "normalization backward");
    };
    if (want_dx && !given) {  // the dx pass from per-group factors the store makes
      const factors::Buffer<factors::Backward<T>> b(shape.G, device);
      reduce(FactorParamStore<T, W>{store, mean, args.batch_stats, static_cast<double>(shape.group_size()), b.data});
      launch_norm_pass<T>(ctx, args.geo.numel(), {f.dx, f.dy, f.x},
                          factors::DxPass<T, factors::BackwardValue<T>>{f.dx, dy, x, {b.data, shape}},
                          "normalization backward");
      return;
    }
    reduce(store);
  } else if ((dw || db) && !fused_params) {
    const ChannelDyLoader<T> load{dy, x, mean, invstd, shape};
    // With S == 1 (LayerNorm) neighbouring channels are neighbours in memory:
    // the tiled column reduction (ops/cuda/column_reduce.cuh, 32 channels x
    // 16 row slices a block), writing dx on the way where it is wanted and
    // the group sums are known (ChannelDyDxLoader; stats::dx_in_column_pass
    // says what it saved); the legacy kernels' thread per channel also reads
    // coalesced, but walks all rows alone. Otherwise a block per channel.
    if (shape.S == 1 && !stats::legacy_kernels() &&
        cuda_kernels::column_reduce_applies(shape.channels(), shape.channel_size())) {
      if (sums_factors && stats::dx_in_column_pass()) {
        cuda_kernels::launch_column_reduce(ctx, shape.channels(), shape.channel_size(), DySums{},
                                           ChannelDyDxLoader<T, W>{load, f.dx, weighted}, AddDySums(),
                                           ParamGradStore<W>{dw, db},
                                           "normalization backward");
        return;  // dx written
      }
      cuda_kernels::launch_column_reduce(ctx, shape.channels(), shape.channel_size(), DySums{}, load, AddDySums(),
                                         ParamGradStore<W>{dw, db}, "normalization backward");
    } else
      cuda_kernels::launch_row_reduce(
          ctx, shape.channels(), shape.channel_size(), DySums{}, load, AddDySums(), ParamGradStore<W>{dw, db},
          "normalization backward",
          shape.S == 1 ? cuda_kernels::RowAccess::kInterleaved : cuda_kernels::RowAccess::kContiguous);
  }
  if (!want_dx) return;
  if (fuse) {
    Tensor partial_buffer;
    DySums* partial = nullptr;
    if (fused_params) {
      partial_buffer = cuda_kernels::temp_buffer(shape.G * shape.K * static_cast<int64_t>(sizeof(DySums)), device);
      partial = static_cast<DySums*>(partial_buffer.raw_data());
    }
    fused::launch_fused_backward<T, W>(ctx, shape, args.grad_input.data_ptr<T>(), dy, x, w, mean, invstd, s1, s2,
                                       partial);
    if (fused_params)
      cuda_kernels::launch_row_reduce(ctx, shape.channels(), shape.G / shape.P, DySums{},
                                      ChannelPartialLoader{partial, shape.K, shape.P}, AddDySums(),
                                      ParamGradStore<W>{dw, db}, "normalization backward",
                                      cuda_kernels::RowAccess::kInterleaved);
    return;
  }
  if (sums_factors && shape.K == 1) {  // the factors are whole (SumsStore took the group's weight)
    launch_norm_pass<T>(ctx, args.geo.numel(), {f.dx, f.dy, f.x},
                        factors::DxPass<T, factors::BackwardValue<T>>{f.dx, dy, x, {sf.data, shape}},
                        "normalization backward");
    return;
  }
  if (sums_factors) {
    launch_norm_pass<T>(ctx, args.geo.numel(), {f.dx, f.dy, f.x},
                        factors::DxPass<T, factors::WeightedBackwardValue<T, W>>{f.dx, dy, x, weighted},
                        "normalization backward");
    return;
  }
  if (shape.K == 1 && !stats::legacy_kernels()) {  // per-group factors from the sums in memory (SyncBN's given ones)
    const factors::Buffer<factors::Backward<T>> b(shape.G, device);
    factors::launch_from_memory(ctx, shape.G, f, b.data, "normalization backward");
    launch_norm_pass<T>(ctx, args.geo.numel(), {f.dx, f.dy, f.x},
                        factors::DxPass<T, factors::BackwardValue<T>>{f.dx, dy, x, {b.data, shape}},
                        "normalization backward");
    return;
  }
  launch_norm_pass<T>(ctx, args.geo.numel(), {f.dx, f.dy, f.x}, f, "normalization backward");
}

void backward_cuda(const NormBackwardArgs& args) {
  // Without a weight, grad_weight or grad_bias carries the parameters' dtype
  // (batch_norm_backward_reduce passes none: its sums are unweighted).
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(args.input.dtype(), "normalization backward", [&] {
    with_param_type<scalar_t>(args.param_dtype_source(),
                              [&]<class W>() { backward_typed<scalar_t, W>(args); });
  });
}

// ---- running statistics (a thread per channel, rows summed in order) -------------

template <class T>
struct RunningUpdateFunctor {
  T *rm, *rv;
  const double *mean, *var;
  int64_t C, R;
  double momentum, correction;
  __device__ void operator()(const Offsets<1>& o) const {
    const int64_t c = o.v[0];
    double bm = mean[c], bv = var[c] * correction;
    if (R > 1) {
      bm = bv = 0.0;
      for (int64_t r = 0; r < R; ++r) {
        bm += mean[r * C + c] / static_cast<double>(R);
        bv += var[r * C + c] * correction / static_cast<double>(R);
      }
    }
    rm[c] = convert<T>(cuda_math::running_update(convert<double>(rm[c]), bm, momentum));
    rv[c] = convert<T>(cuda_math::running_update(convert<double>(rv[c]), bv, momentum));
  }
};

void update_running_stats_cuda(const NormRunningStatsArgs& args) {
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(args.running_mean.dtype(), "update running statistics", [&] {
    const LaunchContext ctx(args.running_mean.device());
    const int64_t C = args.running_mean.numel();
    cuda_kernels::launch_elementwise(
        ctx, C, linear(C, "update running statistics"),
        RunningUpdateFunctor<scalar_t>{args.running_mean.data_ptr<scalar_t>(), args.running_var.data_ptr<scalar_t>(),
                                       args.batch_mean.data_ptr<double>(), args.batch_var.data_ptr<double>(), C,
                                       args.rows, args.momentum, args.var_correction},
        "update running statistics");
  });
}

template <class T>
struct FromRunningFunctor {
  const T *rm, *rv;
  double *mean, *invstd;
  int64_t C;
  double eps;
  __device__ void operator()(const Offsets<1>& o) const {
    const int64_t i = o.v[0], c = i % C;
    mean[i] = convert<double>(rm[c]);
    invstd[i] = 1.0 / std::sqrt(convert<double>(rv[c]) + eps);
  }
};

void stats_from_running_cuda(const NormStatsFromRunningArgs& args) {
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(args.running_mean.dtype(), "statistics from running statistics", [&] {
    const LaunchContext ctx(args.running_mean.device());
    const int64_t C = args.running_mean.numel(), n = args.rows * C;
    cuda_kernels::launch_elementwise(
        ctx, n, linear(n, "statistics from running statistics"),
        FromRunningFunctor<scalar_t>{args.running_mean.data_ptr<scalar_t>(), args.running_var.data_ptr<scalar_t>(),
                                     args.mean.data_ptr<double>(), args.invstd.data_ptr<double>(), C, args.eps},
        "statistics from running statistics");
  });
}

}  // namespace

}  // namespace minidl::norm

namespace minidl {

void register_norm_cuda_kernels() {
  norm::norm_forward_stub.set(DeviceType::CUDA, norm::forward_cuda);
  norm::norm_backward_stub.set(DeviceType::CUDA, norm::backward_cuda);
  norm::norm_update_running_stats_stub.set(DeviceType::CUDA, norm::update_running_stats_cuda);
  norm::norm_stats_from_running_stub.set(DeviceType::CUDA, norm::stats_from_running_cuda);
}

}  // namespace minidl
