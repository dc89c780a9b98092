// Private helpers shared by the tensor core's ops: argument checks with the op's name in the message,
// dtype promotion, and a row-major walk over a shape that hands out element offsets.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "lmcore/core/tensor.h"

namespace lmcore::detail {

// Compile-time counterparts of is_storage_only / is_floating for kernel templates.
template <typename T>
inline constexpr bool is_storage_only_v = std::is_same_v<T, f8_e4m3fn> || std::is_same_v<T, f8_e5m2> ||
                                          std::is_same_v<T, std::uint16_t> || std::is_same_v<T, std::uint32_t> ||
                                          std::is_same_v<T, std::uint64_t>;
template <typename T>
inline constexpr bool is_floating_v = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                                      std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

// Throws unless t is defined: "<op>: argument '<arg>' is undefined".
void check_defined(const Tensor& t, const char* op, const char* arg);
// Throws for the storage-only dtypes (f8, u16/u32/u64), which torch 1.13 cannot compute with either.
void check_computable(const Tensor& t, const char* op, const char* arg);
// Throws unless t's dtype is a floating-point one.
void check_floating(const Tensor& t, const char* op, const char* arg);

// torch.promote_types for the computable dtypes: bool < integers < floats; u8 with a signed type
// needs the next signed width; f16 with bf16 gives f32.
DType promote_types(DType a, DType b, const char* op);

// Strides of t seen through a broadcast `shape` (0 on broadcast and new leading dims).
Shape broadcast_strides(const Tensor& t, const Shape& shape);

// Element offset of the row-major linear index `linear` in a (shape, strides) layout.
inline std::int64_t offset_of(std::int64_t linear, const Shape& shape, const Shape& strides) {
  std::int64_t off = 0;
  for (std::int64_t d = static_cast<std::int64_t>(shape.size()) - 1; d >= 0 && linear > 0; --d) {
    const std::int64_t s = shape[d];
    off += (linear % s) * strides[d];
    linear /= s;
  }
  return off;
}

// Sorted, wrapped, distinct dims; an empty list means every dim (torch's reduction convention).
std::vector<std::int64_t> normalize_dims(const Shape& dims, std::int64_t ndim, const char* op);

}  // namespace lmcore::detail
