// Placeholder until the binary ops land: registers no kernel.
namespace minidl {
void register_binary_cpu_kernels() {}
}  // namespace minidl
