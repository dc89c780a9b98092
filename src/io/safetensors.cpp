// Safetensors reader and writer. The format and its rules are at the top of
// include/lmcore/io/safetensors.h; everything is validated before any tensor data is touched.
#include "lmcore/io/safetensors.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "src/io/file_util.h"
#include "src/io/loaders.h"
#include "src/io/utf8.h"

namespace lmcore::io {

namespace {

using ojson = nlohmann::ordered_json;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kNames[] = {
    {DType::f64, "F64"},  {DType::f32, "F32"},   {DType::f16, "F16"},          {DType::bf16, "BF16"},
    {DType::i64, "I64"},  {DType::i32, "I32"},   {DType::i16, "I16"},          {DType::i8, "I8"},
    {DType::u64, "U64"},  {DType::u32, "U32"},   {DType::u16, "U16"},          {DType::u8, "U8"},
    {DType::boolean, "BOOL"}, {DType::f8_e4m3fn, "F8_E4M3"}, {DType::f8_e5m2, "F8_E5M2"},
};

// Parses JSON while checking that no object repeats a key (nlohmann keeps the last one silently).
ojson parse_json_no_duplicates(std::string_view text, const std::string& name) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  std::string duplicate;
  ojson::parser_callback_t cb = [&](int /*depth*/, ojson::parse_event_t event, ojson& parsed) {
    switch (event) {
      case ojson::parse_event_t::object_start:
        keys.emplace_back();
        break;
      case ojson::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case ojson::parse_event_t::key: {
        const std::string& k = parsed.get_ref<const std::string&>();
        if (!keys.empty() && !keys.back().insert(k).second && duplicate.empty()) duplicate = k;
        break;
      }
      default:
        break;
    }
    return true;
  };
  ojson j;
  try {
    j = ojson::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const ojson::exception& e) {
    fail("{}: safetensors header is not valid JSON: {}", name, e.what());
  }
  if (!duplicate.empty()) fail("{}: safetensors header has the key '{}' more than once", name, duplicate);
  return j;
}

std::uint64_t json_u64(const ojson& v, const std::string& name, const std::string& tensor, const char* field) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
    fail("{}: tensor '{}': {} must hold non-negative integers, found {}", name, tensor, field, v.dump());
  return v.get<std::uint64_t>();
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  for (const auto& n : kNames)
    if (n.dtype == dtype) return n.name;
  fail("safetensors: dtype {} has no safetensors name", dtype_name(dtype));
}

DType safetensors_dtype_from_name(std::string_view name, const std::string& context) {
  for (const auto& n : kNames)
    if (name == n.name) return n.dtype;
  fail("{}: dtype '{}' is not supported (expected one of F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 "
       "BOOL F8_E4M3 F8_E5M2)",
       context, name);
}

namespace {

// The length prefix: checked against the limit and the file size, so that 8 + the result bytes exist.
std::uint64_t header_length(std::span<const std::byte> prefix, std::uint64_t file_size, const std::string& name) {
  if (file_size < 8) fail("{}: safetensors file is {} bytes, too short for the 8-byte header length", name, file_size);
  const auto n = detail::read_le<std::uint64_t>(prefix.data());
  if (n > kSafetensorsMaxHeader)
    fail("{}: safetensors header length {} exceeds the limit of {} bytes", name, n, kSafetensorsMaxHeader);
  if (8 + n > file_size) fail("{}: safetensors header length {} runs past the end of the file ({} bytes)", name, n, file_size);
  return n;
}

// `head` holds the first 8 + header length bytes of a file of `file_size` bytes (or the whole file).
SafetensorsHeader parse_header(std::span<const std::byte> head, std::uint64_t file_size, const std::string& name) {
  SafetensorsHeader h;
  // 1. The length prefix and the header bytes.
  h.header_size = header_length(head, file_size, name);
  h.data_start = 8 + h.header_size;
  LMCORE_CHECK(head.size() >= h.data_start, "{}: parse_header got {} bytes, needs {}", name, head.size(), h.data_start);
  const std::string_view text(reinterpret_cast<const char*>(head.data()) + 8, h.header_size);
  if (const std::size_t bad = detail::first_invalid_utf8(text); bad != std::string_view::npos)
    fail("{}: safetensors header is not valid UTF-8 (bad byte at header offset {})", name, bad);
  if (text.empty() || text[0] != '{')
    fail("{}: safetensors header must start with '{{', found {}", name,
         text.empty() ? std::string("an empty header") : detail::hex_dump(head.subspan(8), 8));

  // 2. JSON, without duplicate keys.
  const ojson j = parse_json_no_duplicates(text, name);
  if (!j.is_object()) fail("{}: safetensors header must be a JSON object", name);

  // 3. Entries.
  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      if (value.is_null()) continue;
      if (!value.is_object()) fail("{}: __metadata__ must map strings to strings, found {}", name, value.type_name());
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          fail("{}: __metadata__['{}'] must be a string, found {} ({})", name, mk, mv.type_name(), mv.dump());
        h.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    if (!value.is_object()) fail("{}: tensor '{}' must be an object, found {}", name, key, value.type_name());
    SafetensorsTensorInfo info;
    info.name = key;
    const auto dt = value.find("dtype");
    const auto shape = value.find("shape");
    const auto offsets = value.find("data_offsets");
    if (dt == value.end() || shape == value.end() || offsets == value.end())
      fail("{}: tensor '{}' must have dtype, shape and data_offsets, found {}", name, key, value.dump());
    if (!dt->is_string()) fail("{}: tensor '{}': dtype must be a string, found {}", name, key, dt->dump());
    info.dtype = safetensors_dtype_from_name(dt->get_ref<const std::string&>(), fmt::format("{}: tensor '{}'", name, key));
    if (!shape->is_array()) fail("{}: tensor '{}': shape must be an array, found {}", name, key, shape->dump());
    std::uint64_t numel = 1;
    for (const auto& d : *shape) {
      const std::uint64_t n = json_u64(d, name, key, "shape");
      if (n > static_cast<std::uint64_t>(INT64_MAX)) fail("{}: tensor '{}': dimension {} is too large", name, key, n);
      info.shape.push_back(static_cast<std::int64_t>(n));
      numel = detail::checked_mul(numel, n, fmt::format("{}: tensor '{}' element count", name, key).c_str());
    }
    if (!offsets->is_array() || offsets->size() != 2)
      fail("{}: tensor '{}': data_offsets must be [begin, end], found {}", name, key, offsets->dump());
    info.begin = json_u64((*offsets)[0], name, key, "data_offsets");
    info.end = json_u64((*offsets)[1], name, key, "data_offsets");
    if (info.end < info.begin)
      fail("{}: tensor '{}': data_offsets [{}, {}] end before they begin", name, key, info.begin, info.end);
    const std::uint64_t nbytes =
        detail::checked_mul(numel, dtype_size(info.dtype), fmt::format("{}: tensor '{}' byte size", name, key).c_str());
    if (info.end - info.begin != nbytes)
      fail("{}: tensor '{}' spans {} bytes, expected {} ({}{})", name, key, info.end - info.begin, nbytes,
           safetensors_dtype_name(info.dtype), shape_str(info.shape));
    h.tensors.push_back(std::move(info));
  }

  // 4. Spans: contiguous from 0, no holes or overlaps, ending at the end of the file.
  std::vector<const SafetensorsTensorInfo*> order;
  for (const auto& t : h.tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) {
    return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
  });
  std::uint64_t expected = 0;
  for (const auto* t : order) {
    if (t->begin != expected)
      fail("{}: tensor '{}' starts at data offset {}, expected {} ({} between tensors)", name, t->name, t->begin,
           expected, t->begin > expected ? "a hole" : "an overlap");
    expected = t->end;
  }
  const std::uint64_t data_size = file_size - h.data_start;
  if (expected != data_size)
    fail("{}: the tensors cover {} bytes of data but the file holds {} after the header", name, expected, data_size);
  return h;
}

}  // namespace

SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file, const std::string& name) {
  return parse_header(file, file.size(), name);
}

namespace detail {

LoadResult load_safetensors(const std::shared_ptr<FileBytes>& file, const std::string& name) {
  // The header is read with read_at() (pread), not through the mapping: touching a cold mapping reads
  // read_ahead_kb around the page (8 MiB on the bench machine, ~60 ms from its disk), so open would
  // cost more for a large file. Nothing of the tensor data is read here.
  std::vector<std::byte> head(std::min<std::uint64_t>(file->size(), 8));
  file->read_at(0, head);
  const std::uint64_t n = header_length(head, file->size(), name);
  head.resize(8 + n);
  file->read_at(8, std::span<std::byte>(head).subspan(8));
  const SafetensorsHeader h = parse_header(head, file->size(), name);
  LoadResult r;
  r.format = Format::safetensors;
  r.metadata = h.metadata;
  for (const auto& t : h.tensors) {
    const std::uint64_t at = h.data_start + t.begin;
    std::byte* p = file->data() + at;
    const std::size_t n = t.end - t.begin;
    std::shared_ptr<Storage> storage;
    std::int64_t file_offset = static_cast<std::int64_t>(at);
    if (reinterpret_cast<std::uintptr_t>(p) % dtype_size(t.dtype) == 0) {
      storage = Storage::borrow(p, n, file);  // zero-copy: the mapping lives while the tensor does
    } else {
      // The header length was not padded: elements are misaligned in memory, so copy them.
      storage = Storage::allocate(n);
      if (n) std::memcpy(storage->data(), p, n);
      file_offset = -1;
    }
    r.tensors.add(t.name, Tensor::from_storage(std::move(storage), t.dtype, t.shape, {}, 0), file_offset);
  }
  return r;
}

}  // namespace detail

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<const std::pair<std::string, Tensor>*> sorted;
  for (const auto& t : tensors) {
    LMCORE_CHECK(t.second.defined(), "save_safetensors: {}: tensor '{}' is undefined", path, t.first);
    LMCORE_CHECK(t.first != "__metadata__", "save_safetensors: {}: '__metadata__' is reserved", path);
    sorted.push_back(&t);
  }
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->first < b->first; });
  for (std::size_t i = 1; i < sorted.size(); ++i)
    LMCORE_CHECK(sorted[i]->first != sorted[i - 1]->first, "save_safetensors: {}: tensor name '{}' appears twice",
                 path, sorted[i]->first);

  ojson header = ojson::object();
  if (!metadata.empty()) {
    ojson m = ojson::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::uint64_t offset = 0;
  for (const auto* t : sorted) {
    const Tensor& x = t->second;
    ojson e = ojson::object();
    e["dtype"] = safetensors_dtype_name(x.dtype());
    e["shape"] = x.shape();
    e["data_offsets"] = {offset, offset + x.nbytes()};
    offset += x.nbytes();
    header[t->first] = std::move(e);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const ojson::exception& e) {  // e.g. a tensor name that is not valid UTF-8
    fail("save_safetensors: {}: cannot encode the header: {}", path, e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned

  detail::AtomicFile out(path, {.what = "save"});
  std::string prefix;
  detail::append_le<std::uint64_t>(prefix, text.size());
  out.write(prefix);
  out.write(text);
  for (const auto* t : sorted) {
    const Tensor c = t->second.contiguous();
    if (c.nbytes()) out.write(c.data_ptr(), c.nbytes());
  }
  out.commit();
}

void save_safetensors(const std::string& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata) {
  NamedTensors v;
  for (const auto& e : tensors) v.emplace_back(e.name, e.tensor);
  save_safetensors(path, v, metadata);
}

}  // namespace lmcore::io
