// The golden replay of tests/test_grad_scaler.cpp, shared with the GPU test
// (tests/test_cuda_grad_scaler.cpp): tests/goldens/grad_scaler.json, written
// by scripts/make_grad_scaler_goldens.py with torch.amp.GradScaler("cpu").
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "minidl/minidl.h"
#include "tests/device_test_util.h"

namespace minidl::testing {

using nlohmann::json;

inline double as_number(const json& v) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    REQUIRE(s == "nan");
    return std::numeric_limits<double>::quiet_NaN();
  }
  return v.get<double>();
}

inline std::vector<double> numbers(const json& list) {
  std::vector<double> out;
  for (const json& v : list) out.push_back(as_number(v));
  return out;
}

// Equal values, NaN equal to NaN (the golden writes every NaN as "nan").
inline bool same(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) ? !std::isnan(got[i]) : got[i] != want[i]) return false;
  }
  return true;
}

inline Tensor values_on(const std::vector<double>& v, DType dtype, Device device) {
  return tensor(v).to(dtype).to(device);
}

inline const json& goldens() {
  static const json fixture = [] {
    std::ifstream in(std::string(MINIDL_GOLDENS_DIR) + "/grad_scaler.json");
    REQUIRE(in.good());
    return json::parse(in);
  }();
  return fixture;
}

// Replays one golden case on `device`. Off the CPU, CPU storages made by
// scale+backward, unscale_, step and update are counted (the test's own
// reads are not): the one host read of step() makes the only one.
inline void replay(const json& c, Device device) {
  const std::string dev = device.str();
  CAPTURE(c.at("name").get<std::string>());
  CAPTURE(dev);
  const std::vector<std::string> names = {"w32", "w64"};
  const std::vector<DType> dtypes = {kFloat32, kFloat64};
  std::vector<Tensor> params;
  for (size_t k = 0; k < 2; ++k)
    params.push_back(values_on(numbers(c.at("init").at(names[k])), dtypes[k], device).requires_grad_());
  optim::SGD opt(params, c.at("lr").get<double>(), c.at("momentum").get<double>());
  amp::GradScaler scaler(dev, c.at("init_scale").get<double>(), c.value("growth_factor", 2.0),
                         c.value("backoff_factor", 0.5), c.at("growth_interval").get<int64_t>());
  int step = 0;
  for (const json& s : c.at("steps")) {
    CAPTURE(step);
    opt.zero_grad();
    std::vector<Tensor> losses;
    for (size_t k = 0; k < 2; ++k)
      losses.push_back((params[k] * values_on(numbers(s.at("x").at(names[k])), dtypes[k], device)).sum());
    const int64_t cpu_backward = testing::cpu_storages_made([&] {
      for (const Tensor& scaled : scaler.scale(losses)) scaled.backward();
    });
    if (!device.is_cpu()) CHECK(cpu_backward == 0);
    for (const json& p : s.at("poison")) {
      const size_t k = p[0] == "w32" ? 0 : 1;
      std::vector<double> g = params[k].grad().to_vector<double>();
      g[p[1].get<size_t>()] = as_number(p[2]);
      params[k].set_grad(values_on(g, dtypes[k], device));
    }
    bool stepped = false;
    const int64_t cpu_step = testing::cpu_storages_made([&] {
      if (s.at("unscale").get<bool>()) scaler.unscale_(opt);
      stepped = scaler.step(opt);
    });
    if (!device.is_cpu()) CHECK(cpu_step == 1);  // the read of found_inf
    CHECK(stepped == s.at("stepped").get<bool>());
    for (size_t k = 0; k < 2; ++k) {
      CAPTURE(names[k]);
      CHECK(same(params[k].grad().to_vector<double>(), numbers(s.at("grads").at(names[k]))));
      CHECK(same(params[k].to_vector<double>(), numbers(s.at("params").at(names[k]))));
      CHECK(params[k].grad().device() == device);
    }
    const int64_t cpu_update = testing::cpu_storages_made([&] {
      if (s.contains("new_scale"))
        scaler.update(s.at("new_scale").get<double>());
      else
        scaler.update();
    });
    if (!device.is_cpu()) CHECK(cpu_update == 0);
    CHECK(scaler.get_scale_async().device() == device);
    CHECK(scaler.get_scale() == s.at("scale").get<double>());
    CHECK(scaler.get_growth_tracker() == s.at("growth_tracker").get<int64_t>());
    ++step;
  }
  CHECK(scaler.state_dict() == c.at("state_dict"));
}

}  // namespace minidl::testing
