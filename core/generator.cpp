#include "minidl/core/generator.h"

#include <cmath>
#include <numbers>
#include <sstream>

#include "minidl/core/check.h"

namespace minidl {

void Generator::manual_seed(uint64_t seed) {
  seed_ = seed;
  engine_.seed(seed);
  has_spare_normal_ = false;
}

double Generator::uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

double Generator::normal() {
  if (has_spare_normal_) {
    has_spare_normal_ = false;
    return spare_normal_;
  }
  const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
  const double u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  spare_normal_ = r * std::sin(2.0 * std::numbers::pi * u2);
  has_spare_normal_ = true;
  return r * std::cos(2.0 * std::numbers::pi * u2);
}

int64_t Generator::randint(int64_t low, int64_t high) {
  MINIDL_CHECK(low < high, "randint: expected low < high, got low=", low, " high=", high);
  // In uint64 (modulo 2^64): high - low and low + offset wrap nowhere for
  // any int64 bounds, and give the same values as the int64 arithmetic did.
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  // Rejection sampling removes modulo bias.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % range;
  uint64_t r;
  do r = engine_(); while (r >= limit);
  return static_cast<int64_t>(static_cast<uint64_t>(low) + r % range);
}

std::string Generator::state() const {
  std::ostringstream os;
  os << seed_ << ' ' << has_spare_normal_ << ' ';
  os.precision(17);
  os << spare_normal_ << ' ' << engine_;
  return os.str();
}

void Generator::set_state(const std::string& state) {
  std::istringstream is(state);
  Generator g;
  is >> g.seed_ >> g.has_spare_normal_ >> g.spare_normal_ >> g.engine_;
  MINIDL_CHECK(!is.fail(), "Generator::set_state: the state string is not one written by state()");
  *this = g;
}

Generator& default_generator() {
  static Generator g;
  return g;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace minidl
