#include "minidl/core/autograd/grad_mode.h"

namespace minidl::autograd {
namespace {
thread_local bool g_grad_enabled = true;
}
bool GradMode::is_enabled() { return g_grad_enabled; }
void GradMode::set_enabled(bool enabled) { g_grad_enabled = enabled; }
}  // namespace minidl::autograd
