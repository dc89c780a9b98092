// A weights-only unpickler: it builds data (None, bools, ints, floats, strings, lists, tuples, dicts,
// sets), tensors and storages, and nothing else. No code from the file ever runs: GLOBAL may name only
// the classes and functions torch.load(weights_only=True) allows (the tensor/parameter rebuild
// functions, storage types, collections.OrderedDict, torch.Size, dtypes, devices...), and REDUCE,
// NEWOBJ and BUILD are interpreted by lmcore for those names only. Any other global (os.system,
// builtins.eval, ...) or opcode is refused with an error naming it.
//
// Opcodes accepted: those of torch 1.13's weights-only unpickler (PROTO STOP GLOBAL NEWOBJ REDUCE BUILD
// APPEND(S) SETITEM(S) MARK TUPLE TUPLE1-3 NONE NEWTRUE NEWFALSE EMPTY_TUPLE/LIST/DICT/SET BININT
// BININT1 BININT2 BINFLOAT BINUNICODE BINPERSID (LONG_)BINGET (LONG_)BINPUT LONG1), plus protocol-4
// forms that carry only data (FRAME MEMOIZE SHORT_BINUNICODE BINUNICODE8 SHORT_BINBYTES BINBYTES
// ADDITEMS, STACK_GLOBAL under the same allow-list).
//
// Values live in an arena owned by the unpickler and refer to each other by index, so hostile
// pickles (self-referencing lists, shared sub-objects) cannot leak or recurse; consumers walk them
// with a depth limit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "lmcore/core/tensor.h"

namespace lmcore::io::detail {

enum class PKind : std::uint8_t {
  none, boolean, integer, big_integer, floating, string, bytes, list, tuple, dict, set, global, tensor, storage
};

struct PValue {
  PKind kind = PKind::none;
  std::int64_t i = 0;            // boolean, integer
  double f = 0;                  // floating
  std::string s;                 // string, bytes, global ("module.name"), big_integer (little-endian bytes)
  std::vector<std::uint32_t> items;  // list/tuple/set items; dict: key0, value0, key1, value1, ...
  Tensor tensor;                 // tensor
  std::shared_ptr<Storage> storage;  // storage
  DType dtype = DType::f32;      // storage
  std::uint64_t numel = 0;       // storage: elements of dtype
  int depth = 0;                 // container nesting (lower bound: see pickle.cpp)
};

class Unpickler {
 public:
  // persistent_load(unpickler, pid) returns the index of the value a persistent id stands for.
  using PersistentLoad = std::function<std::uint32_t(Unpickler&, std::uint32_t)>;

  Unpickler(std::span<const std::byte> data, std::string name, PersistentLoad persistent_load, int max_depth = 200);

  // Runs until STOP; returns the index of the result. Can be called again for a following pickle
  // in the same byte stream (legacy torch files hold several).
  std::uint32_t load();
  std::size_t position() const { return pos_; }

  const PValue& at(std::uint32_t i) const { return values_[i]; }
  std::uint32_t add(PValue v);
  const std::string& name() const { return name_; }
  std::string describe(std::uint32_t i) const;  // short, for error messages
  std::size_t value_count() const { return values_.size(); }

 private:
  std::uint32_t reduce(std::uint32_t func, std::uint32_t args);
  std::uint32_t rebuild_tensor(const std::vector<std::uint32_t>& args, const char* fn);
  std::uint32_t pop();
  std::vector<std::uint32_t> pop_mark();
  std::uint32_t check_global(const std::string& full);
  void check_depth(std::uint32_t container, std::uint32_t child);

  std::span<const std::byte> data_;
  std::string name_;
  PersistentLoad persistent_load_;
  int max_depth_;
  std::size_t pos_ = 0;
  std::vector<PValue> values_;
  std::vector<std::uint32_t> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, std::uint32_t> memo_;
};

// dtype of a torch storage class ("torch.FloatStorage" -> f32); throws for unknown/unsupported ones.
DType storage_class_dtype(const std::string& full_name, const std::string& context);
// "torch.FloatStorage" for f32 etc. (newer torch names for f8/u16/u32/u64, which torch 1.13 lacks).
const char* storage_class_name(DType dtype);

}  // namespace lmcore::io::detail
