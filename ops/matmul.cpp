// Placeholder until the matmul ops land: registers no kernel.
namespace minidl {
void register_matmul_cpu_kernels() {}
}  // namespace minidl
