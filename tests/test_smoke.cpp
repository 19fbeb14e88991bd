#include "tests/test_util.h"
using namespace minidl;
TEST_CASE("factories") {
  Tensor t = arange(6.0).reshape({2, 3});
  CHECK(t.shape() == Shape{2, 3});
}
