// conv2d and conv3d kernels on cuDNN's legacy convolution API (ops/conv2d.h
// and ops/conv3d.h's kernel interfaces; the math and what is saved:
// ops/conv2d.cpp, ops/conv3d.cpp). One Nd code path serves both.
//   forward          y = conv(x, w) (cudnnConvolutionForward, beta = 0),
//                    then y += bias (cudnnAddTensor, a 1 x K x 1 x 1 tensor)
//   backward data    dx = cudnnConvolutionBackwardData(w, dy), beta = 0
//   backward filter  dw = cudnnConvolutionBackwardFilter(x, dy), beta = 0
//   bias grad        dbias = cudnnConvolutionBackwardBias(dy), beta = 0 (16-bit
//                    dy: summed as float32, which cuDNN supports)
// (channels-last: the bias added and its gradient summed by minidl's own
// broadcast add and column reduction, which take any strides.)
// Every output overwrites (the op allocates it; the engine accumulates).
// Stride, padding, dilation and groups (depthwise = groups == C_in) are the
// convolution descriptor's; NCHW / NCDHW contiguous, or x, w, y and their
// gradients all NHWC (ConvShape::channels_last, from a channels-last conv2d:
// cuDNN's tensor-core kernels compute in it, no transposes), float32, float64,
// float16, bfloat16 (16-bit with float32 compute; the CPU kernels refuse
// those, so only float32/float64 are compared with the CPU).
// cuDNN's graph API first (ops/cudnn/conv_graph.h; MINIDL_CUDNN_GRAPH=0
// turns it off), this legacy API where it has no plan; algorithms here:
// ops/cudnn/conv_algo.h (cached per shape and settings);
// workspace: a uint8 tensor from the caching allocator on the current
// stream, released right after the call is enqueued (the allocator reuses
// it only for work later on the same stream). Nothing here synchronizes,
// except a cudnn benchmark search (cudnnFind* times kernels).
// Empty tensors never reach cuDNN (it rejects zero sizes): outputs are
// zero-filled (plus the bias for y) instead.
#include <cuda_runtime_api.h>

#include "minidl/core/backend_settings.h"
#include "minidl/core/cuda/library_handles.h"
#include "minidl/core/cuda/runtime.h"
#include "minidl/ops/conv2d.h"
#include "minidl/ops/conv3d.h"
#include "minidl/ops/cudnn/conv_algo.h"
#include "minidl/ops/cudnn/conv_graph.h"
#include "minidl/ops/cudnn/conv_key.h"
#include "minidl/ops/cudnn/descriptors.h"

namespace minidl {

namespace cudnn_conv {
namespace {

// alpha = 1 and beta = 0/1 in the scaling type cuDNN reads for this dtype
// (double for float64 data, float otherwise).
struct Scale {
  double d0 = 0, d1 = 1;
  float f0 = 0, f1 = 1;
  bool dbl;
  explicit Scale(DType dtype) : dbl(dtype == DType::Float64) {}
  const void* zero() const { return dbl ? static_cast<const void*>(&d0) : &f0; }
  const void* one() const { return dbl ? static_cast<const void*>(&d1) : &f1; }
};

ConvSwitches switches() {
  return {backends::cudnn::deterministic(), backends::cudnn::allow_tf32(), backends::cudnn::benchmark()};
}

void zero_fill(const Tensor& t, const char* op) {
  if (t.numel() == 0) return;
  MINIDL_CUDA_CHECK_OP(cudaMemsetAsync(t.raw_data(), 0, t.nbytes(), cuda::current_stream(t.device().index)), op);
}

// The bias as a (1, K, 1, 1[, 1]) tensor broadcast over y.
TensorDescriptor bias_descriptor(const ConvShape& s, DType dtype, const char* op) {
  std::array<int64_t, 5> sizes{1, s.out_channels, 1, 1, 1};
  return TensorDescriptor(dtype, sizes, s.nd(), op);
}

// dbias = sum of dy over every dim but the channel (beta = 0).
void bias_grad(cudnnHandle_t h, const ConvShape& s, const Tensor& dy, const Tensor& dbias, const char* op) {
  const Scale sc(dy.dtype());
  const TensorDescriptor yd(dy.dtype(), s.y_sizes(), s.nd(), op);
  const TensorDescriptor bd = bias_descriptor(s, dy.dtype(), op);
  MINIDL_CUDNN_CHECK(
      cudnnConvolutionBackwardBias(h, sc.one(), yd.get(), dy.raw_data(), sc.zero(), bd.get(), dbias.raw_data()));
}

void forward(const ConvShape& s, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
             const char* op) {
  cuda::DeviceGuard guard(y.device());
  const int dev = y.device().index;
  const DType dt = y.dtype();
  if (y.numel() == 0) return;
  cudnnHandle_t h = cuda::cudnn_handle(dev);
  const Scale sc(dt);
  if (x.numel() == 0 || w.numel() == 0) {  // no products: y = bias (or 0)
    zero_fill(y, op);
  } else if (const ConvKey key = make_conv_key(ConvDirection::Forward, s, dt, dev, switches());
             !(graph_api_enabled() && graph_forward(h, s, key, x.raw_data(), w.raw_data(), y.raw_data()))) {
    ConvDescriptors d(s, dt, op);
    const ChosenAlgo c = choose_forward(h, d, key, x.raw_data(), w.raw_data(), y.raw_data());
    MINIDL_CUDNN_CHECK(cudnnConvolutionForward(h, sc.one(), d.x.get(), x.raw_data(), d.w.get(), w.raw_data(),
                                               d.conv.get(), static_cast<cudnnConvolutionFwdAlgo_t>(c.choice.algo),
                                               c.workspace_ptr(), c.choice.workspace, sc.zero(), d.y.get(),
                                               y.raw_data()));
  }
  if (bias.defined() && s.channels_last) {
    Tensor(y).add_(bias.view({1, s.out_channels, 1, 1}));  // minidl's broadcast add, walked in NHWC order
  } else if (bias.defined()) {
    const TensorDescriptor bd = bias_descriptor(s, dt, op);
    const TensorDescriptor yd(dt, s.y_sizes(), s.nd(), op);
    MINIDL_CUDNN_CHECK(cudnnAddTensor(h, sc.one(), bd.get(), bias.raw_data(), sc.one(), yd.get(), y.raw_data()));
  }
}

void backward(const ConvShape& s, const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,
              const Tensor& dw, const Tensor& dbias, const char* op) {
  cuda::DeviceGuard guard(dy.device());
  const int dev = dy.device().index;
  const DType dt = dy.dtype();
  const Scale sc(dt);
  cudnnHandle_t h = cuda::cudnn_handle(dev);
  const ConvSwitches sw = switches();
  // Empty x, w or dy: every wanted gradient is a sum over nothing.
  const bool empty_problem = dy.numel() == 0 || (dx.defined() && dx.numel() == 0) ||
                             (dw.defined() && dw.numel() == 0) || s.batch == 0 || s.in_channels == 0;
  if (empty_problem) {
    if (dx.defined()) zero_fill(dx, op);
    if (dw.defined()) zero_fill(dw, op);
  } else if (dx.defined() || dw.defined()) {
    ConvDescriptors d(s, dt, op);
    const bool graph = graph_api_enabled();
    if (const ConvKey key = make_conv_key(ConvDirection::BackwardData, s, dt, dev, sw);
        dx.defined() && !(graph && graph_backward_data(h, s, key, w.raw_data(), dy.raw_data(), dx.raw_data()))) {
      const ChosenAlgo c = choose_backward_data(h, d, key, w.raw_data(), dy.raw_data(), dx.raw_data());
      MINIDL_CUDNN_CHECK(
          cudnnConvolutionBackwardData(h, sc.one(), d.w.get(), w.raw_data(), d.y.get(), dy.raw_data(), d.conv.get(),
                                       static_cast<cudnnConvolutionBwdDataAlgo_t>(c.choice.algo), c.workspace_ptr(),
                                       c.choice.workspace, sc.zero(), d.x.get(), dx.raw_data()));
    }
    if (const ConvKey key = make_conv_key(ConvDirection::BackwardFilter, s, dt, dev, sw);
        dw.defined() && !(graph && graph_backward_filter(h, s, key, x.raw_data(), dy.raw_data(), dw.raw_data()))) {
      const ChosenAlgo c = choose_backward_filter(h, d, key, x.raw_data(), dy.raw_data(), dw.raw_data());
      MINIDL_CUDNN_CHECK(
          cudnnConvolutionBackwardFilter(h, sc.one(), d.x.get(), x.raw_data(), d.y.get(), dy.raw_data(), d.conv.get(),
                                         static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.choice.algo), c.workspace_ptr(),
                                         c.choice.workspace, sc.zero(), d.w.get(), dw.raw_data()));
    }
  }
  if (dbias.defined()) {
    if (dy.numel() == 0) {
      zero_fill(dbias, op);
    } else if (s.channels_last) {
      // NHWC dy is (N*H*W) rows of K values: dbias is its column sums (minidl's reduction).
      const Tensor rows = dy.permute({0, 2, 3, 1}).reshape({-1, s.out_channels});
      Tensor(dbias).copy_(rows.sum({0}));  // 16-bit values summed in double, rounded once
    } else if (is_reduced_floating(dt)) {
      // cudnnConvolutionBackwardBias refuses 16-bit data (CUDNN_STATUS_NOT_SUPPORTED,
      // cuDNN 9 on an H100): sum a float32 copy of dy, round once.
      const Tensor db32 = empty(dbias.shape(), TensorOptions(DType::Float32).device(dbias.device()));
      bias_grad(h, s, dy.to(DType::Float32), db32, op);
      Tensor(dbias).copy_(db32);  // a handle to the same storage
    } else {
      bias_grad(h, s, dy, dbias, op);
    }
  }
}

void conv2d_forward_nchw(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias,
                         const Tensor& y) {
  forward(conv_shape(g), x, w, bias, y, "conv2d");
}
void conv2d_backward_nchw(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                          const Tensor& dx, const Tensor& dw, const Tensor& dbias) {
  backward(conv_shape(g), x, w, dy, dx, dw, dbias, "conv2d_backward");
}
// cuDNN has no NHWC float64 convolutions (PyTorch keeps float64 NCHW for
// that reason): a channels-last float64 call goes through NCHW copies.
void conv2d_forward_cuda(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias,
                         const Tensor& y) {
  if (g.channels_last && x.dtype() == DType::Float64)
    return conv2d_forward_nchw_copies(conv2d_forward_nchw, g, x, w, bias, y);
  conv2d_forward_nchw(g, x, w, bias, y);
}
void conv2d_backward_cuda(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                          const Tensor& dx, const Tensor& dw, const Tensor& dbias) {
  if (g.channels_last && dy.dtype() == DType::Float64)
    return conv2d_backward_nchw_copies(conv2d_backward_nchw, g, x, w, dy, dx, dw, dbias);
  conv2d_backward_nchw(g, x, w, dy, dx, dw, dbias);
}
void conv3d_forward_cuda(const Conv3dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias,
                         const Tensor& y) {
  forward(conv_shape(g), x, w, bias, y, "conv3d");
}
void conv3d_backward_cuda(const Conv3dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                          const Tensor& dx, const Tensor& dw, const Tensor& dbias) {
  backward(conv_shape(g), x, w, dy, dx, dw, dbias, "conv3d_backward");
}

}  // namespace
}  // namespace cudnn_conv

void register_conv_cuda_kernels() {
  conv2d_forward_stub.set(DeviceType::CUDA, cudnn_conv::conv2d_forward_cuda);
  conv2d_backward_stub.set(DeviceType::CUDA, cudnn_conv::conv2d_backward_cuda);
  conv3d_forward_stub.set(DeviceType::CUDA, cudnn_conv::conv3d_forward_cuda);
  conv3d_backward_stub.set(DeviceType::CUDA, cudnn_conv::conv3d_backward_cuda);
}

}  // namespace minidl
