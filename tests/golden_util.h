// Reading PyTorch golden fixtures (tests/goldens/*.safetensors written by
// scripts/make_goldens.py): each file holds tensors named "case<i>.<name>" and
// a "cases" metadata entry, a JSON list with one config object per case.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "minidl/core/safetensors.h"
#include "tests/test_util.h"

namespace minidl::testing {

struct Golden {
  std::string file;
  SafetensorsFile data;
  nlohmann::json cases;  // one config object per case

  std::string key(size_t i, const std::string& name) const { return "case" + std::to_string(i) + "." + name; }
  const Tensor& get(size_t i, const std::string& name) const { return data.at(key(i, name)); }
  bool has(size_t i, const std::string& name) const { return data.contains(key(i, name)); }
};

inline Golden load_golden(const std::string& name) {
  Golden g;
  g.file = std::string(MINIDL_GOLDENS_DIR) + "/" + name;
  g.data = load_safetensors(g.file);
  REQUIRE_MESSAGE(g.data.metadata.count("cases"), g.file, " has no \"cases\" metadata");
  g.cases = nlohmann::json::parse(g.data.metadata.at("cases"));
  REQUIRE(g.cases.is_array());
  REQUIRE(!g.cases.empty());
  return g;
}

// Every golden runs in float64 and again in float32 on the converted inputs.
struct Precision {
  DType dtype;
  double tol;  // allowed max |got - want|, relative to max(1, max |want|)
};
inline const Precision kPrecisions[] = {{kFloat64, 1e-10}, {kFloat32, 1e-4}};

// Checks got against PyTorch's want at precision p; returns
// max |got - want| / max(1, max |want|) (NaN counts as infinitely wrong).
inline double check_close(const std::string& what, const Tensor& got, const Tensor& want, const Precision& p) {
  if (!got.defined()) {
    FAIL_CHECK(what, ": undefined (expected a tensor of shape ", shape_str(want.shape()), ")");
    return INFINITY;
  }
  CHECK_MESSAGE(got.dtype() == p.dtype, what, ": dtype ", std::string(dtype_name(got.dtype())));
  if (got.shape() != want.shape()) {
    FAIL_CHECK(what, ": shape ", shape_str(got.shape()), ", PyTorch has ", shape_str(want.shape()));
    return INFINITY;
  }
  const std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  double diff = 0.0, scale = 1.0;
  for (size_t k = 0; k < a.size(); ++k) {
    const double d = std::abs(a[k] - b[k]);
    diff = std::isnan(d) ? INFINITY : std::max(diff, d);
    scale = std::max(scale, std::abs(b[k]));
  }
  CHECK_MESSAGE(diff <= p.tol * scale, what, ": max abs diff ", diff, " > tolerance ", p.tol * scale);
  return diff / scale;
}

// A fresh leaf holding `t` converted to `dtype`.
inline Tensor leaf(const Tensor& t, DType dtype) { return t.to(dtype).clone().detach().requires_grad_(true); }

// What a failed check names, e.g. "conv2d.safetensors case3 {...} float32 gw".
inline std::string label(const Golden& g, size_t i, const Precision& p, const std::string& tensor) {
  return g.file.substr(g.file.rfind('/') + 1) + " case" + std::to_string(i) + " " + g.cases[i].dump() + " " +
         dtype_name(p.dtype) + " " + tensor;
}

}  // namespace minidl::testing
