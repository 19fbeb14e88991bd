// CPU conversions to and from Float16/BFloat16: the contiguous loops
// (vectorized with F16C / AVX-512 / AVX-512 BF16 where the compiler targets
// them, with a scalar fallback giving the same bits) and the copy_ kernel
// for any pair of dtypes where one side is 16-bit. ops/copy.cpp calls
// copy_half_cpu; everything else converts through minidl::convert<T>.
#pragma once

#include <cstdint>
#include <vector>

#include "minidl/core/half.h"
#include "minidl/core/tensor.h"

namespace minidl {

// dst and src have the same shape (src already broadcast), any strides; at
// least one of them is Float16 or BFloat16. Every conversion goes through
// float32, as PyTorch's does: double -> float -> half, half -> float -> int64.
void copy_half_cpu(const Tensor& dst, const Tensor& src);

// One implementation of the four float32 <-> 16-bit row conversions.
struct HalfConvertKernels {
  const char* name;  // "scalar", "avx2+f16c", "avx512", "avx512+bf16"
  void (*f32_to_f16)(const float* in, Half* out, int64_t n);
  void (*f16_to_f32)(const Half* in, float* out, int64_t n);
  void (*f32_to_bf16)(const float* in, BFloat16* out, int64_t n);
  void (*bf16_to_f32)(const BFloat16* in, float* out, int64_t n);
};

// The one copy_half_cpu uses: the widest this build was compiled for.
const HalfConvertKernels& half_convert_kernels();
// Every implementation compiled into this build, scalar first, so tests can
// check each against PyTorch on a CPU that has them all.
std::vector<HalfConvertKernels> all_half_convert_kernels();

}  // namespace minidl
