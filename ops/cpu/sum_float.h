// The float32 sum of a contiguous run, in double where it matters: groups of
// 256 floats (16 lanes x 16 consecutive 16-float vectors) are added pairwise
// in float32 down to 16 lane values, each converted once to double and
// accumulated in 16 double lanes; leftover whole vectors, then single values,
// go into the double lanes directly; the lanes combine pairwise.
// Internal to ops/cpu/ (used by sum_span, ops/cpu/sum_span.h).
//
// Why: converting every float to double (the old sum_of<double>) was twice
// the vector work of PyTorch's float32 sum: 0.58x-0.82x its speed. Here there
// are (15 + 5) / 16 vector operations per loaded vector, near PyTorch's 1
// (groups of 4 or 8 vectors measured 10-30% slower).
//
// Error bound: each pairwise level of a group rounds once in float32, so a
// group's value is within ((1 + u)^4 - 1) * sum|x_group| ~ 4u sum|x_group| of
// its exact sum (u = 2^-24), whatever n is; the double accumulation adds at most
// (n / 256 + n_tail / 16 + 5) * 2^-53 * sum|x|. So |sum - exact| <= ~4u sum|x|
// before the one rounding of the result to float32, for every n. PyTorch's
// float32 cascade sum adds 16 or more terms in sequence in float32 on each of
// its levels: its worst-case bound is several times that.
//
// The order depends on n only (never on the thread count or the ISA): the
// AVX-512, AVX2 and portable versions give the same bits (tests check).
#pragma once

#include <cstdint>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace minidl::cpu {

constexpr int kSumLanes = 16;                          // double lanes, and floats per logical vector
constexpr int kSumGroupVecs = 16;                      // vectors added pairwise in float32 per group
constexpr int64_t kSumGroup = kSumLanes * kSumGroupVecs;  // 256 floats

// Software prefetch of the cache lines [p + kPrefetchAhead, + bytes): the
// amax/amin rows (ops/cpu/reduce.cpp) read faster from memory with it
// (4096x4096 float amax at 1 thread: 1.86 -> 1.21 ms with 8 KiB, 1.62 with
// 2 KiB; the hardware prefetcher alone falls behind). Past the end of the
// data it only fetches a neighbour's lines: prefetches never fault.
constexpr int kPrefetchAhead = 8192;
inline void prefetch_ahead(const void* p, int bytes) {
  for (int b = 0; b < bytes; b += 64) __builtin_prefetch(static_cast<const char*>(p) + kPrefetchAhead + b);
}

// The definition (any target); the vector versions below give the same bits.
inline double sum_floats_portable(const float* x, int64_t n) {
  double lane[kSumLanes] = {};
  const int64_t groups = n / kSumGroup;
  for (int64_t t = 0; t < groups; ++t) {
    float v[kSumGroupVecs][kSumLanes];
    for (int j = 0; j < kSumGroupVecs; ++j)
      for (int k = 0; k < kSumLanes; ++k) v[j][k] = x[t * kSumGroup + j * kSumLanes + k];
    for (int w = kSumGroupVecs / 2; w > 0; w /= 2)  // pairwise: (v0 + v1), (v2 + v3), ...
      for (int j = 0; j < w; ++j)
        for (int k = 0; k < kSumLanes; ++k) v[j][k] = v[2 * j][k] + v[2 * j + 1][k];
    for (int k = 0; k < kSumLanes; ++k) lane[k] += static_cast<double>(v[0][k]);
  }
  int64_t i = groups * kSumGroup;
  for (; i + kSumLanes <= n; i += kSumLanes)  // leftover whole vectors
    for (int k = 0; k < kSumLanes; ++k) lane[k] += static_cast<double>(x[i + k]);
  for (int k = 0; i < n; ++i, ++k) lane[k] += static_cast<double>(x[i]);  // the last values
  for (int w = kSumLanes / 2; w > 0; w /= 2)
    for (int k = 0; k < w; ++k) lane[k] += lane[k + w];
  return lane[0];
}

#if defined(__AVX512F__) || defined(__AVX2__)
// The vector load(p), after which p moves on by `step` floats through an
// empty asm the compiler cannot see into: the next load's address depends on
// this one's asm, which takes this load's value, so the loads of a group
// are issued in address order. Scheduled freely, GCC read each 1 KiB group
// from its end backwards and the sum ran at half the memory's speed (Zen 4,
// 1 thread, 64x256x28x28: 2.3-2.7 ms, 20 GB/s, against 1.26-1.32 ms in order
// and PyTorch's 1.22; the software prefetch that made up for part of it
// then only cost: 1.6-1.8 ms).
template <class V, class Load>
inline V load_in_order(const float*& p, int step, Load load) {
  V v = load(p);
  asm volatile("" : "+v"(v), "+r"(p));
  p += step;
  return v;
}
#endif

#if defined(__AVX512F__)
// Pairwise sum of the G consecutive 16-float vectors at p; p moves past them.
template <int G>
inline __m512 pairwise_vectors(const float*& p) {
  if constexpr (G == 1) {
    return load_in_order<__m512>(p, kSumLanes, [](const float* q) { return _mm512_loadu_ps(q); });
  } else {
    const __m512 a = pairwise_vectors<G / 2>(p);
    return _mm512_add_ps(a, pairwise_vectors<G / 2>(p));
  }
}

// Out of line: inlined into the global average pooling loop, the same
// instructions ran at half the speed (1.7 vs 0.9 ms on 64x256x28x28, the loop
// placed differently); a call per run costs a few ns.
// Halves by __builtin_shufflevector and the zero-masking convert, all lanes
// kept: the plain convert, extract and cast intrinsics warn in GCC 12
// (maybe-uninitialized: their undefined pass-through operand), and
// __builtin_convertvector is split into 256-bit pieces.
[[gnu::noinline]] inline double sum_floats(const float* x, int64_t n) {
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();  // lanes 0-7, 8-15
  auto add = [&](__m512 g) {
    lo = _mm512_add_pd(lo, _mm512_maskz_cvtps_pd(0xFF, __builtin_shufflevector(g, g, 0, 1, 2, 3, 4, 5, 6, 7)));
    hi = _mm512_add_pd(hi, _mm512_maskz_cvtps_pd(0xFF, __builtin_shufflevector(g, g, 8, 9, 10, 11, 12, 13, 14, 15)));
  };
  const int64_t groups = n / kSumGroup;
  for (const float* p = x; p < x + groups * kSumGroup;) add(pairwise_vectors<kSumGroupVecs>(p));
  int64_t i = groups * kSumGroup;
  for (; i + kSumLanes <= n; i += kSumLanes) add(_mm512_loadu_ps(x + i));
  // The last values into lanes 0, 1, ...; the others get +0, which changes no
  // lane (a lane is never -0: it starts at +0).
  if (i < n) add(_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << (n - i)) - 1), x + i));
  const __m512d s8 = lo + hi;  // the lanes' pairwise combination, as in the portable version
  const __m256d s4 = __builtin_shufflevector(s8, s8, 0, 1, 2, 3) + __builtin_shufflevector(s8, s8, 4, 5, 6, 7);
  const __m128d s2 = __builtin_shufflevector(s4, s4, 0, 1) + __builtin_shufflevector(s4, s4, 2, 3);
  return s2[0] + s2[1];
}
#elif defined(__AVX2__)
// Pairwise sum of G 8-float halves one logical vector (16 floats) apart,
// from p; p moves past them. A group is two of these, its low halves and
// then its high ones (both in address order; one tree over both spilled
// registers). (sum_floats out of line as in the AVX-512 version.)
template <int G>
inline __m256 pairwise_vectors(const float*& p) {
  if constexpr (G == 1) {
    return load_in_order<__m256>(p, kSumLanes, [](const float* q) { return _mm256_loadu_ps(q); });
  } else {
    const __m256 a = pairwise_vectors<G / 2>(p);
    return _mm256_add_ps(a, pairwise_vectors<G / 2>(p));
  }
}

[[gnu::noinline]] inline double sum_floats(const float* x, int64_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;  // lanes 0-3, 4-7, 8-11, 12-15
  auto add = [&](__m256 g0, __m256 g1) {
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(g0)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(g0, 1)));
    a2 = _mm256_add_pd(a2, _mm256_cvtps_pd(_mm256_castps256_ps128(g1)));
    a3 = _mm256_add_pd(a3, _mm256_cvtps_pd(_mm256_extractf128_ps(g1, 1)));
  };
  const int64_t groups = n / kSumGroup;
  for (int64_t t = 0; t < groups; ++t) {
    const float *lo = x + t * kSumGroup, *hi = lo + 8;
    const __m256 g0 = pairwise_vectors<kSumGroupVecs>(lo);
    add(g0, pairwise_vectors<kSumGroupVecs>(hi));
  }
  int64_t i = groups * kSumGroup;
  for (; i + kSumLanes <= n; i += kSumLanes) add(_mm256_loadu_ps(x + i), _mm256_loadu_ps(x + i + 8));
  if (i < n) {  // the last values into lanes 0, 1, ...; +0 elsewhere (see the AVX-512 version)
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i rest = _mm256_set1_epi32(static_cast<int>(n - i));
    add(_mm256_maskload_ps(x + i, _mm256_cmpgt_epi32(rest, lane)),
        _mm256_maskload_ps(x + i + 8, _mm256_cmpgt_epi32(rest, _mm256_add_epi32(lane, _mm256_set1_epi32(8)))));
  }
  const __m256d s4 = _mm256_add_pd(_mm256_add_pd(a0, a2), _mm256_add_pd(a1, a3));  // the portable version's order
  const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
}
#else
inline double sum_floats(const float* x, int64_t n) { return sum_floats_portable(x, n); }
#endif

}  // namespace minidl::cpu
