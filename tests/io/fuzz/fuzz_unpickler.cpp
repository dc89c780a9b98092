// libFuzzer target: the weights-only unpickler and the walk to a state dict, on arbitrary bytes.
// Persistent ids get storages of the size they ask for (capped), so tensor rebuilding is exercised.
#include <cstddef>
#include <cstdint>

#include "src/io/loaders.h"

using namespace lmcore::io::detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    auto persistent_load = [](Unpickler& u, std::uint32_t pid) -> std::uint32_t {
      const PValue& t = u.at(pid);
      if (t.kind != PKind::tuple || t.items.size() < 5) lmcore::fail("fuzz: bad persistent id");
      const PValue& cls = u.at(t.items[1]);
      const PValue& numel = u.at(t.items[4]);
      if (cls.kind != PKind::global || numel.kind != PKind::integer || numel.i < 0 || numel.i > 4096)
        lmcore::fail("fuzz: bad persistent id");
      PValue v;
      v.kind = PKind::storage;
      v.dtype = storage_class_dtype(cls.s, "fuzz");
      v.numel = static_cast<std::uint64_t>(numel.i);
      v.storage = lmcore::Storage::allocate(v.numel * lmcore::dtype_size(v.dtype));
      return u.add(std::move(v));
    };
    Unpickler u(bytes, "fuzz", persistent_load, 200);
    const std::uint32_t root = u.load();
    lmcore::io::LoadOptions o;
    o.keep_structure = true;
    lmcore::io::LoadResult r;
    const auto file = FileBytes::copy_of({});
    pickle_to_result(u, root, *file, o, r);
  } catch (const lmcore::Error&) {
  }
  return 0;
}
