// Placeholder until the softmax ops land: registers no kernel.
namespace minidl {
void register_softmax_cpu_kernels() {}
}  // namespace minidl
