// Division by a run-time constant without a divide instruction: a GPU has no
// integer divider, and a 64-bit `/` or `%` compiles to a ~100-instruction
// routine, which made the normalization kernels' index math (three 64-bit
// divisions per element) cost more than their memory traffic on an H100.
// IntDivider precomputes a magic multiplier (Granlund & Montgomery; the form
// of PyTorch's IntDivider<unsigned>): for 0 <= n < 2^31 and 1 <= d < 2^31,
//   n / d == (umulhi(n, m) + n) >> s.
// Callers check that their indices fit (fits_int_divider) and keep a 64-bit
// path otherwise. Plain C++ with MINIDL_HOST_DEVICE, tested on the CPU.
#pragma once

#include <cstdint>

#include "minidl/core/half.h"  // MINIDL_HOST_DEVICE

namespace minidl::cuda_math {

// Largest dividend and divisor IntDivider takes.
inline constexpr int64_t kIntDividerLimit = int64_t{1} << 31;

struct IntDivider {
  uint32_t divisor = 1, magic = 0, shift = 0;

  IntDivider() = default;
  // d in [1, 2^31): the caller checks with fits_int_divider (0 would divide by zero here).
  MINIDL_HOST_DEVICE explicit IntDivider(int64_t d) : divisor(static_cast<uint32_t>(d)) {
    while (shift < 32 && (uint64_t{1} << shift) < divisor) ++shift;
    magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - divisor)) / divisor + 1);
  }

  MINIDL_HOST_DEVICE uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t t = __umulhi(n, magic);
#else
    const uint32_t t = static_cast<uint32_t>((static_cast<uint64_t>(n) * magic) >> 32);
#endif
    return (t + n) >> shift;  // t + n < 2^32 since n < 2^31
  }
  MINIDL_HOST_DEVICE uint32_t mod(uint32_t n) const { return n - div(n) * divisor; }
};

// Whether every index below `numel` and every divisor (each <= numel or 1)
// is in IntDivider's range.
inline bool fits_int_divider(int64_t numel) { return numel < kIntDividerLimit; }

}  // namespace minidl::cuda_math
