// Placeholder until the conv2d ops land: registers no kernel.
namespace minidl {
void register_conv2d_cpu_kernels() {}
}  // namespace minidl
