// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC'11; the generator behind cuRAND's curand_Philox4x32_10 and PyTorch's
// CUDA dropout): a counter-based generator, so element i's random number is
// a pure function of (seed, i) and the same seed gives the same dropout mask
// on every run, whatever the launch geometry. Shared by the CUDA kernels and
// the CPU tests (known-answer vectors of Random123 in
// tests/test_cuda_kernel_math.cpp). Plain C++ with MINIDL_HOST_DEVICE.
#pragma once

#include <cstdint>

#include "minidl/core/half.h"  // MINIDL_HOST_DEVICE

namespace minidl::cuda_math {

struct Philox4x32 {
  uint32_t v[4];
};

MINIDL_HOST_DEVICE inline void mulhilo32(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// Ten rounds; the key is bumped by the Weyl constants before rounds 2..10.
MINIDL_HOST_DEVICE inline Philox4x32 philox4x32_10(Philox4x32 ctr, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kW0;
      key1 += kW1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo32(kM0, ctr.v[0], hi0, lo0);
    mulhilo32(kM1, ctr.v[2], hi1, lo1);
    ctr = Philox4x32{{hi1 ^ ctr.v[1] ^ key0, lo1, hi0 ^ ctr.v[3] ^ key1, lo0}};
  }
  return ctr;
}

// The i-th 32-bit random number of stream `seed`: block i / 4 of the counter
// (its 64 bits in the first two words), word i % 4 of the output.
MINIDL_HOST_DEVICE inline uint32_t philox_u32(uint64_t seed, uint64_t i) {
  const uint64_t block = i / 4;
  const Philox4x32 out = philox4x32_10(
      Philox4x32{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u}},
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return out.v[i % 4];
}

// Uniform in [0, 1): u / 2^32 (exact in double).
MINIDL_HOST_DEVICE inline double uniform_from_u32(uint32_t u) { return static_cast<double>(u) * 0x1p-32; }

// Dropout's mask value of element i: 1/(1-p) when kept (uniform >= p, as the
// CPU kernel), else 0. The same for every dtype.
MINIDL_HOST_DEVICE inline double dropout_mask_value(uint64_t seed, uint64_t i, double p) {
  return uniform_from_u32(philox_u32(seed, i)) >= p ? 1.0 / (1.0 - p) : 0.0;
}

}  // namespace minidl::cuda_math
