// ops/cpu/conv2d_pack.h: the im2col operand packed with loads and shuffles
// (groups of 8 columns read as two runs of stride 1 or 2) is the same as the
// one gathered column by column, whatever the offsets: runs, runs broken by
// padding, runs that straddle a group, and runs that end near the buffer's
// end (which must fall back to gathers).
#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "minidl/ops/cpu/conv2d_pack.h"
#include "minidl/ops/cpu/transpose8.h"

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

// ops/cpu/transpose8.h: 8 x 8 transposes of blocks whose 8 columns are one
// or two runs of step 1 or 2, padding lanes zeroed, and refusing blocks that
// are neither or that would read past the end (`limit`).
TEST_CASE("transpose8::runs gives the scalar transpose or refuses") {
  const int64_t lds = 40, size = 7 * lds + 64;  // the last row starts at 7 * lds: 64 floats readable from there
  std::vector<float> s(static_cast<size_t>(size));
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<float>(i) + 0.25f;
  std::mt19937 rng(11);
  int done = 0, refused = 0, two_runs = 0;
  for (int step : {1, 2}) {
    for (int trial = 0; trial < 400; ++trial) {
      // Lanes [0, cut) from base0, [cut, 8) from base1 (cut = 8: one run), some lanes padding (-1).
      const int cut = static_cast<int>(rng() % 9);
      const auto base0 = static_cast<int64_t>(rng() % 60), base1 = static_cast<int64_t>(rng() % 60);
      int64_t o[8];
      for (int k = 0; k < 8; ++k) {
        o[k] = (k < cut ? base0 : base1) + step * k;
        if (rng() % 6 == 0) o[k] = -1;
      }
      if (trial % 50 == 0) o[3] = o[2] + 3 * step;  // a third run: refused
      std::vector<float> d(64, -1.f);
      const bool ok = step == 1 ? transpose8::runs<1>(s.data(), lds, o, 64, d.data(), 8)
                                : transpose8::runs<2>(s.data(), lds, o, 64, d.data(), 8);
      if (!ok) {
        ++refused;
        for (float v : d) REQUIRE(v == -1.f);  // nothing written
        continue;
      }
      ++done;
      two_runs += cut > 0 && cut < 8 && base0 != base1;
      for (int k = 0; k < 8; ++k)
        for (int r = 0; r < 8; ++r) {
          const float want = o[k] < 0 ? 0.f : s[static_cast<size_t>(r * lds + o[k])];
          REQUIRE(d[static_cast<size_t>(k * 8 + r)] == want);
        }
    }
  }
  // All lanes in the padding: zeros, and nothing read (the rows may end right there: ASan).
  std::vector<float> tiny(static_cast<size_t>(7 * lds + 1), 1.f), zeros8(64, -1.f);
  const int64_t pad[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
  CHECK(transpose8::runs<2>(tiny.data(), lds, pad, 1, zeros8.data(), 8));
  for (float v : zeros8) CHECK(v == 0.f);
  CHECK(done > 200);
  CHECK(two_runs > 50);
  CHECK(refused > 20);  // third runs and runs reaching past 64 - 8 * step
}
