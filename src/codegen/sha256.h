// SHA-256 (FIPS 180-4) for cache keys and entry checksums: a key must not collide between two kernels'
// sources, and a checksum must catch any truncation or overwrite of a cached library.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lmcore::codegen::detail {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::string hex();  // finishes; 64 lowercase hex digits

 private:
  void block(const std::uint8_t* p);
  std::uint32_t h_[8];
  std::uint8_t buf_[64];
  std::size_t fill_ = 0;
  std::uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view s);
// The digest of a file's bytes; empty when it cannot be read.
std::string sha256_file(const std::string& path, std::uint64_t* size = nullptr);

}  // namespace lmcore::codegen::detail
