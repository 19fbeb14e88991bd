// A small tagged value for ctx->saved_data in custom autograd functions
// (libtorch's IValue, reduced to what an op needs to remember).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "minidl/core/tensor.h"

namespace minidl::autograd {

class IValue {
 public:
  IValue() = default;
  IValue(bool v) : v_(v) {}                      // NOLINT: implicit by design
  IValue(int v) : v_(static_cast<int64_t>(v)) {}  // NOLINT
  IValue(int64_t v) : v_(v) {}                   // NOLINT
  IValue(double v) : v_(v) {}                    // NOLINT
  IValue(std::string v) : v_(std::move(v)) {}    // NOLINT
  IValue(const char* v) : v_(std::string(v)) {}  // NOLINT
  IValue(std::vector<int64_t> v) : v_(std::move(v)) {}  // NOLINT
  IValue(std::vector<double> v) : v_(std::move(v)) {}   // NOLINT
  IValue(Tensor v) : v_(std::move(v)) {}                // NOLINT

  bool is_none() const { return v_.index() == 0; }
  bool to_bool() const { return get<bool>("bool"); }
  int64_t to_int() const { return get<int64_t>("int"); }
  double to_double() const {
    if (auto* i = std::get_if<int64_t>(&v_)) return static_cast<double>(*i);
    return get<double>("double");
  }
  const std::string& to_string() const { return get<std::string>("string"); }
  const std::vector<int64_t>& to_int_list() const { return get<std::vector<int64_t>>("int list"); }
  const std::vector<double>& to_double_list() const { return get<std::vector<double>>("double list"); }
  const Tensor& to_tensor() const { return get<Tensor>("Tensor"); }

 private:
  template <class T>
  const T& get(const char* what) const {
    const T* p = std::get_if<T>(&v_);
    MINIDL_CHECK(p != nullptr, "IValue: expected a ", what, ", got ", kind());
    return *p;
  }
  const char* kind() const {
    static const char* names[] = {"None", "bool", "int", "double", "string", "int list", "double list", "Tensor"};
    return names[v_.index()];
  }
  std::variant<std::monostate, bool, int64_t, double, std::string, std::vector<int64_t>,
               std::vector<double>, Tensor>
      v_;
};

// ctx->saved_data: an op's non-tensor state by name, used as a std::map
// (saved_data["k"] = v; saved_data["k"].to_int(); at("k")). A flat list: a
// node holds a few entries, and a std::map allocated a tree node for each on
// every op call. References from operator[] last until the next insertion.
class SavedData {
 public:
  IValue& operator[](std::string_view key) {
    if (IValue* v = find(key)) return *v;
    if (entries_.empty()) entries_.reserve(4);
    return entries_.emplace_back(std::string(key), IValue()).second;
  }
  const IValue& at(std::string_view key) const {
    const IValue* v = const_cast<SavedData*>(this)->find(key);
    MINIDL_CHECK(v != nullptr, "saved_data: no value saved under \"", key, "\"");
    return *v;
  }
  bool contains(std::string_view key) const { return const_cast<SavedData*>(this)->find(key) != nullptr; }
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  void clear() { entries_.clear(); }

 private:
  IValue* find(std::string_view key) {
    for (auto& [k, v] : entries_)
      if (k == key) return &v;
    return nullptr;
  }
  std::vector<std::pair<std::string, IValue>> entries_;
};

}  // namespace minidl::autograd
