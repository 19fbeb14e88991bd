// The vectorized sum every CPU reduction of a contiguous run shares
// (ops/cpu/reduce.cpp, global average pooling in ops/cpu/pooling.cpp; the
// softmax and class-loss kernels' float64 sums in ops/cpu/softmax_rows.h use
// sum_of directly). Internal to ops/cpu/.
#pragma once

#include <cstdint>
#include <type_traits>

#include "minidl/ops/cpu/sum_float.h"

namespace minidl::cpu {

// Sum of value(0) ... value(n - 1) in Acc with 32 independent accumulators:
// enough adds in flight to hide their latency (4 AVX-512 or 8 AVX2 vectors of
// doubles), so the loop runs at load speed (8 accumulators were one vector,
// latency-bound). Combined pairwise; a little more accurate than one running
// sum, never less. The order depends on n only.
template <class Acc, class Value>
Acc sum_of(int64_t n, Value value) {
  constexpr int kLanes = 32;
  Acc lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) lane[k] += static_cast<Acc>(value(i + k));
  for (int k = 0; i < n; ++i, ++k) lane[k] += static_cast<Acc>(value(i));  // the tail, still independent adds
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int k = 0; k < w; ++k) lane[k] += lane[k + w];
  return lane[0];
}

// Sum of x[0, n) in Acc (double for floating types, int64 for integers).
// float32 into double goes through sum_floats (ops/cpu/sum_float.h: float32
// pairwise groups, then double; within ~4 float32 ulps of sum |x|). Integer
// sums wrap around as PyTorch's (two's complement): added in the unsigned
// type, where overflow is defined.
template <class Acc, class T>
Acc sum_span(const T* x, int64_t n) {
  if constexpr (std::is_same_v<Acc, double> && std::is_same_v<T, float>)
    return sum_floats(x, n);
  else if constexpr (std::is_integral_v<Acc>)
    return static_cast<Acc>(sum_of<std::make_unsigned_t<Acc>>(
        n, [x](int64_t i) { return static_cast<std::make_unsigned_t<Acc>>(static_cast<Acc>(x[i])); }));
  else
    return sum_of<Acc>(n, [x](int64_t i) { return x[i]; });
}

}  // namespace minidl::cpu
