// The CUDA backend's registration: one register_<family>_cuda_kernels() call
// per op family, as each family gains a CUDA kernel (ops/cuda/<family>.cu).
// Until then every op on a CUDA tensor says it has no CUDA kernel yet.
namespace minidl {

void register_cuda_kernels() {}

}  // namespace minidl
