// Half (IEEE binary16) and BFloat16 (the top 16 bits of a float32): storage
// element types. Kernels compute in float32 and round at op boundaries, so
// these structs only convert; they have no arithmetic on purpose, so that a
// kernel that was not written for them fails to compile instead of silently
// computing in 16 bits.
//
// Conversions (the same bits as PyTorch's Tensor.to on CPU, checked on every
// bit pattern by tests/test_half.cpp):
//   float -> Half/BFloat16   round to nearest, ties to even; subnormals exact;
//                            overflow gives inf; NaN stays NaN, quiet, with its
//                            sign and the top payload bits (what x86's
//                            vcvtps2ph and vcvtneps2bf16 do).
//   Half/BFloat16 -> float   exact; a NaN comes back quiet (bfloat16: as is).
//   double, integers -> Half/BFloat16 go through float first, as PyTorch does
//                            (c10::Half has only a float constructor): a double
//                            just off a tie can round twice; we match that.
//
// Integer bit manipulation only (no float tricks that depend on FTZ/DAZ or
// -ffast-math), so host and CUDA device code share the exact same math.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#define MINIDL_HOST_DEVICE __host__ __device__
#else
#define MINIDL_HOST_DEVICE
#endif

namespace minidl {

namespace half_bits {

MINIDL_HOST_DEVICE inline uint32_t from_float(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

MINIDL_HOST_DEVICE inline float to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// float32 bits -> binary16 bits.
MINIDL_HOST_DEVICE inline uint16_t f32_to_f16(uint32_t x) {
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7FFFFFFFu;
  if (x > 0x7F800000u) return sign | 0x7E00u | ((x >> 13) & 0x3FFu);  // NaN: quiet, top payload
  if (x >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 (the tie above 65504) and inf
  if (x >= 0x38800000u) {                       // a normal float16 (>= 2^-14)
    // Rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits
    // to nearest even; a carry out of the mantissa bumps the exponent, as it should.
    const uint32_t r = x - (112u << 23) + 0xFFFu + ((x >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  // A float16 subnormal (or zero): units of 2^-24. The float's value is
  // m * 2^(e - 150); k = m >> (126 - e), rounded to nearest even.
  const uint32_t e = x >> 23;
  if (e < 102) return sign;  // below 2^-25 (float subnormals included): rounds to 0
  const uint32_t m = (x & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - e;  // 14..24
  uint32_t k = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (k & 1u))) ++k;  // k may become 0x400, the smallest normal
  return static_cast<uint16_t>(sign | k);
}

// binary16 bits -> float32 bits (exact).
MINIDL_HOST_DEVICE inline uint32_t f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu;
  uint32_t m = h & 0x3FFu;
  if (e == 0x1F) return sign | 0x7F800000u | (m << 13) | (m ? 0x400000u : 0u);  // inf; NaN made quiet
  if (e != 0) return sign | ((e + 112u) << 23) | (m << 13);
  if (m == 0) return sign;
  // Subnormal m * 2^-24: normalize so the leading 1 is at bit 10.
  uint32_t exp = 113;  // 127 - 14
  while (!(m & 0x400u)) {
    m <<= 1;
    --exp;
  }
  return sign | (exp << 23) | ((m & 0x3FFu) << 13);
}

// float32 bits -> bfloat16 bits: the top half, rounded to nearest even.
MINIDL_HOST_DEVICE inline uint16_t f32_to_bf16(uint32_t x) {
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN: quiet
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);  // a carry may give inf: right
}

MINIDL_HOST_DEVICE inline uint32_t bf16_to_f32(uint16_t b) { return static_cast<uint32_t>(b) << 16; }

}  // namespace half_bits

// Trivial (no member initializer), like float: a CUDA __shared__ array of
// them needs that, and empty() leaves the bits unset anyway.
struct Half {
  uint16_t x;

  Half() = default;
  MINIDL_HOST_DEVICE explicit Half(float f) : x(half_bits::f32_to_f16(half_bits::from_float(f))) {}
  MINIDL_HOST_DEVICE explicit operator float() const { return half_bits::to_float(half_bits::f16_to_f32(x)); }
  MINIDL_HOST_DEVICE static Half from_bits(uint16_t bits) {
    Half h;
    h.x = bits;
    return h;
  }
};

struct BFloat16 {
  uint16_t x;

  BFloat16() = default;
  MINIDL_HOST_DEVICE explicit BFloat16(float f) : x(half_bits::f32_to_bf16(half_bits::from_float(f))) {}
  MINIDL_HOST_DEVICE explicit operator float() const { return half_bits::to_float(half_bits::bf16_to_f32(x)); }
  MINIDL_HOST_DEVICE static BFloat16 from_bits(uint16_t bits) {
    BFloat16 b;
    b.x = bits;
    return b;
  }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2, "Half and BFloat16 must be 2 bytes");

template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// static_cast that also knows Half and BFloat16, for kernels templated over
// element types (copy, fill, factories): anything -> half goes through float,
// half -> anything goes through float.
template <class To, class From>
MINIDL_HOST_DEVICE inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (is_half_v<From>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (is_half_v<To>) {
    return To(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace minidl
