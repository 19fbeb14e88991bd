// CPU kernels of 2-D pooling on channels-last (NHWC) tensors. Sample n's C
// planes are interleaved, so one walk over an output's window serves all
// channels: the innermost loops run over up to kBlock contiguous channels
// (vectorized by the compiler), one task per (sample, block of channels);
// channels are independent, so the backward's scatter needs no atomics.
// Taps come from ops/cpu/pool_windows.h (the CUDA kernels' window math) in
// the planar kernels' order (ops/cpu/pooling.cpp), with their tie, NaN and
// rounding rules: max pooling gives the planar kernels' values and indices
// bit for bit, window averages too; global averages may differ in the last
// bit of a float64 sum (the planar kernel sums a plane in vector lanes).
// 16-bit types compare and sum in float32 (averages in double), the gradient
// summed in a float32 buffer and rounded once, as the planar kernels.
#include "minidl/ops/cpu/pooling_channels_last.h"

#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

#include "minidl/core/half.h"
#include "minidl/ops/cpu/pool_windows.h"
#include "minidl/ops/cuda/pool_math.h"

namespace minidl::cpu {

namespace {

constexpr int64_t kBlock = 64;  // channels per task and per register pass
constexpr int64_t kParallelWork = 32768;

template <class T>
using Compute = std::conditional_t<is_half_v<T>, float, T>;


// Task t of a (sample, channel block) split: offsets of its first channel in
// the input and the output, and how many channels it holds.
struct ChannelTask {
  int64_t in_offset, out_offset, channel0, count;
};

struct ChannelTasks {
  int64_t C, blocks, tasks, in_plane, out_plane;
  explicit ChannelTasks(const PoolGeometry& g)
      : C(g.channels_last),
        blocks((C + kBlock - 1) / kBlock),
        tasks(g.planes / C * blocks),
        in_plane(g.in_plane()),
        out_plane(g.out_plane()) {}
  ChannelTask operator[](int64_t t) const {
    const int64_t n = t / blocks, c0 = t % blocks * kBlock;
    return {n * in_plane * C + c0, n * out_plane * C + c0, c0, std::min(kBlock, C - c0)};
  }
};

// Where a task sums its gradient: a float32 buffer for the 16-bit types
// (rounded once by finish()), the gradient itself for float and double.
// Zeroed on construction.
template <class T>
class GradientSums {
 public:
  GradientSums(T* gx, int64_t C, int64_t count, int64_t in_plane)
      : gx_(gx), C_(C), count_(count), in_plane_(in_plane) {
    if constexpr (is_half_v<T>) {
      thread_local std::vector<float> buffer;
      buffer.assign(static_cast<size_t>(in_plane * count), 0.0f);
      sums_ = buffer.data(), stride_ = count;
    } else {
      for (int64_t i = 0; i < in_plane; ++i) std::fill(gx + i * C, gx + i * C + count, T(0));
      sums_ = gx, stride_ = C;
    }
  }
  Compute<T>* at(int64_t i) { return sums_ + i * stride_; }  // the sums of plane position i
  void finish() {
    if constexpr (is_half_v<T>)
      for (int64_t i = 0; i < in_plane_; ++i)
        for (int64_t k = 0; k < count_; ++k) gx_[i * C_ + k] = static_cast<T>(sums_[i * stride_ + k]);
  }

 private:
  T* gx_;
  int64_t C_, count_, in_plane_;
  Compute<T>* sums_;
  int64_t stride_;
};

}  // namespace

template <class T>
void max_pool_forward_channels_last(const T* x, T* y, int64_t* indices, const PoolGeometry& g) {
  const ChannelTasks tasks(g);
  const WindowTaps t(g);
  const int64_t C = tasks.C, H = g.in[1], W = g.in[2];
#pragma omp parallel for schedule(static) if (g.work(g.taps_per_output()) >= kParallelWork)
  for (int64_t task = 0; task < tasks.tasks; ++task) {
    const ChannelTask ct = tasks[task];
    const T* xs = x + ct.in_offset;
    for_each_output(t, [&](int64_t o, const Taps& td, const Taps& th, const Taps& tw) {
      Compute<T> best[kBlock];
      int64_t at[kBlock];
      // First tap inside the input: PyTorch's index when the window holds only -inf.
      const int64_t first = (pos(td, td.lo) * H + pos(th, th.lo)) * W + pos(tw, tw.lo);
      std::fill(best, best + ct.count, -std::numeric_limits<Compute<T>>::infinity());
      std::fill(at, at + ct.count, first);
      for_each_tap(g, td, th, tw, [&](int64_t i) {
        const T* xi = xs + i * C;
        for (int64_t k = 0; k < ct.count; ++k) {
          const Compute<T> v = static_cast<Compute<T>>(xi[k]);
          const bool take = (v > best[k]) | (v != v);  // NaN propagates (the last NaN's index), as in PyTorch
          best[k] = take ? v : best[k];
          at[k] = take ? i : at[k];
        }
      });
      T* yo = y + ct.out_offset + o * C;
      int64_t* io = indices + ct.out_offset + o * C;
      for (int64_t k = 0; k < ct.count; ++k) {
        yo[k] = static_cast<T>(best[k]);  // one of the inputs: exact in T
        io[k] = at[k];
      }
    });
  }
}

template <class T>
void max_pool_backward_channels_last(const T* gy, const int64_t* indices, T* gx, const PoolGeometry& g) {
  const ChannelTasks tasks(g);
  const int64_t C = tasks.C;
  const std::vector<uint8_t> routes = gradient_routes(WindowTaps(g));  // windows with no tap route nothing
#pragma omp parallel for schedule(static) if (g.planes * (tasks.in_plane + tasks.out_plane) >= kParallelWork)
  for (int64_t task = 0; task < tasks.tasks; ++task) {
    const ChannelTask ct = tasks[task];
    GradientSums<T> sums(gx + ct.in_offset, C, ct.count, tasks.in_plane);
    for (int64_t o = 0; o < tasks.out_plane; ++o) {  // in output order: the planar kernel's sums
      if (!routes[static_cast<size_t>(o)]) continue;
      const T* go = gy + ct.out_offset + o * C;
      const int64_t* io = indices + ct.out_offset + o * C;
      for (int64_t k = 0; k < ct.count; ++k) sums.at(io[k])[k] += static_cast<Compute<T>>(go[k]);
    }
    sums.finish();
  }
}

template <class T>
void avg_pool_forward_channels_last(const T* x, T* y, const PoolGeometry& g) {
  const ChannelTasks tasks(g);
  const int64_t C = tasks.C;
  if (g.adaptive && tasks.out_plane == 1) {
    // Global average: a task per sample sums its rows of C values in order
    // (the windows' sums, read as one stream; blocks of channels read 256-byte pieces).
    const int64_t P = tasks.in_plane;
#pragma omp parallel for schedule(static) if (g.planes * P >= kParallelWork)
    for (int64_t n = 0; n < g.planes / C; ++n) {
      thread_local std::vector<double> sums;
      sums.assign(static_cast<size_t>(C), 0.0);
      double* s = sums.data();
      for (const T* row = x + n * P * C; row < x + (n + 1) * P * C; row += C)
        for (int64_t c = 0; c < C; ++c) s[c] += static_cast<double>(static_cast<Compute<T>>(row[c]));
      for (int64_t c = 0; c < C; ++c)
        y[n * C + c] = static_cast<T>(static_cast<Compute<T>>(s[c] / static_cast<double>(P)));
    }
    return;
  }
  const WindowTaps t(g);
#pragma omp parallel for schedule(static) if (g.work(g.taps_per_output()) >= kParallelWork)
  for (int64_t task = 0; task < tasks.tasks; ++task) {
    const ChannelTask ct = tasks[task];
    const T* xs = x + ct.in_offset;
    for_each_output(t, [&](int64_t o, const Taps& td, const Taps& th, const Taps& tw) {
      T* yo = y + ct.out_offset + o * C;
      if (cuda_math::empty_window(td, th, tw)) {  // PyTorch writes 0
        std::fill(yo, yo + ct.count, T(0));
        return;
      }
      double s[kBlock] = {};
      for_each_tap(g, td, th, tw, [&](int64_t i) {
        const T* xi = xs + i * C;
        for (int64_t k = 0; k < ct.count; ++k) s[k] += static_cast<double>(static_cast<Compute<T>>(xi[k]));
      });
      const double d = divisor(g, td, th, tw);
      for (int64_t k = 0; k < ct.count; ++k) yo[k] = static_cast<T>(static_cast<Compute<T>>(s[k] / d));
    });
  }
}

template <class T>
void avg_pool_backward_channels_last(const T* gy, T* gx, const PoolGeometry& g) {
  const ChannelTasks tasks(g);
  const WindowTaps t(g);
  const int64_t C = tasks.C;
  const int64_t work = g.planes * tasks.in_plane + g.work(g.taps_per_output());
#pragma omp parallel for schedule(static) if (work >= kParallelWork)
  for (int64_t task = 0; task < tasks.tasks; ++task) {
    const ChannelTask ct = tasks[task];
    GradientSums<T> sums(gx + ct.in_offset, C, ct.count, tasks.in_plane);
    for_each_output(t, [&](int64_t o, const Taps& td, const Taps& th, const Taps& tw) {
      if (cuda_math::empty_window(td, th, tw)) return;
      const double d = divisor(g, td, th, tw);
      const T* go = gy + ct.out_offset + o * C;
      Compute<T> share[kBlock];  // dy / divisor rounded to the compute type, as the planar kernel
      for (int64_t k = 0; k < ct.count; ++k) share[k] = static_cast<Compute<T>>(static_cast<Compute<T>>(go[k]) / d);
      for_each_tap(g, td, th, tw, [&](int64_t i) {
        Compute<T>* acc = sums.at(i);
        for (int64_t k = 0; k < ct.count; ++k) acc[k] += share[k];
      });
    });
    sums.finish();
  }
}

#define MINIDL_POOL_CL_INSTANTIATE(T)                                                                     \
  template void max_pool_forward_channels_last<T>(const T*, T*, int64_t*, const PoolGeometry&);           \
  template void max_pool_backward_channels_last<T>(const T*, const int64_t*, T*, const PoolGeometry&);    \
  template void avg_pool_forward_channels_last<T>(const T*, T*, const PoolGeometry&);                     \
  template void avg_pool_backward_channels_last<T>(const T*, T*, const PoolGeometry&);
MINIDL_POOL_CL_INSTANTIATE(float)
MINIDL_POOL_CL_INSTANTIATE(double)
MINIDL_POOL_CL_INSTANTIATE(Half)
MINIDL_POOL_CL_INSTANTIATE(BFloat16)
#undef MINIDL_POOL_CL_INSTANTIATE

}  // namespace minidl::cpu
