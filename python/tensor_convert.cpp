#include "python/tensor_convert.h"

#include <dlpack/dlpack.h>

#include <memory>
#include <string>

namespace lmcore::python {

namespace {

// NumPy format for each dtype; the 16/8-bit floats NumPy lacks are shown as same-size integers.
py::dtype numpy_dtype(DType d) {
  switch (d) {
    case DType::f32: return py::dtype::of<float>();
    case DType::f64: return py::dtype::of<double>();
    case DType::f16: return py::dtype("float16");
    case DType::bf16: return py::dtype::of<std::uint16_t>();
    case DType::i8: return py::dtype::of<std::int8_t>();
    case DType::u8: return py::dtype::of<std::uint8_t>();
    case DType::i16: return py::dtype::of<std::int16_t>();
    case DType::i32: return py::dtype::of<std::int32_t>();
    case DType::i64: return py::dtype::of<std::int64_t>();
    case DType::boolean: return py::dtype::of<bool>();
    case DType::f8_e4m3fn:
    case DType::f8_e5m2: return py::dtype::of<std::uint8_t>();
    case DType::u16: return py::dtype::of<std::uint16_t>();
    case DType::u32: return py::dtype::of<std::uint32_t>();
    case DType::u64: return py::dtype::of<std::uint64_t>();
  }
  fail("numpy: tensor dtype code {} is not an lmcore dtype (0 to {}); the tensor is damaged",
       static_cast<int>(d), kNumDTypes - 1);
}

DType dtype_from_numpy(const py::dtype& dt) {
  const char kind = dt.kind();
  // lmcore tensors hold little-endian (native) elements; a view of big-endian ones would read as
  // garbage. NumPy writes '>' for big-endian, '<' or '=' for little/native, '|' where order is moot.
  if (dt.byteorder() == '>' && dt.itemsize() > 1)
    fail("from_numpy: the array is big-endian (dtype '{}'); lmcore tensors are little-endian views, so convert "
         "it first: array.astype(array.dtype.newbyteorder('<'))",
         std::string(py::str(static_cast<const py::object&>(dt))));
  const auto size = dt.itemsize();
  if (kind == 'f' && size == 4) return DType::f32;
  if (kind == 'f' && size == 8) return DType::f64;
  if (kind == 'f' && size == 2) return DType::f16;
  if (kind == 'b') return DType::boolean;
  if (kind == 'i' && size == 1) return DType::i8;
  if (kind == 'i' && size == 2) return DType::i16;
  if (kind == 'i' && size == 4) return DType::i32;
  if (kind == 'i' && size == 8) return DType::i64;
  if (kind == 'u' && size == 1) return DType::u8;
  if (kind == 'u' && size == 2) return DType::u16;
  if (kind == 'u' && size == 4) return DType::u32;
  if (kind == 'u' && size == 8) return DType::u64;
  fail("from_numpy: NumPy dtype '{}' has no lmcore dtype", std::string(py::str(static_cast<const py::object&>(dt))));
}

}  // namespace

py::array tensor_to_numpy(const Tensor& t) {
  LMCORE_CHECK(t.defined(), "numpy: tensor is undefined");
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  std::vector<py::ssize_t> strides;
  for (auto s : t.strides()) strides.push_back(static_cast<py::ssize_t>(s * static_cast<std::int64_t>(t.itemsize())));
  // The capsule owns a copy of the Tensor handle, so the storage lives as long as the array.
  auto* keep = new Tensor(t);
  py::capsule owner(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  py::array out(numpy_dtype(t.dtype()), shape, strides, t.data_ptr(), owner);
  if (t.is_read_only()) out.attr("setflags")(py::arg("write") = false);  // stays read-only in NumPy too
  return out;
}

Tensor numpy_to_tensor(const py::array& array) {
  const DType dt = dtype_from_numpy(array.dtype());
  const auto itemsize = static_cast<py::ssize_t>(dtype_size(dt));
  Shape shape, strides;
  for (py::ssize_t i = 0; i < array.ndim(); ++i) {
    shape.push_back(array.shape(i));
    LMCORE_CHECK(array.strides(i) % itemsize == 0, "from_numpy: stride {} of dim {} is not a multiple of {} bytes",
                 array.strides(i), i, itemsize);
    strides.push_back(array.strides(i) / itemsize);
  }
  // Keep the array (and so its buffer) alive through a shared_ptr whose deleter drops the reference.
  auto* ref = new py::object(array);
  std::shared_ptr<const void> owner(ref, [](const void* p) {
    py::gil_scoped_acquire gil;
    delete static_cast<const py::object*>(p);
  });
  // Find the lowest address the view reaches, so negative strides work too.
  std::int64_t lo = 0, hi = 0;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) { lo = 0; hi = -1; break; }
    const std::int64_t reach = (shape[i] - 1) * strides[i];
    (reach < 0 ? lo : hi) += reach;
  }
  auto* base = static_cast<std::byte*>(const_cast<void*>(array.data())) + lo * itemsize;
  const std::size_t span = hi >= lo ? static_cast<std::size_t>(hi - lo + 1) * itemsize : 0;
  // A read-only array (writeable=False: a `bytes` object, a read-only memory map, a broadcast view)
  // gives a read-only tensor: in-place operations on it are errors instead of writes into memory that
  // must not change (or cannot: a read-only mapping would segfault).
  auto storage = Storage::borrow(base, span, std::move(owner), /*read_only=*/!array.writeable());
  return Tensor::from_storage(std::move(storage), dt, shape, strides, -lo);
}

// ---------------------------------------------------------------------------------------------
// DLPack

namespace {

struct DLPackOwner {
  Tensor tensor;
  std::vector<std::int64_t> shape, strides;
  DLManagedTensor managed{};
};

DLDataType dl_dtype(DType d) {
  switch (d) {
    case DType::f32: return {kDLFloat, 32, 1};
    case DType::f64: return {kDLFloat, 64, 1};
    case DType::f16: return {kDLFloat, 16, 1};
    case DType::bf16: return {kDLBfloat, 16, 1};
    case DType::i8: return {kDLInt, 8, 1};
    case DType::i16: return {kDLInt, 16, 1};
    case DType::i32: return {kDLInt, 32, 1};
    case DType::i64: return {kDLInt, 64, 1};
    case DType::u8: return {kDLUInt, 8, 1};
    case DType::u16: return {kDLUInt, 16, 1};
    case DType::u32: return {kDLUInt, 32, 1};
    case DType::u64: return {kDLUInt, 64, 1};
    case DType::boolean: return {kDLUInt, 8, 1};  // DLPack 0.6 has no bool; torch 1.13 exports bool as uint8
    default: fail("to_dlpack: dtype {} has no DLPack 0.6 code", d);
  }
}

DType dtype_from_dl(const DLDataType& t) {
  LMCORE_CHECK(t.lanes == 1, "from_dlpack: vector lanes are not supported, found {}", t.lanes);
  if (t.code == kDLFloat && t.bits == 32) return DType::f32;
  if (t.code == kDLFloat && t.bits == 64) return DType::f64;
  if (t.code == kDLFloat && t.bits == 16) return DType::f16;
  if (t.code == kDLBfloat && t.bits == 16) return DType::bf16;
  if (t.code == kDLInt && t.bits == 8) return DType::i8;
  if (t.code == kDLInt && t.bits == 16) return DType::i16;
  if (t.code == kDLInt && t.bits == 32) return DType::i32;
  if (t.code == kDLInt && t.bits == 64) return DType::i64;
  if (t.code == kDLUInt && t.bits == 8) return DType::u8;
  if (t.code == kDLUInt && t.bits == 16) return DType::u16;
  if (t.code == kDLUInt && t.bits == 32) return DType::u32;
  if (t.code == kDLUInt && t.bits == 64) return DType::u64;
  fail("from_dlpack: DLPack dtype (code {}, bits {}) has no lmcore dtype", static_cast<int>(t.code), t.bits);
}

}  // namespace

py::capsule tensor_to_dlpack(const Tensor& t) {
  LMCORE_CHECK(t.defined(), "to_dlpack: tensor is undefined");
  // DLPack 0.6 has no read-only flag: a consumer (torch) would get a writable view of memory that must
  // not change, or cannot (a read-only mapping segfaults). NumPy's own rule for such arrays is a copy.
  LMCORE_CHECK(!t.is_read_only(),
               "to_dlpack: the tensor {} is read-only (it views a NumPy array with writeable=False, a bytes object "
               "or a read-only memory map) and DLPack cannot mark it so: export a copy, t.clone()",
               t.describe());
  auto* owner = new DLPackOwner;
  owner->tensor = t;
  owner->shape = t.shape();
  owner->strides = t.strides();
  DLTensor& dl = owner->managed.dl_tensor;
  dl.data = t.data_ptr();
  dl.device = {kDLCPU, 0};
  dl.ndim = static_cast<int>(t.dim());
  dl.dtype = dl_dtype(t.dtype());
  dl.shape = owner->shape.data();
  dl.strides = owner->strides.data();
  dl.byte_offset = 0;
  owner->managed.manager_ctx = owner;
  owner->managed.deleter = [](DLManagedTensor* self) { delete static_cast<DLPackOwner*>(self->manager_ctx); };
  // Protocol: a consumer renames the capsule to "used_dltensor" and calls the deleter itself; if
  // nobody consumed it, the capsule's destructor frees it.
  return py::capsule(&owner->managed, "dltensor", [](PyObject* cap) {
    if (PyCapsule_IsValid(cap, "dltensor")) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
      if (m && m->deleter) m->deleter(m);
    }
  });
}

Tensor tensor_from_dlpack(const py::object& obj) {
  py::object cap_obj = obj;
  if (py::hasattr(obj, "__dlpack__")) cap_obj = obj.attr("__dlpack__")();
  PyObject* cap = cap_obj.ptr();
  LMCORE_CHECK(PyCapsule_IsValid(cap, "dltensor"),
               "from_dlpack: expected an unused 'dltensor' capsule or an object with __dlpack__");
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
  const DLTensor& dl = managed->dl_tensor;
  LMCORE_CHECK(dl.device.device_type == kDLCPU, "from_dlpack: expected a CPU tensor, found device type {}",
               static_cast<int>(dl.device.device_type));
  const DType dt = dtype_from_dl(dl.dtype);
  Shape shape(dl.shape, dl.shape + dl.ndim);
  Shape strides = dl.strides ? Shape(dl.strides, dl.strides + dl.ndim) : contiguous_strides(shape);
  PyCapsule_SetName(cap, "used_dltensor");
  std::shared_ptr<const void> owner(managed, [](const void* p) {
    auto* m = static_cast<DLManagedTensor*>(const_cast<void*>(p));
    if (m->deleter) m->deleter(m);
  });
  std::int64_t lo = 0, hi = 0;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) { lo = 0; hi = -1; break; }
    const std::int64_t reach = (shape[i] - 1) * strides[i];
    (reach < 0 ? lo : hi) += reach;
  }
  const auto itemsize = static_cast<std::int64_t>(dtype_size(dt));
  auto* base = static_cast<std::byte*>(dl.data) + dl.byte_offset + lo * itemsize;
  const std::size_t span = hi >= lo ? static_cast<std::size_t>(hi - lo + 1) * itemsize : 0;
  return Tensor::from_storage(Storage::borrow(base, span, std::move(owner)), dt, shape, strides, -lo);
}

Tensor to_tensor(const py::object& obj, const char* arg_name) {
  if (py::isinstance<Tensor>(obj)) return obj.cast<Tensor>();
  if (py::isinstance<py::array>(obj)) return numpy_to_tensor(obj.cast<py::array>());
  if (py::hasattr(obj, "__dlpack__")) return tensor_from_dlpack(obj);
  fail("argument '{}': expected an lmcore.Tensor, a NumPy array or a DLPack-capable tensor, found {}", arg_name,
       std::string(py::str(obj.get_type())));
}

}  // namespace lmcore::python
