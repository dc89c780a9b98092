// Safetensors reader and writer. The format and its rules are at the top of
// include/lmcore/io/safetensors.h; everything is validated before any tensor data is touched.
#include "lmcore/io/safetensors.h"

#include <algorithm>
#include <set>
#include <unordered_set>
#include <utility>

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

// A valid header nests three deep ({"t": {"shape": [..]}}); unknown fields of a tensor may hold a
// little more. Anything deeper is refused while parsing, before it can cost stack or time anywhere.
constexpr int kMaxJsonDepth = 16;

bool dtype_of(std::string_view name, DType& out) {
  for (const auto& n : kNames)
    if (name == n.name) {
      out = n.dtype;
      return true;
    }
  return false;
}

// Builds the header straight from the parser's events (nlohmann's SAX interface): no JSON tree is
// built, so the cost is linear in the header (a DOM, and nlohmann's callback parser in particular, was
// quadratic in the number of tensors), and nesting is bounded as it opens. The first broken rule stops
// the parse; its message is in error().
class HeaderBuilder final : public nlohmann::json_sax<nlohmann::json> {
 public:
  HeaderBuilder(const std::string& name, SafetensorsHeader& h) : name_(name), h_(h) {}
  const std::string& error() const { return error_; }

  bool null() override { return scalar("null", "null"); }
  bool boolean(bool v) override { return scalar("boolean", v ? "true" : "false"); }
  // Numbers are written out only for a message (a million tensors hold three million of them).
  bool number_integer(number_integer_t v) override { return scalar("number", fmt::format("{}", v)); }
  bool number_unsigned(number_unsigned_t v) override { return number(v); }
  bool number_float(number_float_t, const string_t& text) override { return scalar("number", text); }
  bool binary(binary_t&) override { return scalar("binary", "binary"); }

  bool string(string_t& v) override {
    switch (at_) {
      case At::metadata:
        h_.metadata[key_] = std::move(v);
        return true;
      case At::tensor:
        if (key_ == "dtype") {
          if (!dtype_of(v, tensor_.dtype)) {  // the message, with its context, only when it is needed
            try {
              (void)safetensors_dtype_from_name(v, fmt::format("{}: tensor '{}'", name_, tensor_.name));
            } catch (const Error& e) {
              return stop(e.what());
            }
          }
          have_dtype_ = true;
          return true;
        }
        return scalar("string", quoted(v));
      default:
        return scalar("string", quoted(v));
    }
  }

  bool key(string_t& k) override {
    switch (at_) {
      case At::root:
        // Tensor names are checked for repeats once all are read (check_names): a set of them built
        // here would copy every name.
        if (k == "__metadata__" && std::exchange(seen_metadata_, true))
          return stop(fmt::format("{}: safetensors header has the key '{}' more than once", name_, k));
        key_ = std::move(k);
        return true;
      case At::metadata:
        if (h_.metadata.count(k)) return stop(fmt::format("{}: safetensors header has the key '{}' more than once", name_, k));
        key_ = std::move(k);
        return true;
      case At::tensor:
        for (const std::string& seen : tensor_keys_)
          if (seen == k) return stop(fmt::format("{}: safetensors header has the key '{}' more than once", name_, k));
        tensor_keys_.push_back(k);
        key_ = std::move(k);
        return true;
      default:  // inside a field lmcore does not read: only its nesting is followed
        return true;
    }
  }

  bool start_object(std::size_t) override {
    if (!deeper()) return false;
    switch (at_) {
      case At::start:
        at_ = At::root;
        return true;
      case At::root:
        if (key_ == "__metadata__") {
          at_ = At::metadata;
        } else {
          at_ = At::tensor;
          tensor_ = SafetensorsTensorInfo{};
          tensor_.name = std::move(key_);  // key_ is the tensor's own keys from here on
          tensor_keys_.clear();
          have_dtype_ = have_shape_ = false;
          offsets_.clear();
          offsets_seen_ = false;
        }
        return true;
      case At::tensor:
        return field_container("an object");
      case At::skip:
        ++skip_depth_;
        return true;
      default:
        return container_in_value("object");
    }
  }

  bool end_object() override {
    --depth_;
    switch (at_) {
      case At::root:
        at_ = At::done;
        return true;
      case At::metadata:
        at_ = At::root;
        return true;
      case At::tensor:
        at_ = At::root;
        return finish_tensor();
      case At::skip:
        return leave_skip();
      default:
        return true;
    }
  }

  bool start_array(std::size_t) override {
    if (!deeper()) return false;
    switch (at_) {
      case At::tensor:
        if (key_ == "shape") {
          at_ = At::shape;
          have_shape_ = true;
          return true;
        }
        if (key_ == "data_offsets") {
          at_ = At::offsets;
          offsets_seen_ = true;
          return true;
        }
        return field_container("an array");
      case At::skip:
        ++skip_depth_;
        return true;
      default:
        return container_in_value("array");
    }
  }

  bool end_array() override {
    --depth_;
    switch (at_) {
      case At::shape:
        at_ = At::tensor;
        return true;
      case At::offsets:
        at_ = At::tensor;
        if (offsets_.size() != 2)
          return stop(fmt::format("{}: tensor '{}': data_offsets must be [begin, end], found {} values", name_,
                                  tensor_.name, offsets_.size()));
        return true;
      case At::skip:
        return leave_skip();
      default:
        return true;
    }
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    return stop(fmt::format("{}: safetensors header is not valid JSON: {}", name_, e.what()));
  }

 private:
  enum class At { start, root, metadata, tensor, shape, offsets, skip, done };

  bool stop(std::string message) {
    if (error_.empty()) error_ = std::move(message);
    return false;
  }

  static std::string quoted(const std::string& v) {
    return v.size() <= 40 ? fmt::format("\"{}\"", v) : fmt::format("\"{}...\"", v.substr(0, 40));
  }

  bool deeper() {
    if (++depth_ > kMaxJsonDepth)
      return stop(fmt::format("{}: safetensors header nests arrays and objects more than {} deep (a valid header "
                              "needs 3)",
                              name_, kMaxJsonDepth));
    return true;
  }

  // A field of a tensor object that lmcore does not read may hold anything; only its nesting is followed.
  bool field_container(const char* what) {
    if (key_ == "dtype") return stop(fmt::format("{}: tensor '{}': dtype must be a string, found {}", name_, tensor_.name, what));
    if (key_ == "shape") return stop(fmt::format("{}: tensor '{}': shape must be an array, found {}", name_, tensor_.name, what));
    if (key_ == "data_offsets")
      return stop(fmt::format("{}: tensor '{}': data_offsets must be [begin, end], found {}", name_, tensor_.name, what));
    at_ = At::skip;
    skip_depth_ = 1;
    return true;
  }

  bool leave_skip() {
    if (--skip_depth_ == 0) at_ = At::tensor;
    return true;
  }

  // An array or object where a scalar belongs.
  bool container_in_value(const char* type) {
    const std::string what = fmt::format("an {}", type);
    switch (at_) {
      case At::start: return stop(fmt::format("{}: safetensors header must be a JSON object", name_));
      case At::root:
        if (key_ == "__metadata__")
          return stop(fmt::format("{}: __metadata__ must map strings to strings, found {}", name_, what));
        return stop(fmt::format("{}: tensor '{}' must be an object, found {}", name_, key_, what));
      case At::metadata:
        return stop(fmt::format("{}: __metadata__['{}'] must be a string, found {}", name_, key_, what));
      case At::shape:
        return stop(fmt::format("{}: tensor '{}': shape must hold non-negative integers, found {}", name_, tensor_.name, what));
      case At::offsets:
        return stop(fmt::format("{}: tensor '{}': data_offsets must hold non-negative integers, found {}", name_,
                                tensor_.name, what));
      default:
        return stop(fmt::format("{}: safetensors header: unexpected {}", name_, what));
    }
  }

  // A scalar value of JSON type `type`, written `text`, in any position but a string where one belongs.
  bool scalar(const char* type, const std::string& text) {
    switch (at_) {
      case At::start: return stop(fmt::format("{}: safetensors header must be a JSON object", name_));
      case At::root:
        if (key_ == "__metadata__") {
          if (std::string_view(type) == "null") return true;  // "__metadata__": null is allowed
          return stop(fmt::format("{}: __metadata__ must map strings to strings, found {}", name_, type));
        }
        return stop(fmt::format("{}: tensor '{}' must be an object, found {}", name_, key_, type));
      case At::metadata:
        return stop(fmt::format("{}: __metadata__['{}'] must be a string, found {} ({})", name_, key_, type, text));
      case At::tensor:
        if (key_ == "dtype") return stop(fmt::format("{}: tensor '{}': dtype must be a string, found {}", name_, tensor_.name, text));
        if (key_ == "shape") return stop(fmt::format("{}: tensor '{}': shape must be an array, found {}", name_, tensor_.name, text));
        if (key_ == "data_offsets")
          return stop(fmt::format("{}: tensor '{}': data_offsets must be [begin, end], found {}", name_, tensor_.name, text));
        return true;  // a field lmcore does not read
      case At::shape:
        return stop(fmt::format("{}: tensor '{}': shape must hold non-negative integers, found {}", name_, tensor_.name, text));
      case At::offsets:
        return stop(fmt::format("{}: tensor '{}': data_offsets must hold non-negative integers, found {}", name_,
                                tensor_.name, text));
      default:
        return true;  // inside a skipped field
    }
  }

  bool number(std::uint64_t v) {
    if (at_ != At::shape && at_ != At::offsets) return scalar("number", fmt::format("{}", v));
    if (at_ == At::offsets) {
      offsets_.push_back(v);
      return true;
    }
    if (v > static_cast<std::uint64_t>(INT64_MAX))
      return stop(fmt::format("{}: tensor '{}': dimension {} is too large", name_, tensor_.name, v));
    tensor_.shape.push_back(static_cast<std::int64_t>(v));
    return true;
  }

  bool finish_tensor() {
    SafetensorsTensorInfo& info = tensor_;
    if (!have_dtype_ || !have_shape_ || !offsets_seen_) {
      std::string found;
      for (const std::string& k : tensor_keys_) found += fmt::format("{}{}", found.empty() ? "" : ", ", k);
      return stop(fmt::format("{}: tensor '{}' must have dtype, shape and data_offsets, found {}", name_, info.name,
                              found.empty() ? std::string("no keys") : "keys " + found));
    }
    info.begin = offsets_[0];
    info.end = offsets_[1];
    if (info.end < info.begin)
      return stop(fmt::format("{}: tensor '{}': data_offsets [{}, {}] end before they begin", name_, info.name,
                              info.begin, info.end));
    std::uint64_t numel = 1;
    for (const std::int64_t d : info.shape) {
      if (__builtin_mul_overflow(numel, static_cast<std::uint64_t>(d), &numel))
        return stop(fmt::format("{}: tensor '{}' element count: shape {} overflows 64 bits", name_, info.name,
                                shape_str(info.shape)));
    }
    std::uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, static_cast<std::uint64_t>(dtype_size(info.dtype)), &nbytes))
      return stop(fmt::format("{}: tensor '{}' byte size: {} x {} overflows 64 bits", name_, info.name, numel,
                              dtype_size(info.dtype)));
    if (info.end - info.begin != nbytes)
      return stop(fmt::format("{}: tensor '{}' spans {} bytes, expected {} ({}{})", name_, info.name,
                              info.end - info.begin, nbytes, safetensors_dtype_name(info.dtype), shape_str(info.shape)));
    h_.tensors.push_back(std::move(info));
    return true;
  }

  const std::string& name_;
  SafetensorsHeader& h_;
  std::string error_;
  At at_ = At::start;
  int depth_ = 0;
  int skip_depth_ = 0;
  std::string key_;                          // the last key read at the current level
  bool seen_metadata_ = false;
  SafetensorsTensorInfo tensor_;              // the tensor being read
  std::vector<std::string> tensor_keys_;      // its keys so far
  bool have_dtype_ = false, have_shape_ = false, offsets_seen_ = false;
  std::vector<std::uint64_t> offsets_;
};

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

  // 2-3. JSON (duplicate keys refused, nesting bounded) and the entries, checked as they are read.
  HeaderBuilder builder(name, h);
  const bool ok = nlohmann::json::sax_parse(text.begin(), text.end(), &builder, nlohmann::detail::input_format_t::json,
                                            /*strict=*/true, /*ignore_comments=*/false);
  if (!ok || !builder.error().empty()) {
    if (!builder.error().empty()) fail("{}", builder.error());
    fail("{}: safetensors header is not valid JSON", name);
  }
  // 3b. No tensor name twice (views of the names, once all are read: linear, no copies).
  {
    std::unordered_set<std::string_view> names;
    names.reserve(h.tensors.size());
    for (const auto& t : h.tensors)
      if (!names.insert(t.name).second) fail("{}: safetensors header has the key '{}' more than once", name, t.name);
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

  // The header text is assembled entry by entry (an ordered_json object would search its keys on every
  // insertion: quadratic in the number of tensors). The result is what ordered_json's compact dump gives.
  std::string text = "{";
  try {
    if (!metadata.empty()) {
      text += "\"__metadata__\":{";
      for (const auto& [k, v] : metadata) {
        if (text.back() != '{') text += ',';
        text += ojson(k).dump() + ":" + ojson(v).dump();
      }
      text += '}';
    }
    std::uint64_t offset = 0;
    for (const auto* t : sorted) {
      const Tensor& x = t->second;
      if (text.size() > 1) text += ',';
      text += ojson(t->first).dump();
      text += fmt::format(":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                          safetensors_dtype_name(x.dtype()), fmt::join(x.shape(), ","), offset, offset + x.nbytes());
      offset += x.nbytes();
    }
  } catch (const ojson::exception& e) {  // e.g. a tensor name that is not valid UTF-8
    fail("save_safetensors: {}: cannot encode the header: {}", path, e.what());
  }
  text += '}';
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
