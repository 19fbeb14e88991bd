// state_dict <-> safetensors file, through core/safetensors.h.
#include "minidl/nn/serialize.h"

#include "minidl/core/safetensors.h"

namespace minidl::nn {

void save_state_dict(const Module& module, const std::string& path) {
  save_safetensors(path, module.state_dict(), {{"format", "pt"}});
}

LoadStateDictResult load_state_dict_file(Module& module, const std::string& path, bool strict) {
  SafetensorsFile file = load_safetensors(path);  // its errors name the file already
  try {
    return module.load_state_dict(file.tensors, strict);
  } catch (const Error& e) {  // e.g. a checkpoint of another network: say which file
    MINIDL_FAIL("load_state_dict_file: ", path, ": ", e.what());
  }
}

}  // namespace minidl::nn
