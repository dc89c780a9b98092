// libFuzzer target: the zip reader (directory parsing, local header checks, bounded inflate), and
// load() on the archive (PyTorch zip or .npz), on arbitrary bytes.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "lmcore/io/checkpoint.h"
#include "src/io/zip_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const lmcore::io::detail::ZipReader zip(bytes, "fuzz", 64u << 20);
    for (const auto& e : zip.entries()) {
      std::vector<std::byte> out(e.uncompressed_size);
      zip.extract_to(e, out.data(), true);
    }
  } catch (const lmcore::Error&) {
  }
  try {
    (void)lmcore::io::load_bytes(bytes, "fuzz");
  } catch (const lmcore::Error&) {
  }
  return 0;
}
