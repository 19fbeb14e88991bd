// array_loop: an elementwise CPU kernel written as one Eigen array expression,
// run over the rows for_each_row (ops/cpu/strided_loop.h) gives.
//
//   array_loop<T>(out, [](const auto& x) { return x.exp(); }, x);
//   array_loop<T>(dx, [](const auto& g, const auto& y) { return g * y; }, grad, y);
//
// The lambda is generic: a contiguous row reaches it as an Eigen::Map of an
// array (Eigen evaluates it with packet math: AVX-512/AVX2 exp, log, tanh...),
// a strided or broadcast row (stride 0) as a Map with a runtime InnerStride
// (Eigen falls back to its scalar functors there: correct, slower, rare).
// Every operand has out's shape and type T.
//
// Results do not depend on the thread count: Eigen computes the unaligned
// head and the tail of each row with scalar math and the rest with packets,
// which may differ in the last bit, so where a row starts and ends matters.
// for_each_row keeps those places fixed: whole rows, or one long row cut at
// fixed 16384-element chunk boundaries, whatever the number of threads. A
// strided view and its contiguous copy may differ within the ops' error bound
// (tests/test_vec_math.cpp).
#pragma once

#include <Eigen/Core>
#include <array>
#include <cstdint>
#include <utility>

#include "minidl/ops/cpu/strided_loop.h"

namespace minidl {

template <class T, class F, class... In>
void array_loop(const Tensor& out, F f, const In&... in) {
  constexpr size_t N = 1 + sizeof...(In);
  using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
  using Stride = Eigen::InnerStride<>;
  T* o = static_cast<T*>(out.raw_data());
  const std::array<const T*, N - 1> src{static_cast<const T*>(in.raw_data())...};
  for_each_row<N>(out.shape(), {out.strides(), in.strides()...},
                  [&](const std::array<int64_t, N>& off, int64_t n, const std::array<int64_t, N>& step) {
                    bool contiguous = true;
                    for (int64_t s : step) contiguous = contiguous && s == 1;
                    [&]<size_t... I>(std::index_sequence<I...>) {
                      if (contiguous) {
                        Eigen::Map<Array>(o + off[0], n) = f(Eigen::Map<const Array>(src[I] + off[I + 1], n)...);
                      } else {
                        Eigen::Map<Array, 0, Stride>(o + off[0], n, Stride(step[0])) =
                            f(Eigen::Map<const Array, 0, Stride>(src[I] + off[I + 1], n, Stride(step[I + 1]))...);
                      }
                    }(std::make_index_sequence<N - 1>{});
                  });
}

}  // namespace minidl
