// Move-only owners of cuDNN's legacy descriptors (tensor, filter,
// convolution) and the cuDNN names of minidl's dtypes. Destructors never
// throw (a failed destroy is ignored: nothing useful can be done then).
// CUDA build only (ops/cudnn/ is compiled with -DMINIDL_CUDA=ON).
#pragma once

#include <cudnn.h>

#include <array>
#include <climits>
#include <cstdint>
#include <utility>

#include "minidl/core/cuda/library_handles.h"
#include "minidl/core/dtype.h"
#include "minidl/ops/cudnn/conv_key.h"

namespace minidl::cudnn_conv {

// Storage type and the convolution's compute type (float for 16-bit inputs).
inline cudnnDataType_t data_type(DType dtype, const char* op) {
  switch (dtype) {
    case DType::Float32: return CUDNN_DATA_FLOAT;
    case DType::Float64: return CUDNN_DATA_DOUBLE;
    case DType::Float16: return CUDNN_DATA_HALF;
    case DType::BFloat16: return CUDNN_DATA_BFLOAT16;
    default: MINIDL_FAIL(op, ": cuDNN convolutions take floating-point tensors, got ", dtype_name(dtype));
  }
}
inline cudnnDataType_t compute_type(DType dtype) {
  return dtype == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
}

// cuDNN's descriptors hold int sizes (PyTorch splits the batch beyond that; we refuse).
inline int cudnn_int(int64_t v, const char* op) {
  MINIDL_CHECK(v >= 0 && v <= INT_MAX, op, ": size ", v, " does not fit cuDNN's 32-bit descriptors");
  return static_cast<int>(v);
}

template <class Handle, cudnnStatus_t (*Create)(Handle*), cudnnStatus_t (*Destroy)(Handle)>
class Descriptor {
 public:
  Descriptor() { MINIDL_CUDNN_CHECK(Create(&d_)); }
  ~Descriptor() {
    if (d_ != nullptr) (void)Destroy(d_);
  }
  Descriptor(Descriptor&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Descriptor& operator=(Descriptor&& o) noexcept {
    if (this != &o) {
      if (d_ != nullptr) (void)Destroy(d_);
      d_ = std::exchange(o.d_, nullptr);
    }
    return *this;
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  Handle get() const { return d_; }

 private:
  Handle d_ = nullptr;
};

// An N-d tensor (nd = 4 or 5; sizes NCHW / NCDHW), contiguous or with the
// given strides (channels last: ops/cudnn/conv_key.h layout_strides).
class TensorDescriptor
    : public Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor> {
 public:
  TensorDescriptor(DType dtype, const std::array<int64_t, 5>& sizes, int nd, const char* op)
      : TensorDescriptor(dtype, sizes, contiguous_strides(sizes, nd), nd, op) {}
  TensorDescriptor(DType dtype, const std::array<int64_t, 5>& sizes, const std::array<int64_t, 5>& strides, int nd,
                   const char* op) {
    int dims[5], st[5];
    for (int i = 0; i < nd; ++i) {
      dims[i] = cudnn_int(sizes[static_cast<size_t>(i)], op);
      st[i] = cudnn_int(strides[static_cast<size_t>(i)], op);
    }
    MINIDL_CUDNN_CHECK(cudnnSetTensorNdDescriptor(get(), data_type(dtype, op), nd, dims, st));
  }
};

// Weights (K, C/groups, kernel...): sizes in NCHW order, laid out NCHW or
// channels last (NHWC: cuDNN's format for both 4-D and 5-D filters).
class FilterDescriptor
    : public Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor> {
 public:
  FilterDescriptor(DType dtype, const std::array<int64_t, 5>& sizes, int nd, bool channels_last, const char* op) {
    int dims[5];
    for (int i = 0; i < nd; ++i) dims[i] = cudnn_int(sizes[static_cast<size_t>(i)], op);
    const cudnnTensorFormat_t format = channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    MINIDL_CUDNN_CHECK(cudnnSetFilterNdDescriptor(get(), data_type(dtype, op), format, nd, dims));
  }
};

// Padding, stride, dilation, groups of a cross-correlation (PyTorch's conv).
class ConvolutionDescriptor : public Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                                                cudnnDestroyConvolutionDescriptor> {
 public:
  ConvolutionDescriptor(const ConvShape& s, DType dtype, const char* op) {
    int pad[3], stride[3], dilation[3];
    for (int i = 0; i < s.spatial; ++i) {
      pad[i] = cudnn_int(s.pad[static_cast<size_t>(i)], op);
      stride[i] = cudnn_int(s.stride[static_cast<size_t>(i)], op);
      dilation[i] = cudnn_int(s.dilation[static_cast<size_t>(i)], op);
    }
    MINIDL_CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(get(), s.spatial, pad, stride, dilation,
                                                       CUDNN_CROSS_CORRELATION, compute_type(dtype)));
    MINIDL_CUDNN_CHECK(cudnnSetConvolutionGroupCount(get(), cudnn_int(s.groups, op)));
  }
  void set_math(cudnnMathType_t math) { MINIDL_CUDNN_CHECK(cudnnSetConvolutionMathType(get(), math)); }
};

}  // namespace minidl::cudnn_conv
