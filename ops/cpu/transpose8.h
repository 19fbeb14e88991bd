// 8 x 8 transposes of float blocks through registers (GCC vector
// extensions; __builtin_shufflevector: GCC >= 12 and clang), for the packing
// of the conv2d GEMM operands in ops/cpu/. Internal to ops/cpu/.
#pragma once

#include <cstdint>
#include <cstring>

namespace minidl::transpose8 {

typedef float F8 __attribute__((vector_size(32)));
typedef int32_t I8 __attribute__((vector_size(32)));

// The first two shuffle stages of a transpose: the rows r[0..3] give u[k]
// (k < 4) holding columns k and k + 4 of the four rows.
inline void columns_of_four(const F8* r, F8* u) {
  F8 t[4];  // rows (0, 1) and (2, 3) interleaved
  for (int k = 0; k < 4; k += 2) {
    t[k] = __builtin_shufflevector(r[k], r[k + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[k + 1] = __builtin_shufflevector(r[k], r[k + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int h = 0; h < 2; ++h) {
    u[2 * h] = __builtin_shufflevector(t[h], t[h + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[2 * h + 1] = __builtin_shufflevector(t[h], t[h + 2], 2, 3, 10, 11, 6, 7, 14, 15);
  }
}

// dst(k)[r] = r_[r][k]: the rows r_[0..7] stored as columns, column k at
// dst(k) (8 floats).
template <class Dst>
inline void store_columns_at(const F8* r, Dst dst) {
  F8 u[8];  // u[k] (k < 4): columns k and k + 4 of rows 0-3, u[k + 4] of rows 4-7
  columns_of_four(r, u);
  columns_of_four(r + 4, u + 4);
  for (int k = 0; k < 4; ++k) {
    const F8 lo = __builtin_shufflevector(u[k], u[k + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    const F8 hi = __builtin_shufflevector(u[k], u[k + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    std::memcpy(dst(k), &lo, sizeof(F8));
    std::memcpy(dst(k + 4), &hi, sizeof(F8));
  }
}

// d[k * ldd + r] = r_[r][k]: the rows r_[0..7] stored as columns.
inline void store_columns(const F8* r, float* d, int64_t ldd) {
  store_columns_at(r, [&](int k) { return d + k * ldd; });
}

// s[0], s[Step], ..., s[7 * Step] (Step 1 or 2: 8 or 16 floats read).
template <int Step>
inline F8 load_run(const float* s) {
  static_assert(Step == 1 || Step == 2);
  F8 v;
  std::memcpy(&v, s, sizeof v);
  if constexpr (Step == 2) {
    F8 hi;
    std::memcpy(&hi, s + 8, sizeof hi);
    v = __builtin_shufflevector(v, hi, 0, 2, 4, 6, 8, 10, 12, 14);
  }
  return v;
}

// d[k * ldd + r] = s[r * lds + k * Step] for r, k < 8.
template <int Step = 1>
inline void block(const float* s, int64_t lds, float* d, int64_t ldd) {
  F8 r[8];
  for (int k = 0; k < 8; ++k) r[k] = load_run<Step>(s + k * lds);
  store_columns(r, d, ldd);
}

// d[k * 4 + r] = s[r * lds + k] for r < 4, k < 8: 4 rows as 8 columns of 4.
inline void block4(const float* s, int64_t lds, float* d) {
  F8 r[4], u[4];
  for (int k = 0; k < 4; ++k) std::memcpy(&r[k], s + k * lds, sizeof(F8));
  columns_of_four(r, u);
  const F8 out[4] = {__builtin_shufflevector(u[0], u[1], 0, 1, 2, 3, 8, 9, 10, 11),  // columns 0, 1
                     __builtin_shufflevector(u[2], u[3], 0, 1, 2, 3, 8, 9, 10, 11),
                     __builtin_shufflevector(u[0], u[1], 4, 5, 6, 7, 12, 13, 14, 15),  // columns 4, 5
                     __builtin_shufflevector(u[2], u[3], 4, 5, 6, 7, 12, 13, 14, 15)};
  std::memcpy(d, out, sizeof out);
}

// d[k * ldd + r] = s[r * lds + o[k]] (0 where o[k] < 0) for r, k < 8, where
// the valid offsets form at most two runs of step Step, the first from lane
// 0, the second from some later lane. Each row is read as whole runs from
// both bases, which must lie in [0, limit - 8 * Step] (limit: the floats
// readable from s + 7 * lds on). False (nothing written) otherwise.
template <int Step>
inline bool runs(const float* s, int64_t lds, const int64_t* o, int64_t limit, float* d, int64_t ldd) {
  // One run (the common case), checked first.
  bool one = o[0] >= 0 && o[0] + 8 * Step <= limit;
  for (int k = 1; k < 8 && one; ++k) one = o[k] == o[0] + Step * k;
  if (one) {
    block<Step>(s + o[0], lds, d, ldd);
    return true;
  }
  int64_t base[2] = {-1, -1};
  int run = 0, second = 0, valid = 0;  // bit k: lane k from the second run, in x
  for (int k = 0; k < 8; ++k) {
    if (o[k] < 0) continue;
    valid |= 1 << k;
    if (base[run] < 0) base[run] = o[k] - Step * k;
    if (o[k] != base[run] + Step * k) {
      if (run == 1) return false;
      run = 1;
      base[1] = o[k] - Step * k;
    }
    if (base[run] < 0 || base[run] + 8 * Step > limit) return false;
    second |= run << k;
  }
  if (valid == 0) {  // all padding: nothing to read
    for (int k = 0; k < 8; ++k) std::memset(d + k * ldd, 0, sizeof(F8));
    return true;
  }
  if (run == 0) base[1] = base[0];
  const I8 bits = {1, 2, 4, 8, 16, 32, 64, 128};
  const I8 second_v = (bits & second) != 0, valid_v = (bits & valid) != 0;
  F8 r[8];
  for (int k = 0; k < 8; ++k) {
    const I8 a = reinterpret_cast<I8>(load_run<Step>(s + k * lds + base[0]));
    const I8 b = reinterpret_cast<I8>(load_run<Step>(s + k * lds + base[1]));
    r[k] = reinterpret_cast<F8>(((a & ~second_v) | (b & second_v)) & valid_v);
  }
  store_columns(r, d, ldd);
  return true;
}

}  // namespace minidl::transpose8
