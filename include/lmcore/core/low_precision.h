// lmcore/core/low_precision.h — 16- and 8-bit floating-point storage types and their f32 casts.
//
//   bf16        1 sign, 8 exponent, 7 mantissa bits (bias 127)
//   f16         1 sign, 5 exponent, 10 mantissa bits (bias 15), IEEE binary16
//   f8_e4m3fn   1 sign, 4 exponent, 3 mantissa bits (bias 7); no infinities, S.1111.111 is NaN, max 448
//   f8_e5m2     1 sign, 5 exponent, 2 mantissa bits (bias 15), IEEE-like with infinities
//
// Every f32 -> narrow cast rounds to nearest, ties to even, and keeps NaN and infinities (f8_e4m3fn,
// which has no infinity, turns overflow and infinity into NaN, as PyTorch does). The f32 -> bf16 and
// f32 -> f16 casts are bit-identical to torch 1.13's (tests/python/test_cast.py checks this). The
// types are plain structs over their bits: arithmetic happens in f32.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace lmcore {

namespace detail {

inline std::uint32_t f32_bits(float f) { return std::bit_cast<std::uint32_t>(f); }
inline float f32_from_bits(std::uint32_t u) { return std::bit_cast<float>(u); }

// Rounds |f| (given as its f32 bits, finite, not NaN) to a binary format with `exp_bits` exponent and
// `man_bits` mantissa bits, IEEE-style subnormals, ties to even. Returns the code without sign; a
// result past the largest finite code is for the caller to map to infinity or NaN.
inline std::uint32_t round_f32_magnitude(std::uint32_t abs_bits, int exp_bits, int man_bits) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const std::uint32_t min_normal_bits = static_cast<std::uint32_t>(127 - bias + 1) << 23;
  if (abs_bits < min_normal_bits) {
    // Subnormal target: count units of 2^(1 - bias - man_bits). The scaling is exact (a power of two)
    // and nearbyint rounds ties to even; a result of 2^man_bits is the smallest normal, as it should be.
    const float scaled = std::ldexp(f32_from_bits(abs_bits), bias - 1 + man_bits);
    return static_cast<std::uint32_t>(std::nearbyint(scaled));
  }
  const int shift = 23 - man_bits;
  const std::uint32_t odd = (abs_bits >> shift) & 1u;
  // Re-bias the exponent and add just under half an ulp (plus one when odd): ties go to even.
  const std::uint32_t rebias = static_cast<std::uint32_t>(bias - 127) << 23;  // wraps, by design
  return (abs_bits + rebias + ((1u << (shift - 1)) - 1u) + odd) >> shift;
}

// Decodes an IEEE-style code (no sign) with subnormals and, if has_inf, an all-ones exponent for
// infinity/NaN. NaN payloads are kept in the top mantissa bits.
inline float decode_minifloat(std::uint32_t code, bool negative, int exp_bits, int man_bits, bool has_inf) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const std::uint32_t exp = code >> man_bits;
  const std::uint32_t man = code & ((1u << man_bits) - 1u);
  const std::uint32_t sign = negative ? 0x80000000u : 0u;
  const std::uint32_t exp_max = (1u << exp_bits) - 1u;
  if (has_inf && exp == exp_max) return f32_from_bits(sign | 0x7F800000u | (man << (23 - man_bits)));
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(man), 1 - bias - man_bits);
    return negative ? -v : v;
  }
  return f32_from_bits(sign | ((exp - bias + 127) << 23) | (man << (23 - man_bits)));
}

}  // namespace detail

struct bf16 {
  std::uint16_t bits = 0;

  static bf16 from_bits(std::uint16_t b) { return bf16{b}; }
  static bf16 from_f32(float f) {
    const std::uint32_t u = detail::f32_bits(f);
    if (std::isnan(f)) return bf16{0xFFFF};  // torch 1.13's (vectorised) cast maps every NaN to 0xFFFF
    const std::uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
    return bf16{static_cast<std::uint16_t>((u + rounding) >> 16)};
  }
  float to_f32() const { return detail::f32_from_bits(static_cast<std::uint32_t>(bits) << 16); }
  explicit operator float() const { return to_f32(); }
};

struct f16 {
  std::uint16_t bits = 0;

  static f16 from_bits(std::uint16_t b) { return f16{b}; }
  static f16 from_f32(float f) {
    const std::uint32_t u = detail::f32_bits(f);
    const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
    const std::uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return f16{static_cast<std::uint16_t>(sign | 0x7E00u)};  // NaN, as torch 1.13
    if (a == 0x7F800000u) return f16{static_cast<std::uint16_t>(sign | 0x7C00u)};
    const std::uint32_t code = detail::round_f32_magnitude(a, 5, 10);
    return f16{static_cast<std::uint16_t>(sign | (code >= 0x7C00u ? 0x7C00u : code))};
  }
  float to_f32() const { return detail::decode_minifloat(bits & 0x7FFFu, bits & 0x8000u, 5, 10, true); }
  explicit operator float() const { return to_f32(); }
};

struct f8_e4m3fn {
  std::uint8_t bits = 0;

  static f8_e4m3fn from_bits(std::uint8_t b) { return f8_e4m3fn{b}; }
  static f8_e4m3fn from_f32(float f) {
    const std::uint32_t u = detail::f32_bits(f);
    const std::uint8_t sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
    const std::uint32_t a = u & 0x7FFFFFFFu;
    if (a >= 0x7F800000u) return f8_e4m3fn{static_cast<std::uint8_t>(sign | 0x7Fu)};  // inf, NaN -> NaN
    const std::uint32_t code = detail::round_f32_magnitude(a, 4, 3);
    return f8_e4m3fn{static_cast<std::uint8_t>(sign | (code >= 0x7Fu ? 0x7Fu : code))};  // overflow -> NaN
  }
  float to_f32() const {
    if ((bits & 0x7Fu) == 0x7Fu) return std::nanf("");
    return detail::decode_minifloat(bits & 0x7Fu, bits & 0x80u, 4, 3, false);
  }
  explicit operator float() const { return to_f32(); }
};

struct f8_e5m2 {
  std::uint8_t bits = 0;

  static f8_e5m2 from_bits(std::uint8_t b) { return f8_e5m2{b}; }
  static f8_e5m2 from_f32(float f) {
    const std::uint32_t u = detail::f32_bits(f);
    const std::uint8_t sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
    const std::uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return f8_e5m2{static_cast<std::uint8_t>(sign | 0x7Fu)};
    if (a == 0x7F800000u) return f8_e5m2{static_cast<std::uint8_t>(sign | 0x7Cu)};
    const std::uint32_t code = detail::round_f32_magnitude(a, 5, 2);
    return f8_e5m2{static_cast<std::uint8_t>(sign | (code >= 0x7Cu ? 0x7Cu : code))};
  }
  float to_f32() const { return detail::decode_minifloat(bits & 0x7Fu, bits & 0x80u, 5, 2, true); }
  explicit operator float() const { return to_f32(); }
};

}  // namespace lmcore
