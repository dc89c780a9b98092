// Dense comparison kernels (compare_kernels.cpp, Highway, run-time dispatch). `op` is the CompareOp
// value; b_step is 0 (b is one broadcast value) or 1 (b is a dense run like a).
#pragma once

#include <cstdint>

namespace lmcore::detail {

void compare_run(int op, bool* out, const float* a, const float* b, std::int64_t b_step, std::int64_t n);
void compare_run(int op, bool* out, const std::int32_t* a, const std::int32_t* b, std::int64_t b_step, std::int64_t n);
void compare_run(int op, bool* out, const std::int16_t* a, const std::int16_t* b, std::int64_t b_step, std::int64_t n);
void compare_run(int op, bool* out, const std::int8_t* a, const std::int8_t* b, std::int64_t b_step, std::int64_t n);
void compare_run(int op, bool* out, const std::uint8_t* a, const std::uint8_t* b, std::int64_t b_step, std::int64_t n);

}  // namespace lmcore::detail
