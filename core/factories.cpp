// Tensor factories. Constant ones (zeros, ones, full) fill on the requested
// device through the fill kernel; random ones, arange and tensor(values) are
// made on the host and copied over: the default Generator lives on the host
// (a device Philox generator comes with the CUDA kernels), and these run at
// set-up time, not per training step.
#include <cmath>
#include <cstring>

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/generator.h"
#include "minidl/core/tensor.h"

namespace minidl {
namespace {

Tensor finish(Tensor t, const TensorOptions& options) {
  if (options.device_ != t.device()) t = t.to(options.device_);
  if (options.requires_grad_) t.requires_grad_(true);
  return t;
}

// Fills a new host tensor of options' dtype with f(i) for i in [0, numel).
template <class F>
Tensor host_tensor(const Shape& shape, const TensorOptions& options, F&& f) {
  Tensor t = empty(shape, TensorOptions(options.dtype_));
  MINIDL_DISPATCH_ALL_AND_HALF(t.dtype(), "tensor factory", [&] {
    scalar_t* p = t.data_ptr<scalar_t>();
    const int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i) p[i] = convert<scalar_t>(f(i));
  });
  return finish(t, options);
}

// PyTorch's two refusals of a size, in its words; every factory comes
// through here (via empty), so no tensor exists whose numel or byte count
// wrapped around.
void check_shape(const Shape& shape, const char* op, DType dtype = kUInt8) {
  for (int64_t s : shape)
    MINIDL_CHECK(s >= 0, op, ": Trying to create tensor with negative dimension ", s, ": ",
                 shape_str(shape));
  MINIDL_CHECK(checked_nbytes(shape, element_size(dtype)).has_value(), op,
               ": Storage size calculation overflowed with sizes=", shape_str(shape));
}

// A new tensor of `shape` laid out by `strides`, which the caller made dense
// (storage for numel elements); shape checked.
Tensor allocate(const Shape& shape, Shape strides, const TensorOptions& options) {
  MINIDL_CHECK(!options.pinned_memory_ || options.device_.is_cpu(), "empty: only CPU tensors can be pinned, got ",
               options.device_.str());
  const auto nbytes = static_cast<size_t>(*checked_nbytes(shape, element_size(options.dtype_)));
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->strides = std::move(strides);
  impl->dtype = options.dtype_;
  Allocator* pinned = options.pinned_memory_ ? pinned_host_allocator() : nullptr;
  impl->storage = pinned ? std::make_shared<Storage>(nbytes, options.device_, pinned)
                         : std::make_shared<Storage>(nbytes, options.device_);
  Tensor t(std::move(impl));
  if (options.requires_grad_) t.requires_grad_(true);
  return t;
}

}  // namespace

// The size is checked before its strides are computed (they would overflow first).
Tensor empty(const Shape& shape, TensorOptions options) {
  check_shape(shape, "empty", options.dtype_);
  return allocate(shape, contiguous_strides(shape), options);
}

Tensor empty_strided(const Shape& shape, const Shape& strides, TensorOptions options) {
  check_shape(shape, "empty", options.dtype_);
  MINIDL_CHECK(strides.size() == shape.size(), "empty_strided: expected ", shape.size(), " strides for size ",
               shape_str(shape), ", got ", strides.size());
  Tensor t = allocate(shape, strides, options);
  // The storage holds numel elements: anything but a dense layout would read past it or alias.
  MINIDL_CHECK(dense_dim_order(t).has_value(), "empty_strided: strides ", shape_str(strides), " for size ",
               shape_str(shape), " are not a dense layout (minidl allocates only permutations of a contiguous one)");
  return t;
}

Tensor empty(const Shape& shape, TensorOptions options, MemoryFormat fmt) {
  MINIDL_CHECK(fmt != MemoryFormat::Preserve, "empty: memory format option preserve_format is only valid for ",
               "empty_like");
  if (fmt == MemoryFormat::Contiguous) return empty(shape, options);
  check_shape(shape, "empty", options.dtype_);
  return allocate(shape, channels_last_strides(shape), options);
}

Tensor empty_like(const Tensor& t, MemoryFormat fmt) {
  if (fmt != MemoryFormat::Preserve) return empty(t.shape(), t.options(), fmt);
  if (dense_dim_order(t).has_value()) return empty_strided(t.shape(), t.strides(), t.options());
  return empty(t.shape(), t.options(), t.suggest_memory_format());
}

Tensor zeros(const Shape& shape, TensorOptions options) {
  if (!options.device_.is_cpu()) return full(shape, 0.0, options);
  Tensor t = empty(shape, options);
  std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

Tensor ones(const Shape& shape, TensorOptions options) { return full(shape, 1.0, options); }

namespace {

// A floating value stored into a `dtype` tensor, truncated for an integer
// dtype, as PyTorch's; NaN, inf and values past the type refused (converting
// them would be undefined behaviour).
double checked_value(DType dtype, double value, const char* op) {
  MINIDL_CHECK(!scalar_overflows(dtype, value), op, ": value cannot be converted to type ", c10_type_name(dtype),
               " without overflow");
  if (is_floating(dtype)) return value;
  const double lo = dtype == kUInt8 ? 0.0 : -0x1p63, end = dtype == kUInt8 ? 256.0 : 0x1p63;
  MINIDL_CHECK(value >= lo && value < end, op, ": value cannot be converted to type ",
               c10_type_name(dtype), " without overflow");
  return std::trunc(value);
}

// full and scalar_tensor (`op` names which).
Tensor filled(const Shape& shape, Scalar value, const TensorOptions& options, const char* op) {
  check_shape(shape, op);
  const double v = checked_scalar_value(options.dtype_, value, op);
  if (!options.device_.is_cpu()) {
    Tensor t = empty(shape, options.requires_grad(false));
    {
      NoGradGuard no_grad;  // a fresh leaf: nothing to record
      t.fill_(value);
    }
    return finish(t, options);
  }
  if (options.dtype_ == kInt64 && value.is_integral()) {  // exact past 2^53, where v rounds
    const int64_t exact = value.to_int64();
    return host_tensor(shape, options, [exact](int64_t) { return exact; });
  }
  return host_tensor(shape, options, [v](int64_t) { return v; });
}

// Scalar::to<int64_t>() of an arange bound: exact for an integer, truncated
// (and range-checked) for a floating value.
int64_t arange_int64(Scalar s) {
  return s.is_integral() && s.fits_int64() ? s.to_int64()
                                           : static_cast<int64_t>(checked_value(kInt64, s.to_double(), "arange"));
}

// The element count of an int64 arange with integer bounds, exactly: |end -
// start| fits uint64 once the signs agree, and the count must fit int64.
int64_t exact_arange_count(int64_t start, int64_t end, int64_t step) {
  const auto dist = step > 0 ? static_cast<uint64_t>(end) - static_cast<uint64_t>(start)
                             : static_cast<uint64_t>(start) - static_cast<uint64_t>(end);
  const uint64_t by = step > 0 ? static_cast<uint64_t>(step) : -static_cast<uint64_t>(step);
  const uint64_t count = dist / by + (dist % by != 0);
  MINIDL_CHECK(count <= static_cast<uint64_t>(INT64_MAX), "arange: invalid size, possible overflow? (", count,
               " elements from ", start, " to ", end, " by ", step, ")");
  return static_cast<int64_t>(count);
}

}  // namespace

double checked_scalar_value(DType dtype, Scalar value, const char* op) {
  if (!value.is_integral() || is_floating(dtype)) return checked_value(dtype, value.to_double(), op);
  // An integer into an integer dtype (PyTorch's overflows<To>(int64)): uint8 also takes
  // [-255, -1], wrapped (two's complement, so u8 - 1 and fill_(-1) agree).
  const bool fits = value.fits_int64() &&
                    (dtype != kUInt8 || (value.to_int64() >= -255 && value.to_int64() <= 255));
  MINIDL_CHECK(fits, op, ": value cannot be converted to type ", c10_type_name(dtype), " without overflow");
  return dtype == kUInt8 ? static_cast<uint8_t>(value.to_int64()) : static_cast<double>(value.to_int64());
}

Tensor full(const Shape& shape, Scalar value, TensorOptions options) { return filled(shape, value, options, "full"); }

Tensor arange(Scalar end, TensorOptions options) { return arange(0, end, 1, options); }

Tensor arange(Scalar start, Scalar end, Scalar step, TensorOptions options) {
  const double dstart = start.to_double(), dend = end.to_double(), dstep = step.to_double();
  MINIDL_CHECK(dstep != 0.0, "arange: step must be nonzero");
  MINIDL_CHECK(std::isfinite(dstart) && std::isfinite(dend), "arange: unsupported range: ", dstart, " -> ", dend);
  MINIDL_CHECK((dstep > 0 && dend >= dstart) || (dstep < 0 && dend <= dstart),
               "arange: upper bound and lower bound inconsistent with step sign");
  if (is_floating(options.dtype_)) {
    const double count = std::ceil((dend - dstart) / dstep);
    // Casting a count beyond int64 to int64 is undefined: refuse it first (PyTorch's words).
    MINIDL_CHECK(count < 9.2e18, "arange: invalid size, possible overflow? (", count, " elements from ", dstart,
                 " to ", dend, " by ", dstep, ")");
    return host_tensor({static_cast<int64_t>(count)}, options,
                       [=](int64_t i) { return dstart + static_cast<double>(i) * dstep; });
  }
  // An integer dtype steps from the truncated start by the truncated step
  // (arange(0, 5, 1.5) is 0, 1, 2, 3), in int64 (uint8 wraps, as PyTorch's).
  const int64_t first = arange_int64(start), by = arange_int64(step);
  int64_t n = 0;
  if (options.dtype_ == kInt64 && start.is_integral() && end.is_integral() && step.is_integral()) {
    n = exact_arange_count(first, arange_int64(end), by);
  } else {
    const double count = std::ceil((dend - dstart) / dstep);
    MINIDL_CHECK(count < 9.2e18, "arange: invalid size, possible overflow? (", count, " elements from ", dstart,
                 " to ", dend, " by ", dstep, ")");
    n = static_cast<int64_t>(count);
  }
  // In uint64, whose wrap-around is defined (int64 overflow is not).
  return host_tensor({n}, options, [=](int64_t i) {
    return static_cast<int64_t>(static_cast<uint64_t>(first) + static_cast<uint64_t>(i) * static_cast<uint64_t>(by));
  });
}

Tensor rand(const Shape& shape, TensorOptions options) {
  check_shape(shape, "rand");
  MINIDL_CHECK(is_floating(options.dtype_), "rand: expected a floating dtype, got ", dtype_name(options.dtype_));
  Generator& g = default_generator();
  return host_tensor(shape, options, [&g](int64_t) { return g.uniform(); });
}

Tensor randn(const Shape& shape, TensorOptions options) {
  check_shape(shape, "randn");
  MINIDL_CHECK(is_floating(options.dtype_), "randn: expected a floating dtype, got ", dtype_name(options.dtype_));
  Generator& g = default_generator();
  return host_tensor(shape, options, [&g](int64_t) { return g.normal(); });
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options) {
  check_shape(shape, "randint");
  if (options.dtype_ == kUInt8) {  // PyTorch's checks; wrapped values before
    MINIDL_CHECK(low >= 0 && low <= 255, "randint: from is out of bounds for unsigned char");
    MINIDL_CHECK(high - 1 <= 255, "randint: to - 1 is out of bounds for unsigned char");
  }
  Generator& g = default_generator();
  // As int64 (through a double, values past 2^53 lost their low bits).
  return host_tensor(shape, options, [&](int64_t) { return g.randint(low, high); });
}

Tensor randperm(int64_t n, TensorOptions options) {
  check_shape({n}, "randperm", kInt64);
  // Every index must be exact in the dtype (PyTorch's checks; wrapped or rounded before).
  MINIDL_CHECK(options.dtype_ != kUInt8 || n <= 256, "randperm: value cannot be converted to type uint8_t without ",
               "overflow (n = ", n, ")");
  MINIDL_CHECK(options.dtype_ != kFloat16 || n <= 2049, "randperm: n cannot be greater than 2049 for Half type.");
  MINIDL_CHECK(options.dtype_ != kBFloat16 || n <= 257, "randperm: n cannot be greater than 257 for BFloat16 type.");
  // The index buffer is a tensor, so a too-large n fails in the allocator
  // with minidl::Error (a std::vector would throw std::bad_alloc).
  Tensor perm = empty({n}, TensorOptions(kInt64));
  int64_t* p = perm.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  Generator& g = default_generator();
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[g.randint(0, i + 1)]);  // Fisher-Yates
  return host_tensor({n}, options, [p](int64_t i) { return p[i]; });
}

Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.options()); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.options()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.options()); }
Tensor full_like(const Tensor& t, Scalar value) { return full(t.shape(), value, t.options()); }
Tensor randn_like(const Tensor& t) { return randn(t.shape(), t.options()); }
Tensor rand_like(const Tensor& t) { return rand(t.shape(), t.options()); }

template <class T>
Tensor tensor(const std::vector<T>& values, const Shape& shape, TensorOptions options) {
  const Shape s = shape.empty() ? Shape{static_cast<int64_t>(values.size())} : shape;
  MINIDL_CHECK(numel_of(s) == static_cast<int64_t>(values.size()), "tensor: shape ", shape_str(s),
               " needs ", numel_of(s), " values, got ", values.size());
  // Values into an integer dtype of another type are range-checked (a float
  // 300 into uint8 is refused, as PyTorch's; int64 into int64 is exact).
  if (!is_floating(options.dtype_) && dtype_v<T> != options.dtype_)
    for (const T& v : values) checked_value(options.dtype_, convert<double>(v), "tensor");
  return host_tensor(s, options, [&values](int64_t i) { return values[i]; });
}
template Tensor tensor(const std::vector<float>&, const Shape&, TensorOptions);
template Tensor tensor(const std::vector<double>&, const Shape&, TensorOptions);
template Tensor tensor(const std::vector<int64_t>&, const Shape&, TensorOptions);
template Tensor tensor(const std::vector<uint8_t>&, const Shape&, TensorOptions);
template Tensor tensor(const std::vector<Half>&, const Shape&, TensorOptions);
template Tensor tensor(const std::vector<BFloat16>&, const Shape&, TensorOptions);

Tensor tensor(std::initializer_list<double> values, const Shape& shape, TensorOptions options) {
  return tensor(std::vector<double>(values), shape, options);
}

Tensor scalar_tensor(Scalar value, TensorOptions options) { return filled({}, value, options, "scalar_tensor"); }

Tensor from_buffer(const void* data, const Shape& shape, DType dtype, TensorOptions options) {
  Tensor t = empty(shape, TensorOptions(dtype));
  // A null buffer is a caller's mistake (an unopened file, an empty vector's
  // data()), not something to memcpy from; zero elements need no bytes.
  MINIDL_CHECK(data != nullptr || t.nbytes() == 0, "from_buffer: expected a non-null data pointer for ",
               t.nbytes(), " bytes of shape ", shape_str(shape), ", got nullptr");
  if (t.nbytes() != 0) std::memcpy(t.raw_data(), data, t.nbytes());
  return finish(t, options);
}

}  // namespace minidl
