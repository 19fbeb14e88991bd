// Placeholder until the dropout ops land: registers no kernel.
namespace minidl {
void register_dropout_cpu_kernels() {}
}  // namespace minidl
