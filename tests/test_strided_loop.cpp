// for_each_row (ops/cpu/strided_loop.h), the loop under every elementwise
// CPU kernel: over any layout, the rows it hands out visit each element of
// the shape exactly once, at each operand's offset for that element. Covers
// its flat path (every operand contiguous or one broadcast element: one row,
// no merge_dims) and the merged one (views, transposes, partial broadcasts).
#include <doctest/doctest.h>

#include <array>
#include <map>
#include <vector>

#include "minidl/ops/cpu/strided_loop.h"
#include "tests/test_util.h"

using namespace minidl;

namespace {

// Runs for_each_row<2> serially or on threads and checks that the (out, in)
// offset pairs it visits are exactly those of the shape's elements, each
// once; returns the number of rows it used.
int64_t check_rows(const Shape& shape, const Shape& out_strides, const Shape& in_strides, int64_t min_parallel) {
  std::map<std::pair<int64_t, int64_t>, int> expected, seen;
  int64_t numel = 1;
  for (int64_t n : shape) numel *= n;
  for (int64_t i = 0; i < numel; ++i) ++expected[{testing::element_offset(shape, out_strides, i), testing::element_offset(shape, in_strides, i)}];
  std::vector<std::vector<std::pair<int64_t, int64_t>>> rows;
  for_each_row<2>(
      shape, {out_strides, in_strides},
      [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& step) {
        std::vector<std::pair<int64_t, int64_t>> r;
        for (int64_t k = 0; k < n; ++k) r.push_back({off[0] + k * step[0], off[1] + k * step[1]});
#pragma omp critical
        rows.push_back(std::move(r));
      },
      min_parallel);
  for (const auto& r : rows)
    for (const auto& p : r) ++seen[p];
  CHECK(seen == expected);
  return static_cast<int64_t>(rows.size());
}

}  // namespace

TEST_CASE("for_each_row: every element once, at every operand's offset") {
  const Shape s{2, 3, 4};
  const Shape contiguous{12, 4, 1};
  // Flat: contiguous and broadcast operands give one row (split on threads only when long).
  CHECK(check_rows(s, contiguous, contiguous, 1 << 30) == 1);
  CHECK(check_rows(s, contiguous, {0, 0, 0}, 1 << 30) == 1);
  CHECK(check_rows({1, 24, 1}, {24, 1, 1}, {7, 1, 99}, 1 << 30) == 1);  // size-1 dims' strides say nothing
  CHECK(check_rows({1}, {1}, {0}, 1 << 30) == 1);
  CHECK(check_rows({}, {}, {}, 1 << 30) == 1);  // a 0-d tensor: one element
  // Merged: a transposed input, a row broadcast, a column broadcast, a strided view.
  CHECK(check_rows(s, contiguous, {1, 2, 6}, 1 << 30) > 1);
  CHECK(check_rows(s, contiguous, {0, 0, 1}, 1 << 30) > 1);
  CHECK(check_rows(s, contiguous, {3, 1, 0}, 1 << 30) > 1);
  CHECK(check_rows(s, contiguous, {24, 8, 1}, 1 << 30) == 6);  // every other row of 4
  CHECK(check_rows(s, contiguous, {24, 8, 2}, 1 << 30) == 1);  // every other element: one row of step 2
  CHECK(check_rows(s, {1, 2, 6}, contiguous, 1 << 30) > 1);  // a transposed output
  // Empty shapes visit nothing.
  CHECK(check_rows({2, 0, 4}, {0, 4, 1}, {0, 4, 1}, 1 << 30) == 0);
  // On threads: one long flat row is cut into chunks, rows of a merged layout spread.
  const Shape big{3, 20000};
  CHECK(check_rows(big, {20000, 1}, {20000, 1}, 1000) > 1);
  CHECK(check_rows(big, {20000, 1}, {0, 0}, 1000) > 1);
  CHECK(check_rows(big, {20000, 1}, {1, 3}, 1000) == 3);
}
