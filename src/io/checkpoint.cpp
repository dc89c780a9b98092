// load(): format detection and dispatch, the StateDict container, and the walk from an unpickled
// object to a flat state dict.
#include "lmcore/io/checkpoint.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "src/io/loaders.h"

namespace lmcore::io {

namespace {

constexpr unsigned char kLegacyMagic[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c,
                                          0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};

bool starts_with(std::span<const std::byte> b, const void* prefix, std::size_t n) {
  return b.size() >= n && std::memcmp(b.data(), prefix, n) == 0;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

Format zip_kind(const detail::ZipReader& zip) {
  if (detail::find_torch_pickle(zip)) return Format::torch_zip;
  if (!zip.entries().empty() &&
      std::all_of(zip.entries().begin(), zip.entries().end(), [](const auto& e) { return ends_with(e.name, ".npy"); }))
    return Format::npz;
  return Format::zip;
}

Format detect_head(std::span<const std::byte> b) {
  if (starts_with(b, "PK\x03\x04", 4) || starts_with(b, "PK\x05\x06", 4)) return Format::zip;
  if (starts_with(b, "\x93NUMPY", 6)) return Format::npy;
  if (starts_with(b, "GGUF", 4)) return Format::gguf;
  if (starts_with(b, kLegacyMagic, sizeof(kLegacyMagic))) return Format::torch_legacy;
  // safetensors: a u64 header length, then '{'. An absurd length still counts, so that load()
  // reports the safetensors rule it breaks rather than "unknown format".
  if (b.size() >= 9 && static_cast<char>(b[8]) == '{' && detail::read_le<std::uint64_t>(b.data()) >= 2)
    return Format::safetensors;
  return Format::unknown;
}

}  // namespace

std::string_view format_name(Format format) {
  switch (format) {
    case Format::unknown: return "unknown";
    case Format::safetensors: return "safetensors";
    case Format::torch_zip: return "pytorch-zip";
    case Format::torch_legacy: return "pytorch-legacy";
    case Format::npy: return "npy";
    case Format::npz: return "npz";
    case Format::gguf: return "gguf";
    case Format::zip: return "zip";
  }
  return "?";
}

Format detect_format(std::span<const std::byte> bytes) {
  const Format f = detect_head(bytes);
  if (f != Format::zip) return f;
  try {
    return zip_kind(detail::ZipReader(bytes, "detect_format"));
  } catch (const Error&) {
    return Format::zip;  // a damaged or partial archive: still a zip
  }
}

// ---- StateDict ----

void StateDict::add(std::string name, Tensor tensor, std::int64_t file_offset) {
  LMCORE_CHECK(index_.find(name) == index_.end(), "state dict: tensor name '{}' appears twice", name);
  index_.emplace(name, entries_.size());
  entries_.push_back(Entry{std::move(name), std::move(tensor), file_offset});
}

const Entry* StateDict::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

const Tensor& StateDict::at(std::string_view name) const {
  const Entry* e = find(name);
  if (!e) fail("state dict: no tensor named '{}' (it holds {} tensors)", name, entries_.size());
  return e->tensor;
}

// ---- load ----

namespace {

LoadResult load_file(const std::shared_ptr<detail::FileBytes>& file, const std::string& name,
                     const LoadOptions& options) {
  const auto bytes = file->bytes();
  // The first bytes through read_at(), not through the mapping (see FileBytes::read_at).
  std::array<std::byte, 16> head_bytes{};
  const std::span<std::byte> head(head_bytes.data(), std::min(bytes.size(), head_bytes.size()));
  file->read_at(0, head);
  const Format f = detect_head(head);
  switch (f) {
    case Format::safetensors:
      return detail::load_safetensors(file, name);
    case Format::torch_legacy:
      return detail::load_torch_legacy(file, name, options);
    case Format::npy:
      return detail::load_npy(file, name);
    case Format::zip: {
      // Compressed entries may inflate to 64x the archive (at least 64 MiB); beyond is a zip bomb.
      const std::uint64_t limit = std::max<std::uint64_t>(64ull << 20, 64 * static_cast<std::uint64_t>(bytes.size()));
      const detail::ZipReader zip(bytes, name, limit);
      switch (zip_kind(zip)) {
        case Format::torch_zip: return detail::load_torch_zip(file, zip, name, options);
        case Format::npz: return detail::load_npz(file, zip, name);
        default: {
          std::string names;
          for (std::size_t i = 0; i < zip.entries().size() && i < 5; ++i) names += fmt::format(" '{}'", zip.entries()[i].name);
          fail("{}: a zip archive that is neither a PyTorch checkpoint (no <archive>/data.pkl) nor .npz; entries:{}{}",
               name, names, zip.entries().size() > 5 ? " ..." : "");
        }
      }
    }
    case Format::gguf:
      fail("{}: this is a GGUF file (llama.cpp); lmcore detects GGUF but does not read it", name);
    default:
      break;
  }
  fail("{}: unknown checkpoint format ({} bytes); it starts with {} (expected safetensors, a PyTorch zip or legacy "
       "file, .npy or .npz)",
       name, bytes.size(), bytes.empty() ? std::string("nothing (empty file)") : detail::hex_dump(head, 16));
}

}  // namespace

LoadResult load(const std::string& path, const LoadOptions& options) {
  const auto file = detail::FileBytes::open(path, options.mmap);
  LoadResult r = load_file(file, path, options);
  file->close_descriptor();  // tensors keep the mapping, not the descriptor
  return r;
}

LoadResult load_bytes(std::span<const std::byte> bytes, const std::string& name, const LoadOptions& options) {
  return load_file(detail::FileBytes::copy_of(bytes), name, options);
}

// ---- pickle walk ----

namespace detail {

namespace {

std::string scalar_text(const PValue& v) {
  switch (v.kind) {
    case PKind::none: return "None";
    case PKind::boolean: return v.i ? "True" : "False";
    case PKind::integer: return std::to_string(v.i);
    case PKind::big_integer: return "<big int>";
    case PKind::floating: return fmt::format("{}", v.f);
    case PKind::string: return v.s;
    case PKind::bytes: return fmt::format("<{} bytes>", v.s.size());
    case PKind::global: return v.s;
    default: return "?";
  }
}

struct Walker {
  const Unpickler& u;
  const FileBytes& file;
  const LoadOptions& options;
  LoadResult& result;
  std::uint64_t budget;

  std::int64_t file_offset(const Tensor& t) const {
    if (!t.storage() || t.storage()->owned()) return -1;
    const std::byte* p = t.storage()->data();
    if (p < file.data() || p >= file.data() + file.size()) return -1;
    return static_cast<std::int64_t>(p - file.data()) + t.storage_offset() * static_cast<std::int64_t>(t.itemsize());
  }

  std::string key_text(std::uint32_t k) const {
    const PValue& v = u.at(k);
    if (v.kind == PKind::string) return v.s;
    if (v.kind == PKind::integer) return std::to_string(v.i);
    if (v.kind == PKind::boolean || v.kind == PKind::none || v.kind == PKind::floating) return scalar_text(v);
    fail("{}: a dict key is a {}, expected a string or an int", u.name(), u.describe(k));
  }

  static std::string join(const std::string& prefix, const std::string& key) {
    return prefix.empty() ? key : fmt::format("{}.{}", prefix, key);
  }

  void walk(std::uint32_t i, const std::string& path, int depth, Node* node) {
    if (depth > options.max_depth)
      fail("{}: the pickled object nests deeper than {} levels at '{}' (or refers to itself)", u.name(),
           options.max_depth, path);
    if (budget-- == 0) fail("{}: the pickled object expands to too many values (shared sub-objects?)", u.name());
    const PValue& v = u.at(i);
    switch (v.kind) {
      case PKind::tensor:
      case PKind::storage: {
        Tensor t = v.kind == PKind::tensor
                       ? v.tensor
                       : Tensor::from_storage(v.storage, v.dtype, {static_cast<std::int64_t>(v.numel)}, {}, 0);
        const std::string name = path.empty() ? "tensor" : path;
        result.tensors.add(name, t, file_offset(t));
        if (node) {
          node->kind = Node::Kind::tensor;
          node->tensor = t;
        }
        return;
      }
      case PKind::dict:
        if (node) node->kind = Node::Kind::dict;
        for (std::size_t k = 0; k < v.items.size(); k += 2) {
          const std::string key = key_text(v.items[k]);
          Node* child = nullptr;
          if (node) {
            node->keys.push_back(key);
            child = &node->children.emplace_back();
          }
          walk(v.items[k + 1], join(path, key), depth + 1, child);
        }
        return;
      case PKind::list:
      case PKind::tuple:
      case PKind::set:
        if (node) node->kind = Node::Kind::list;
        for (std::size_t k = 0; k < v.items.size(); ++k) {
          Node* child = nullptr;
          if (node) {
            node->keys.push_back(std::to_string(k));
            child = &node->children.emplace_back();
          }
          walk(v.items[k], join(path, std::to_string(k)), depth + 1, child);
        }
        return;
      default:
        if (node) {
          node->kind = Node::Kind::scalar;
          node->text = scalar_text(v);
        }
        if (!path.empty()) result.metadata[path] = scalar_text(v);
        return;
    }
  }
};

}  // namespace

void pickle_to_result(const Unpickler& u, std::uint32_t root, const FileBytes& file, const LoadOptions& options,
                      LoadResult& result) {
  // Each value may be reached a few times (tied weights); far more visits means a pickle that shares
  // sub-objects to blow up.
  Walker w{u, file, options, result, 4 * static_cast<std::uint64_t>(u.value_count()) + 1024};
  w.walk(root, "", 0, options.keep_structure ? &result.tree : nullptr);
}

void byteswap_elements(std::byte* data, std::size_t n, std::size_t size) {
  if (size == 1) return;
  for (std::size_t i = 0; i < n; ++i) std::reverse(data + i * size, data + (i + 1) * size);
}

}  // namespace detail

}  // namespace lmcore::io
