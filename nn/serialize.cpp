// state_dict <-> safetensors file, through core/safetensors.h.
#include "minidl/nn/serialize.h"

#include "minidl/core/safetensors.h"

namespace minidl::nn {

void save_state_dict(const Module& module, const std::string& path) {
  save_safetensors(path, module.state_dict(), {{"format", "pt"}});
}

LoadStateDictResult load_state_dict_file(Module& module, const std::string& path, bool strict) {
  SafetensorsFile file = load_safetensors(path);
  return module.load_state_dict(file.tensors, strict);
}

}  // namespace minidl::nn
