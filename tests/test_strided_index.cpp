// The per-element math of the CUDA copy and fill kernels (ops/cuda/
// strided_index.h, tensor_geometry.h), run on the CPU: the same
// __host__ __device__ functions the kernels call, so the index math and the
// dtype conversions are checked on every machine, GPU or not.
#include <doctest/doctest.h>

#include "minidl/core/tensor.h"
#include "minidl/ops/cuda/strided_index.h"
#include "minidl/ops/cuda/tensor_geometry.h"
#include "tests/test_util.h"

using namespace minidl;
using cuda_detail::StridedIndex;

namespace {

// The element offset of linear (row-major) index i of view t, the slow way.
int64_t reference_offset(const Tensor& t, int64_t i) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    off += (i % t.size(d)) * t.stride(d);
    i /= t.size(d);
  }
  return off;
}

void check_geometry(const Tensor& t) {
  const StridedIndex s = cuda_detail::strided_index(t, "test");
  for (int64_t i = 0; i < t.numel(); ++i) REQUIRE(s.offset(i) == reference_offset(t, i));
}

// What the CUDA copy kernel computes, on the CPU: copy_element over every index.
template <class D, class S>
Tensor kernel_copy(const Tensor& src) {
  Tensor dst = empty(src.shape(), TensorOptions(dtype_v<D>));
  const StridedIndex di = cuda_detail::strided_index(dst, "test"), si = cuda_detail::strided_index(src, "test");
  for (int64_t i = 0; i < src.numel(); ++i)
    cuda_detail::copy_element(static_cast<D*>(dst.raw_data()), di, static_cast<const S*>(src.raw_data()), si, i);
  return dst;
}

}  // namespace

TEST_CASE("strided_index: offsets of views, dims merged where memory allows") {
  const Tensor x = randn({4, 5, 6});
  check_geometry(x);
  check_geometry(x.transpose(0, 2));
  check_geometry(x.permute({1, 0, 2}));
  check_geometry(x.narrow(1, 1, 3));
  check_geometry(x.select(2, 4));
  check_geometry(x.narrow(2, 0, 1).expand({4, 5, 7}));       // stride 0
  check_geometry(randn({1, 7}).expand({3, 7}));
  check_geometry(full({}, 1.0));                             // 0-d
  check_geometry(randn({2, 1, 3, 1}).transpose(1, 3));       // size-1 dims
  // A contiguous tensor is one dim, contiguous; a transpose stays two dims.
  const StridedIndex c = cuda_detail::strided_index(x, "test");
  CHECK(c.contiguous);
  CHECK(c.ndim == 1);
  const StridedIndex t = cuda_detail::strided_index(x.transpose(0, 1), "test");
  CHECK_FALSE(t.contiguous);
  CHECK(t.ndim == 3);
  CHECK(cuda_detail::strided_index(x.narrow(0, 1, 2), "test").contiguous);  // rows of a contiguous tensor
  // More than 16 dims that cannot merge are refused with the op's name.
  Shape big(17, 2);
  const Tensor many = randn(big);
  Shape perm(17);
  for (int64_t i = 0; i < 17; ++i) perm[static_cast<size_t>(i)] = 16 - i;
  CHECK_THROWS_CONTAINS(cuda_detail::strided_index(many.permute(perm), "copy_"), "copy_: a CUDA kernel takes views");
  CHECK(cuda_detail::strided_index(many, "copy_").ndim == 1);  // contiguous: merges into one
}

TEST_CASE("copy_element: the CUDA kernel's conversions give the CPU copy's values") {
  const Tensor r = (randn({9, 11}, TensorOptions(kFloat64)) * 300.0).t();  // strided, beyond float16's precision
  CHECK(minidl::testing::max_abs_diff(kernel_copy<Half, double>(r), r.to(kFloat16)) == 0.0);
  CHECK(minidl::testing::max_abs_diff(kernel_copy<BFloat16, double>(r), r.to(kBFloat16)) == 0.0);
  CHECK(minidl::testing::max_abs_diff(kernel_copy<float, double>(r), r.to(kFloat32)) == 0.0);
  CHECK(minidl::testing::max_abs_diff(kernel_copy<int64_t, double>(r), r.to(kInt64)) == 0.0);
  const Tensor h = r.to(kFloat16);
  CHECK(minidl::testing::max_abs_diff(kernel_copy<BFloat16, Half>(h), h.to(kBFloat16)) == 0.0);
  CHECK(minidl::testing::max_abs_diff(kernel_copy<double, Half>(h.t()), h.t().to(kFloat64)) == 0.0);
  const Tensor u = full({3, 4}, 200.0, TensorOptions(kUInt8));
  CHECK(kernel_copy<Half, uint8_t>(u).to_vector<double>() == std::vector<double>(12, 200.0));
}

TEST_CASE("blocks_for: covers n, at least one block, capped") {
  CHECK(cuda_detail::blocks_for(0) == 1);
  CHECK(cuda_detail::blocks_for(1) == 1);
  CHECK(cuda_detail::blocks_for(256) == 1);
  CHECK(cuda_detail::blocks_for(257) == 2);
  CHECK(cuda_detail::blocks_for(int64_t{1} << 40) == 65535u * 8u);
}
