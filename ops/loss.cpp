// Placeholder until the loss ops land: registers no kernel.
namespace minidl {
void register_loss_cpu_kernels() {}
}  // namespace minidl
