// libFuzzer target: the safetensors header parser and loader on arbitrary bytes. Any input must give
// a result or an lmcore::Error, never a crash, a leak or undefined behaviour.
#include <cstddef>
#include <cstdint>

#include "lmcore/io/checkpoint.h"
#include "lmcore/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const auto header = lmcore::io::parse_safetensors_header(bytes, "fuzz");
    // A valid header: the loader must give tensors whose bytes can all be read.
    const auto r = lmcore::io::load_bytes(bytes, "fuzz");
    volatile std::uint8_t sink = 0;
    for (const auto& e : r.tensors) {
      const auto* p = static_cast<const std::uint8_t*>(e.tensor.data_ptr());
      for (std::size_t i = 0; i < e.tensor.nbytes(); ++i) sink = sink ^ p[i];
    }
    (void)header;
  } catch (const lmcore::Error&) {
  }
  return 0;
}
