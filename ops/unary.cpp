// Placeholder until the unary ops land: registers no kernel.
namespace minidl {
void register_unary_cpu_kernels() {}
}  // namespace minidl
