// Runs backward: from the root tensors, each node executes once all
// gradients flowing into it have arrived (dependency counting), later-created
// nodes first among the ready ones, as PyTorch's engine does on one thread.
#pragma once

#include "core/autograd/node.h"

namespace minidl::autograd {

// grads[i] seeds roots[i]; an undefined grad means ones (scalar roots only).
void backward(const variable_list& roots, const variable_list& grads = {},
              bool retain_graph = false);

}  // namespace minidl::autograd
