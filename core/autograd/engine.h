// Runs backward: from the root tensors, each node executes once all
// gradients flowing into it have arrived (dependency counting), later-created
// nodes first among the ready ones, as PyTorch's engine does on one thread.
#pragma once

#include <functional>

#include "minidl/core/autograd/node.h"

namespace minidl::autograd {

// grads[i] seeds roots[i]; an undefined grad means ones (scalar roots only).
void backward(const variable_list& roots, const variable_list& grads = {},
              bool retain_graph = false);

// Queues `callback` to run when the backward() now running on this thread has
// executed every node, just before it returns (PyTorch's
// Variable._execution_engine.queue_callback). DDP's reducer finishes its
// gradient all-reduces this way. Callbacks run in queue order and may queue
// more; a backward that throws drops them. Outside a backward it throws.
void queue_callback(std::function<void()> callback);

}  // namespace minidl::autograd
