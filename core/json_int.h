// Integers read from JSON that came from a file (checkpoints, state dicts):
// nlohmann's get<int64_t>() converts a JSON float too, silently truncating
// 1.5 and with undefined behaviour for 3.9e61 (found by fuzz_checkpoint), so
// these accept JSON integers only and refuse the rest with minidl::Error
// naming what was read.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "minidl/core/check.h"

namespace minidl {

inline int64_t json_int64(const nlohmann::json& v, const std::string& what) {
  MINIDL_CHECK(v.is_number_integer(), what, ": expected an integer, got ", v.dump());
  if (v.is_number_unsigned())
    MINIDL_CHECK(v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), what,
                 ": expected an integer that fits int64, got ", v.dump());
  return v.get<int64_t>();
}

inline uint64_t json_uint64(const nlohmann::json& v, const std::string& what) {
  MINIDL_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), what,
               ": expected an integer >= 0, got ", v.dump());
  return v.get<uint64_t>();
}

}  // namespace minidl
