#include "src/io/pickle.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "src/io/file_util.h"
#include "src/io/utf8.h"

namespace lmcore::io::detail {

namespace {

struct StorageClass {
  const char* name;
  DType dtype;
};
constexpr StorageClass kStorageClasses[] = {
    {"torch.FloatStorage", DType::f32},       {"torch.DoubleStorage", DType::f64},
    {"torch.HalfStorage", DType::f16},        {"torch.BFloat16Storage", DType::bf16},
    {"torch.LongStorage", DType::i64},        {"torch.IntStorage", DType::i32},
    {"torch.ShortStorage", DType::i16},       {"torch.CharStorage", DType::i8},
    {"torch.ByteStorage", DType::u8},         {"torch.BoolStorage", DType::boolean},
    // Newer torch (2.1+, 2.3+) storages; torch 1.13 has none of these dtypes.
    {"torch.Float8_e4m3fnStorage", DType::f8_e4m3fn}, {"torch.Float8_e5m2Storage", DType::f8_e5m2},
    {"torch.UInt16Storage", DType::u16},      {"torch.UInt32Storage", DType::u32},
    {"torch.UInt64Storage", DType::u64},
};
// Storage classes torch allows but whose element types lmcore does not have.
constexpr const char* kUnsupportedStorages[] = {
    "torch.ComplexFloatStorage", "torch.ComplexDoubleStorage", "torch.ComplexHalfStorage", "torch.QInt8Storage",
    "torch.QUInt8Storage", "torch.QInt32Storage", "torch.QUInt4x2Storage", "torch.QUInt2x4Storage",
    "torch.UntypedStorage", "torch.storage.UntypedStorage", "torch.storage._UntypedStorage",
    "torch.storage.TypedStorage", "torch.storage._TypedStorage"};

// Callables and constants the weights-only unpickler of torch allows (and lmcore interprets).
constexpr const char* kAllowedGlobals[] = {
    "collections.OrderedDict", "torch.nn.parameter.Parameter", "torch.serialization._get_layout", "torch.Size",
    "torch.Tensor", "torch.device", "torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state",
    "torch._utils._rebuild_tensor", "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_sparse_tensor",
    "torch._utils._rebuild_meta_tensor_no_storage", "torch._utils._rebuild_sparse_csr_tensor",
    "torch._utils._rebuild_qtensor", "torch._tensor._rebuild_from_type_v2",
    // dtypes (str(torch.float32) == "torch.float32") and layouts
    "torch.float32", "torch.float", "torch.float64", "torch.double", "torch.float16", "torch.half", "torch.bfloat16",
    "torch.int64", "torch.long", "torch.int32", "torch.int", "torch.int16", "torch.short", "torch.int8", "torch.uint8",
    "torch.bool", "torch.complex64", "torch.complex128", "torch.complex32", "torch.qint8", "torch.quint8",
    "torch.qint32", "torch.quint4x2", "torch.float8_e4m3fn", "torch.float8_e5m2", "torch.uint16", "torch.uint32",
    "torch.uint64", "torch.strided", "torch.sparse_coo",
    // tensor classes (torch._tensor_classes)
    "torch.FloatTensor", "torch.DoubleTensor", "torch.HalfTensor", "torch.BFloat16Tensor", "torch.LongTensor",
    "torch.IntTensor", "torch.ShortTensor", "torch.CharTensor", "torch.ByteTensor", "torch.BoolTensor"};

bool is_allowed(const std::string& full) {
  for (const char* g : kAllowedGlobals)
    if (full == g) return true;
  for (const auto& s : kStorageClasses)
    if (full == s.name) return true;
  for (const char* s : kUnsupportedStorages)
    if (full == s) return true;
  return false;
}

// Pickle opcodes used below.
enum Op : std::uint8_t {
  MARK = '(', STOP = '.', POP = '0', BINFLOAT = 'G', BININT = 'J', BININT1 = 'K', BININT2 = 'M', NONE = 'N',
  BINPERSID = 'Q', REDUCE = 'R', BINUNICODE = 'X', APPEND = 'a', BUILD = 'b', GLOBAL = 'c', EMPTY_DICT = '}',
  APPENDS = 'e', BINGET = 'h', LONG_BINGET = 'j', EMPTY_LIST = ']', BINPUT = 'q', LONG_BINPUT = 'r',
  SETITEM = 's', TUPLE = 't', EMPTY_TUPLE = ')', SETITEMS = 'u',
  PROTO = 0x80, NEWOBJ = 0x81, TUPLE1 = 0x85, TUPLE2 = 0x86, TUPLE3 = 0x87, NEWTRUE = 0x88, NEWFALSE = 0x89,
  LONG1 = 0x8a, BINBYTES = 'B', SHORT_BINBYTES = 'C', SHORT_BINUNICODE = 0x8c, BINUNICODE8 = 0x8d,
  EMPTY_SET = 0x8f, ADDITEMS = 0x90, STACK_GLOBAL = 0x93, MEMOIZE = 0x94, FRAME = 0x95,
};

const char* kind_name(PKind k) {
  switch (k) {
    case PKind::none: return "None";
    case PKind::boolean: return "bool";
    case PKind::integer: return "int";
    case PKind::big_integer: return "int";
    case PKind::floating: return "float";
    case PKind::string: return "str";
    case PKind::bytes: return "bytes";
    case PKind::list: return "list";
    case PKind::tuple: return "tuple";
    case PKind::dict: return "dict";
    case PKind::set: return "set";
    case PKind::global: return "global";
    case PKind::tensor: return "tensor";
    case PKind::storage: return "storage";
  }
  return "?";
}

}  // namespace

DType storage_class_dtype(const std::string& full, const std::string& context) {
  for (const auto& s : kStorageClasses)
    if (full == s.name) return s.dtype;
  fail("{}: storage type '{}' is not supported by lmcore", context, full);
}

const char* storage_class_name(DType dtype) {
  for (const auto& s : kStorageClasses)
    if (s.dtype == dtype) return s.name;
  fail("save_torch: no torch storage type for dtype {}", dtype_name(dtype));
}

Unpickler::Unpickler(std::span<const std::byte> data, std::string name, PersistentLoad persistent_load, int max_depth)
    : data_(data), name_(std::move(name)), persistent_load_(std::move(persistent_load)), max_depth_(max_depth) {}

std::uint32_t Unpickler::add(PValue v) {
  // Every value costs at least one opcode byte, so the arena is bounded by the pickle's size.
  values_.push_back(std::move(v));
  return static_cast<std::uint32_t>(values_.size() - 1);
}

std::string Unpickler::describe(std::uint32_t i) const {
  const PValue& v = values_[i];
  switch (v.kind) {
    case PKind::integer: return fmt::format("int {}", v.i);
    case PKind::string: return fmt::format("str '{}'", v.s.substr(0, 64));
    case PKind::global: return fmt::format("global '{}'", v.s);
    default: return kind_name(v.kind);
  }
}

std::uint32_t Unpickler::pop() {
  if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back()))
    fail("{}: pickle stack underflow at byte {}", name_, pos_);
  const std::uint32_t v = stack_.back();
  stack_.pop_back();
  return v;
}

std::vector<std::uint32_t> Unpickler::pop_mark() {
  if (marks_.empty()) fail("{}: pickle opcode at byte {} needs a MARK, found none", name_, pos_);
  const std::size_t m = marks_.back();
  marks_.pop_back();
  std::vector<std::uint32_t> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
  stack_.resize(m);
  return items;
}

std::uint32_t Unpickler::check_global(const std::string& full) {
  if (!is_allowed(full))
    fail("{}: pickle refers to the global '{}', which weights-only loading does not allow (only tensors, "
         "storages and plain containers are loaded; no code from the file is run)",
         name_, full);
  PValue v;
  v.kind = PKind::global;
  v.s = full;
  return add(std::move(v));
}

void Unpickler::check_depth(std::uint32_t container, std::uint32_t child) {
  const int d = values_[child].depth + 1;
  if (d > max_depth_) fail("{}: pickle nests containers deeper than {} levels (refused)", name_, max_depth_);
  values_[container].depth = std::max(values_[container].depth, d);
}

std::uint32_t Unpickler::load() {
  auto need = [&](std::size_t n) {
    if (data_.size() - pos_ < n) fail("{}: pickle truncated at byte {} (needs {} more bytes)", name_, pos_, n);
  };
  auto read_bytes = [&](std::size_t n) {
    need(n);
    std::string s(reinterpret_cast<const char*>(data_.data() + pos_), n);
    pos_ += n;
    return s;
  };
  auto read_line = [&]() {
    const std::size_t limit = std::min<std::size_t>(data_.size() - pos_, 1024);
    for (std::size_t k = 0; k < limit; ++k) {
      if (data_[pos_ + k] == std::byte{'\n'}) {
        std::string s(reinterpret_cast<const char*>(data_.data() + pos_), k);
        pos_ += k + 1;
        return s;
      }
    }
    fail("{}: pickle GLOBAL at byte {} has no newline-terminated name", name_, pos_);
  };
  auto push_new = [&](PValue v) { stack_.push_back(add(std::move(v))); };
  auto make_string = [&](std::string s, PKind kind) {
    if (kind == PKind::string && first_invalid_utf8(s) != std::string_view::npos)
      fail("{}: pickle string at byte {} is not valid UTF-8", name_, pos_);
    PValue v;
    v.kind = kind;
    v.s = std::move(s);
    return v;
  };
  auto make_int = [&](std::int64_t i) {
    PValue v;
    v.kind = PKind::integer;
    v.i = i;
    return v;
  };
  auto make_tuple = [&](std::vector<std::uint32_t> items) {
    PValue v;
    v.kind = PKind::tuple;
    for (auto it : items) v.depth = std::max(v.depth, values_[it].depth + 1);
    if (v.depth > max_depth_) fail("{}: pickle nests containers deeper than {} levels (refused)", name_, max_depth_);
    v.items = std::move(items);
    return v;
  };
  auto expect_container = [&](std::uint32_t c, PKind kind, const char* op) {
    if (values_[c].kind != kind)
      fail("{}: pickle {} at byte {} applies to a {}, expected a {}", name_, op, pos_, kind_name(values_[c].kind),
           kind_name(kind));
  };
  auto set_items = [&](std::uint32_t dict, const std::vector<std::uint32_t>& kv) {
    if (values_[dict].kind != PKind::dict)
      fail("{}: pickle SETITEM(S) at byte {} applies to a {}, expected a dict", name_, pos_,
           kind_name(values_[dict].kind));
    if (kv.size() % 2) fail("{}: pickle SETITEMS at byte {} has an odd number of items", name_, pos_);
    for (std::size_t k = 0; k < kv.size(); k += 2) {
      check_depth(dict, kv[k + 1]);
      // Replace the value of an existing string/int key, as a Python dict would.
      const PValue& key = values_[kv[k]];
      bool replaced = false;
      auto& items = values_[dict].items;
      if (key.kind == PKind::string || key.kind == PKind::integer) {
        for (std::size_t j = 0; j < items.size(); j += 2) {
          const PValue& other = values_[items[j]];
          if (other.kind == key.kind && other.s == key.s && other.i == key.i) {
            items[j + 1] = kv[k + 1];
            replaced = true;
            break;
          }
        }
      }
      if (!replaced) {
        items.push_back(kv[k]);
        items.push_back(kv[k + 1]);
      }
    }
  };

  stack_.clear();
  marks_.clear();
  while (true) {
    need(1);
    const std::size_t op_at = pos_;
    const auto op = static_cast<std::uint8_t>(data_[pos_++]);
    switch (op) {
      case PROTO: {
        need(1);
        const auto proto = static_cast<std::uint8_t>(data_[pos_++]);
        if (proto > 5) fail("{}: pickle protocol {} is not supported (at most 5)", name_, proto);
        break;
      }
      case FRAME:
        need(8);
        pos_ += 8;  // framing is only a hint for buffered readers
        break;
      case STOP: {
        const std::uint32_t r = pop();
        if (!stack_.empty() || !marks_.empty())
          fail("{}: pickle STOP at byte {} leaves {} values on the stack", name_, op_at, stack_.size());
        return r;
      }
      case MARK:
        marks_.push_back(stack_.size());
        break;
      case POP:
        pop();
        break;
      case NONE:
        push_new(PValue{});
        break;
      case NEWTRUE:
      case NEWFALSE: {
        PValue v;
        v.kind = PKind::boolean;
        v.i = op == NEWTRUE;
        push_new(std::move(v));
        break;
      }
      case BININT: {
        need(4);
        push_new(make_int(read_le<std::int32_t>(data_.data() + pos_)));
        pos_ += 4;
        break;
      }
      case BININT1:
        need(1);
        push_new(make_int(static_cast<std::uint8_t>(data_[pos_++])));
        break;
      case BININT2:
        need(2);
        push_new(make_int(read_le<std::uint16_t>(data_.data() + pos_)));
        pos_ += 2;
        break;
      case LONG1: {
        need(1);
        const std::size_t n = static_cast<std::uint8_t>(data_[pos_++]);
        need(n);
        if (n <= 8) {
          std::uint64_t u = 0;
          for (std::size_t k = 0; k < n; ++k) u |= static_cast<std::uint64_t>(data_[pos_ + k]) << (8 * k);
          if (n > 0 && n < 8 && (static_cast<std::uint8_t>(data_[pos_ + n - 1]) & 0x80)) u |= ~0ull << (8 * n);
          pos_ += n;
          push_new(make_int(static_cast<std::int64_t>(u)));
        } else {
          push_new(make_string(read_bytes(n), PKind::big_integer));
        }
        break;
      }
      case BINFLOAT: {
        need(8);
        std::uint64_t u = read_le<std::uint64_t>(data_.data() + pos_);
        pos_ += 8;
        u = __builtin_bswap64(u);  // big-endian in the pickle
        PValue v;
        v.kind = PKind::floating;
        v.f = std::bit_cast<double>(u);
        push_new(std::move(v));
        break;
      }
      case SHORT_BINUNICODE: {
        need(1);
        const std::size_t n = static_cast<std::uint8_t>(data_[pos_++]);
        push_new(make_string(read_bytes(n), PKind::string));
        break;
      }
      case BINUNICODE: {
        need(4);
        const std::size_t n = read_le<std::uint32_t>(data_.data() + pos_);
        pos_ += 4;
        push_new(make_string(read_bytes(n), PKind::string));  // read_bytes checks n against the data
        break;
      }
      case BINUNICODE8: {
        need(8);
        const std::uint64_t n = read_le<std::uint64_t>(data_.data() + pos_);
        pos_ += 8;
        need(n);
        push_new(make_string(read_bytes(n), PKind::string));
        break;
      }
      case SHORT_BINBYTES: {
        need(1);
        const std::size_t n = static_cast<std::uint8_t>(data_[pos_++]);
        push_new(make_string(read_bytes(n), PKind::bytes));
        break;
      }
      case BINBYTES: {
        need(4);
        const std::size_t n = read_le<std::uint32_t>(data_.data() + pos_);
        pos_ += 4;
        push_new(make_string(read_bytes(n), PKind::bytes));
        break;
      }
      case EMPTY_TUPLE:
        push_new(make_tuple({}));
        break;
      case TUPLE:
        push_new(make_tuple(pop_mark()));
        break;
      case TUPLE1:
      case TUPLE2:
      case TUPLE3: {
        const std::size_t n = op - TUPLE1 + 1;
        std::vector<std::uint32_t> items(n);
        for (std::size_t k = n; k-- > 0;) items[k] = pop();
        push_new(make_tuple(std::move(items)));
        break;
      }
      case EMPTY_LIST:
      case EMPTY_DICT:
      case EMPTY_SET: {
        PValue v;
        v.kind = op == EMPTY_LIST ? PKind::list : op == EMPTY_DICT ? PKind::dict : PKind::set;
        push_new(std::move(v));
        break;
      }
      case APPEND: {
        const std::uint32_t item = pop();
        if (stack_.empty()) fail("{}: pickle APPEND at byte {} has no list", name_, op_at);
        const std::uint32_t list = stack_.back();
        expect_container(list, PKind::list, "APPEND");
        check_depth(list, item);
        values_[list].items.push_back(item);
        break;
      }
      case APPENDS:
      case ADDITEMS: {
        const auto items = pop_mark();
        if (stack_.empty()) fail("{}: pickle APPENDS/ADDITEMS at byte {} has no container", name_, op_at);
        const std::uint32_t c = stack_.back();
        expect_container(c, op == APPENDS ? PKind::list : PKind::set, op == APPENDS ? "APPENDS" : "ADDITEMS");
        for (auto it : items) {
          check_depth(c, it);
          values_[c].items.push_back(it);
        }
        break;
      }
      case SETITEM: {
        const std::uint32_t value = pop();
        const std::uint32_t key = pop();
        if (stack_.empty()) fail("{}: pickle SETITEM at byte {} has no dict", name_, op_at);
        set_items(stack_.back(), {key, value});
        break;
      }
      case SETITEMS: {
        const auto kv = pop_mark();
        if (stack_.empty()) fail("{}: pickle SETITEMS at byte {} has no dict", name_, op_at);
        set_items(stack_.back(), kv);
        break;
      }
      case BINPUT:
      case LONG_BINPUT:
      case MEMOIZE: {
        std::uint64_t idx;
        if (op == BINPUT) {
          need(1);
          idx = static_cast<std::uint8_t>(data_[pos_++]);
        } else if (op == LONG_BINPUT) {
          need(4);
          idx = read_le<std::uint32_t>(data_.data() + pos_);
          pos_ += 4;
        } else {
          idx = memo_.size();
        }
        if (stack_.empty()) fail("{}: pickle memo store at byte {} with an empty stack", name_, op_at);
        memo_[idx] = stack_.back();
        break;
      }
      case BINGET:
      case LONG_BINGET: {
        std::uint64_t idx;
        if (op == BINGET) {
          need(1);
          idx = static_cast<std::uint8_t>(data_[pos_++]);
        } else {
          need(4);
          idx = read_le<std::uint32_t>(data_.data() + pos_);
          pos_ += 4;
        }
        const auto it = memo_.find(idx);
        if (it == memo_.end()) fail("{}: pickle memo lookup of {} at byte {}: no such entry", name_, idx, op_at);
        stack_.push_back(it->second);
        break;
      }
      case GLOBAL: {
        const std::string module = read_line();
        const std::string qualname = read_line();
        stack_.push_back(check_global(fmt::format("{}.{}", module, qualname)));
        break;
      }
      case STACK_GLOBAL: {
        const std::uint32_t qn = pop();
        const std::uint32_t mod = pop();
        if (values_[qn].kind != PKind::string || values_[mod].kind != PKind::string)
          fail("{}: pickle STACK_GLOBAL at byte {} needs two strings", name_, op_at);
        stack_.push_back(check_global(fmt::format("{}.{}", values_[mod].s, values_[qn].s)));
        break;
      }
      case BINPERSID: {
        const std::uint32_t pid = pop();
        if (!persistent_load_) fail("{}: pickle has a persistent id at byte {} but none is expected", name_, op_at);
        stack_.push_back(persistent_load_(*this, pid));
        break;
      }
      case REDUCE: {
        const std::uint32_t args = pop();
        const std::uint32_t func = pop();
        stack_.push_back(reduce(func, args));
        break;
      }
      case NEWOBJ: {
        const std::uint32_t args = pop();
        const std::uint32_t cls = pop();
        if (values_[cls].kind != PKind::global || values_[cls].s != "torch.nn.parameter.Parameter")
          fail("{}: pickle NEWOBJ at byte {} instantiates {}, only torch.nn.parameter.Parameter is allowed", name_,
               op_at, describe(cls));
        stack_.push_back(reduce(cls, args));
        break;
      }
      case BUILD: {
        const std::uint32_t state = pop();
        if (stack_.empty()) fail("{}: pickle BUILD at byte {} has no object", name_, op_at);
        const PValue& inst = values_[stack_.back()];
        // An OrderedDict's attributes (state_dict's _metadata) and a Parameter's state carry no
        // tensor data: they are accepted and dropped.
        if (inst.kind != PKind::dict && inst.kind != PKind::tensor)
          fail("{}: pickle BUILD at byte {} on a {}: only tensors, parameters and dicts can be built", name_, op_at,
               kind_name(inst.kind));
        (void)state;
        break;
      }
      default:
        fail("{}: pickle opcode 0x{:02x} ('{}') at byte {} is not allowed in weights-only loading", name_, op,
             (op >= 32 && op < 127) ? std::string(1, static_cast<char>(op)) : std::string("?"), op_at);
    }
  }
}

std::uint32_t Unpickler::reduce(std::uint32_t func, std::uint32_t args_index) {
  if (values_[func].kind != PKind::global)
    fail("{}: pickle REDUCE calls a {}, expected an allowed global", name_, describe(func));
  if (values_[args_index].kind != PKind::tuple)
    fail("{}: pickle REDUCE of '{}' has {} arguments, expected a tuple", name_, values_[func].s, describe(args_index));
  const std::string f = values_[func].s;
  const std::vector<std::uint32_t> args = values_[args_index].items;
  if (f == "torch._utils._rebuild_tensor_v2" || f == "torch._utils._rebuild_tensor") return rebuild_tensor(args, f.c_str());
  if (f == "torch._utils._rebuild_parameter" || f == "torch._utils._rebuild_parameter_with_state" ||
      f == "torch.nn.parameter.Parameter") {
    if (args.empty() || values_[args[0]].kind != PKind::tensor)
      fail("{}: pickle calls {} without a tensor as its first argument", name_, f);
    return args[0];  // a parameter is its data tensor here (requires_grad is not kept)
  }
  if (f == "collections.OrderedDict") {
    PValue d;
    d.kind = PKind::dict;
    const std::uint32_t di = add(std::move(d));
    if (args.empty()) return di;
    // OrderedDict(iterable of pairs)
    if (args.size() != 1 || values_[args[0]].kind != PKind::list)
      fail("{}: pickle calls OrderedDict with unsupported arguments", name_);
    const std::vector<std::uint32_t> pairs = values_[args[0]].items;
    for (auto p : pairs) {
      if (values_[p].kind != PKind::tuple || values_[p].items.size() != 2)
        fail("{}: pickle calls OrderedDict with an item that is not a pair", name_);
      check_depth(di, values_[p].items[1]);
      values_[di].items.push_back(values_[p].items[0]);
      values_[di].items.push_back(values_[p].items[1]);
    }
    return di;
  }
  if (f == "torch.Size") {
    if (args.size() != 1 || values_[args[0]].kind != PKind::tuple)
      fail("{}: pickle calls torch.Size with unsupported arguments", name_);
    return args[0];
  }
  if (f == "torch.device" || f == "torch.serialization._get_layout") {
    if (args.empty() || values_[args[0]].kind != PKind::string)
      fail("{}: pickle calls {} without a string argument", name_, f);
    return args[0];
  }
  if (f == "torch._tensor._rebuild_from_type_v2") {
    // (func, new_type, args, state): rebuild with func(*args); only plain tensors/parameters.
    if (args.size() != 4) fail("{}: pickle calls {} with {} arguments, expected 4", name_, f, args.size());
    const PValue& type = values_[args[1]];
    if (type.kind != PKind::global || (type.s != "torch.Tensor" && type.s != "torch.nn.parameter.Parameter"))
      fail("{}: pickle rebuilds a tensor subclass {}, which is not supported", name_, describe(args[1]));
    return reduce(args[0], args[2]);
  }
  if (f.find("sparse") != std::string::npos || f.find("qtensor") != std::string::npos || f.find("meta") != std::string::npos)
    fail("{}: pickle calls {}: sparse, quantized and meta tensors are not supported by lmcore", name_, f);
  fail("{}: pickle REDUCE on '{}' is not supported in weights-only loading", name_, f);
}

std::uint32_t Unpickler::rebuild_tensor(const std::vector<std::uint32_t>& args, const char* fn) {
  // _rebuild_tensor(storage, storage_offset, size, stride)
  // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
  if (args.size() < 4 || args.size() > 7) fail("{}: pickle calls {} with {} arguments, expected 4 to 7", name_, fn, args.size());
  const PValue& st = values_[args[0]];
  if (st.kind != PKind::storage) fail("{}: {}: first argument is a {}, expected a storage", name_, fn, describe(args[0]));
  auto as_int = [&](std::uint32_t i, const char* what) {
    if (values_[i].kind != PKind::integer) fail("{}: {}: {} is a {}, expected an int", name_, fn, what, describe(i));
    if (values_[i].i < 0) fail("{}: {}: {} is {}, expected >= 0", name_, fn, what, values_[i].i);
    return values_[i].i;
  };
  auto as_ints = [&](std::uint32_t i, const char* what) {
    if (values_[i].kind != PKind::tuple && values_[i].kind != PKind::list)
      fail("{}: {}: {} is a {}, expected a tuple of ints", name_, fn, what, describe(i));
    Shape out;
    for (auto it : values_[i].items) out.push_back(as_int(it, what));
    return out;
  };
  const std::int64_t offset = as_int(args[1], "storage_offset");
  const Shape size = as_ints(args[2], "size");
  const Shape stride = as_ints(args[3], "stride");
  if (size.size() != stride.size())
    fail("{}: {}: size {} and stride {} differ in length", name_, fn, shape_str(size), shape_str(stride));
  // The last element must lie inside the storage (overflow-checked).
  std::uint64_t numel = 1, last = static_cast<std::uint64_t>(offset);
  for (std::size_t d = 0; d < size.size(); ++d)
    numel = checked_mul(numel, static_cast<std::uint64_t>(size[d]), "tensor element count");
  if (numel > 0) {
    for (std::size_t d = 0; d < size.size(); ++d)
      last = checked_add(last, checked_mul(static_cast<std::uint64_t>(size[d] - 1), static_cast<std::uint64_t>(stride[d]),
                                           "tensor extent"),
                         "tensor extent");
    if (last >= st.numel)
      fail("{}: tensor of size {}, stride {}, offset {} reaches element {} of a storage of {} elements", name_,
           shape_str(size), shape_str(stride), offset, last, st.numel);
  }
  PValue t;
  t.kind = PKind::tensor;
  t.tensor = Tensor::from_storage(st.storage, st.dtype, size, stride, numel > 0 ? offset : 0);
  return add(std::move(t));
}

}  // namespace lmcore::io::detail
