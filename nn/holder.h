// ModuleHolder<Impl>: the handle users hold for a module (PyTorch C++'s
// pimpl.h, kept shallow). It owns a std::shared_ptr<Impl>; copying a holder
// aliases the same module. MINIDL_MODULE(Linear) defines
// `class Linear : public ModuleHolder<LinearImpl>`, so user code reads
//
//   auto conv = nn::Conv2d(nn::Conv2dOptions(3, 64, 3).padding(1));
//   Tensor y = conv(x);            // conv->forward(x)
//   conv->weight, conv->train(false), conv.ptr()
//
// An empty holder (member placeholders assigned later in a constructor) is
// made with `nn::Linear fc{nullptr};`.
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

#include "minidl/core/check.h"

namespace minidl::nn {

class Module;

template <class Impl>
class ModuleHolder {
 public:
  using ImplType = Impl;

  // Builds a new Impl from the arguments (none: Impl's default constructor,
  // when it has one; otherwise the holder starts empty).
  ModuleHolder() {
    if constexpr (std::is_default_constructible_v<Impl>) impl_ = std::make_shared<Impl>();
  }
  ModuleHolder(std::nullptr_t) {}  // NOLINT: empty holder
  ModuleHolder(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}  // NOLINT: wraps an existing module
  // (A single argument that is itself this holder type is a copy, not a new Impl.)
  template <class A0, class... Args>
    requires((sizeof...(Args) > 0 || (!std::is_base_of_v<ModuleHolder, std::remove_cvref_t<A0>> &&
                                       !std::is_same_v<std::remove_cvref_t<A0>, std::nullptr_t> &&
                                       !std::is_same_v<std::remove_cvref_t<A0>, std::shared_ptr<Impl>>)) &&
             std::is_constructible_v<Impl, A0, Args...>)
  explicit ModuleHolder(A0&& a0, Args&&... args)
      : impl_(std::make_shared<Impl>(std::forward<A0>(a0), std::forward<Args>(args)...)) {}

  Impl* operator->() const { return get(); }
  Impl& operator*() const { return *get(); }
  Impl* get() const {
    MINIDL_CHECK(impl_ != nullptr, "Accessing an empty ModuleHolder (it was made with nullptr)");
    return impl_.get();
  }
  const std::shared_ptr<Impl>& ptr() const { return impl_; }
  bool is_empty() const { return impl_ == nullptr; }
  explicit operator bool() const { return impl_ != nullptr; }

  // Calls the module's forward with the same arguments.
  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    return get()->forward(std::forward<Args>(args)...);
  }
  // Indexing containers through the handle: seq[0] == seq->operator[](0).
  template <class Arg>
  decltype(auto) operator[](Arg&& arg) const {
    return (*get())[std::forward<Arg>(arg)];
  }

 private:
  std::shared_ptr<Impl> impl_;
};

// True for module handles (ModuleHolder<X> and classes made by MINIDL_MODULE).
template <class T>
concept ModuleHolderType = requires { typename std::remove_cvref_t<T>::ImplType; } &&
                           std::is_base_of_v<ModuleHolder<typename std::remove_cvref_t<T>::ImplType>,
                                             std::remove_cvref_t<T>>;

}  // namespace minidl::nn

// MINIDL_MODULE(Conv2d) after `struct Conv2dImpl : nn::Module {...}` defines the
// handle class Conv2d (in the current namespace).
#define MINIDL_MODULE(Name)                                            \
  class Name : public ::minidl::nn::ModuleHolder<Name##Impl> {         \
   public:                                                             \
    using ::minidl::nn::ModuleHolder<Name##Impl>::ModuleHolder;        \
    using Impl = Name##Impl;                                           \
  }
