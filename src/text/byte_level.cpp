#include "src/text/byte_level.h"

#include <array>

#include "src/text/utf8.h"

namespace lmcore::text::detail {

namespace {

struct Alphabet {
  std::array<std::uint32_t, 256> to_cp{};
  std::array<std::int16_t, 0x144> to_byte{};  // code points < 0x144 only
  std::array<std::string, 256> utf8;
  Alphabet() {
    to_byte.fill(-1);
    std::uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool self = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = self ? static_cast<std::uint32_t>(b) : next++;
      to_byte[to_cp[b]] = static_cast<std::int16_t>(b);
      append_utf8(utf8[b], to_cp[b]);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

std::uint32_t byte_to_code_point(std::uint8_t b) { return alphabet().to_cp[b]; }

int code_point_to_byte(std::uint32_t cp) { return cp < 0x144 ? alphabet().to_byte[cp] : -1; }

std::string bytes_to_byte_level(std::string_view bytes) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) out += a.utf8[c];
  return out;
}

std::string byte_level_to_bytes(std::string_view s, bool* strict) {
  const Alphabet& a = alphabet();
  if (strict) *strict = true;
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  std::size_t i = 0;
  while (i < s.size()) {
    int len = utf8_sequence_length(p + i, s.size() - i);
    if (len == 0) len = 1;  // not reached for valid input; keeps the byte
    const std::uint32_t cp = len == 1 && p[i] >= 0x80 ? p[i] : decode_utf8(p + i, len);
    const int b = cp < 0x144 ? a.to_byte[cp] : -1;
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(s.data() + i, static_cast<std::size_t>(len));
      if (strict) *strict = false;
    }
    i += static_cast<std::size_t>(len);
  }
  return out;
}

}  // namespace lmcore::text::detail
