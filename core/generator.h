// The global seeded random generator. Every random draw in minidl (rand,
// randn, init, dropout, shuffling, augmentation) comes from a Generator, so a
// given seed reproduces a run. manual_seed() reseeds the default one.
#pragma once

#include <cstdint>
#include <random>
#include <string>

namespace minidl {

class Generator {
 public:
  explicit Generator(uint64_t seed = 67280421310721ULL) { manual_seed(seed); }

  void manual_seed(uint64_t seed);
  uint64_t initial_seed() const { return seed_; }

  uint64_t next_u64() { return engine_(); }
  double uniform();  // [0, 1) with 53 random bits
  double normal();   // N(0, 1), Box-Muller (portable: same numbers on every libstdc++)
  int64_t randint(int64_t low, int64_t high);  // [low, high)

  // The full state as text, for checkpoints; set_state(state()) restores it.
  std::string state() const;
  void set_state(const std::string& state);

 private:
  uint64_t seed_ = 0;
  std::mt19937_64 engine_;
  bool has_spare_normal_ = false;
  double spare_normal_ = 0.0;
};

Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace minidl
