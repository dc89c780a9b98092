// Seeded random float vectors for kernel tests that work on plain arrays (not tensors).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace lmcore::testing {

// n values from N(mean, 1).
inline std::vector<float> normal_floats(std::int64_t n, std::uint32_t seed, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(mean, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// n values uniform in [lo, hi).
inline std::vector<float> uniform_floats(std::int64_t n, std::uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

}  // namespace lmcore::testing
