// Vectorized exp, log and sigmoid for Eigen array expressions (float and
// double), for the elementwise kernels that array_loop (ops/cpu/array_loop.h)
// runs: vec::exp(x), vec::log(x), vec::sigmoid(x), vec::log_sigmoid(x).
//
// Why not Eigen's x.exp() and x.log() directly: Eigen's packet exp flushes
// results below the smallest normal number (x < -87.3 in float) to 0 and
// overflows early on AVX-512, and its packet log reads subnormal inputs as
// the smallest normal; these functors fix those ranges with a select, which
// costs little. Why functors and not
// expressions: an Eigen expression that uses a subexpression twice computes
// it twice (sigmoid needs exp(-|x|) twice); a functor's packetOp computes it
// once. Each functor's scalar operator() (used on strided rows) is the
// std:: formula. The softmax kernels keep Eigen's plain exp with a flush
// instead (ops/cpu/softmax_rows.h): their arguments are <= 0, where only the
// flush matters, and this functor's range fix cost them 30-45%.
//
// Accuracy (tests/test_vec_math.cpp checks it; float32 on AVX-512 measured):
// exp within 5 ulp of the exact result (about 4 at |x| > 87, where it is
// exp(x/2)^2; 2 below), log 2 ulp, sigmoid 4 ulp, everywhere including
// subnormals, +-inf and NaN (NaN in, NaN out). float64 is tighter.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <limits>
#include <type_traits>

namespace minidl::vec {

// Beyond +-this, exp(x) is computed as exp(x/2)^2: Eigen's packet exp
// flushes subnormal results to 0 and (AVX-512 float) overflows from 88.38,
// below the true 88.72.
template <class T>
constexpr T kExpHalveBeyond = std::is_same_v<T, float> ? T(87) : T(708);
// Subnormal x is scaled by 2^k into the normal range before the log: log(x) = log(x 2^k) - k ln 2.
template <class T>
constexpr int kLogScaleBits = std::is_same_v<T, float> ? 24 : 54;

template <class T>
struct ExpOp {
  T operator()(const T& x) const { return std::exp(x); }
  template <class Packet>
  Packet packetOp(const Packet& x) const {
    using namespace Eigen::internal;
    const Packet far = pcmp_lt(pset1<Packet>(kExpHalveBeyond<T>), pabs(x));  // NaN: false
    const Packet e = pexp(pselect(far, pmul(x, pset1<Packet>(T(0.5))), x));
    return pselect(far, pmul(e, e), e);
  }
};

template <class T>
struct LogOp {
  T operator()(const T& x) const { return std::log(x); }
  template <class Packet>
  Packet packetOp(const Packet& x) const {
    using namespace Eigen::internal;
    // x < smallest normal: also 0 and negatives, whose log (-inf, NaN) the scaling keeps.
    const Packet sub = pcmp_lt(x, pset1<Packet>(std::numeric_limits<T>::min()));
    const T scale = std::ldexp(T(1), kLogScaleBits<T>);
    const Packet l = plog(pselect(sub, pmul(x, pset1<Packet>(scale)), x));
    const T shift = static_cast<T>(kLogScaleBits<T> * 0.69314718055994530942L);
    return pselect(sub, psub(l, pset1<Packet>(shift)), l);
  }
};

// 1 / (1 + exp(-x)) for x >= 0, e / (1 + e) with e = exp(x) below: exp never
// overflows, so large |x| gives 0 or 1, never inf / inf.
template <class T>
struct SigmoidOp {
  T operator()(const T& x) const {
    if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
    const T e = std::exp(x);
    return e / (T(1) + e);
  }
  template <class Packet>
  Packet packetOp(const Packet& x) const {
    using namespace Eigen::internal;
    const Packet e = ExpOp<T>().packetOp(pnegate(pabs(x)));
    const Packet s = pdiv(pset1<Packet>(T(1)), padd(pset1<Packet>(T(1)), e));
    return pselect(pcmp_lt(x, pzero(x)), pmul(e, s), s);  // NaN: not < 0, 1 / (1 + NaN) = NaN
  }
};

template <class X>
auto exp(const Eigen::ArrayBase<X>& x) {
  return x.unaryExpr(ExpOp<typename X::Scalar>());
}
template <class X>
auto log(const Eigen::ArrayBase<X>& x) {
  return x.unaryExpr(LogOp<typename X::Scalar>());
}
template <class X>
auto sigmoid(const Eigen::ArrayBase<X>& x) {
  return x.unaryExpr(SigmoidOp<typename X::Scalar>());
}
// min(x, 0) - log1p(exp(-|x|)): exp never overflows. Eigen's exp is enough
// here: where it flushes (|x| > 87), log1p of it is below x's last bit.
template <class X>
auto log_sigmoid(const Eigen::ArrayBase<X>& x) {
  using T = typename X::Scalar;
  return x.min(T(0)) - (-x.abs()).exp().log1p();
}

}  // namespace minidl::vec

namespace Eigen::internal {

template <class T>
struct functor_traits<minidl::vec::ExpOp<T>> {
  enum { Cost = 10 * NumTraits<T>::MulCost, PacketAccess = packet_traits<T>::HasExp && packet_traits<T>::HasCmp };
};
template <class T>
struct functor_traits<minidl::vec::LogOp<T>> {
  enum { Cost = 10 * NumTraits<T>::MulCost, PacketAccess = packet_traits<T>::HasLog && packet_traits<T>::HasCmp };
};
template <class T>
struct functor_traits<minidl::vec::SigmoidOp<T>> {
  enum {
    Cost = 14 * NumTraits<T>::MulCost,
    PacketAccess = packet_traits<T>::HasExp && packet_traits<T>::HasCmp && packet_traits<T>::HasDiv
  };
};

}  // namespace Eigen::internal
