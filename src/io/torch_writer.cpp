#include <algorithm>
#include <map>
#include <set>

#include "lmcore/io/torch_format.h"
#include "src/io/pickle.h"
#include "src/io/zip_writer.h"

namespace lmcore::io {

namespace {

// A minimal protocol-2 pickle emitter for the opcodes save_torch needs.
struct PickleOut {
  std::string b;
  void op(char c) { b.push_back(c); }
  void global(std::string_view module, std::string_view name) {
    b += 'c';
    b += module;
    b += '\n';
    b += name;
    b += '\n';
  }
  void str(std::string_view s) {
    b += 'X';
    detail::append_le<std::uint32_t>(b, static_cast<std::uint32_t>(s.size()));
    b += s;
  }
  void integer(std::int64_t v) {
    if (v >= INT32_MIN && v <= INT32_MAX) {
      b += 'J';
      detail::append_le<std::int32_t>(b, static_cast<std::int32_t>(v));
    } else {
      b += '\x8a';
      b += '\x08';
      detail::append_le<std::int64_t>(b, v);
    }
  }
  void int_tuple(const Shape& v) {
    op('(');
    for (auto x : v) integer(x);
    op('t');
  }
};

struct Group {
  std::string key;
  const Storage* storage;
  DType dtype;
  std::int64_t lo = INT64_MAX, hi = 0;  // element range used
};

}  // namespace

void save_torch(const std::string& path, const NamedTensors& input, const SaveTorchOptions& options) {
  // 1. Plan storages: tensors sharing (storage, dtype) share one torch storage covering the element
  //    range they use. Empty tensors get their own empty storage.
  struct Item {
    std::string name;
    Tensor t;
    std::size_t group;
  };
  std::vector<Item> items;
  std::vector<Group> groups;
  std::map<std::pair<const Storage*, DType>, std::size_t> by_storage;
  std::set<std::string_view> names;
  for (const auto& [name, tensor] : input) {
    LMCORE_CHECK(tensor.defined(), "save_torch: {}: tensor '{}' is undefined", path, name);
    Tensor t = tensor;
    if (std::any_of(t.strides().begin(), t.strides().end(), [](auto s) { return s < 0; })) t = t.contiguous();
    LMCORE_CHECK(names.insert(name).second, "save_torch: {}: tensor name '{}' appears twice", path, name);
    (void)detail::storage_class_name(t.dtype());  // throws for dtypes torch has no storage for
    std::size_t g;
    if (t.numel() == 0) {
      g = groups.size();
      groups.push_back({std::to_string(g), nullptr, t.dtype(), 0, 0});
    } else {
      const auto k = std::make_pair(t.storage().get(), t.dtype());
      auto it = by_storage.find(k);
      if (it == by_storage.end()) {
        it = by_storage.emplace(k, groups.size()).first;
        groups.push_back({std::to_string(groups.size()), t.storage().get(), t.dtype()});
      }
      g = it->second;
      std::int64_t last = t.storage_offset();
      for (std::int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
      groups[g].lo = std::min(groups[g].lo, t.storage_offset());
      groups[g].hi = std::max(groups[g].hi, last + 1);
    }
    items.push_back({name, t, g});
  }
  for (auto& g : groups)
    if (g.storage == nullptr) g.lo = g.hi = 0;

  // 2. The pickle: OrderedDict of name -> _rebuild_tensor_v2(...).
  PickleOut p;
  p.b = "\x80\x02";
  p.global("collections", "OrderedDict");
  p.op(')');
  p.op('R');
  p.op('(');
  for (const Item& it : items) {
    const Group& g = groups[it.group];
    p.str(it.name);
    p.global("torch._utils", "_rebuild_tensor_v2");
    p.op('(');
    p.op('(');
    p.str("storage");
    const std::string cls = detail::storage_class_name(g.dtype);
    p.global("torch", std::string_view(cls).substr(6));  // "torch.FloatStorage" -> FloatStorage
    p.str(g.key);
    p.str("cpu");
    p.integer(g.hi - g.lo);
    p.op('t');
    p.op('Q');  // BINPERSID
    p.integer(it.t.numel() == 0 ? 0 : it.t.storage_offset() - g.lo);
    p.int_tuple(it.t.shape());
    p.int_tuple(it.t.numel() == 0 ? contiguous_strides(it.t.shape()) : it.t.strides());
    p.op('\x89');  // requires_grad = False
    p.global("collections", "OrderedDict");
    p.op(')');
    p.op('R');
    p.op('t');
    p.op('R');
  }
  p.op('u');
  p.op('.');

  // 3. The archive.
  detail::AtomicFile out(path, {.what = "save"});
  detail::ZipWriter zip(out, options.force_zip64);
  zip.add("archive/data.pkl", p.b.data(), p.b.size());
  zip.add("archive/byteorder", "little", 6);
  for (const Group& g : groups) {
    const std::size_t isz = dtype_size(g.dtype);
    const std::byte* data = g.storage ? g.storage->data() + g.lo * isz : nullptr;
    zip.add(fmt::format("archive/data/{}", g.key), data, static_cast<std::uint64_t>(g.hi - g.lo) * isz);
  }
  zip.add("archive/version", "3\n", 2);
  zip.finish();
  out.commit();
}

void save_torch(const std::string& path, const StateDict& tensors, const SaveTorchOptions& options) {
  NamedTensors v;
  for (const auto& e : tensors) v.emplace_back(e.name, e.tensor);
  save_torch(path, v, options);
}

}  // namespace lmcore::io
