// conv3d's CPU kernels: conv2d's kernels (ops/cpu/conv2d_kernels.h, with their
// shifted-plane, im2col and Winograd paths) applied to depth slices.
//
// Forward. Output depth od reads input depths id = od*sd - pd + kd*dd, kd < kD.
// Stack those kD input slices of every channel as the channels of one 2-D
// image, channel c*kD + kd (zero where id falls into the depth padding):
//     y[n][:, od] = conv2d(stacked slices, w viewed as (K, Cg*kD, kH, kW))
// since w's (c, kd) index already is c*kD + kd in memory, and with groups the
// Cg*kD stacked channels of group g are exactly those its weights read.
//
// Grad input, per input depth id: the output depths that read it are
// od = (id + pd - kd*dd) / sd for the taps kd where that divides exactly,
// which depends only on the phase (id + pd) mod sd. Stack those dy slices as
// channels (k, j) for the phase's taps j (zero outside the output) and
//     dx[n][:, id] = conv2d grad input of them, with w permuted to (K*taps, Cg, kH, kW)
// so every input depth is computed once, by one thread, with no sums across
// threads (a scatter of stacked-slice gradients would race), and no products
// with the taps that can never reach it (half of them for a stride-2 depth).
//
// Grad weight: conv2d's grad weight of each chunk of forward slices, summed.
//
// Forward and grad input (depth stride 1) skip the stacking where conv2d
// would run Winograd on the stacked slices and a plane has enough tiles:
// ops/cpu/conv3d_winograd.h transforms each input plane once and sums the
// depth taps in the transformed domain (the stacking transforms a plane once
// per output depth reading it). MINIDL_CONV3D_STACKED=1 (read once) keeps
// the stacked path, to compare.
//
// Threads: the work items are (image, chunk of depths); each thread runs
// whole items, calling conv2d single-threaded, so a call forks and joins once.
// (Per-item parallel regions inside conv2d plus parallel copies cost 3x on a
// loaded machine: every join waits for a descheduled thread.) With fewer
// items than threads, the items run in turn and conv2d threads each one.
// Only the chunks' stacked slices exist at a time (a whole vol2col of a
// UNet3d level would be hundreds of MB).
//
// 16-bit tensors (BFloat16, Half) are read and written as they are: the
// copies into the stacked slices widen them to float32, conv2d computes in
// float32, the copies back round each output once (Float32Compute's bits
// without its float32 copies of whole volumes). bfloat16 on a CPU with
// AVX512-BF16 runs some passes on conv2d's dot products instead, the slices
// kept in bfloat16 (dot_products below).
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "minidl/core/dtype.h"
#include "minidl/ops/conv3d.h"
#include "minidl/ops/cpu/bf16_gemm.h"
#include "minidl/ops/cpu/bf16_kernels.h"
#include "minidl/ops/cpu/conv2d_gemm.h"
#include "minidl/ops/cpu/conv2d_kernels.h"
#include "minidl/ops/cpu/conv3d_kernels.h"
#include "minidl/ops/cpu/conv3d_winograd.h"
#include "minidl/ops/cpu/float32_compute.h"

namespace minidl {

namespace {

// Scratch per thread (conv2d's thread_buffer slots are in use by the conv2d
// calls in between, so these are separate).
template <class T>
struct Scratch {
  conv2d_gemm::Buffer<T> slices, planes, weights;
};
template <class T>
Scratch<T>& scratch() {
  thread_local Scratch<T> s;
  return s;
}

// Bytes of stacked slices per item: with conv2d's own copy of them, within L2/L3 reach.
constexpr int64_t kItemBytes = int64_t{4} << 20;

// Depths per item: within kItemBytes (bytes_per_depth each), but small enough
// that there are a few items per thread.
int64_t depths_per_item(const Conv3dGeometry& g, int64_t depths, int64_t bytes_per_depth) {
  const int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const int64_t by_memory = std::max<int64_t>(1, kItemBytes / std::max<int64_t>(1, bytes_per_depth));
  const int64_t by_threads = std::max<int64_t>(1, g.hw.batch * depths / (2 * threads));
  return std::clamp<int64_t>(std::min(by_memory, by_threads), 1, std::max<int64_t>(depths, 1));
}

// Runs f(item) for items [0, count): spread over threads when there are
// enough of them (conv2d then runs single-threaded inside), else in turn
// (conv2d threads each). Items go to threads as they finish (one thread may be
// descheduled on a busy machine) unless `fixed`: then always to the same
// thread, so per-thread sums add up in the same order on every run.
template <class F>
void run_items(int64_t count, bool fixed, F f) {
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (threads > 1 && count >= threads) {
    if (fixed) {
#pragma omp parallel for schedule(static) num_threads(threads)
      for (int64_t i = 0; i < count; ++i) f(i);
    } else {
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
      for (int64_t i = 0; i < count; ++i) f(i);
    }
    return;
  }
  for (int64_t i = 0; i < count; ++i) f(i);
}

int64_t input_depth(const Conv3dGeometry& g, int64_t od, int64_t kd) {
  return od * g.stride_d - g.pad_d + kd * g.dilation_d;
}

// dst[0, n) = src[0, n), converted (a memcpy where the types agree).
template <class Src, class Dst>
void copy_values(const Src* src, int64_t n, Dst* dst) {
  if constexpr (std::is_same_v<Src, Dst>) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(Dst));
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = convert<Dst>(src[i]);
  }
}

// slices[b][c*kD + kd] = x_n[c][input_depth(od0 + b, kd)] (0 in the padding).
template <class E, class T>
void gather_input(const Conv3dGeometry& g, const E* x_n, int64_t od0, int64_t chunk, T* slices) {
  const int64_t C = g.hw.in_channels, kD = g.kernel_d, HW = g.hw.in_h * g.hw.in_w;
  for (int64_t b = 0; b < chunk; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t kd = 0; kd < kD; ++kd) {
        T* dst = slices + ((b * C + c) * kD + kd) * HW;
        const int64_t id = input_depth(g, od0 + b, kd);
        if (id < 0 || id >= g.in_d)
          std::fill(dst, dst + HW, T(0));
        else
          copy_values(x_n + (c * g.in_d + id) * HW, HW, dst);
      }
}

// planes[b][c] = v_n[c][depth0 + b] and back (volume: (C, depths, plane)).
template <class E, class T>
void volume_to_planes(const E* v_n, int64_t C, int64_t depths, int64_t plane, int64_t depth0, int64_t chunk, T* out) {
  for (int64_t b = 0; b < chunk; ++b)
    for (int64_t c = 0; c < C; ++c) copy_values(v_n + (c * depths + depth0 + b) * plane, plane, out + (b * C + c) * plane);
}
template <class T, class E>
void planes_to_volume(const T* planes, int64_t C, int64_t depths, int64_t plane, int64_t depth0, int64_t chunk,
                      E* v_n) {
  for (int64_t b = 0; b < chunk; ++b)
    for (int64_t c = 0; c < C; ++c) copy_values(planes + (b * C + c) * plane, plane, v_n + (c * depths + depth0 + b) * plane);
}

// p as T: p itself where the types agree, else a converted copy in `buffer`.
template <class T, class E>
const T* as_compute(const E* p, int64_t n, std::vector<T>& buffer) {
  if constexpr (std::is_same_v<T, E>) {
    return p;
  } else {
    if (!p) return nullptr;
    buffer.resize(static_cast<size_t>(n));
    copy_values(p, n, buffer.data());
    return buffer.data();
  }
}

Conv2dGeometry forward_slices(const Conv3dGeometry& g, int64_t chunk) {
  Conv2dGeometry s = g.hw;
  s.batch = chunk;
  s.in_channels = g.hw.in_channels * g.kernel_d;
  return s;
}

// Whether a bfloat16 pass runs conv2d's dot products (ops/cpu/bf16_kernels.h)
// on bfloat16 slices rather than float32 ones: grad weight always; forward
// and grad input (where conv3d_winograd does not run) on planes of at most
// kDotMaxPixels outputs. Zen 4, 2 threads, UNet3d's 3x3x3 convs at batch 2,
// float32 slices -> dot products, ms: forward 64->128 on 4x8x8 2.60 -> 0.71,
// 128->128 5.53 -> 1.40; grad input alike; but 64->32 on 16x32x32 10.6 ->
// 12.2 and 1->16 on 32x64x64's grad input 3.8 -> 12.9; grad weight (against
// float32 shifted planes) 120 -> 87 over all eleven shapes.
constexpr int64_t kDotMaxPixels = 16 * 16;

template <class E>
bool dot_products(const Conv3dGeometry& g, Conv2dPass pass) {
  if (!std::is_same_v<E, BFloat16> || !cpu::bf16_dot_enabled()) return false;
  return pass == Conv2dPass::kWeight || g.hw.out_h * g.hw.out_w <= kDotMaxPixels;
}

// The Winograd tile (2, 4) of a pass that runs ops/cpu/conv3d_winograd.h
// (each input plane transformed once, not once per stacked slice), 0 where
// it does not: where conv2d would run Winograd on the stacked slices and a
// plane has at least kWinogradMinTiles tiles (fewer make narrow GEMMs; the
// stacked path puts several depths' tiles side by side).
constexpr int64_t kWinogradMinTiles = 16;

int winograd3d_tile(const Conv3dGeometry& g, Conv2dPass pass) {
  static const bool stacked_only = [] {
    const char* v = std::getenv("MINIDL_CONV3D_STACKED");
    return v != nullptr && v[0] == '1';
  }();
  const bool applies = pass == Conv2dPass::kInput ? conv3d_winograd_input_applies(g) : conv3d_winograd_applies(g);
  if (!applies || stacked_only) return 0;
  const int tile = [&] {
    switch (conv2d_resolve_algo(forward_slices(g, g.hw.batch), pass)) {
      case Conv2dAlgo::kWinograd: return 2;
      case Conv2dAlgo::kWinograd4: return 4;
      default: return 0;
    }
  }();
  const int64_t tiles = ((g.hw.out_h + tile - 1) / std::max(tile, 1)) * ((g.hw.out_w + tile - 1) / std::max(tile, 1));
  return tile > 0 && tiles >= kWinogradMinTiles ? tile : 0;
}

// The forward work items: (image, chunk of output depths).
struct Items {
  int64_t per_item = 1, per_image = 1;
  Items(const Conv3dGeometry& g, int64_t depths, int64_t bytes_per_depth)
      : per_item(depths_per_item(g, depths, bytes_per_depth)), per_image((depths + per_item - 1) / per_item) {}
};

template <class E>
void bias_grad(const Conv3dGeometry& g, const E* dy, E* dbias) {
  const int64_t K = g.hw.out_channels, per_image = g.out_d * g.hw.out_h * g.hw.out_w;
  for (int64_t k = 0; k < K; ++k) {
    double sum = 0;  // float32 sums over batch * voxels lose bits in float
    for (int64_t n = 0; n < g.hw.batch; ++n) {
      const E* src = dy + (n * K + k) * per_image;
      acc_type_t<E> s = 0;
      for (int64_t i = 0; i < per_image; ++i) s += convert<acc_type_t<E>>(src[i]);
      sum += s;
    }
    dbias[k] = convert<E>(sum);
  }
}

}  // namespace

int64_t conv3d_depth_chunk(const Conv3dGeometry& g, int64_t element_size) {
  const int64_t bytes = g.hw.in_channels * g.kernel_d * g.hw.in_h * g.hw.in_w * element_size;
  return depths_per_item(g, g.out_d, bytes);
}

template <class E>
void conv3d_forward_kernel(const Conv3dGeometry& g, const E* x, const E* w_stored, const E* bias_stored, E* y) {
  using T = acc_type_t<E>;
  const int64_t C = g.hw.in_channels, K = g.hw.out_channels, HW = g.hw.in_h * g.hw.in_w;
  const int64_t OHW = g.hw.out_h * g.hw.out_w;
  if (const int tile = winograd3d_tile(g, Conv2dPass::kForward))
    if (conv3d_winograd_forward(g, x, w_stored, bias_stored, y, tile)) return;  // else x holds an inf or NaN
  const bool dot = dot_products<E>(g, Conv2dPass::kForward);
  std::vector<T> w_buffer, bias_buffer;
  const T* w = as_compute<T>(w_stored, K * (C / g.hw.groups) * g.kernel_d * g.hw.kernel_h * g.hw.kernel_w, w_buffer);
  const T* bias = as_compute<T>(bias_stored, K, bias_buffer);
  const Items items(g, g.out_d, C * g.kernel_d * HW * static_cast<int64_t>(sizeof(T)));
  run_items(g.hw.batch * items.per_image, false, [&](int64_t i) {
    const int64_t n = i / items.per_image, od0 = i % items.per_image * items.per_item;
    const int64_t chunk = std::min(items.per_item, g.out_d - od0);
    if constexpr (std::is_same_v<E, BFloat16>) {
      if (dot) {  // the slices stay bfloat16; conv2d's dot products round each output once
        E* slices = scratch<E>().slices.get(chunk * C * g.kernel_d * HW);
        E* planes = scratch<E>().planes.get(chunk * K * OHW);
        gather_input(g, x + n * C * g.in_d * HW, od0, chunk, slices);
        cpu::conv2d_forward_bf16(forward_slices(g, chunk), slices, w_stored, bias_stored, planes);
        planes_to_volume(planes, K, g.out_d, OHW, od0, chunk, y + n * K * g.out_d * OHW);
        return;
      }
    }
    T* slices = scratch<T>().slices.get(chunk * C * g.kernel_d * HW);
    T* planes = scratch<T>().planes.get(chunk * K * OHW);
    gather_input(g, x + n * C * g.in_d * HW, od0, chunk, slices);
    conv2d_forward_kernel(forward_slices(g, chunk), slices, w, bias, planes);
    planes_to_volume(planes, K, g.out_d, OHW, od0, chunk, y + n * K * g.out_d * OHW);
  });
}

template <class E>
void conv3d_backward_input_kernel(const Conv3dGeometry& g, const E* dy, const E* w, E* dx) {
  using T = acc_type_t<E>;
  const int64_t C = g.hw.in_channels, K = g.hw.out_channels, Cg = C / g.hw.groups, kD = g.kernel_d;
  const int64_t HW = g.hw.in_h * g.hw.in_w, OHW = g.hw.out_h * g.hw.out_w, taps2 = g.hw.kernel_h * g.hw.kernel_w;
  const int64_t sd = g.stride_d;
  if (const int tile = winograd3d_tile(g, Conv2dPass::kInput))
    if (conv3d_winograd_backward_input(g, dy, w, dx, tile)) return;  // else dy holds an inf or NaN
  // Per phase p = (id + pd) mod sd: the depth taps that reach it, and w permuted to [k][j][c][tap2].
  std::vector<std::vector<int64_t>> phase_taps(static_cast<size_t>(sd));
  for (int64_t kd = 0; kd < kD; ++kd) phase_taps[static_cast<size_t>(kd * g.dilation_d % sd)].push_back(kd);
  const bool dot = dot_products<E>(g, Conv2dPass::kInput);
  std::vector<std::vector<T>> phase_w(static_cast<size_t>(sd));
  std::vector<std::vector<E>> phase_w_stored(static_cast<size_t>(sd));  // the dot products' (bfloat16)
  auto permute = [&](const auto& taps, auto& pw) {
    const auto J = static_cast<int64_t>(taps.size());
    pw.resize(static_cast<size_t>(K * J * Cg * taps2));
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < J; ++j)
        for (int64_t c = 0; c < Cg; ++c)
          copy_values(w + ((k * Cg + c) * kD + taps[static_cast<size_t>(j)]) * taps2, taps2,
                      pw.data() + ((k * J + j) * Cg + c) * taps2);
  };
  for (int64_t p = 0; p < sd; ++p) {
    if (dot)
      permute(phase_taps[static_cast<size_t>(p)], phase_w_stored[static_cast<size_t>(p)]);
    else
      permute(phase_taps[static_cast<size_t>(p)], phase_w[static_cast<size_t>(p)]);
  }
  // Items: (image, phase, chunk of the phase's input depths id = first + i * sd).
  const int64_t max_taps = (kD + sd - 1) / sd + 1;
  const Items items(g, (g.in_d + sd - 1) / sd, K * max_taps * OHW * static_cast<int64_t>(sizeof(T)));
  const int64_t per_phase = items.per_image;
  run_items(g.hw.batch * sd * per_phase, false, [&](int64_t item) {
    const int64_t n = item / (sd * per_phase), r = item % (sd * per_phase);
    const int64_t first = r / per_phase;  // depth id = first + i * sd has phase (first + pd) mod sd
    const int64_t count = first < g.in_d ? (g.in_d - 1 - first) / sd + 1 : 0;
    const int64_t i0 = r % per_phase * items.per_item, chunk = std::min(items.per_item, count - i0);
    if (chunk <= 0) return;
    const int64_t phase = (first + g.pad_d) % sd;
    const auto& taps = phase_taps[static_cast<size_t>(phase)];
    const auto J = static_cast<int64_t>(taps.size());
    E* dx_n = dx + n * C * g.in_d * HW;
    if (J == 0) {  // no tap reaches these depths (sd > kD * dd)
      for (int64_t b = 0; b < chunk; ++b)
        for (int64_t c = 0; c < C; ++c) {
          E* dst = dx_n + (c * g.in_d + first + (i0 + b) * sd) * HW;
          std::fill(dst, dst + HW, convert<E>(0.0f));
        }
      return;
    }
    // The phase's dy slices stacked as channels (k, j), in S (float32, or
    // bfloat16 for the dot products); conv2d's grad input of them; dx's depths.
    auto run = [&](auto s_tag, const auto* phase_weights) {
      using S = decltype(s_tag);
      S* slices = scratch<S>().slices.get(chunk * K * J * OHW);
      S* planes = scratch<S>().planes.get(chunk * C * HW);
      const E* dy_n = dy + n * K * g.out_d * OHW;
      for (int64_t b = 0; b < chunk; ++b) {
        const int64_t id = first + (i0 + b) * sd;
        for (int64_t k = 0; k < K; ++k)
          for (int64_t j = 0; j < J; ++j) {
            S* dst = slices + ((b * K + k) * J + j) * OHW;
            const int64_t num = id + g.pad_d - taps[static_cast<size_t>(j)] * g.dilation_d;  // = od * sd
            const int64_t od = num / sd;
            if (num < 0 || od >= g.out_d)
              std::fill(dst, dst + OHW, convert<S>(0.0f));
            else
              copy_values(dy_n + (k * g.out_d + od) * OHW, OHW, dst);
          }
      }
      Conv2dGeometry s = g.hw;
      s.batch = chunk;
      s.out_channels = K * J;
      if constexpr (std::is_same_v<S, BFloat16>)
        cpu::conv2d_backward_input_bf16(s, slices, phase_weights, planes);
      else
        conv2d_backward_input_kernel(s, slices, phase_weights, planes);
      for (int64_t b = 0; b < chunk; ++b)
        for (int64_t c = 0; c < C; ++c)
          copy_values(planes + (b * C + c) * HW, HW, dx_n + (c * g.in_d + first + (i0 + b) * sd) * HW);
    };
    if constexpr (std::is_same_v<E, BFloat16>) {
      if (dot) return run(E{}, phase_w_stored[static_cast<size_t>(phase)].data());
    }
    run(T{}, phase_w[static_cast<size_t>(phase)].data());
  });
}

template <class E>
void conv3d_backward_weight_kernel(const Conv3dGeometry& g, const E* dy, const E* x, E* dw, E* dbias) {
  using T = acc_type_t<E>;
  if (dbias) bias_grad(g, dy, dbias);
  if (!dw) return;
  const int64_t C = g.hw.in_channels, K = g.hw.out_channels, HW = g.hw.in_h * g.hw.in_w;
  const int64_t OHW = g.hw.out_h * g.hw.out_w;
  const int64_t w_size = K * (C / g.hw.groups) * g.kernel_d * g.hw.kernel_h * g.hw.kernel_w;
  const Items items(g, g.out_d, C * g.kernel_d * HW * static_cast<int64_t>(sizeof(T)));
  const int64_t count = g.hw.batch * items.per_image;
  // One running sum per thread (and one product buffer), added up at the end.
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  std::vector<T> sums(static_cast<size_t>(threads * w_size), T(0));
  const bool bf16_dot = dot_products<E>(g, Conv2dPass::kWeight);
  run_items(count, true, [&](int64_t i) {
    const int64_t n = i / items.per_image, od0 = i % items.per_image * items.per_item;
    const int64_t chunk = std::min(items.per_item, g.out_d - od0);
    T* sum = sums.data() + (omp_in_parallel() ? omp_get_thread_num() : 0) * w_size;
    if constexpr (std::is_same_v<E, BFloat16>) {
      if (bf16_dot) {  // the slices stay bfloat16; the dot products add into the float32 sum
        E* slices = scratch<E>().slices.get(chunk * C * g.kernel_d * HW);
        E* planes = scratch<E>().planes.get(chunk * K * OHW);
        gather_input(g, x + n * C * g.in_d * HW, od0, chunk, slices);
        volume_to_planes(dy + n * K * g.out_d * OHW, K, g.out_d, OHW, od0, chunk, planes);
        cpu::conv2d_backward_weight_bf16_accumulate(forward_slices(g, chunk), planes, slices, sum);
        return;
      }
    }
    T* slices = scratch<T>().slices.get(chunk * C * g.kernel_d * HW);
    T* planes = scratch<T>().planes.get(chunk * K * OHW);
    T* partial = scratch<T>().weights.get(w_size);
    gather_input(g, x + n * C * g.in_d * HW, od0, chunk, slices);
    volume_to_planes(dy + n * K * g.out_d * OHW, K, g.out_d, OHW, od0, chunk, planes);
    conv2d_backward_weight_kernel<T>(forward_slices(g, chunk), planes, slices, partial, nullptr);
    for (int64_t k = 0; k < w_size; ++k) sum[k] += partial[k];
  });
  for (int64_t k = 0; k < w_size; ++k) {
    T sum = sums[static_cast<size_t>(k)];
    for (int t = 1; t < threads; ++t) sum += sums[static_cast<size_t>(t * w_size + k)];
    dw[k] = convert<E>(sum);
  }
}

#define MINIDL_CONV3D_INSTANTIATE(T)                                                                          \
  template void conv3d_forward_kernel<T>(const Conv3dGeometry&, const T*, const T*, const T*, T*);            \
  template void conv3d_backward_input_kernel<T>(const Conv3dGeometry&, const T*, const T*, T*);               \
  template void conv3d_backward_weight_kernel<T>(const Conv3dGeometry&, const T*, const T*, T*, T*);
MINIDL_CONV3D_INSTANTIATE(float)
MINIDL_CONV3D_INSTANTIATE(double)
MINIDL_CONV3D_INSTANTIATE(BFloat16)
MINIDL_CONV3D_INSTANTIATE(Half)
#undef MINIDL_CONV3D_INSTANTIATE

namespace {

template <class T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

void conv3d_forward_cpu(const Conv3dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias,
                        const Tensor& y) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "conv3d", [&] {
    conv3d_forward_kernel<scalar_t>(g, x.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(), ptr_or_null<scalar_t>(bias),
                                    y.data_ptr<scalar_t>());
  });
}

void conv3d_backward_cpu(const Conv3dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                         const Tensor& dx, const Tensor& dw, const Tensor& dbias) {
  MINIDL_DISPATCH_FLOATING(dy.dtype(), "conv3d_backward", [&] {
    if (dx.defined())
      conv3d_backward_input_kernel<scalar_t>(g, dy.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(),
                                             dx.data_ptr<scalar_t>());
    if (dw.defined() || dbias.defined())
      conv3d_backward_weight_kernel<scalar_t>(g, dy.data_ptr<scalar_t>(), ptr_or_null<scalar_t>(x),
                                              ptr_or_null<scalar_t>(dw), ptr_or_null<scalar_t>(dbias));
  });
}

// 16-bit tensors of one dtype in CPU memory: the kernels read them as they
// are; others (a float32 bias next to bfloat16 x) through Float32Compute.
void conv3d_forward_any(const Conv3dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias,
                        const Tensor& y) {
  if (!cpu::same_reduced_on_cpu({&x, &w, &bias, &y}))
    return cpu::Float32Compute<conv3d_forward_cpu, 4>::run(g, x, w, bias, y);
  cpu::dispatch_reduced(x.dtype(), [&](auto s) {
    using S = decltype(s);
    conv3d_forward_kernel<S>(g, x.data_ptr<S>(), w.data_ptr<S>(), ptr_or_null<S>(bias), y.data_ptr<S>());
  });
}

void conv3d_backward_any(const Conv3dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                         const Tensor& dx, const Tensor& dw, const Tensor& dbias) {
  if (!cpu::same_reduced_on_cpu({&dy, &x, &w, &dx, &dw, &dbias}))
    return cpu::Float32Compute<conv3d_backward_cpu, 4, 5, 6>::run(g, x, w, dy, dx, dw, dbias);
  cpu::dispatch_reduced(dy.dtype(), [&](auto s) {
    using S = decltype(s);
    if (dx.defined()) conv3d_backward_input_kernel<S>(g, dy.data_ptr<S>(), w.data_ptr<S>(), dx.data_ptr<S>());
    if (dw.defined() || dbias.defined())
      conv3d_backward_weight_kernel<S>(g, dy.data_ptr<S>(), ptr_or_null<S>(x), ptr_or_null<S>(dw),
                                       ptr_or_null<S>(dbias));
  });
}

}  // namespace

void register_conv3d_cpu_kernels() {
  conv3d_forward_stub.set(DeviceType::CPU, conv3d_forward_any);
  conv3d_backward_stub.set(DeviceType::CPU, conv3d_backward_any);
}

}  // namespace minidl
