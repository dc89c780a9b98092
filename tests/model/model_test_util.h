// Helpers of the model tests: deterministic random buffers and an error report per tensor.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace lmcore::model::testing {

inline std::vector<float> random_vector(std::int64_t n, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = d(gen);
  return v;
}

inline double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

// Largest |got - want| over the elements; fails (naming `what`, the index and both values) when it
// exceeds `bound`. Returns the error so that tests can print their measured figures.
inline double expect_close(const std::vector<float>& got, const std::vector<float>& want, double bound,
                           const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(e <= worst)) {
      worst = e;
      at = i;
    }
  }
  if (std::getenv("LMCORE_PRINT_ERRORS")) std::printf("%s: error %.3g, bound %.3g\n", what.c_str(), worst, bound);
  EXPECT_LE(worst, bound) << what << ": max error " << worst << " at [" << at << "]: got " << got[at] << ", want "
                          << want[at] << " (bound " << bound << ")";
  return worst;
}

}  // namespace lmcore::model::testing
