// The compiler builds small constant vectors as written. Debian 12's GCC 12.2
// with AVX-512 turned {4, 4, 0, 0} into {4, 4, 4, 4} (a copy of equal values
// then zeros became a broadcast); CMake detects it and adds
// -fno-tree-slp-vectorize (cmake/gcc_slp_constant_check.cmake). Compiled with
// the flags of every minidl target, these fail where a build lacks the
// workaround it needs (each copy is in its own function: the bug shows only
// where the constant is copied straight into the new vector).
#include <cstdint>
#include <vector>

#include "tests/test_util.h"

namespace {

template <class T>
__attribute__((noipa)) double at(const std::vector<T>& v, size_t i) {
  return static_cast<double>(v[i]);
}

__attribute__((noipa)) double int64_4400() { return at<int64_t>({4, 4, 0, 0}, 2); }
__attribute__((noipa)) double int64_1100() { return at<int64_t>({1, 1, 0, 0}, 3); }
__attribute__((noipa)) double int64_77770000() { return at<int64_t>({7, 7, 7, 7, 0, 0, 0, 0}, 5); }
__attribute__((noipa)) double double_2200() { return at<double>({2, 2, 0, 0}, 2); }
__attribute__((noipa)) double float_33330000() { return at<float>({3, 3, 3, 3, 0, 0, 0, 0}, 4); }
__attribute__((noipa)) double int32_55550000() { return at<int32_t>({5, 5, 5, 5, 0, 0, 0, 0}, 7); }

}  // namespace

TEST_CASE("vector constants of equal values then zeros keep their zeros") {
  CHECK(int64_4400() == 0);
  CHECK(int64_1100() == 0);
  CHECK(int64_77770000() == 0);
  CHECK(double_2200() == 0);
  CHECK(float_33330000() == 0);
  CHECK(int32_55550000() == 0);
}
