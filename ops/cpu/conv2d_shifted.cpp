// conv2d's shifted-plane path: an implicit GEMM over "shifted planes" (no
// im2col), used for big feature maps; small ones go to
// ops/cpu/conv2d_im2col.cpp, and conv2d_pick_algo (ops/cpu/conv2d_kernels.cpp)
// chooses.
//
// Stride 1 first. Store each input channel as a zero-padded plane with row
// pitch P, and number the output pixels q = ho * P + wo. Tap (kh, kw) of
// output pixel q reads plane value (ho + kh*dh) * P + (wo + kw*dw) = off_t + q,
// so for the whole image every tap reads one contiguous run of the plane:
//     y[m][q] = sum_j sum_t w[m][j][t] * plane_j[off_t + q]
// That is a GEMM whose right operand (the im2col matrix) is never built: the
// micro-kernel (shifted_tile) loads its vectors straight from the planes.
// Columns wo >= Wo of each output row are junk and are dropped when y is
// written. Rows share their zero padding: a read that runs past the end of a
// row lands in the next row's left padding, so P = W + pad rather than
// W + 2 * pad (plan_pitch says exactly how small P may be).
//
// Stride s: split the padded input into s_h * s_w phase planes (every s-th row
// and column, starting at a different offset); each tap reads one phase plane
// with stride 1, so it is the same sum with per-tap offsets into different planes.
//
// Grad input is the same problem backwards: for each phase of dx (the pixels
// that share (y + pad) mod stride), dx is a stride-1 correlation of dy with
// the transposed kernel taps of that phase. Grad weight is
//     dw[m][j][t] = sum_q dy[m][q] * plane_j[off_t + q]
// a GEMM over q (weight_grad_tile) with dy transposed to [q][m] and zero at
// the junk columns.
//
// Work is split over (image, group) pairs with OpenMP, each thread owning its
// scratch buffers; with fewer pairs than threads the tiles of one image are
// split instead. Grad weight sums per-thread partials at the end.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "minidl/core/allocator.h"
#include "minidl/core/check.h"
#include "minidl/ops/cpu/conv2d_gemm.h"
#include "minidl/ops/cpu/conv2d_kernels.h"
#include "minidl/ops/cpu/conv2d_shifted_tiles.h"
#include "minidl/ops/cpu/conv2d_simd.h"
#include "minidl/ops/cpu/transpose8.h"

namespace minidl {

namespace {

using conv2d_gemm::Slot;
using conv2d_gemm::thread_buffer;
using conv2d_simd::kLanes;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }  // b > 0

using conv2d_shifted::grad_cols;
using conv2d_shifted::kMaxGradCols;
using conv2d_shifted::kQVecs;
using conv2d_shifted::kRows;
using conv2d_shifted::shifted_tile_any;
using conv2d_shifted::weight_grad_tile_any;

// ---- shifted-plane problems ------------------------------------------------------------

// Row tiles of heights kRows, 4, 2, 1 covering [0, m).
struct RowTile {
  int64_t start, rows;
};
std::vector<RowTile> row_tiles(int64_t m) {
  std::vector<RowTile> tiles;
  for (int64_t start = 0; start < m;) {
    int64_t rows = 1;
    for (int64_t h : {int64_t{kRows}, int64_t{4}, int64_t{2}})
      if (m - start >= h) {
        rows = h;
        break;
      }
    tiles.push_back({start, rows});
    start += rows;
  }
  return tiles;
}

// One correlation over shifted planes, for one image and group:
//   out[m][q] = sum_{j<J} sum_t w[m][j][t] * buffer[j*plane + off[t] + q]
// where out pixel (row, col) is q = row * pitch + col, valid for
// row < out_rows, col < out_cols. The buffer holds `slots` stacks of J planes
// of src_rows x pitch values; plane value (v, u) of slot s is the source
// pixel (v * row_step + s.row0, u * col_step + s.col0), or 0 where that pixel
// does not exist.
struct ShiftedProblem {
  struct Slot {
    int64_t row0, col0;
  };
  int64_t J = 0;
  int64_t out_rows = 0, out_cols = 0;
  int64_t pitch = 1, src_rows = 0, plane = 0;
  int64_t row_step = 1, col_step = 1;
  std::vector<Slot> slots;
  std::vector<int64_t> taps;  // kernel tap (kh * kW + kw) of each term
  std::vector<int64_t> off;   // its read offset into the buffer
  int64_t q_pad = 0;               // out_rows * pitch, rounded up to whole vectors
  int64_t buffer_size = 0;         // including the zero tail that the last reads run into

  // Finishes the layout once out_*, slots, row/col maps and per-term
  // (slot, row shift, col shift) are known. Columns [0, lead) hold zeros in
  // every plane row (lead = fewest leading zero columns over the slots) and
  // `data_end` is where a slot's source pixels end.
  void finish(const std::vector<int64_t>& term_slot, const std::vector<int64_t>& term_dy,
              const std::vector<int64_t>& term_dx, int64_t src_w, int64_t lanes) {
    const int64_t max_dy = taps.empty() ? 0 : *std::max_element(term_dy.begin(), term_dy.end());
    const int64_t max_dx = taps.empty() ? 0 : *std::max_element(term_dx.begin(), term_dx.end());
    const int64_t reach = out_cols + max_dx;  // plane columns that valid outputs read
    int64_t lead = reach;
    for (const Slot& s : slots) lead = std::min(lead, std::max<int64_t>(0, ceil_div(-s.col0, col_step)));
    // The pitch must hold every output column and every column a valid
    // output reads that has data (data_end), and a read past the row end must
    // land in the next row's leading zeros: reach - pitch <= lead.
    pitch = std::max<int64_t>({1, out_cols, reach - lead});
    for (const Slot& s : slots) {
      const int64_t data_end = std::max<int64_t>(0, ceil_div(src_w - s.col0, col_step));
      pitch = std::max(pitch, std::min(data_end, reach));
    }
    src_rows = out_rows + max_dy;
    plane = src_rows * pitch;
    off.resize(taps.size());
    for (size_t i = 0; i < taps.size(); ++i)
      off[i] = term_slot[i] * J * plane + term_dy[i] * pitch + term_dx[i];
    q_pad = round_up(out_rows * pitch, lanes);
    buffer_size = static_cast<int64_t>(slots.size()) * J * plane + max_dx + lanes;
  }
};

// Fills the buffer of `p` from J source planes (src_h x src_w, consecutive).
// Channel by channel, all slots of a channel together: its source plane is
// read once from memory and then from cache (slot by slot, an image of more
// channels than fit in L2 was read from memory once per slot).
template <class T>
void fill_planes(const ShiftedProblem& p, const T* src, int64_t src_h, int64_t src_w, T* buffer) {
  const int64_t slots = static_cast<int64_t>(p.slots.size());
  for (int64_t j = 0; j < p.J; ++j) {
    const T* src_j = src + j * src_h * src_w;
    for (int64_t si = 0; si < slots; ++si) {
      const ShiftedProblem::Slot& s = p.slots[static_cast<size_t>(si)];
      T* dst = buffer + (si * p.J + j) * p.plane;
      // Plane columns [u_begin, u_end) have source pixels.
      const int64_t u_begin = std::clamp<int64_t>(ceil_div(-s.col0, p.col_step), 0, p.pitch);
      const int64_t u_end = std::clamp<int64_t>(ceil_div(src_w - s.col0, p.col_step), u_begin, p.pitch);
      for (int64_t v = 0; v < p.src_rows; ++v, dst += p.pitch) {
        const int64_t r = v * p.row_step + s.row0;
        if (r < 0 || r >= src_h) {
          std::fill(dst, dst + p.pitch, T(0));
          continue;
        }
        const T* row = src_j + r * src_w;
        std::fill(dst, dst + u_begin, T(0));
        if (p.col_step == 1)
          std::memcpy(dst + u_begin, row + u_begin + s.col0, static_cast<size_t>(u_end - u_begin) * sizeof(T));
        else if (p.col_step == 2)  // a constant stride, so the compiler vectorizes the deinterleave
          for (int64_t u = u_begin; u < u_end; ++u) dst[u] = row[u * 2 + s.col0];
        else
          for (int64_t u = u_begin; u < u_end; ++u) dst[u] = row[u * p.col_step + s.col0];
        std::fill(dst + u_end, dst + p.pitch, T(0));
      }
    }
  }
  T* tail = buffer + slots * p.J * p.plane;
  std::fill(tail, buffer + p.buffer_size, T(0));
}

// Packs weights value(m, j, term) for the row tiles of m: tile (start, rows)
// begins at start * J * terms and holds [(j * terms + term) * rows + r].
template <class T, class Value>
std::vector<T> pack_row_tiles(int64_t M, int64_t J, int64_t terms, Value value) {
  std::vector<T> packed(static_cast<size_t>(M * J * terms));
  for (const RowTile& tile : row_tiles(M)) {
    T* dst = packed.data() + tile.start * J * terms;
    for (int64_t j = 0; j < J; ++j)
      for (int64_t t = 0; t < terms; ++t)
        for (int64_t r = 0; r < tile.rows; ++r) *dst++ = value(tile.start + r, j, t);
  }
  return packed;
}

// out (M rows of pitch q_pad) = the correlation of p with packed weights, for
// output vectors [vec_begin, vec_end) of every row.
template <class T>
void run_shifted(const ShiftedProblem& p, int64_t M, const T* packed_w, const T* buffer, T* out, int64_t vec_begin,
                 int64_t vec_end) {
  constexpr int64_t L = kLanes<T>;
  constexpr int64_t kBlockVecs = 32 * kQVecs;  // output block whose input stripe stays in cache
  const int64_t terms = static_cast<int64_t>(p.taps.size());
  const std::vector<RowTile> tiles = row_tiles(M);
  for (int64_t b0 = vec_begin; b0 < vec_end; b0 += kBlockVecs) {
    const int64_t b1 = std::min(vec_end, b0 + kBlockVecs);
    for (const RowTile& tile : tiles) {
      const T* w = packed_w + tile.start * p.J * terms;
      for (int64_t v = b0; v < b1; v += kQVecs) {
        const int64_t nv = std::min<int64_t>(kQVecs, b1 - v);
        shifted_tile_any<T>(tile.rows, nv, w, buffer + v * L, p.plane, p.off.data(), terms, p.J,
                            out + tile.start * p.q_pad + v * L, p.q_pad);
      }
    }
  }
}

// Runs the correlation for one image: all threads split the output vectors
// when `split` (we are not inside a parallel loop), else this thread does all.
template <class T>
void run_shifted_image(const ShiftedProblem& p, int64_t M, const T* packed_w, const T* buffer, T* out, bool split) {
  const int64_t vecs = p.q_pad / kLanes<T>;
  if (!split) return run_shifted(p, M, packed_w, buffer, out, 0, vecs);
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t chunk = round_up(ceil_div(vecs, nt), kQVecs);
    run_shifted(p, M, packed_w, buffer, out, std::min(vecs, id * chunk), std::min(vecs, (id + 1) * chunk));
  }
}

// ---- forward --------------------------------------------------------------------------

// The forward correlation of one (image, group): the source is x's Cg planes
// split into stride phases, one slot per phase that some tap reads.
ShiftedProblem forward_problem(const Conv2dGeometry& g, int64_t lanes) {
  ShiftedProblem p;
  p.J = g.in_channels / g.groups;
  p.out_rows = g.out_h, p.out_cols = g.out_w;
  p.row_step = g.stride_h, p.col_step = g.stride_w;
  std::vector<int64_t> slot_of_phase(static_cast<size_t>(g.stride_h * g.stride_w), -1);
  std::vector<int64_t> term_slot, term_dy, term_dx;
  for (int64_t kh = 0; kh < g.kernel_h; ++kh)
    for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
      const int64_t a = kh * g.dilation_h % g.stride_h, b = kw * g.dilation_w % g.stride_w;
      int64_t& slot = slot_of_phase[static_cast<size_t>(a * g.stride_w + b)];
      if (slot < 0) {
        slot = static_cast<int64_t>(p.slots.size());
        p.slots.push_back({a - g.pad_h, b - g.pad_w});
      }
      p.taps.push_back(kh * g.kernel_w + kw);
      term_slot.push_back(slot);
      term_dy.push_back(kh * g.dilation_h / g.stride_h);
      term_dx.push_back(kw * g.dilation_w / g.stride_w);
    }
  p.finish(term_slot, term_dy, term_dx, g.in_w, lanes);
  return p;
}

// Should (image, group) pairs be spread over threads (else the tiles of each)?
bool split_over_images(const Conv2dGeometry& g, int threads) { return g.batch * g.groups >= threads; }

// Runs image(n, group, buffer, out, split) for every (image, group) pair with
// this thread's operand and product buffers: pairs spread over the threads,
// or (one thread, or fewer pairs than threads) in turn with the tiles of each
// split over the threads.
template <class T, class Image>
void for_each_image(const Conv2dGeometry& g, size_t buffer_size, size_t out_size, Image image) {
  const int64_t G = g.groups;
  const int threads = conv2d_threads(g);
  if (threads == 1 || !split_over_images(g, threads)) {
    T* buffer = thread_buffer<T>(Slot::kOperandB, buffer_size);
    T* out = thread_buffer<T>(Slot::kProduct, out_size);
    for (int64_t i = 0; i < g.batch * G; ++i) image(i / G, i % G, buffer, out, threads > 1);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    T* buffer = thread_buffer<T>(Slot::kOperandB, buffer_size);
    T* out = thread_buffer<T>(Slot::kProduct, out_size);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < g.batch * G; ++i) image(i / G, i % G, buffer, out, false);
  }
}

}  // namespace

template <class T>
void conv2d_shifted_forward(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y) {
  const int64_t G = g.groups, Cg = g.in_channels / G, Kg = g.out_channels / G;
  const int64_t taps = g.kernel_h * g.kernel_w, HW = g.in_h * g.in_w, out_hw = g.out_h * g.out_w;
  const ShiftedProblem p = forward_problem(g, kLanes<T>);
  std::vector<std::vector<T>> packed(static_cast<size_t>(G));
  for (int64_t gi = 0; gi < G; ++gi)
    packed[static_cast<size_t>(gi)] = pack_row_tiles<T>(Kg, Cg, taps, [&](int64_t m, int64_t j, int64_t t) {
      return w[((gi * Kg + m) * Cg + j) * taps + p.taps[static_cast<size_t>(t)]];
    });

  auto image = [&](int64_t n, int64_t gi, T* buffer, T* out, bool split) {
    fill_planes(p, x + (n * g.in_channels + gi * Cg) * HW, g.in_h, g.in_w, buffer);
    run_shifted_image(p, Kg, packed[static_cast<size_t>(gi)].data(), buffer, out, split);
    for (int64_t m = 0; m < Kg; ++m) {
      const int64_t k = gi * Kg + m;
      const T b = bias ? bias[k] : T(0);
      T* dst = y + (n * g.out_channels + k) * out_hw;
      for (int64_t r = 0; r < g.out_h; ++r) {
        const T* row = out + m * p.q_pad + r * p.pitch;
        for (int64_t c = 0; c < g.out_w; ++c) dst[r * g.out_w + c] = row[c] + b;
      }
    }
  };
  const auto buffer_size = static_cast<size_t>(p.buffer_size), out_size = static_cast<size_t>(Kg * p.q_pad);
  for_each_image<T>(g, buffer_size, out_size, image);
}

namespace {

// ---- grad input -----------------------------------------------------------------------

// dx pixels whose padded row is = a (mod stride): rows first + i * stride, i < count.
struct PhaseAxis {
  int64_t first = 0, count = 0;
};
PhaseAxis phase_axis(int64_t a, int64_t pad, int64_t stride, int64_t size) {
  PhaseAxis ax;
  ax.first = ((a - pad) % stride + stride) % stride;
  ax.count = ax.first < size ? (size - 1 - ax.first) / stride + 1 : 0;
  return ax;
}

// dx at the pixels of phase (a, b) as a correlation of dy (J = Kg planes):
// dx pixel (first_h + i*s_h, first_w + j*s_w) gets w[k][c][kh][kw] * dy[k][i + e_kh][j + f_kw]
// for the taps with kh*dh = a and kw*dw = b (mod stride), where
// e_kh = (first_h + pad_h - kh*dh) / s_h (exact), f_kw likewise.
ShiftedProblem input_grad_problem(const Conv2dGeometry& g, const PhaseAxis& rows, const PhaseAxis& cols, int64_t a,
                                  int64_t b, int64_t lanes) {
  ShiftedProblem p;
  p.J = g.out_channels / g.groups;
  p.out_rows = rows.count, p.out_cols = cols.count;
  std::vector<int64_t> e, f;  // per term
  for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
    if (kh * g.dilation_h % g.stride_h != a) continue;
    for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
      if (kw * g.dilation_w % g.stride_w != b) continue;
      p.taps.push_back(kh * g.kernel_w + kw);
      e.push_back((rows.first + g.pad_h - kh * g.dilation_h) / g.stride_h);
      f.push_back((cols.first + g.pad_w - kw * g.dilation_w) / g.stride_w);
    }
  }
  if (p.taps.empty()) return p;
  const int64_t e_min = *std::min_element(e.begin(), e.end()), f_min = *std::min_element(f.begin(), f.end());
  std::vector<int64_t> term_slot(p.taps.size(), 0), term_dy(p.taps.size()), term_dx(p.taps.size());
  for (size_t i = 0; i < p.taps.size(); ++i) term_dy[i] = e[i] - e_min, term_dx[i] = f[i] - f_min;
  p.slots.push_back({e_min, f_min});  // plane value (v, u) = dy[v + e_min][u + f_min]
  p.finish(term_slot, term_dy, term_dx, g.out_w, lanes);
  return p;
}

}  // namespace

template <class T>
void conv2d_shifted_backward_input(const Conv2dGeometry& g, const T* dy, const T* w, T* dx) {
  const int64_t G = g.groups, Cg = g.in_channels / G, Kg = g.out_channels / G;
  const int64_t taps = g.kernel_h * g.kernel_w, HW = g.in_h * g.in_w, out_hw = g.out_h * g.out_w;
  struct Phase {
    PhaseAxis rows, cols;
    ShiftedProblem p;
    std::vector<std::vector<T>> packed;  // per group
  };
  std::vector<Phase> phases;
  size_t buffer_size = 0, out_size = 0;
  for (int64_t a = 0; a < g.stride_h; ++a)
    for (int64_t b = 0; b < g.stride_w; ++b) {
      Phase ph;
      ph.rows = phase_axis(a, g.pad_h, g.stride_h, g.in_h);
      ph.cols = phase_axis(b, g.pad_w, g.stride_w, g.in_w);
      if (ph.rows.count == 0 || ph.cols.count == 0) continue;
      ph.p = input_grad_problem(g, ph.rows, ph.cols, a, b, kLanes<T>);
      const int64_t terms = static_cast<int64_t>(ph.p.taps.size());
      for (int64_t gi = 0; gi < G && terms > 0; ++gi)
        ph.packed.push_back(pack_row_tiles<T>(Cg, Kg, terms, [&](int64_t c, int64_t k, int64_t t) {
          return w[((gi * Kg + k) * Cg + c) * taps + ph.p.taps[static_cast<size_t>(t)]];
        }));
      buffer_size = std::max(buffer_size, static_cast<size_t>(ph.p.buffer_size));
      out_size = std::max(out_size, static_cast<size_t>(Cg * ph.p.q_pad));
      phases.push_back(std::move(ph));
    }

  auto image = [&](int64_t n, int64_t gi, T* buffer, T* out, bool split) {
    for (const Phase& ph : phases) {
      const ShiftedProblem& p = ph.p;
      const bool has_taps = !p.taps.empty();
      if (has_taps) {
        fill_planes(p, dy + (n * g.out_channels + gi * Kg) * out_hw, g.out_h, g.out_w, buffer);
        run_shifted_image(p, Cg, ph.packed[static_cast<size_t>(gi)].data(), buffer, out, split);
      }
      for (int64_t c = 0; c < Cg; ++c) {
        T* dst = dx + (n * g.in_channels + gi * Cg + c) * HW;
        for (int64_t i = 0; i < ph.rows.count; ++i) {
          T* drow = dst + (ph.rows.first + i * g.stride_h) * g.in_w + ph.cols.first;
          const T* row = out + c * p.q_pad + i * p.pitch;
          for (int64_t j = 0; j < ph.cols.count; ++j) drow[j * g.stride_w] = has_taps ? row[j] : T(0);
        }
      }
    }
  };
  for_each_image<T>(g, buffer_size, out_size, image);
}

namespace {

// ---- grad weight ----------------------------------------------------------------------

// dy of one (image, group) transposed to dyt[q][m] (q = row * pitch + col as
// in the forward problem), zero at junk columns, padding rows and m >= Kg.
// float: 8 x 8 blocks through registers (ops/cpu/transpose8.h), only the junk
// zeroed; element by element (scattered writes) and a full clear, the
// transpose was most of a first layer's weight gradient (3 input channels:
// little arithmetic per pixel).
template <class T>
void transpose_dy(const ShiftedProblem& p, const T* dy, int64_t Kg, int64_t out_h, int64_t out_w, int64_t ld,
                  T* dyt) {
  const bool blocks = std::is_same_v<T, float> && Kg == ld && Kg % 8 == 0 && out_w % 8 == 0;
  if (!blocks) {
    std::fill(dyt, dyt + p.q_pad * ld, T(0));
    for (int64_t m = 0; m < Kg; ++m)
      for (int64_t r = 0; r < out_h; ++r) {
        const T* src = dy + (m * out_h + r) * out_w;
        T* dst = dyt + r * p.pitch * ld + m;
        for (int64_t c = 0; c < out_w; ++c) dst[c * ld] = src[c];
      }
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    const int64_t plane = out_h * out_w;
    for (int64_t r = 0; r < out_h; ++r) {
      for (int64_t m = 0; m < Kg; m += 8)
        for (int64_t c = 0; c < out_w; c += 8)
          transpose8::block(dy + m * plane + r * out_w + c, plane, dyt + (r * p.pitch + c) * ld + m, ld);
      std::fill(dyt + (r * p.pitch + out_w) * ld, dyt + (r + 1) * p.pitch * ld, T(0));  // junk columns
    }
    std::fill(dyt + out_h * p.pitch * ld, dyt + p.q_pad * ld, T(0));  // rows past the last
  }
}

// Column chunks of the weight-grad tiles: 4, 2 or 1 vectors of output channels.
std::vector<RowTile> grad_chunks(int64_t vecs) {
  std::vector<RowTile> chunks;
  for (int64_t start = 0; start < vecs;) {
    const int64_t nv = vecs - start >= 4 ? 4 : vecs - start >= 2 ? 2 : 1;
    chunks.push_back({start, nv});
    start += nv;
  }
  return chunks;
}

// dwt[term_index][m] += for the terms [n_begin, n_end) (term = j * taps + t).
template <class T>
void run_weight_grad(const ShiftedProblem& p, const T* buffer, const T* dyt, int64_t ld, T* dwt, int64_t n_begin,
                     int64_t n_end) {
  constexpr int64_t L = kLanes<T>, kBlockQ = 256;  // dyt rows per block (stay in L2)
  const int64_t terms = static_cast<int64_t>(p.taps.size());
  const int64_t total = p.J * terms;
  const std::vector<RowTile> chunks = grad_chunks(ld / L);
  const T* src[kMaxGradCols];
  for (int64_t q0 = 0; q0 < p.q_pad; q0 += kBlockQ) {
    const int64_t q1 = std::min(p.q_pad, q0 + kBlockQ);
    for (const RowTile& ch : chunks) {
      const int64_t cols = ch.rows == 4 ? grad_cols(4) : ch.rows == 2 ? grad_cols(2) : grad_cols(1);
      for (int64_t n0 = n_begin; n0 < n_end; n0 += cols) {
        // Terms past the end read the first term's plane; their sums land in
        // dwt's padding rows.
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t n = n0 + c < total ? n0 + c : 0;
          src[c] = buffer + (n / terms) * p.plane + p.off[static_cast<size_t>(n % terms)];
        }
        weight_grad_tile_any<T>(ch.rows, src, dyt + ch.start * L, ld, q0, q1, dwt + n0 * ld + ch.start * L, ld);
      }
    }
  }
}

}  // namespace

template <class T>
void conv2d_shifted_backward_weight(const Conv2dGeometry& g, const T* dy, const T* x, T* dw) {
  const int64_t G = g.groups, Cg = g.in_channels / G, Kg = g.out_channels / G;
  const int64_t taps = g.kernel_h * g.kernel_w, HW = g.in_h * g.in_w, out_hw = g.out_h * g.out_w;
  const ShiftedProblem p = forward_problem(g, kLanes<T>);
  const int64_t ld = round_up(Kg, kLanes<T>);                       // dyt / dwt row length
  const int64_t terms_pad = round_up(Cg * taps, kMaxGradCols) + kMaxGradCols;  // dwt rows (with tile padding)
  const size_t partial_size = static_cast<size_t>(G * terms_pad * ld);
  const int threads = conv2d_threads(g);
  // partial[thread][group][term][m]; terms in forward_problem order (j * taps + t).
  T* partial = thread_buffer<T>(Slot::kSums, threads * partial_size);
  std::fill_n(partial, static_cast<size_t>(threads) * partial_size, T(0));

  auto image = [&](int64_t n, int64_t gi, T* buffer, T* dyt, T* dwt, bool split) {
    fill_planes(p, x + (n * g.in_channels + gi * Cg) * HW, g.in_h, g.in_w, buffer);
    transpose_dy(p, dy + (n * g.out_channels + gi * Kg) * out_hw, Kg, g.out_h, g.out_w, ld, dyt);
    T* dwt_g = dwt + gi * terms_pad * ld;
    const int64_t total = Cg * taps;
    if (!split) return run_weight_grad(p, buffer, dyt, ld, dwt_g, 0, total);
#pragma omp parallel
    {
      const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
      const int64_t chunk = round_up(ceil_div(total, nt), kMaxGradCols);
      run_weight_grad(p, buffer, dyt, ld, dwt_g, std::min(total, id * chunk), std::min(total, (id + 1) * chunk));
    }
  };
  const auto buffer_size = static_cast<size_t>(p.buffer_size), dyt_size = static_cast<size_t>(p.q_pad * ld);
  if (threads == 1 || !split_over_images(g, threads)) {
    T* buffer = thread_buffer<T>(Slot::kOperandB, buffer_size);
    T* dyt = thread_buffer<T>(Slot::kOperandA, dyt_size);
    for (int64_t i = 0; i < g.batch * G; ++i) image(i / G, i % G, buffer, dyt, partial, threads > 1);
  } else {
#pragma omp parallel num_threads(threads)
    {
      T* buffer = thread_buffer<T>(Slot::kOperandB, buffer_size);
      T* dyt = thread_buffer<T>(Slot::kOperandA, dyt_size);
      T* mine = partial + static_cast<size_t>(omp_get_thread_num()) * partial_size;
#pragma omp for schedule(static)
      for (int64_t i = 0; i < g.batch * G; ++i) image(i / G, i % G, buffer, dyt, mine, false);
    }
  }
  // dw[k][j][tap] = sum over threads of partial[.][group][j * taps + t][m].
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t k = 0; k < g.out_channels; ++k) {
    const int64_t gi = k / Kg, m = k % Kg;
    for (int64_t j = 0; j < Cg; ++j)
      for (int64_t t = 0; t < taps; ++t) {
        T sum = 0;
        for (int th = 0; th < threads; ++th)
          sum += partial[static_cast<size_t>(th) * partial_size +
                         static_cast<size_t>((gi * terms_pad + j * taps + t) * ld + m)];
        dw[(k * Cg + j) * taps + p.taps[static_cast<size_t>(t)]] = sum;
      }
  }
}

template void conv2d_shifted_forward<float>(const Conv2dGeometry&, const float*, const float*, const float*, float*);
template void conv2d_shifted_forward<double>(const Conv2dGeometry&, const double*, const double*, const double*,
                                             double*);
template void conv2d_shifted_backward_input<float>(const Conv2dGeometry&, const float*, const float*, float*);
template void conv2d_shifted_backward_input<double>(const Conv2dGeometry&, const double*, const double*, double*);
template void conv2d_shifted_backward_weight<float>(const Conv2dGeometry&, const float*, const float*, float*);
template void conv2d_shifted_backward_weight<double>(const Conv2dGeometry&, const double*, const double*, double*);

}  // namespace minidl
