// SIMD vectors for the conv2d kernels (GCC vector extensions, the widest the
// target has), shared by the conv2d paths in ops/cpu/. Internal to ops/cpu/.
#pragma once

#include <cstdint>
#include <cstring>

namespace minidl::conv2d_simd {

#if defined(__AVX512F__)
constexpr int kVecBytes = 64;
constexpr int kAccRegs = 24;  // accumulator registers of a micro-tile (of 32)
#elif defined(__AVX__)
constexpr int kVecBytes = 32;
constexpr int kAccRegs = 12;  // (of 16)
#else
constexpr int kVecBytes = 16;
constexpr int kAccRegs = 12;
#endif

template <class T>
struct VecOf {
  typedef T type __attribute__((vector_size(kVecBytes)));
};
template <class T>
using Vec = typename VecOf<T>::type;
template <class T>
constexpr int64_t kLanes = kVecBytes / sizeof(T);

template <class T>
inline Vec<T> load(const T* p) {
  Vec<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
// x in every lane. (x - 0 is x for every x, so this compiles to a plain
// broadcast, often folded into the FMA; 0 + x is not, for x = -0, and costs an add.)
template <class T>
inline Vec<T> broadcast(T x) {
  return x - Vec<T>{};
}
template <class T>
inline void store(T* p, Vec<T> v) {
  std::memcpy(p, &v, sizeof v);
}
// Keeps v in a register from here on. With AVX2's 16 registers a micro-tile
// of 12 accumulators leaves exactly 4 for its 3 loaded vectors and the
// broadcast, and GCC then folds the loads into the FMAs as memory operands:
// 12 loads per 12 FMAs instead of 3. On a Zen 3 that ran the 4 x 24 tile at
// half its speed (1 thread, L1-resident: 37-44 against 82-88 GFLOP/s). An
// empty asm that may change v makes each load happen once, into a register.
template <class V>
[[gnu::always_inline]] inline void in_register(V& v) {
#if defined(__AVX__) && !defined(__AVX512F__)
  asm("" : "+x"(v));
#else
  (void)v;
#endif
}

}  // namespace minidl::conv2d_simd
