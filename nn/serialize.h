// Saving and loading a module's state_dict as a safetensors file (the format
// of Hugging Face's `safetensors` package, so checkpoints move to and from
// PyTorch: safetensors.torch.load_file + model.load_state_dict).
#pragma once

#include <string>

#include "minidl/nn/module.h"

namespace minidl::nn {

// Writes module.state_dict() (PyTorch's names) atomically: a temporary file
// renamed over `path`, so a crash never leaves a half-written checkpoint.
void save_state_dict(const Module& module, const std::string& path);

// Reads `path` and loads it with module.load_state_dict(tensors, strict).
// A missing, truncated or corrupt file throws load_safetensors' error (naming
// the file) and leaves the module unchanged.
LoadStateDictResult load_state_dict_file(Module& module, const std::string& path, bool strict = true);

}  // namespace minidl::nn
