// Placeholder until the reduce ops land: registers no kernel.
namespace minidl {
void register_reduce_cpu_kernels() {}
}  // namespace minidl
