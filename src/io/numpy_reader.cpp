// NumPy .npy and .npz.
//
// .npy: "\x93NUMPY", major, minor, header length (u16 for version 1, u32 for 2 and 3), then a Python
// dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), } padded with spaces and a
// newline, then the array's bytes (row-major, or column-major when fortran_order). .npz is a zip of
// .npy files, stored (np.savez) or deflated (np.savez_compressed); the tensor names are the entry
// names without ".npy". A lone .npy file loads as one tensor named "array".
#include <cstring>

#include "src/io/loaders.h"

namespace lmcore::io::detail {

namespace {

struct NpyHeader {
  DType dtype;
  bool big_endian = false;
  bool fortran = false;
  Shape shape;
  std::size_t data_offset = 0;
};

DType npy_dtype(std::string_view descr, bool& big_endian, const std::string& name) {
  if (descr.size() < 2) fail("{}: .npy descr '{}' is not a simple dtype", name, descr);
  const char order = descr[0];
  const std::string_view t = descr.substr(1);
  big_endian = order == '>';
  if (order != '<' && order != '>' && order != '|' && order != '=')
    fail("{}: .npy descr '{}' has an unknown byte order", name, descr);
  struct M { const char* code; DType dtype; };
  static constexpr M kMap[] = {{"f4", DType::f32}, {"f8", DType::f64}, {"f2", DType::f16}, {"b1", DType::boolean},
                               {"u1", DType::u8},  {"i1", DType::i8},  {"i2", DType::i16}, {"i4", DType::i32},
                               {"i8", DType::i64}, {"u2", DType::u16}, {"u4", DType::u32}, {"u8", DType::u64}};
  for (const auto& m : kMap)
    if (t == m.code) return m.dtype;
  if (t == "O") fail("{}: .npy holds Python objects (pickled), which lmcore never loads", name);
  fail("{}: .npy dtype '{}' is not supported by lmcore", name, descr);
}

// Reads the value after 'key': in the header dict.
std::string_view dict_value(std::string_view h, std::string_view key, const std::string& name) {
  const std::string quoted = fmt::format("'{}'", key);
  auto p = h.find(quoted);
  if (p == std::string_view::npos) fail("{}: .npy header lacks '{}': {}", name, key, h);
  p = h.find(':', p + quoted.size());
  if (p == std::string_view::npos) fail("{}: .npy header: no value for '{}'", name, key);
  ++p;
  while (p < h.size() && h[p] == ' ') ++p;
  std::size_t end = p;
  if (p < h.size() && h[p] == '\'') {
    end = h.find('\'', p + 1);
    if (end == std::string_view::npos) fail("{}: .npy header: unterminated string for '{}'", name, key);
    return h.substr(p + 1, end - p - 1);
  }
  if (p < h.size() && h[p] == '(') {
    end = h.find(')', p);
    if (end == std::string_view::npos) fail("{}: .npy header: unterminated tuple for '{}'", name, key);
    return h.substr(p + 1, end - p - 1);
  }
  while (end < h.size() && h[end] != ',' && h[end] != '}') ++end;
  return h.substr(p, end - p);
}

NpyHeader parse_npy_header(std::span<const std::byte> b, const std::string& name) {
  if (b.size() < 10 || std::memcmp(b.data(), "\x93NUMPY", 6) != 0) fail("{}: not a .npy file", name);
  const auto major = static_cast<std::uint8_t>(b[6]);
  std::size_t hlen, start;
  if (major == 1) {
    hlen = read_le<std::uint16_t>(b.data() + 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) fail("{}: .npy header truncated", name);
    hlen = read_le<std::uint32_t>(b.data() + 8);
    start = 12;
  } else {
    fail("{}: .npy version {} is not supported", name, major);
  }
  if (b.size() - start < hlen) fail("{}: .npy header of {} bytes runs past the end ({} bytes)", name, hlen, b.size());
  const std::string_view h(reinterpret_cast<const char*>(b.data()) + start, hlen);
  NpyHeader r;
  r.data_offset = start + hlen;
  r.dtype = npy_dtype(dict_value(h, "descr", name), r.big_endian, name);
  const std::string_view fo = dict_value(h, "fortran_order", name);
  if (fo.starts_with("True")) r.fortran = true;
  else if (!fo.starts_with("False")) fail("{}: .npy fortran_order is '{}'", name, fo);
  std::string_view shape = dict_value(h, "shape", name);
  while (!shape.empty()) {
    while (!shape.empty() && (shape[0] == ' ' || shape[0] == ',')) shape.remove_prefix(1);
    if (shape.empty()) break;
    std::size_t k = 0;
    std::uint64_t v = 0;
    while (k < shape.size() && shape[k] >= '0' && shape[k] <= '9') {
      v = checked_add(checked_mul(v, 10, "npy shape"), static_cast<std::uint64_t>(shape[k] - '0'), "npy shape");
      ++k;
    }
    if (k == 0 || v > static_cast<std::uint64_t>(INT64_MAX)) fail("{}: .npy shape '{}' is not a tuple of ints", name, shape);
    r.shape.push_back(static_cast<std::int64_t>(v));
    shape.remove_prefix(k);
    while (!shape.empty() && shape[0] == 'L') shape.remove_prefix(1);
  }
  return r;
}

// A tensor from .npy bytes living in `file` at [at, at + size) (zero-copy when possible).
Tensor npy_tensor(const std::shared_ptr<FileBytes>& owner, std::byte* at, std::size_t size, const std::string& name,
                  bool may_borrow, std::int64_t& file_offset) {
  const NpyHeader h = parse_npy_header({at, size}, name);
  std::uint64_t numel = 1;
  for (auto d : h.shape) numel = checked_mul(numel, static_cast<std::uint64_t>(d), "npy element count");
  const std::uint64_t nbytes = checked_mul(numel, dtype_size(h.dtype), "npy byte size");
  if (size - h.data_offset != nbytes)
    fail("{}: .npy data is {} bytes, expected {} ({}{})", name, size - h.data_offset, nbytes, dtype_name(h.dtype),
         shape_str(h.shape));
  std::byte* data = at + h.data_offset;
  std::shared_ptr<Storage> storage;
  if (may_borrow && !h.big_endian && reinterpret_cast<std::uintptr_t>(data) % dtype_size(h.dtype) == 0) {
    storage = Storage::borrow(data, nbytes, owner);
    file_offset = data - owner->data();
  } else {
    storage = Storage::allocate(nbytes);
    if (nbytes) std::memcpy(storage->data(), data, nbytes);
    if (h.big_endian) byteswap_elements(storage->data(), numel, dtype_size(h.dtype));
    file_offset = -1;
  }
  Shape strides;
  if (h.fortran && numel > 0) {  // column-major: strides grow from the first dimension
    std::int64_t s = 1;
    for (auto d : h.shape) {
      strides.push_back(s);
      s *= std::max<std::int64_t>(d, 1);
    }
  }
  return Tensor::from_storage(std::move(storage), h.dtype, h.shape, strides, 0);
}

}  // namespace

LoadResult load_npy(const std::shared_ptr<FileBytes>& file, const std::string& name) {
  LoadResult r;
  r.format = Format::npy;
  std::int64_t off = -1;
  Tensor t = npy_tensor(file, file->data(), file->size(), name, true, off);
  r.tensors.add("array", std::move(t), off);
  return r;
}

LoadResult load_npz(const std::shared_ptr<FileBytes>& file, const ZipReader& zip, const std::string& name) {
  LoadResult r;
  r.format = Format::npz;
  for (const auto& e : zip.entries()) {
    const std::string tname = e.name.substr(0, e.name.size() - 4);
    const std::string where = fmt::format("{}: {}", name, e.name);
    std::int64_t off = -1;
    if (e.method == 0) {
      Tensor t = npy_tensor(file, file->data() + e.data_offset, e.compressed_size, where, true, off);
      r.tensors.add(tname, std::move(t), off);
    } else {
      auto buf = std::make_shared<std::vector<std::byte>>(e.uncompressed_size);
      zip.extract_to(e, buf->data(), true);
      auto owner = FileBytes::copy_of(*buf);
      Tensor t = npy_tensor(owner, owner->data(), owner->size(), where, true, off);
      r.tensors.add(tname, std::move(t), -1);
    }
  }
  return r;
}

}  // namespace lmcore::io::detail
