// The all-reduce ProcessGroupGloo runs on its worker thread (or the waiting
// caller's), and the algorithm it picks by size:
//
//   ring      gloo::allreduce (Gloo's ring: reduce-scatter then all-gather in
//             segments of up to 1 MiB, two in flight). Every step is a
//             message whose delivery wakes Gloo's event-loop thread and then
//             the thread running the collective; a 2-rank all-reduce of up
//             to 1 MiB takes two dependent steps of two segments each.
//   exchange  every rank sends its whole buffer to every peer at once and
//             reduces the size() buffers itself, in rank order (so every
//             rank gets the same bits). One dependent step; for 2 ranks the
//             same bytes on the wire as the ring; for more ranks size / 2
//             times the ring's per-rank traffic. It needs a scratch buffer
//             of (size - 1) * bytes, kept by the group between calls.
//   rsag      reduce-scatter then all-gather, each done directly between
//             every pair of ranks: rank j owns chunk j (n / size elements),
//             every rank sends chunk j to rank j, which reduces it in rank
//             order and sends it back to everyone. Two dependent steps for
//             any group size and the ring's bytes on the wire; chunks go in
//             segments of 4 MiB so the reduce and the all-gather of one
//             segment overlap the transfer of the next. Scratch: (size - 1)
//             chunks. Each chunk is reduced by one rank only, so every rank
//             gets the same bits.
// Taken: 2 ranks: the exchange up to 256 KiB per rank, rsag above; more
// ranks: the exchange up to 64 KiB, the ring above (measured only for 2).
//
// When another job shares the cores every wake-up can wait for a scheduler
// tick (bench/RESULTS.md "all_reduce under contention"): fewer dependent
// steps and fewer blocking waits are what helps then.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "minidl/core/dtype.h"
#include "minidl/dist/process_group.h"

namespace gloo {
class Context;
}

namespace minidl::dist {

enum class GlooAllReduceAlgo { kRing, kExchange, kRsag };

// The algorithm for `bytes` per rank in a group of `size` ranks:
// MINIDL_GLOO_ALLREDUCE=ring|exchange|rsag forces one (tests, benchmarks).
GlooAllReduceAlgo choose_gloo_all_reduce(int64_t bytes, int size);

// In-place all-reduce of `n` elements of `dtype` (float32, float64 or int64)
// at `data`; AVG is SUM divided by the group size. `scratch`: the group's
// reusable buffer for the exchange algorithm. Throws what Gloo throws (a
// peer's connection closed, the timeout passed).
void gloo_all_reduce(const std::shared_ptr<gloo::Context>& ctx, void* data, DType dtype, size_t n, ReduceOp op,
                     uint32_t tag, Milliseconds timeout, std::vector<unsigned char>& scratch);

}  // namespace minidl::dist
