// Sequential and ModuleList: numbered children, indexing, chained forward.
#include "minidl/nn/modules/container.h"

namespace minidl::nn {

void ModuleListBase::push_back_ptr(std::shared_ptr<Module> module) {
  register_module(std::to_string(size()), std::move(module));
}

std::shared_ptr<Module> ModuleListBase::operator[](int64_t index) const {
  const int64_t n = static_cast<int64_t>(size());
  MINIDL_CHECK(index >= -n && index < n, "index ", index, " is out of range");
  return children_registry()[static_cast<size_t>(index < 0 ? index + n : index)].second;
}

Tensor SequentialImpl::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& [name, child] : children_registry()) x = child->forward(x);
  return x;
}

}  // namespace minidl::nn
