// Private UTF-8 helpers of the text part: well-formedness (Unicode 15, table 3-7: no overlong forms, no
// surrogates, nothing above U+10FFFF) and the lossy conversion Rust's String::from_utf8_lossy does
// (one U+FFFD per maximal invalid subpart), which is what Hugging Face's decoders return.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace lmcore::text::detail {

// What a lead byte allows (table 3-7): the sequence length (0: not a lead byte) and the range of the
// second byte, which is narrower after E0, ED, F0 and F4.
struct Utf8Lead {
  int len;
  unsigned lo, hi;
};

inline Utf8Lead utf8_lead(unsigned c) {
  if (c >= 0xC2 && c <= 0xDF) return {2, 0x80, 0xBF};
  if (c >= 0xE0 && c <= 0xEF) return {3, c == 0xE0 ? 0xA0u : 0x80u, c == 0xED ? 0x9Fu : 0xBFu};
  if (c >= 0xF0 && c <= 0xF4) return {4, c == 0xF0 ? 0x90u : 0x80u, c == 0xF4 ? 0x8Fu : 0xBFu};
  return {0, 0, 0};
}

// Length of the well-formed sequence starting at p[0] (1-4), or 0 when none starts there. `n` >= 1
// bytes are readable.
inline int utf8_sequence_length(const unsigned char* p, std::size_t n) {
  if (p[0] < 0x80) return 1;
  const Utf8Lead lead = utf8_lead(p[0]);
  if (lead.len == 0 || n < static_cast<std::size_t>(lead.len) || p[1] < lead.lo || p[1] > lead.hi) return 0;
  for (int k = 2; k < lead.len; ++k)
    if ((p[k] & 0xC0) != 0x80) return 0;
  return lead.len;
}

// Length of the maximal subpart of an ill-formed sequence at p[0] (where utf8_sequence_length is 0):
// the lead byte and the continuation bytes that could still have completed it.
inline int utf8_invalid_length(const unsigned char* p, std::size_t n) {
  const Utf8Lead lead = utf8_lead(p[0]);
  if (lead.len == 0) return 1;
  int k = 1;
  if (static_cast<std::size_t>(k) < n && p[k] >= lead.lo && p[k] <= lead.hi) {
    ++k;
    while (k < lead.len && static_cast<std::size_t>(k) < n && (p[k] & 0xC0) == 0x80) ++k;
  }
  return k;
}

// Index of the first byte that is not part of a well-formed sequence, or npos. ASCII runs go 8 bytes
// at a time.
inline std::size_t first_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    if (i + 8 <= n) {
      std::uint64_t w;
      std::memcpy(&w, p + i, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const int len = utf8_sequence_length(p + i, n - i);
    if (len == 0) return i;
    i += static_cast<std::size_t>(len);
  }
  return std::string_view::npos;
}

// Appends `bytes` to `out` with each maximal invalid subpart replaced by U+FFFD.
inline void append_utf8_lossy(std::string& out, std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  std::size_t i = 0, run = 0;  // [run, i) is valid and not yet copied
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const int len = utf8_sequence_length(p + i, n - i);
    if (len > 0) {
      i += static_cast<std::size_t>(len);
      continue;
    }
    out.append(bytes.data() + run, i - run);
    out.append("\xEF\xBF\xBD");
    i += static_cast<std::size_t>(utf8_invalid_length(p + i, n - i));
    run = i;
  }
  out.append(bytes.data() + run, n - run);
}

// Appends the UTF-8 encoding of code point cp (< 0x110000, not a surrogate).
inline void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Decodes the well-formed sequence of `len` bytes at p.
inline std::uint32_t decode_utf8(const unsigned char* p, int len) {
  switch (len) {
    case 1:
      return p[0];
    case 2:
      return ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
    case 3:
      return ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
    default:
      return ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
  }
}

}  // namespace lmcore::text::detail
