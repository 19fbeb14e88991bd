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
// flush matters, and this functor's range fix cost them 30-45%; without
// AVX-512 their float exp is pexp_float_fast_normal below (Eigen's generic
// packet exp, which AVX2 gets, builds 2^m with a slow ldexp).
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

// The shared reduction: t = x log2(e) + (1.5 2^23 + 127) rounds x log2(e)
// to the nearest integer m (|x| < 2^22) and holds m + 127 in its low
// mantissa bits, so 2^m is t's bits shifted left by 23 for m in [-127, 128]
// (-127: 0, 128: inf) with no float-to-int conversion or floor; y = exp(r),
// r = x - m ln 2 in [-ln2 / 2, ln2 / 2] (ln 2 in two parts), by Eigen's
// pexp_float polynomial (Cephes coefficients).
template <class Packet>
Packet pexp_float_reduce(const Packet& x, Packet& y) {
  using namespace Eigen::internal;
  const Packet magic = pset1<Packet>(12582912.0f + 127.0f);
  const Packet t = pmadd(x, pset1<Packet>(1.44269504088896341f), magic);
  const Packet m = psub(t, magic);
  Packet r = pmadd(m, pset1<Packet>(-0.693359375f), x);
  r = pmadd(m, pset1<Packet>(2.12194440e-4f), r);
  const Packet r2 = pmul(r, r), r3 = pmul(r2, r);
  y = pmadd(pset1<Packet>(1.9875691500E-4f), r, pset1<Packet>(1.3981999507E-3f));
  Packet y1 = pmadd(pset1<Packet>(4.1665795894E-2f), r, pset1<Packet>(1.6666665459E-1f));
  const Packet y2 = padd(r, pset1<Packet>(1.0f));
  y = pmadd(y, r, pset1<Packet>(8.3334519073E-3f));
  y1 = pmadd(y1, r, pset1<Packet>(5.0000001201E-1f));
  y = pmadd(y, r3, y1);
  y = pmadd(y, r2, y2);
  return t;
}

// 2^m from pexp_float_reduce's t (m in [-127, 128]).
template <class Packet>
Packet pexp2_of_reduced(const Packet& t) {
  using namespace Eigen::internal;
  using PacketI = typename unpacket_traits<Packet>::integer_packet;
  return preinterpret<Packet>(plogical_shift_left<23>(preinterpret<PacketI>(t)));
}

// 2^k for integer packets k in [-127, 128] (-127: 0, 128: inf).
template <class Packet, class PacketI>
Packet pexp2_int(const PacketI& k) {
  using namespace Eigen::internal;
  return preinterpret<Packet>(plogical_shift_left<23>(padd(k, pset1<PacketI>(127))));
}

// exp(x) for float packets: the polynomial of Eigen's pexp_float (Cephes
// coefficients: same accuracy), with 2^m built from exponent bits instead of
// Eigen's generic pldexp, which all but its AVX-512 float path use and which
// made AVX2 exp ~3x slower than AVX-512's (256000 values, 1 thread: 0.105 vs
// 0.037 ms). Where a lane has |x| > 87, 2^m is two factors 2^(m/2)
// 2^(m - m/2), so results down to the subnormals round once, as they should;
// x clamped to [-104, 89] keeps m in [-150, 128], each factor a normal
// number, exp(x < -103.3) rounds to 0 and exp(x > 88.72) overflows to inf.
// Elsewhere (a predictable branch) one factor: the two cost ~20% (sigmoid,
// AVX2). NaN propagates (Eigen's pmin/pmax return their first argument when
// it is NaN). Measured within 1 ulp of the correctly rounded exp over every
// float in [-110, 90] (tests/test_vec_math.cpp checks every 4099th).
template <class Packet>
Packet pexp_float_fast(const Packet& x) {
  using namespace Eigen::internal;
  using PacketI = typename unpacket_traits<Packet>::integer_packet;
  Packet y;
  const Packet t = pexp_float_reduce(pmax(pmin(x, pset1<Packet>(89.0f)), pset1<Packet>(-104.0f)), y);
  if (!predux_any(pcmp_lt(pset1<Packet>(87.0f), pabs(x)))) return pmul(y, pexp2_of_reduced(t));
  const PacketI mi = psub(preinterpret<PacketI>(t), preinterpret<PacketI>(pset1<Packet>(12582912.0f)));
  const PacketI m1 = parithmetic_shift_right<1>(psub(mi, pset1<PacketI>(127)));  // m = mi - 127
  return pmul(pmul(y, pexp2_int<Packet>(m1)), pexp2_int<Packet>(psub(psub(mi, pset1<PacketI>(127)), m1)));
}

// pexp_float_fast with one factor, for the softmax kernels (1.2x faster): x
// is clamped to [-88, 89], so exp(x >= 88.38) = inf (m = 128; the true
// overflow is at 88.72, as with Eigen's AVX-512 exp) and results
// below the smallest normal number come out as 0 or as a subnormal close to
// the exact one (m = -127 gives 0, m = -126 and exp(r) < 1 a subnormal):
// the callers flush those.
template <class Packet>
Packet pexp_float_fast_normal(const Packet& x) {
  using namespace Eigen::internal;
  Packet y;
  const Packet t = pexp_float_reduce(pmax(pmin(x, pset1<Packet>(89.0f)), pset1<Packet>(-88.0f)), y);
  return pmul(y, pexp2_of_reduced(t));
}

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
// overflows, so large |x| gives 0 or 1, never inf / inf. Float's exp is
// pexp_float_fast (AVX2 math-only 64x256x28x28, 1 thread: 8.8 -> 4.9 ms;
// AVX-512: 3.8 -> 2.9; worst error over every 61st float 2.7 ulp). The
// division stays: rcp + Newton steps measured slower (two steps, needed for
// sigmoid(0) = 0.5 and sigmoid(inf) = 1 exactly: +20%; one step: +10%).
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
    Packet e;
    if constexpr (std::is_same_v<T, float>) e = pexp_float_fast(pnegate(pabs(x)));
    else e = ExpOp<T>().packetOp(pnegate(pabs(x)));
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
