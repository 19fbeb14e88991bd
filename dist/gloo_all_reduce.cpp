// gloo_all_reduce: Gloo's ring or a one-step exchange (see gloo_all_reduce.h),
// with minidl's own reduce loops (plain size_t loops the compiler vectorizes
// for the build's -march; Gloo's math.h counts with an int).
#include "minidl/dist/gloo_all_reduce.h"

#include <gloo/allreduce.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "minidl/core/check.h"
#include "minidl/dist/gloo_profile.h"

namespace minidl::dist {

namespace {

// Slot prefix of the exchange's messages: Gloo's own algorithms use 0x01-0x08
// (gloo/types.h); the tag (the collective's sequence number) tells calls apart.
constexpr uint8_t kExchangeSlotPrefix = 0x4d;

// Up to this many bytes per rank a group exchanges. Measured for 2 ranks
// on 2 shared cores (bench/RESULTS.md "all_reduce under contention"): the
// exchange won at 4-64 KiB in every run (0.09-0.3 ms vs the ring's 0.3-1.5
// ms), was bimodal at 256 KiB (0.14-1.9 ms; one big message both ways), and
// lost at 1 and 4 MiB (no overlap of the transfer with the reduce, and a
// size-sized scratch buffer). For more ranks it also sends size / 2 times
// the ring's traffic, which small tensors can afford.
constexpr int64_t kExchangeMaxBytes = 64 << 10;

template <class T, class F>
void reduce_loop(void* c_, const void* a_, const void* b_, size_t n, F f) {
  T* c = static_cast<T*>(c_);  // may alias a
  const T* a = static_cast<const T*>(a_);
  const T* b = static_cast<const T*>(b_);
  for (size_t i = 0; i < n; ++i) c[i] = f(a[i], b[i]);
}

template <class T>
void sum_fn(void* c, const void* a, const void* b, size_t n) {
  reduce_loop<T>(c, a, b, n, [](T x, T y) { return x + y; });
}
template <class T>
void product_fn(void* c, const void* a, const void* b, size_t n) {
  reduce_loop<T>(c, a, b, n, [](T x, T y) { return x * y; });
}
template <class T>
void min_fn(void* c, const void* a, const void* b, size_t n) {
  reduce_loop<T>(c, a, b, n, [](T x, T y) { return std::min(x, y); });
}
template <class T>
void max_fn(void* c, const void* a, const void* b, size_t n) {
  reduce_loop<T>(c, a, b, n, [](T x, T y) { return std::max(x, y); });
}

using Fn = void (*)(void*, const void*, const void*, size_t);

template <class T>
Fn reduce_fn(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::AVG: return &sum_fn<T>;
    case ReduceOp::PRODUCT: return &product_fn<T>;
    case ReduceOp::MIN: return &min_fn<T>;
    case ReduceOp::MAX: return &max_fn<T>;
  }
  MINIDL_FAIL("all_reduce: unknown ReduceOp");
}

Fn reduce_fn(DType dtype, ReduceOp op) {
  switch (dtype) {
    case kFloat32: return reduce_fn<float>(op);
    case kFloat64: return reduce_fn<double>(op);
    case kInt64: return reduce_fn<int64_t>(op);
    default: MINIDL_FAIL("gloo: unsupported dtype ", dtype_name(dtype));
  }
}

// The reduce function Gloo calls; timed when MINIDL_GLOO_PROFILE is set.
gloo::AllreduceOptions::Func gloo_reduce_function(Fn fn) {
  if (!GlooProfile::enabled()) return fn;
  return [fn](void* c, const void* a, const void* b, size_t n) {
    auto t0 = GlooProfile::Clock::now();
    fn(c, a, b, n);
    GlooProfile::add_reduce_us(std::chrono::duration<double, std::micro>(GlooProfile::Clock::now() - t0).count());
  };
}

template <class T>
void ring(const std::shared_ptr<gloo::Context>& ctx, void* data, size_t n, Fn fn, uint32_t tag,
          Milliseconds timeout) {
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(static_cast<T*>(data), n);  // typed: segments never split an element
  opts.setReduceFunction(gloo_reduce_function(fn));
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::allreduce(opts);
}

void exchange(const std::shared_ptr<gloo::Context>& ctx, void* data, size_t elem, size_t n, Fn fn, uint32_t tag,
              Milliseconds timeout, std::vector<unsigned char>& scratch) {
  const int size = ctx->size, rank = ctx->rank;
  const size_t bytes = n * elem;
  if (scratch.size() < bytes * static_cast<size_t>(size - 1)) scratch.resize(bytes * static_cast<size_t>(size - 1));
  // Peer r's buffer lands at scratch[slot_of(r) * bytes].
  auto slot_of = [rank](int r) { return static_cast<size_t>(r < rank ? r : r - 1); };
  const auto slot = gloo::Slot::build(kExchangeSlotPrefix, tag);
  auto in = ctx->createUnboundBuffer(scratch.data(), bytes * static_cast<size_t>(size - 1));
  auto out = ctx->createUnboundBuffer(data, bytes);
  for (int r = 0; r < size; ++r)
    if (r != rank) in->recv(r, slot, slot_of(r) * bytes, bytes);
  for (int d = 1; d < size; ++d) out->send((rank + d) % size, slot);
  for (int i = 1; i < size; ++i) in->waitRecv(timeout);
  for (int i = 1; i < size; ++i) out->waitSend(timeout);  // before `data` is overwritten
  // Reduce in rank order, identical on every rank: acc = x_0 op x_1 op ...
  auto ptr = [&](int r) -> void* { return r == rank ? data : scratch.data() + slot_of(r) * bytes; };
  void* acc = ptr(0);
  auto t0 = GlooProfile::Clock::now();
  for (int r = 1; r < size; ++r) fn(acc, acc, ptr(r), n);
  if (acc != data) std::memcpy(data, acc, bytes);
  if (GlooProfile::enabled())
    GlooProfile::add_reduce_us(std::chrono::duration<double, std::micro>(GlooProfile::Clock::now() - t0).count());
}

template <class T>
void divide(void* data, size_t n, int size) {
  T* p = static_cast<T*>(data);
  for (size_t i = 0; i < n; ++i) p[i] /= static_cast<T>(size);
}

}  // namespace

GlooAllReduceAlgo choose_gloo_all_reduce(int64_t bytes, int size) {
  if (const char* forced = std::getenv("MINIDL_GLOO_ALLREDUCE"); forced && *forced) {
    if (std::strcmp(forced, "ring") == 0) return GlooAllReduceAlgo::kRing;
    if (std::strcmp(forced, "exchange") == 0) return GlooAllReduceAlgo::kExchange;
    MINIDL_FAIL("all_reduce: MINIDL_GLOO_ALLREDUCE must be ring or exchange, got '", forced, "'");
  }
  (void)size;  // one threshold fits the group sizes measured (2) and bounds the traffic of larger ones
  return bytes <= kExchangeMaxBytes ? GlooAllReduceAlgo::kExchange : GlooAllReduceAlgo::kRing;
}

void gloo_all_reduce(const std::shared_ptr<gloo::Context>& ctx, void* data, DType dtype, size_t n, ReduceOp op,
                     uint32_t tag, Milliseconds timeout, std::vector<unsigned char>& scratch) {
  const Fn fn = reduce_fn(dtype, op);
  const size_t elem = element_size(dtype);
  if (n == 0 || ctx->size == 1) {
    // Nothing to exchange (AVG over one rank divides by 1).
  } else if (choose_gloo_all_reduce(static_cast<int64_t>(n * elem), ctx->size) == GlooAllReduceAlgo::kExchange) {
    exchange(ctx, data, elem, n, fn, tag, timeout, scratch);
  } else {
    if (dtype == kFloat32) ring<float>(ctx, data, n, fn, tag, timeout);
    else if (dtype == kFloat64) ring<double>(ctx, data, n, fn, tag, timeout);
    else ring<int64_t>(ctx, data, n, fn, tag, timeout);
  }
  if (op == ReduceOp::AVG) {
    if (dtype == kFloat32) divide<float>(data, n, ctx->size);
    else if (dtype == kFloat64) divide<double>(data, n, ctx->size);
  }
}

}  // namespace minidl::dist
