// Float16/BFloat16 conversion loops and the copy_ kernel between a 16-bit
// dtype and any other. Every vector path gives the scalar path's bits
// (core/half.h), which are PyTorch's: tests/test_half.cpp runs each
// implementation compiled in over a fixture of torch's results.
//
//   f32 -> f16   F16C vcvtps2ph (8 or 16 lanes): rounds to nearest even,
//                keeps subnormals and NaN payloads the way half_bits does.
//   f16 -> f32   vcvtph2ps: exact; NaN made quiet, as half_bits does.
//   f32 -> bf16  integer round-to-nearest-even on the bits (AVX2/AVX-512),
//                or AVX-512 BF16 vcvtneps2bf16, which flushes float32
//                subnormals to zero: those lanes are redone with the integer
//                rounding, so the result keeps them as PyTorch does.
//   bf16 -> f32  a 16-bit shift.
#include "minidl/ops/cpu/convert_half.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#if defined(__AVX2__) || defined(__AVX512F__)
// GCC 12 reports its own _mm512_undefined_* inside AVX-512 intrinsics as
// "may be used uninitialized" (GCC bug 105593): not our code, and harmless.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

#include "minidl/ops/cpu/strided_loop.h"

namespace minidl {
namespace {

// ---- scalar: core/half.h's bit manipulation -------------------------------------

void f32_to_f16_scalar(const float* in, Half* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Half(in[i]);
}
void f16_to_f32_scalar(const Half* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
}
void f32_to_bf16_scalar(const float* in, BFloat16* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = BFloat16(in[i]);
}
void bf16_to_f32_scalar(const BFloat16* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
}

// Each vector loop leaves the last n % lanes elements to the scalar loop.
#if defined(__AVX2__) || defined(__AVX512F__)
constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
#endif

// ---- AVX2 + F16C: 8 lanes ------------------------------------------------------

#if defined(__AVX2__) && defined(__F16C__)
void f32_to_f16_avx2(const float* in, Half* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), kRound));
  f32_to_f16_scalar(in + i, out + i, n - i);
}

void f16_to_f32_avx2(const Half* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  f16_to_f32_scalar(in + i, out + i, n - i);
}

// bits + 0x7FFF + (bit 16), shifted down: round to nearest even on the 16
// dropped bits (a carry into the exponent, up to inf, is the right result).
void f32_to_bf16_avx2(const float* in, BFloat16* out, int64_t n) {
  const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7FFF), quiet = _mm256_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(in + i);
    const __m256i x = _mm256_castps_si256(v);
    const __m256i top = _mm256_srli_epi32(x, 16);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, bias), _mm256_and_si256(top, one)), 16);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(top, quiet), nan);
    // packus interleaves the two 128-bit halves; qwords 0 and 2 hold lanes 0-3 and 4-7.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(packed));
  }
  f32_to_bf16_scalar(in + i, out + i, n - i);
}

void bf16_to_f32_avx2(const BFloat16* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  bf16_to_f32_scalar(in + i, out + i, n - i);
}
#endif

// ---- AVX-512: 16 lanes ---------------------------------------------------------

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
void f32_to_f16_avx512(const float* in, Half* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtps_ph(_mm512_loadu_ps(in + i), kRound));
  f32_to_f16_scalar(in + i, out + i, n - i);
}

void f16_to_f32_avx512(const Half* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i))));
  f16_to_f32_scalar(in + i, out + i, n - i);
}

// The integer rounding of f32_to_bf16_avx2 on 16 lanes, NaN lanes not fixed.
inline __m512i bf16_round_bits(__m512i x) {
  const __m512i rounding = _mm512_add_epi32(_mm512_set1_epi32(0x7FFF),
                                            _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1)));
  return _mm512_srli_epi32(_mm512_add_epi32(x, rounding), 16);
}

void f32_to_bf16_avx512(const float* in, BFloat16* out, int64_t n) {
  const __m512i quiet = _mm512_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(in + i);
    const __m512i x = _mm512_castps_si512(v);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512i r = _mm512_mask_mov_epi32(bf16_round_bits(x), nan, _mm512_or_si512(_mm512_srli_epi32(x, 16), quiet));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtepi32_epi16(r));
  }
  f32_to_bf16_scalar(in + i, out + i, n - i);
}

void bf16_to_f32_avx512(const BFloat16* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
    _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
  bf16_to_f32_scalar(in + i, out + i, n - i);
}

#if defined(__AVX512BF16__)
void f32_to_bf16_avx512bf16(const float* in, BFloat16* out, int64_t n) {
  const __m512i exponent = _mm512_set1_epi32(0x7F800000), mantissa = _mm512_set1_epi32(0x007FFFFF);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(in + i);
    const __m256bh b = _mm512_cvtneps_pbh(v);
    __m256i r;
    std::memcpy(&r, &b, sizeof r);
    const __m512i x = _mm512_castps_si512(v);
    const __mmask16 subnormal = _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(x, exponent), x, mantissa);
    if (subnormal) r = _mm256_mask_blend_epi16(subnormal, r, _mm512_cvtepi32_epi16(bf16_round_bits(x)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), r);
  }
  f32_to_bf16_scalar(in + i, out + i, n - i);
}
#endif
#endif

std::vector<HalfConvertKernels> make_kernels() {
  std::vector<HalfConvertKernels> k;
  k.push_back({"scalar", f32_to_f16_scalar, f16_to_f32_scalar, f32_to_bf16_scalar, bf16_to_f32_scalar});
#if defined(__AVX2__) && defined(__F16C__)
  k.push_back({"avx2+f16c", f32_to_f16_avx2, f16_to_f32_avx2, f32_to_bf16_avx2, bf16_to_f32_avx2});
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  k.push_back({"avx512", f32_to_f16_avx512, f16_to_f32_avx512, f32_to_bf16_avx512, bf16_to_f32_avx512});
#if defined(__AVX512BF16__)
  k.push_back({"avx512+bf16", f32_to_f16_avx512, f16_to_f32_avx512, f32_to_bf16_avx512bf16, bf16_to_f32_avx512});
#endif
#endif
  return k;
}

// ---- copy_ ---------------------------------------------------------------------

template <class T>
void to_float(const T* in, float* out, int64_t n) {
  if constexpr (std::is_same_v<T, Half>) {
    half_convert_kernels().f16_to_f32(in, out, n);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    half_convert_kernels().bf16_to_f32(in, out, n);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
  }
}

template <class T>
void from_float(const float* in, T* out, int64_t n) {
  if constexpr (std::is_same_v<T, Half>) {
    half_convert_kernels().f32_to_f16(in, out, n);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    half_convert_kernels().f32_to_bf16(in, out, n);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(in[i]);
  }
}

template <class D, class S>
void convert_contiguous(const S* in, D* out, int64_t n) {
  if constexpr (std::is_same_v<D, S>) {
    std::memcpy(out, in, static_cast<size_t>(n) * sizeof(D));  // bit for bit, NaN payloads too
  } else if constexpr (std::is_same_v<S, float>) {
    from_float(in, out, n);
  } else if constexpr (std::is_same_v<D, float>) {
    to_float(in, out, n);
  } else {  // through a float32 block on the stack, as PyTorch converts
    constexpr int64_t kBlock = 1024;
    float buf[kBlock];
    for (int64_t k = 0; k < n; k += kBlock) {
      const int64_t m = std::min(kBlock, n - k);
      to_float(in + k, buf, m);
      from_float(buf, out + k, m);
    }
  }
}

template <class D, class S>
void copy_typed(const Tensor& dst, const Tensor& src) {
  copy_strided<D, S>(dst, src, [](const S* i, D* o, int64_t n) { convert_contiguous(i, o, n); },
                     [](S x) { return convert<D>(x); });
}

}  // namespace

const HalfConvertKernels& half_convert_kernels() {
  static const HalfConvertKernels widest = make_kernels().back();
  return widest;
}

std::vector<HalfConvertKernels> all_half_convert_kernels() { return make_kernels(); }

void copy_half_cpu(const Tensor& dst, const Tensor& src) {
  MINIDL_DISPATCH_ALL_AND_HALF(dst.dtype(), "copy_", [&] {
    using D = scalar_t;
    MINIDL_DISPATCH_ALL_AND_HALF(src.dtype(), "copy_", [&] {
      using S = scalar_t;
      if constexpr (is_half_v<D> || is_half_v<S>) {
        copy_typed<D, S>(dst, src);
      } else {
        MINIDL_ASSERT(false, "copy_half_cpu: neither ", dtype_name(dst.dtype()), " nor ",
                      dtype_name(src.dtype()), " is a 16-bit dtype");
      }
    });
  });
}

}  // namespace minidl
