// Placeholder until the pooling ops land: registers no kernel.
namespace minidl {
void register_pooling_cpu_kernels() {}
}  // namespace minidl
