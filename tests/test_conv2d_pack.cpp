// ops/cpu/conv2d_pack.h: the im2col operand packed with loads and shuffles
// (groups of 8 columns read as two runs of stride 1 or 2) is the same as the
// one gathered column by column, whatever the offsets: runs, runs broken by
// padding, runs that straddle a group, and runs that end near the buffer's
// end (which must fall back to gathers).
#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "minidl/ops/cpu/conv2d_pack.h"

using namespace minidl;

TEST_CASE("conv2d_pack: loads and shuffles give what the gathers give") {
  constexpr int64_t NR = conv2d_gemm::kNR<float>;
  const int64_t HW = 37, kc = 5, np = 3, cols = np * NR;
  const int64_t size = (kc - 1) * HW + 64;  // channel c's plane at c * HW; the last one ends at `size`
  std::vector<float> x(static_cast<size_t>(size));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) + 0.5f;
  std::mt19937 rng(7);
  int64_t fast_groups = 0, gathered_groups = 0;
  for (int64_t step : {1, 2, 3}) {
    for (int trial = 0; trial < 40; ++trial) {
      // Runs of random length and start (stride `step`), some columns in the padding.
      std::vector<int32_t> off(static_cast<size_t>(cols));
      for (int64_t j = 0; j < cols;) {
        const int64_t len = 1 + static_cast<int64_t>(rng() % 9);
        const auto start = static_cast<int64_t>(rng() % static_cast<uint64_t>(64 - step * (len - 1)));  // up to x's end
        for (int64_t k = 0; k < len && j < cols; ++k, ++j)
          off[static_cast<size_t>(j)] = rng() % 7 == 0 ? -1 : static_cast<int32_t>(start + step * k);
      }
      const int64_t limit = size - (kc - 1) * HW;
      std::vector<conv2d_pack::Group8> groups(static_cast<size_t>(cols / 8));
      conv2d_pack::classify(off.data(), cols, step, limit, groups.data());
      for (const auto& grp : groups)
        if (step < 3) (grp.kind == conv2d_pack::GroupKind::kGather ? gathered_groups : fast_groups)++;
      std::vector<float> packed(static_cast<size_t>(np * kc * NR)), gathered(packed.size());
      conv2d_pack::pack_panels(false, np, kc, x.data(), HW, off.data(), groups.data(), packed.data());
      conv2d_pack::pack_panels<float, int32_t>(false, np, kc, x.data(), HW, off.data(), nullptr, gathered.data());
      for (int64_t i = 0; i < np; ++i)
        for (int64_t c = 0; c < kc; ++c)
          for (int64_t jj = 0; jj < NR; ++jj) {
            const int32_t o = off[static_cast<size_t>(i * NR + jj)];
            const float want = o < 0 ? 0.f : x[static_cast<size_t>(c * HW + o)];
            const size_t at = static_cast<size_t>((i * kc + c) * NR + jj);
            REQUIRE(gathered[at] == want);
            REQUIRE(packed[at] == want);
          }
    }
  }
  // Both ways were exercised with strides 1 and 2 (the loads only where
  // conv2d_pack::kLoads<float>: not in SSE-only builds, which gather).
  CHECK(conv2d_pack::kLoads<float> == (NR % 8 == 0));
  CHECK(fast_groups > 20);
  CHECK(gathered_groups > 20);
}
