// Helpers shared by the io unit tests: temporary directories, byte buffers, expected errors.
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

namespace lmcore::io::testing {

inline std::span<const std::byte> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "lmcore_io_test_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Runs fn and returns the lmcore::Error message (fails the test when nothing or something else is thrown).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected lmcore::Error, got std::exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected lmcore::Error, nothing was thrown";
  return "";
}

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
