// Helpers shared by the io unit tests: byte buffers and tensors, plus the base tests' temporary
// directory, file and error helpers.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "lmcore/core/error.h"
#include "lmcore/io/checkpoint.h"
#include "tests/base/base_test_util.h"

namespace lmcore::io::testing {

inline std::span<const std::byte> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// The temporary directory, whole-file reads and writes and expected errors of the base tests.
using base::testing::error_of;
using base::testing::slurp;
using base::testing::spit;
using base::testing::TempDir;

#define EXPECT_ERROR_HAS(stmt, needle)                                   \
  do {                                                                   \
    const std::string msg_ = ::lmcore::io::testing::error_of([&] { stmt; }); \
    EXPECT_NE(msg_.find(needle), std::string::npos) << "message: " << msg_;  \
  } while (0)

// Bytes of a tensor (contiguous), for bit-exact comparisons.
inline std::string tensor_bytes(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

// A tensor of `dtype` filled with arbitrary bit patterns (every byte varies).
inline Tensor pattern_tensor(const Shape& shape, DType dtype, unsigned seed) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* p = static_cast<unsigned char*>(t.data_ptr());
  std::uint32_t s = seed * 2654435761u + 7;
  for (std::size_t i = 0; i < t.nbytes(); ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = static_cast<unsigned char>(s >> 24);
  }
  if (dtype == DType::boolean)
    for (std::size_t i = 0; i < t.nbytes(); ++i) p[i] &= 1;
  return t;
}

}  // namespace lmcore::io::testing
