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

}  // namespace minidl::conv2d_simd
