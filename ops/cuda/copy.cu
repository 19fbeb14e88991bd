// copy_ on CUDA (ops/copy.h's kernel interface): dst = src converted to
// dst's dtype, any strides, any of the six dtypes, in every direction:
//   host -> device   the host side is made contiguous (and converted) on the
//                    CPU, then one cudaMemcpyAsync, then a device kernel if
//                    dst is strided;
//   device -> host   the device side is made contiguous in dst's dtype by a
//                    kernel, then one cudaMemcpyAsync, then the stream is
//                    synchronized: item() and to_vector() read at once;
//   device -> device one strided conversion kernel on the same device, or a
//                    peer copy between devices, ordered on both streams.
// Everything runs on the current stream of the CUDA device. As PyTorch,
// a copy that touches host memory synchronizes that stream before returning
// unless non_blocking; non_blocking leaves it asynchronous only where that is
// safe: from/to pinned memory, whose block then waits for the copy's event
// before it is freed (record_pinned_host_use).
// Not handled (as the CPU kernel): a dst that overlaps src in memory.
#include "minidl/core/cuda/graph.h"
#include "minidl/core/cuda/runtime.h"
#include "minidl/core/dtype.h"
#include "minidl/ops/copy.h"
#include "minidl/ops/cuda/strided_index.h"
#include "minidl/ops/cuda/tensor_geometry.h"

namespace minidl {

namespace {

using cuda_detail::StridedIndex;

template <class D, class S>
__global__ void copy_kernel(D* dst, StridedIndex di, const S* src, StridedIndex si, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    cuda_detail::copy_element(dst, di, src, si, i);
}

// dst and src on the same CUDA device (current), any strides and dtypes.
void copy_on_device(const Tensor& dst, const Tensor& src, cudaStream_t stream) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    MINIDL_CUDA_CHECK_OP(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(), cudaMemcpyDeviceToDevice, stream),
                         "copy_");
    return;
  }
  const StridedIndex di = cuda_detail::strided_index(dst, "copy_"), si = cuda_detail::strided_index(src, "copy_");
  MINIDL_DISPATCH_ALL_AND_HALF(dst.dtype(), "copy_", [&] {
    using D = scalar_t;
    MINIDL_DISPATCH_ALL_AND_HALF(src.dtype(), "copy_", [&] {
      using S = scalar_t;
      copy_kernel<D, S><<<cuda_detail::blocks_for(n), cuda_detail::kThreadsPerBlock, 0, stream>>>(
          static_cast<D*>(dst.raw_data()), di, static_cast<const S*>(src.raw_data()), si, n);
      MINIDL_CUDA_KERNEL_LAUNCH_CHECK("copy_");
    });
  });
}

// A contiguous tensor of `dtype` on `device` with t's shape.
Tensor scratch(const Tensor& t, DType dtype, Device device) {
  return empty(t.shape(), TensorOptions(dtype).device(device));
}

// Host-side copy with the CPU kernel (no autograd).
void copy_on_host(const Tensor& dst, const Tensor& src) { copy_stub.kernel(kCPU)(dst, src, false); }

void host_to_device(const Tensor& dst, const Tensor& src, bool non_blocking) {
  const int index = dst.device().index;
  const cudaStream_t stream = cuda::current_stream(index);
  // The bytes to send: src itself when it already has dst's dtype and is
  // contiguous, else a contiguous converted host copy.
  Tensor host = src;
  if (src.dtype() != dst.dtype() || !src.is_contiguous()) {
    host = scratch(src, dst.dtype(), kCPU);
    copy_on_host(host, src);
  }
  const Tensor target = dst.is_contiguous() ? dst : scratch(dst, dst.dtype(), dst.device());
  // A pinned source read asynchronously can be captured (each replay copies
  // it again); anything else synchronizes with the host below.
  if (!(non_blocking && host.is_same(src) && src.is_pinned()))
    cuda::check_not_capturing(stream, "copy_ (host to device) from pageable memory or blocking",
                              "it synchronizes with the host; copy into static inputs before replay()");
  MINIDL_CUDA_CHECK_OP(cudaMemcpyAsync(target.raw_data(), host.raw_data(), dst.nbytes(), cudaMemcpyHostToDevice, stream),
                       "copy_ (host to device)");
  if (!target.is_same(dst)) copy_on_device(dst, target, stream);
  // From pageable memory (src, or the host scratch that dies on return)
  // cudaMemcpyAsync "might be synchronous" only (CUDA Runtime API, "API
  // synchronization behavior"): the stream is synchronized below, so neither
  // is freed or written before the copy has read it. A pinned src is read
  // later: the caller promised (non_blocking) not to write it meanwhile, and
  // its block waits for the copy before it is freed.
  const bool async_ok = non_blocking && host.is_same(src) && src.is_pinned();
  if (async_ok) {
    cuda::record_pinned_host_use(src, stream);  // src's memory outlives the copy
  } else {
    MINIDL_CUDA_CHECK_OP(cudaStreamSynchronize(stream), "copy_ (host to device)");
  }
}

void device_to_host(const Tensor& dst, const Tensor& src, bool non_blocking) {
  const int index = src.device().index;
  const cudaStream_t stream = cuda::current_stream(index);
  // On the device: src contiguous in dst's dtype.
  Tensor dev = src;
  if (src.dtype() != dst.dtype() || !src.is_contiguous()) {
    dev = scratch(src, dst.dtype(), src.device());
    copy_on_device(dev, src, stream);
  }
  const Tensor target = dst.is_contiguous() ? dst : scratch(dst, dst.dtype(), kCPU);
  if (!(non_blocking && target.is_same(dst) && dst.is_pinned()))
    cuda::check_not_capturing(stream, "copy_ (device to host), e.g. item() or to(kCPU)",
                              "it synchronizes with the host; read results after replay()");
  MINIDL_CUDA_CHECK_OP(cudaMemcpyAsync(target.raw_data(), dev.raw_data(), dst.nbytes(), cudaMemcpyDeviceToHost, stream),
                       "copy_ (device to host)");
  const bool async_ok = non_blocking && target.is_same(dst) && dst.is_pinned();
  if (async_ok) {
    cuda::record_pinned_host_use(dst, stream);  // dst's memory outlives the copy
  } else {
    MINIDL_CUDA_CHECK_OP(cudaStreamSynchronize(stream), "copy_ (device to host)");
  }
  if (!target.is_same(dst)) copy_on_host(dst, target);
}

// Between two devices: src made contiguous on its device, a peer copy on
// dst's stream (after src's stream's work), the strided conversion on dst's
// device; src's stream then waits for the peer copy before it may reuse the
// scratch block (PyTorch's copy_device_to_device does the same two waits).
void device_to_device(const Tensor& dst, const Tensor& src) {
  const int di = dst.device().index, si = src.device().index;
  const cudaStream_t dst_stream = cuda::current_stream(di), src_stream = cuda::current_stream(si);
  Tensor from = src;
  {
    cuda::DeviceGuard guard(si);
    if (!src.is_contiguous()) {
      from = scratch(src, src.dtype(), src.device());
      copy_on_device(from, src, src_stream);
    }
  }
  cuda::DeviceGuard guard(di);
  const Tensor to = dst.is_contiguous() && dst.dtype() == src.dtype() ? dst : scratch(dst, src.dtype(), dst.device());
  cudaEvent_t src_ready = nullptr, copied = nullptr;
  MINIDL_CUDA_CHECK(cudaEventCreateWithFlags(&src_ready, cudaEventDisableTiming));
  MINIDL_CUDA_CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
  MINIDL_CUDA_CHECK(cudaEventRecord(src_ready, src_stream));
  MINIDL_CUDA_CHECK(cudaStreamWaitEvent(dst_stream, src_ready, 0));
  // from.nbytes(), in src's dtype: dst.nbytes() overran both buffers when dst's dtype is wider.
  MINIDL_CUDA_CHECK_OP(cudaMemcpyPeerAsync(to.raw_data(), di, from.raw_data(), si, from.nbytes(), dst_stream), "copy_");
  if (!to.is_same(dst)) copy_on_device(dst, to, dst_stream);
  MINIDL_CUDA_CHECK(cudaEventRecord(copied, dst_stream));
  MINIDL_CUDA_CHECK(cudaStreamWaitEvent(src_stream, copied, 0));
  (void)cudaEventDestroy(src_ready);  // destruction is deferred by the driver until the event completes
  (void)cudaEventDestroy(copied);
}

void copy_cuda(const Tensor& dst, const Tensor& src, bool non_blocking) {
  if (dst.numel() == 0) return;
  const Device runner = dst.is_cuda() ? dst.device() : src.device();
  cuda::DeviceGuard guard(runner);
  if (src.device().is_cpu()) return host_to_device(dst, src, non_blocking);
  if (dst.device().is_cpu()) return device_to_host(dst, src, non_blocking);
  MINIDL_CHECK(dst.is_cuda() && src.is_cuda(), "copy_: cannot copy between ", src.device().str(), " and ",
               dst.device().str());
  if (dst.device() == src.device()) return copy_on_device(dst, src, cuda::current_stream(dst.device().index));
  device_to_device(dst, src);
}

}  // namespace

void register_copy_cuda_kernels() { copy_stub.set(DeviceType::CUDA, copy_cuda); }

}  // namespace minidl
