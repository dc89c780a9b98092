// lmcore/core/dtype.h — element types.
//
// The enum values are explicit and append-only: they are stored in files and crossed over the
// Python boundary. `visit_dtype` turns a runtime DType into a compile-time C++ type:
//
//   visit_dtype(t.dtype(), [&](auto tag) { using T = typename decltype(tag)::type; ... });
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>
#include <type_traits>

#include "lmcore/core/error.h"
#include "lmcore/core/low_precision.h"

namespace lmcore {

enum class DType : std::uint8_t {
  f32 = 0,
  f64 = 1,
  f16 = 2,
  bf16 = 3,
  i8 = 4,
  u8 = 5,
  i16 = 6,
  i32 = 7,
  i64 = 8,
  boolean = 9,
  f8_e4m3fn = 10,  // storage type: cast to and from f32, no arithmetic
  f8_e5m2 = 11,    // storage type
  u16 = 12,        // storage types (safetensors has them; torch 1.13 does not)
  u32 = 13,
  u64 = 14,
};
inline constexpr int kNumDTypes = 15;

// Bytes per element.
std::size_t dtype_size(DType dtype);
// "f32", "bf16", "bool", ...
std::string_view dtype_name(DType dtype);
// Inverse of dtype_name; also accepts torch spellings ("float32", "bfloat16", "int64", "bool", ...).
// Throws Error naming the string when it is not a dtype.
DType dtype_from_name(std::string_view name);

bool is_floating(DType dtype);      // f32, f64, f16, bf16, f8_*
bool is_low_precision(DType dtype);  // f16, bf16, f8_*: computed in f32
bool is_integral(DType dtype);      // signed and unsigned integers, not bool
bool is_signed(DType dtype);
bool is_storage_only(DType dtype);  // f8_*, u16, u32, u64: cast and copy only, as in torch

template <typename T>
struct TypeTag {
  using type = T;
};

// The C++ element type of each DType.
template <DType D> struct DTypeToCpp;
template <> struct DTypeToCpp<DType::f32> { using type = float; };
template <> struct DTypeToCpp<DType::f64> { using type = double; };
template <> struct DTypeToCpp<DType::f16> { using type = f16; };
template <> struct DTypeToCpp<DType::bf16> { using type = bf16; };
template <> struct DTypeToCpp<DType::i8> { using type = std::int8_t; };
template <> struct DTypeToCpp<DType::u8> { using type = std::uint8_t; };
template <> struct DTypeToCpp<DType::i16> { using type = std::int16_t; };
template <> struct DTypeToCpp<DType::i32> { using type = std::int32_t; };
template <> struct DTypeToCpp<DType::i64> { using type = std::int64_t; };
template <> struct DTypeToCpp<DType::boolean> { using type = bool; };
template <> struct DTypeToCpp<DType::f8_e4m3fn> { using type = f8_e4m3fn; };
template <> struct DTypeToCpp<DType::f8_e5m2> { using type = f8_e5m2; };
template <> struct DTypeToCpp<DType::u16> { using type = std::uint16_t; };
template <> struct DTypeToCpp<DType::u32> { using type = std::uint32_t; };
template <> struct DTypeToCpp<DType::u64> { using type = std::uint64_t; };

template <typename T> struct CppToDType;
template <> struct CppToDType<float> { static constexpr DType value = DType::f32; };
template <> struct CppToDType<double> { static constexpr DType value = DType::f64; };
template <> struct CppToDType<f16> { static constexpr DType value = DType::f16; };
template <> struct CppToDType<bf16> { static constexpr DType value = DType::bf16; };
template <> struct CppToDType<std::int8_t> { static constexpr DType value = DType::i8; };
template <> struct CppToDType<std::uint8_t> { static constexpr DType value = DType::u8; };
template <> struct CppToDType<std::int16_t> { static constexpr DType value = DType::i16; };
template <> struct CppToDType<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct CppToDType<std::int64_t> { static constexpr DType value = DType::i64; };
template <> struct CppToDType<bool> { static constexpr DType value = DType::boolean; };
template <> struct CppToDType<f8_e4m3fn> { static constexpr DType value = DType::f8_e4m3fn; };
template <> struct CppToDType<f8_e5m2> { static constexpr DType value = DType::f8_e5m2; };
template <> struct CppToDType<std::uint16_t> { static constexpr DType value = DType::u16; };
template <> struct CppToDType<std::uint32_t> { static constexpr DType value = DType::u32; };
template <> struct CppToDType<std::uint64_t> { static constexpr DType value = DType::u64; };
template <typename T>
inline constexpr DType dtype_of = CppToDType<T>::value;

// Calls fn(TypeTag<T>{}) with T the element type of `dtype`.
template <typename Fn>
decltype(auto) visit_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: return fn(TypeTag<float>{});
    case DType::f64: return fn(TypeTag<double>{});
    case DType::f16: return fn(TypeTag<f16>{});
    case DType::bf16: return fn(TypeTag<bf16>{});
    case DType::i8: return fn(TypeTag<std::int8_t>{});
    case DType::u8: return fn(TypeTag<std::uint8_t>{});
    case DType::i16: return fn(TypeTag<std::int16_t>{});
    case DType::i32: return fn(TypeTag<std::int32_t>{});
    case DType::i64: return fn(TypeTag<std::int64_t>{});
    case DType::boolean: return fn(TypeTag<bool>{});
    case DType::f8_e4m3fn: return fn(TypeTag<f8_e4m3fn>{});
    case DType::f8_e5m2: return fn(TypeTag<f8_e5m2>{});
    case DType::u16: return fn(TypeTag<std::uint16_t>{});
    case DType::u32: return fn(TypeTag<std::uint32_t>{});
    case DType::u64: return fn(TypeTag<std::uint64_t>{});
  }
  fail("visit_dtype: unknown dtype code {}", static_cast<int>(dtype));
}

// Element types that are stored narrow and computed in f32.
template <typename T>
inline constexpr bool is_low_precision_v = std::is_same_v<T, bf16> || std::is_same_v<T, f16> ||
                                           std::is_same_v<T, f8_e4m3fn> || std::is_same_v<T, f8_e5m2>;

// The type arithmetic on T is done in: f32 for the low-precision floats, T itself otherwise.
template <typename T>
using compute_t = std::conditional_t<is_low_precision_v<T>, float, T>;

// Loads an element as its compute type, and stores a compute-type value back.
template <typename T>
inline compute_t<T> load_as_compute(T v) {
  if constexpr (is_low_precision_v<T>) return v.to_f32(); else return v;
}
template <typename T, typename C>
inline T store_from_compute(C v) {
  if constexpr (is_low_precision_v<T>) return T::from_f32(static_cast<float>(v));
  else return static_cast<T>(v);
}

inline std::ostream& operator<<(std::ostream& os, DType d) { return os << dtype_name(d); }

}  // namespace lmcore

template <>
struct fmt::formatter<lmcore::DType> : fmt::formatter<std::string_view> {
  auto format(lmcore::DType d, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(lmcore::dtype_name(d), ctx);
  }
};
