// Float32Compute: runs a float32 CPU kernel on float16/bfloat16 tensors, the
// one mechanism behind every CPU op that accepts the 16-bit types (DESIGN.md
// "Mixed precision": compute in float32, round at op boundaries).
//
//   conv2d_forward_stub.set(DeviceType::CPU, Float32Compute<conv2d_forward_cpu, 4>::run);
//
// The wrapper has the kernel's signature. When no tensor argument is 16-bit it
// calls the kernel as is. Otherwise each 16-bit tensor argument is replaced by
// a float32 tensor with the same shape and strides (over a float32 copy of the
// storage span the view reaches, so kernels that address memory relative to a
// base pointer see the same layout), the float32 kernel runs, and the
// arguments listed as outputs (indices into the argument list) are rounded back
// into the caller's 16-bit tensors (nearest even, as Tensor::to does). Outputs
// are converted in as well, so kernels that accumulate into them stay right.
// Tensors of other dtypes (float32 weights next to a bfloat16 input, int64
// indices, float64 statistics) pass through untouched.
//
// Conversions use the vectorized f32<->16-bit loops of ops/cpu/convert_half.cpp
// through the device's copy kernel, and temporaries are allocated on the
// tensor's device, so the test device (which mirrors the CPU kernels) never
// touches CPU storage. Cost: one extra pass over each operand and a float32
// temporary of it. conv2d, linear and matmul on bfloat16 skip it where the
// CPU has AVX512-BF16: they read bfloat16 directly (ops/cpu/bf16_kernels.h).
#pragma once

#include <initializer_list>
#include <tuple>
#include <type_traits>
#include <utility>

#include "minidl/core/tensor.h"

namespace minidl::cpu {

bool is_reduced_tensor(const Tensor& t);  // defined and float16/bfloat16
// A float32 tensor with t's shape and strides over a float32 copy of the
// storage span t reaches (on t's device).
Tensor widen_to_float32(const Tensor& t);
// dst (16-bit) = wide (float32, dst's shape), rounded.
void round_into(const Tensor& dst, const Tensor& wide);

// Kernels that skip Float32Compute read and write 16-bit tensors themselves,
// computing in float32 and rounding each output once (conv2d's Winograd
// passes, conv3d). They apply when the first tensor is 16-bit and every
// defined one has its dtype and lives in CPU-addressable memory.
bool same_reduced_on_cpu(std::initializer_list<const Tensor*> tensors);
// f(BFloat16{}) or f(Half{}) for a 16-bit dtype.
template <class F>
void dispatch_reduced(DType dtype, F f) {
  if (dtype == kBFloat16) f(BFloat16{});
  else f(Half{});
}

namespace detail {

template <class A>
constexpr bool is_tensor_arg = std::is_same_v<std::remove_cvref_t<A>, Tensor>;

template <class A>
bool reduced_arg(const A& a) {
  if constexpr (is_tensor_arg<A>) return is_reduced_tensor(a);
  else return false;
}

// One argument of the wrapped call: a widened tensor, or the argument itself.
template <class A, bool IsTensor = is_tensor_arg<A>>
struct Held {
  A value;
  explicit Held(A a) : value(static_cast<A>(a)) {}
  A get() { return static_cast<A>(value); }
};
template <class A>
struct Held<A, true> {
  static_assert(std::is_same_v<A, const Tensor&>, "Float32Compute: tensor arguments must be const Tensor&");
  Tensor value;
  explicit Held(const Tensor& t) : value(is_reduced_tensor(t) ? widen_to_float32(t) : t) {}
  const Tensor& get() { return value; }
};

}  // namespace detail

template <auto Kernel, int... Outputs>
struct Float32Compute;

template <class... Args, void (*Kernel)(Args...), int... Outputs>
struct Float32Compute<Kernel, Outputs...> {
  static void run(Args... args) {
    if (!(detail::reduced_arg<Args>(args) || ...)) return Kernel(static_cast<Args>(args)...);
    run_wide(std::index_sequence_for<Args...>{}, static_cast<Args>(args)...);
  }

 private:
  template <size_t... I>
  static void run_wide(std::index_sequence<I...>, Args... args) {
    std::tuple<detail::Held<Args>...> held{detail::Held<Args>(static_cast<Args>(args))...};
    Kernel(std::get<I>(held).get()...);
    (round_back<I>(std::get<I>(held), args), ...);
  }

  template <size_t I, class H, class A>
  static void round_back(H& held, const A& original) {
    if constexpr (detail::is_tensor_arg<A>) {
      if (((static_cast<int>(I) == Outputs) || ...) && is_reduced_tensor(original)) round_into(original, held.value);
    }
  }
};

}  // namespace minidl::cpu
