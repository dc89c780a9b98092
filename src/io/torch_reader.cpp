// PyTorch checkpoints: the zip format of torch.save since 1.6 and the legacy pickle stream before it.
//
// Zip format ("archive" is any top-level folder name, usually the file's stem):
//   archive/data.pkl   the pickled object; tensors are REDUCE(_rebuild_tensor_v2, (storage, offset,
//                      size, stride, requires_grad, hooks)) and each storage is a persistent id
//                      ('storage', <StorageClass>, key, location, numel)
//   archive/data/<key> the raw bytes of storage <key>: numel x element size, stored uncompressed and
//                      64-byte aligned by torch's writer
//   archive/byteorder  "little" or "big" (absent: little)
//   archive/version    the serialization format version
// Legacy format: five things one after another: pickle(magic number 0x1950a86a20f9469cfc6c),
// pickle(protocol version 1001), pickle(sys_info dict), pickle(the object, with persistent ids
// ('storage', <StorageClass>, key, location, numel, view_metadata)), pickle(list of storage keys),
// then for each key: numel as an 8-byte integer followed by the storage's bytes. view_metadata is
// None, or (view_key, offset, size) in elements: a storage view of `size` elements starting `offset`
// elements into storage `key` (written by PyTorch before 0.4; torch 1.13 still reads them).
#include <cstring>
#include <map>

#include "src/io/loaders.h"

namespace lmcore::io::detail {

namespace {

struct LoadedStorage {
  std::shared_ptr<Storage> storage;
  std::uint64_t nbytes = 0;
};

// Checks a persistent id ('storage', StorageClass, key, location, numel, ...) and returns its parts.
struct StorageId {
  DType dtype;
  std::string key;
  std::uint64_t numel;
  std::uint32_t view_metadata = UINT32_MAX;
};

StorageId parse_storage_id(const Unpickler& u, std::uint32_t pid, std::size_t min_items, std::size_t max_items) {
  const PValue& t = u.at(pid);
  if (t.kind != PKind::tuple || t.items.size() < min_items || t.items.size() > max_items)
    fail("{}: persistent id is a {} of {} items, expected ('storage', type, key, location, numel)", u.name(),
         u.describe(pid), t.items.size());
  const PValue& tag = u.at(t.items[0]);
  if (tag.kind != PKind::string || tag.s != "storage")
    fail("{}: persistent id starts with {}, expected 'storage'", u.name(), u.describe(t.items[0]));
  const PValue& cls = u.at(t.items[1]);
  if (cls.kind != PKind::global) fail("{}: persistent id names the storage type {}", u.name(), u.describe(t.items[1]));
  StorageId id;
  id.dtype = storage_class_dtype(cls.s, u.name());
  const PValue& key = u.at(t.items[2]);
  if (key.kind == PKind::string) id.key = key.s;
  else if (key.kind == PKind::integer) id.key = std::to_string(key.i);
  else fail("{}: persistent id has the storage key {}", u.name(), u.describe(t.items[2]));
  const PValue& numel = u.at(t.items[4]);
  if (numel.kind != PKind::integer || numel.i < 0)
    fail("{}: storage '{}' has the element count {}", u.name(), id.key, u.describe(t.items[4]));
  id.numel = static_cast<std::uint64_t>(numel.i);
  if (t.items.size() > 5 && u.at(t.items[5]).kind != PKind::none) id.view_metadata = t.items[5];
  return id;
}

// The storage that a legacy view (view_key, offset, size) names: `size` elements of `root` from
// element `offset`, sharing its memory. The first use of a view key creates it; later uses get the same
// storage back whatever offset they state, as torch.load does.
std::shared_ptr<Storage> legacy_storage_view(const Unpickler& u, const StorageId& id, const std::shared_ptr<Storage>& root,
                                             std::map<std::string, std::shared_ptr<Storage>>& views) {
  const PValue& meta = u.at(id.view_metadata);
  if (meta.kind != PKind::tuple || meta.items.size() != 3)
    fail("{}: storage '{}': view metadata is {}, expected (view_key, offset, size)", u.name(), id.key,
         u.describe(id.view_metadata));
  const PValue& key = u.at(meta.items[0]);
  std::string view_key;
  if (key.kind == PKind::string) view_key = key.s;
  else if (key.kind == PKind::integer) view_key = std::to_string(key.i);
  else fail("{}: storage '{}': the view key is {}", u.name(), id.key, u.describe(meta.items[0]));
  if (const auto it = views.find(view_key); it != views.end()) return it->second;
  const PValue& offset = u.at(meta.items[1]);
  const PValue& size = u.at(meta.items[2]);
  if (offset.kind != PKind::integer || offset.i < 0 || size.kind != PKind::integer || size.i < 0)
    fail("{}: storage view '{}' of '{}' has offset {} and size {}, expected non-negative integers", u.name(), view_key,
         id.key, u.describe(meta.items[1]), u.describe(meta.items[2]));
  const std::size_t elem = dtype_size(id.dtype);
  const std::uint64_t begin = checked_mul(static_cast<std::uint64_t>(offset.i), elem, "storage view offset");
  const std::uint64_t nbytes = checked_mul(static_cast<std::uint64_t>(size.i), elem, "storage view size");
  if (checked_add(begin, nbytes, "storage view end") > root->nbytes())
    fail("{}: storage view '{}' covers elements [{}, {}) of storage '{}', which holds {}", u.name(), view_key, offset.i,
         offset.i + size.i, id.key, root->nbytes() / elem);
  auto view = Storage::borrow(root->data() + begin, nbytes, root);
  views.emplace(view_key, view);
  return view;
}

std::uint32_t storage_value(Unpickler& u, const std::shared_ptr<Storage>& storage, DType dtype) {
  PValue v;
  v.kind = PKind::storage;
  v.storage = storage;
  v.dtype = dtype;
  v.numel = storage->nbytes() / dtype_size(dtype);
  return u.add(std::move(v));
}

}  // namespace

const ZipEntry* find_torch_pickle(const ZipReader& zip) {
  for (const auto& e : zip.entries()) {
    const auto slash = e.name.find('/');
    if (slash != std::string::npos && e.name.compare(slash, std::string::npos, "/data.pkl") == 0) return &e;
  }
  return nullptr;
}

LoadResult load_torch_zip(const std::shared_ptr<FileBytes>& file, const ZipReader& zip, const std::string& name,
                          const LoadOptions& options) {
  const ZipEntry* pkl = find_torch_pickle(zip);
  LMCORE_ASSERT(pkl != nullptr);
  const std::string prefix = pkl->name.substr(0, pkl->name.size() - std::strlen("data.pkl"));

  bool big_endian = false;
  if (const ZipEntry* bo = zip.find(fmt::format("{}byteorder", prefix))) {
    const std::string order = zip.read_string(*bo, 16);
    if (order == "big") big_endian = true;
    else if (order != "little") fail("{}: byteorder record says '{}', expected 'little' or 'big'", name, order);
  }

  // The pickle: mapped when stored, inflated (bounded by the zip reader) when compressed.
  std::vector<std::byte> pickle_copy;
  std::span<const std::byte> pickle_bytes;
  if (pkl->method == 0) {
    pickle_bytes = zip.stored_bytes(*pkl);
    if (options.verify_crc) zip.verify_stored_crc(*pkl);
  } else {
    pickle_copy.resize(pkl->uncompressed_size);
    zip.extract_to(*pkl, pickle_copy.data(), true);
    pickle_bytes = pickle_copy;
  }

  std::map<std::string, LoadedStorage> storages;
  auto persistent_load = [&](Unpickler& u, std::uint32_t pid) -> std::uint32_t {
    const StorageId id = parse_storage_id(u, pid, 5, 5);
    auto it = storages.find(id.key);
    if (it == storages.end()) {
      const ZipEntry* e = zip.find(fmt::format("{}data/{}", prefix, id.key));
      if (!e) fail("{}: storage '{}' has no record '{}data/{}' in the archive", name, id.key, prefix, id.key);
      const std::uint64_t expected = checked_mul(id.numel, dtype_size(id.dtype), "storage size");
      if (e->uncompressed_size != expected)
        fail("{}: storage '{}' holds {} bytes, expected {} ({} elements of {})", name, id.key, e->uncompressed_size,
             expected, id.numel, dtype_name(id.dtype));
      LoadedStorage s;
      s.nbytes = expected;
      const std::byte* at = file->data() + e->data_offset;
      if (e->method == 0 && !big_endian && reinterpret_cast<std::uintptr_t>(at) % dtype_size(id.dtype) == 0) {
        // Zero-copy: a view of the mapping, which the storage keeps alive.
        if (options.verify_crc) zip.verify_stored_crc(*e);
        s.storage = Storage::borrow(const_cast<std::byte*>(at), expected, file);
      } else {
        s.storage = Storage::allocate(expected);
        zip.extract_to(*e, s.storage->data(), e->method != 0 || options.verify_crc);
        if (big_endian) byteswap_elements(s.storage->data(), id.numel, dtype_size(id.dtype));
      }
      it = storages.emplace(id.key, std::move(s)).first;
    } else if (it->second.nbytes % dtype_size(id.dtype) != 0) {
      fail("{}: storage '{}' ({} bytes) is viewed as {}, whose size does not divide it", name, id.key,
           it->second.nbytes, dtype_name(id.dtype));
    }
    return storage_value(u, it->second.storage, id.dtype);
  };

  Unpickler u(pickle_bytes, fmt::format("{}: {}", name, pkl->name), persistent_load, options.max_depth);
  const std::uint32_t root = u.load();
  LoadResult r;
  r.format = Format::torch_zip;
  pickle_to_result(u, root, *file, options, r);
  return r;
}

LoadResult load_torch_legacy(const std::shared_ptr<FileBytes>& file, const std::string& name,
                             const LoadOptions& options) {
  const auto bytes = file->bytes();
  struct Pending {
    std::shared_ptr<Storage> storage;
    DType dtype;
    std::uint64_t numel;
    bool filled = false;
  };
  std::map<std::string, Pending> storages;
  std::map<std::string, std::shared_ptr<Storage>> views;  // by view key, as torch caches them
  std::uint64_t total_claimed = 0;
  auto persistent_load = [&](Unpickler& u, std::uint32_t pid) -> std::uint32_t {
    const StorageId id = parse_storage_id(u, pid, 5, 6);
    auto it = storages.find(id.key);
    if (it == storages.end()) {
      const std::uint64_t n = checked_mul(id.numel, dtype_size(id.dtype), "storage size");
      // The bytes follow the pickles in the file: never allocate more than the file can hold.
      total_claimed = checked_add(total_claimed, n, "storage sizes");
      if (total_claimed > bytes.size())
        fail("{}: storages claim {} bytes, more than the file's {} bytes", name, total_claimed, bytes.size());
      it = storages.emplace(id.key, Pending{Storage::allocate(n), id.dtype, id.numel, false}).first;
    }
    if (id.view_metadata == UINT32_MAX) return storage_value(u, it->second.storage, id.dtype);
    return storage_value(u, legacy_storage_view(u, id, it->second.storage, views), id.dtype);
  };

  Unpickler u(bytes, name, persistent_load, options.max_depth);
  const std::uint32_t magic = u.load();
  if (u.at(magic).kind != PKind::big_integer) fail("{}: legacy torch file without its magic number", name);
  const std::uint32_t proto = u.load();
  if (u.at(proto).kind != PKind::integer || u.at(proto).i != 1001)
    fail("{}: legacy torch protocol version is {}, expected 1001", name, u.describe(proto));
  const std::uint32_t sys_info = u.load();
  bool little = true;
  if (u.at(sys_info).kind == PKind::dict) {
    const auto& items = u.at(sys_info).items;
    for (std::size_t k = 0; k + 1 < items.size(); k += 2)
      if (u.at(items[k]).s == "little_endian" && u.at(items[k + 1]).kind == PKind::boolean)
        little = u.at(items[k + 1]).i != 0;
  }
  const std::uint32_t root = u.load();
  const std::uint32_t keys = u.load();
  if (u.at(keys).kind != PKind::list) fail("{}: legacy torch file: the storage key list is a {}", name, u.describe(keys));
  std::size_t pos = u.position();
  for (const std::uint32_t k : u.at(keys).items) {
    const PValue& kv = u.at(k);
    const std::string key = kv.kind == PKind::integer ? std::to_string(kv.i) : kv.s;
    const auto it = storages.find(key);
    if (it == storages.end()) fail("{}: legacy storage '{}' is listed but never used", name, key);
    if (bytes.size() - pos < 8) fail("{}: legacy storage '{}': file truncated at byte {}", name, key, pos);
    // torch writes the element count as a signed 64-bit integer: a negative one is damage, reported as such.
    std::uint64_t raw = read_le<std::uint64_t>(bytes.data() + pos);
    if (!little) raw = __builtin_bswap64(raw);
    const auto count = static_cast<std::int64_t>(raw);
    if (count < 0)
      fail("{}: legacy storage '{}' at byte {} has the element count {}, expected a count >= 0 (the file is damaged)",
           name, key, pos, count);
    const auto numel = static_cast<std::uint64_t>(count);
    pos += 8;
    if (numel != it->second.numel)
      fail("{}: legacy storage '{}' holds {} elements, the pickle says {}", name, key, numel, it->second.numel);
    const std::size_t n = it->second.storage->nbytes();
    if (bytes.size() - pos < n)
      fail("{}: legacy storage '{}' needs {} bytes at offset {}, the file has {}", name, key, n, pos, bytes.size() - pos);
    if (n) std::memcpy(it->second.storage->data(), bytes.data() + pos, n);
    if (!little) byteswap_elements(it->second.storage->data(), numel, dtype_size(it->second.dtype));
    pos += n;
    it->second.filled = true;
  }
  for (const auto& [key, s] : storages)
    if (!s.filled) fail("{}: legacy storage '{}' is used but its bytes are missing", name, key);
  LoadResult r;
  r.format = Format::torch_legacy;
  pickle_to_result(u, root, *file, options, r);
  return r;
}

}  // namespace lmcore::io::detail
