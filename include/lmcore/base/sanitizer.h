// lmcore/base/sanitizer.h — whether this translation unit is built under AddressSanitizer (gcc defines
// __SANITIZE_ADDRESS__, clang answers __has_feature), for code that must leave memory to its heap
// there and for the tests that check that code.
#pragma once

namespace lmcore {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

}  // namespace lmcore
