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
#include <type_traits>

#include "minidl/core/check.h"
#include "minidl/dist/gloo_profile.h"

namespace minidl::dist {

namespace {

// Slot prefix of the exchange's messages: Gloo's own algorithms use 0x01-0x08
// (gloo/types.h); the tag (the collective's sequence number) tells calls apart.
constexpr uint8_t kExchangeSlotPrefix = 0x4d;
constexpr uint8_t kRsagScatterSlotPrefix = 0x4e;
constexpr uint8_t kRsagGatherSlotPrefix = 0x4f;

// The choice by bytes per rank, measured for 2 ranks on 2 shared cores
// (bench/RESULTS.md "all_reduce under contention"; Gloo's ring, the exchange
// and rsag side by side, with and without 2 busy loops). Under load every
// blocking wait can cost a scheduler tick, so fewer waits win:
//   - the exchange (4 voluntary context switches per call on rank 0 vs the
//     ring's 8) won up to 256 KiB: per-call medians 0.17 ms vs rsag's 0.19,
//     the ring's 1.67 and PyTorch's 0.31 there; at 1 MiB it lost to rsag
//     (0.70 vs 0.51 ms): no overlap of the transfer with the reduce.
//   - rsag won from 1 MiB (0.51-74 ms vs the ring's 0.63-84, about 1/4 of
//     its waits at 64 MiB).
// Which of the two modes a run falls into (RESULTS: Gloo's loop thread
// spinning for a tick) moves the ratios more than the choice does.
// For more ranks the exchange sends size / 2 times the ring's traffic and
// rsag opens size - 1 flows per rank at once; neither was measured there, so
// those groups keep the exchange for small tensors and Gloo's ring above.
constexpr int64_t kExchangeMaxBytes2 = 256 << 10;  // 2 ranks
constexpr int64_t kExchangeMaxBytes = 64 << 10;    // more ranks
constexpr int64_t kRsagSegmentBytes = 4 << 20;

// rsag's segment: the unit it reduces and forwards while the rest arrives.
// MINIDL_GLOO_RSAG_SEGMENT (bytes) overrides it for measuring.
size_t rsag_segment_bytes() {
  const char* v = std::getenv("MINIDL_GLOO_RSAG_SEGMENT");
  return v && *v ? std::max<size_t>(1, std::strtoull(v, nullptr, 10)) : size_t(kRsagSegmentBytes);
}

template <class T, class F>
void reduce_loop(void* c_, const void* a_, const void* b_, size_t n, F f) {
  T* c = static_cast<T*>(c_);  // may alias a
  const T* a = static_cast<const T*>(a_);
  const T* b = static_cast<const T*>(b_);
  for (size_t i = 0; i < n; ++i) c[i] = f(a[i], b[i]);
}

// Integer sums and products wrap around as PyTorch's (two's complement):
// computed in the unsigned type, where overflow is defined.
template <class T>
using WrapType = typename std::conditional_t<std::is_integral_v<T>, std::make_unsigned<T>,
                                             std::type_identity<T>>::type;

template <class T>
void sum_fn(void* c, const void* a, const void* b, size_t n) {
  reduce_loop<T>(c, a, b, n, [](T x, T y) { return static_cast<T>(WrapType<T>(x) + WrapType<T>(y)); });
}
template <class T>
void product_fn(void* c, const void* a, const void* b, size_t n) {
  reduce_loop<T>(c, a, b, n, [](T x, T y) { return static_cast<T>(WrapType<T>(x) * WrapType<T>(y)); });
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

// Element range [begin, end) of rank j's chunk: n split as evenly as possible.
size_t chunk_begin(size_t n, int size, int j) { return n * static_cast<size_t>(j) / static_cast<size_t>(size); }

void rsag(const std::shared_ptr<gloo::Context>& ctx, void* data_, size_t elem, size_t n, Fn fn, uint32_t tag,
          Milliseconds timeout, std::vector<unsigned char>& scratch) {
  const int size = ctx->size, rank = ctx->rank;
  auto* data = static_cast<unsigned char*>(data_);
  const size_t seg_elems = std::max<size_t>(1, rsag_segment_bytes() / elem);
  // Segments [first, last) of chunk j, in elements; every rank computes the same ones.
  auto for_each_segment = [&](int j, auto&& f) {
    const size_t b = chunk_begin(n, size, j), e = chunk_begin(n, size, j + 1);
    for (size_t s = b; s < e; s += seg_elems) f(s, std::min(e, s + seg_elems));
  };
  const size_t mine = chunk_begin(n, size, rank), mine_bytes = (chunk_begin(n, size, rank + 1) - mine) * elem;
  if (scratch.size() < mine_bytes * static_cast<size_t>(size - 1))
    scratch.resize(mine_bytes * static_cast<size_t>(size - 1));
  // Peer r's contribution to my chunk lands at scratch[slot_of(r) * mine_bytes].
  auto slot_of = [rank](int r) { return static_cast<size_t>(r < rank ? r : r - 1); };
  const auto scatter_slot = gloo::Slot::build(kRsagScatterSlotPrefix, tag);
  const auto gather_slot = gloo::Slot::build(kRsagGatherSlotPrefix, tag);
  auto out = ctx->createUnboundBuffer(data, n * elem);
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> in(static_cast<size_t>(size));
  size_t sends = 0, gathers = 0;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    in[r] = ctx->createUnboundBuffer(scratch.data() + slot_of(r) * mine_bytes, mine_bytes);
    for_each_segment(rank, [&](size_t b, size_t e) { in[r]->recv(r, scatter_slot, (b - mine) * elem, (e - b) * elem); });
    // The reduced chunk r arrives in place: r reduces it only after it has all
    // of my chunk r, so my sends from there have left this buffer by then.
    for_each_segment(r, [&](size_t b, size_t e) { out->recv(r, gather_slot, b * elem, (e - b) * elem), ++gathers; });
  }
  for (int d = 1; d < size; ++d) {
    const int r = (rank + d) % size;
    for_each_segment(r, [&](size_t b, size_t e) { out->send(r, scatter_slot, b * elem, (e - b) * elem), ++sends; });
  }
  // Reduce my chunk segment by segment as the peers' parts arrive (in order
  // from each peer), in rank order as the exchange does, and send each
  // reduced segment on at once: the all-gather overlaps the reduce-scatter.
  auto ptr = [&](int r, size_t b) -> unsigned char* {
    return r == rank ? data + b * elem : scratch.data() + slot_of(r) * mine_bytes + (b - mine) * elem;
  };
  double reduce_us = 0;
  for_each_segment(rank, [&](size_t b, size_t e) {
    for (int r = 0; r < size; ++r)
      if (r != rank) in[r]->waitRecv(timeout);
    auto t0 = GlooProfile::Clock::now();
    unsigned char* acc = ptr(0, b);
    for (int r = 1; r < size; ++r) fn(acc, acc, ptr(r, b), e - b);
    if (acc != data + b * elem) std::memcpy(data + b * elem, acc, (e - b) * elem);
    if (GlooProfile::enabled())
      reduce_us += std::chrono::duration<double, std::micro>(GlooProfile::Clock::now() - t0).count();
    for (int d = 1; d < size; ++d) out->send((rank + d) % size, gather_slot, b * elem, (e - b) * elem), ++sends;
  });
  for (size_t i = 0; i < gathers; ++i) out->waitRecv(timeout);
  for (size_t i = 0; i < sends; ++i) out->waitSend(timeout);
  if (GlooProfile::enabled()) GlooProfile::add_reduce_us(reduce_us);
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
    if (std::strcmp(forced, "rsag") == 0) return GlooAllReduceAlgo::kRsag;
    MINIDL_FAIL("all_reduce: MINIDL_GLOO_ALLREDUCE must be ring, exchange or rsag, got '", forced, "'");
  }
  if (size == 2) return bytes <= kExchangeMaxBytes2 ? GlooAllReduceAlgo::kExchange : GlooAllReduceAlgo::kRsag;
  return bytes <= kExchangeMaxBytes ? GlooAllReduceAlgo::kExchange : GlooAllReduceAlgo::kRing;
}

void gloo_all_reduce(const std::shared_ptr<gloo::Context>& ctx, void* data, DType dtype, size_t n, ReduceOp op,
                     uint32_t tag, Milliseconds timeout, std::vector<unsigned char>& scratch) {
  const Fn fn = reduce_fn(dtype, op);
  const size_t elem = element_size(dtype);
  if (n == 0 || ctx->size == 1) {
    // Nothing to exchange (AVG over one rank divides by 1).
  } else if (const auto algo = choose_gloo_all_reduce(static_cast<int64_t>(n * elem), ctx->size);
             algo == GlooAllReduceAlgo::kExchange) {
    exchange(ctx, data, elem, n, fn, tag, timeout, scratch);
  } else if (algo == GlooAllReduceAlgo::kRsag) {
    rsag(ctx, data, elem, n, fn, tag, timeout, scratch);
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
