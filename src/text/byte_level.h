// GPT-2's byte-level alphabet: each of the 256 bytes is written as one printable Unicode character, so
// that a vocabulary of byte strings can be stored as JSON text. Bytes '!'..'~', 0xA1..0xAC and
// 0xAE..0xFF stand for themselves (as code points); the other 68 bytes, in increasing order, become
// U+0100, U+0101, ... (a space, 0x20, is 'Ġ' U+0120; a newline, 0x0A, is 'Ċ' U+010A).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lmcore::text::detail {

// The code point that stands for byte b.
std::uint32_t byte_to_code_point(std::uint8_t b);
// The byte code point cp stands for, or -1 when cp is not in the alphabet.
int code_point_to_byte(std::uint32_t cp);

// Raw bytes -> their byte-level string (UTF-8).
std::string bytes_to_byte_level(std::string_view bytes);
// Byte-level string -> raw bytes. Characters outside the alphabet stand for their own UTF-8 bytes
// (what Hugging Face's ByteLevel decoder does); `*strict` is set false when there was one. `s` must be
// valid UTF-8.
std::string byte_level_to_bytes(std::string_view s, bool* strict = nullptr);

}  // namespace lmcore::text::detail
