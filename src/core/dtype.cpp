#include "lmcore/core/dtype.h"

#include <array>

namespace lmcore {
namespace {

struct DTypeInfo {
  std::string_view name;
  std::size_t size;
  bool floating, low_precision, integral, is_signed, storage_only;
};

constexpr std::array<DTypeInfo, kNumDTypes> kInfo = {{
    {"f32", 4, true, false, false, true, false},
    {"f64", 8, true, false, false, true, false},
    {"f16", 2, true, true, false, true, false},
    {"bf16", 2, true, true, false, true, false},
    {"i8", 1, false, false, true, true, false},
    {"u8", 1, false, false, true, false, false},
    {"i16", 2, false, false, true, true, false},
    {"i32", 4, false, false, true, true, false},
    {"i64", 8, false, false, true, true, false},
    {"bool", 1, false, false, false, false, false},
    {"f8_e4m3fn", 1, true, true, false, true, true},
    {"f8_e5m2", 1, true, true, false, true, true},
    {"u16", 2, false, false, true, false, true},
    {"u32", 4, false, false, true, false, true},
    {"u64", 8, false, false, true, false, true},
}};

const DTypeInfo& info(DType d) {
  const auto i = static_cast<std::size_t>(d);
  LMCORE_CHECK(i < kInfo.size(), "dtype: unknown dtype code {}", i);
  return kInfo[i];
}

}  // namespace

std::size_t dtype_size(DType d) { return info(d).size; }
std::string_view dtype_name(DType d) { return info(d).name; }
bool is_floating(DType d) { return info(d).floating; }
bool is_low_precision(DType d) { return info(d).low_precision; }
bool is_integral(DType d) { return info(d).integral; }
bool is_signed(DType d) { return info(d).is_signed; }
bool is_storage_only(DType d) { return info(d).storage_only; }

DType dtype_from_name(std::string_view name) {
  if (name.substr(0, 6) == "torch.") name.remove_prefix(6);
  for (std::size_t i = 0; i < kInfo.size(); ++i)
    if (kInfo[i].name == name) return static_cast<DType>(i);
  struct Alias { std::string_view name; DType dtype; };
  static constexpr Alias kAliases[] = {
      {"float32", DType::f32}, {"float", DType::f32}, {"float64", DType::f64}, {"double", DType::f64},
      {"float16", DType::f16}, {"half", DType::f16}, {"bfloat16", DType::bf16}, {"int8", DType::i8},
      {"uint8", DType::u8}, {"int16", DType::i16}, {"short", DType::i16}, {"int32", DType::i32},
      {"int", DType::i32}, {"int64", DType::i64}, {"long", DType::i64}, {"float8_e4m3fn", DType::f8_e4m3fn},
      {"float8_e5m2", DType::f8_e5m2}, {"uint16", DType::u16}, {"uint32", DType::u32}, {"uint64", DType::u64},
      {"b8", DType::boolean},
  };
  for (const auto& a : kAliases)
    if (a.name == name) return a.dtype;
  fail("dtype_from_name: '{}' is not a dtype (expected one of f32, f64, f16, bf16, i8, u8, i16, i32, i64, bool, "
       "f8_e4m3fn, f8_e5m2, u16, u32, u64 or a torch spelling)",
       name);
}

}  // namespace lmcore
