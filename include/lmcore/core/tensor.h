// lmcore/core/tensor.h — a strided view over shared, refcounted storage.
//
// A Tensor is (storage, dtype, shape, strides, storage offset). Strides are in elements, so element
// (i0, i1, ..., ik) lives at  data_ptr() + (i0*stride[0] + ... + ik*stride[k]) * itemsize.
// Views (narrow, select, transpose, permute, view, expand, squeeze, ...) share the storage and never
// copy; reshape copies only when the strides make a view impossible; contiguous() copies only when
// needed; clone() always copies. Storage is either owned (64-byte aligned, counted by the allocation
// tracker) or borrowed from a region such as a memory map, whose owner it keeps alive.
//
//   Tensor x = Tensor::empty({4, 8}, DType::f32);
//   Tensor xt = x.transpose(0, 1);       // view, [8, 4], strides {1, 8}
//   Tensor y = xt.contiguous();          // copy, strides {4, 1}
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lmcore/core/dtype.h"

namespace lmcore {

using Shape = std::vector<std::int64_t>;

// A block of bytes that tensors view. Owned storage frees itself; borrowed storage holds `owner`.
class Storage {
 public:
  // Owned, uninitialised, 64-byte aligned, counted by the allocation tracker.
  static std::shared_ptr<Storage> allocate(std::size_t nbytes);
  // Borrowed: `data` stays valid while `owner` lives (e.g. a shared_ptr to a memory map). A read-only
  // storage (a NumPy array with writeable=False, a `bytes` object, a read-only mapping) refuses every
  // in-place operation (Tensor::check_writable).
  static std::shared_ptr<Storage> borrow(void* data, std::size_t nbytes, std::shared_ptr<const void> owner,
                                         bool read_only = false);

  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  std::byte* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  bool owned() const { return owned_; }
  bool read_only() const { return read_only_; }

 private:
  Storage(std::byte* data, std::size_t nbytes, bool owned, std::shared_ptr<const void> owner, bool read_only = false)
      : data_(data), nbytes_(nbytes), owned_(owned), read_only_(read_only), owner_(std::move(owner)) {}
  std::byte* data_;
  std::size_t nbytes_;
  bool owned_;
  bool read_only_;
  std::shared_ptr<const void> owner_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor: defined() is false

  // ---- construction ----
  static Tensor empty(const Shape& shape, DType dtype);
  static Tensor zeros(const Shape& shape, DType dtype);
  static Tensor full(const Shape& shape, double value, DType dtype);
  // 0, 1, ..., n-1.
  static Tensor arange(std::int64_t n, DType dtype);
  // A view of existing memory; `owner` is kept alive while any view of it lives. Empty strides mean
  // contiguous. Throws when the view would reach outside [data, data + nbytes).
  static Tensor from_blob(void* data, const Shape& shape, DType dtype, std::shared_ptr<const void> owner,
                          const Shape& strides = {}, std::size_t nbytes = SIZE_MAX);
  // A view of `storage` (shape/strides/offset checked against its size).
  static Tensor from_storage(std::shared_ptr<Storage> storage, DType dtype, const Shape& shape,
                             const Shape& strides, std::int64_t storage_offset);
  // A tensor holding a copy of `values` with the given shape (numel must match).
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);

  // ---- properties ----
  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  std::size_t itemsize() const { return dtype_size(dtype_); }
  std::int64_t dim() const { return static_cast<std::int64_t>(shape_.size()); }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  std::int64_t size(std::int64_t d) const;    // negative d counts from the end
  std::int64_t stride(std::int64_t d) const;
  std::int64_t numel() const;
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * itemsize(); }
  std::int64_t storage_offset() const { return offset_; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  bool is_contiguous() const;
  // True when the elements are a dense block in some order (e.g. a transpose of a contiguous tensor).
  bool is_non_overlapping_and_dense() const;
  // True when the storage is read-only (see Storage::borrow); views share the flag, copies do not.
  bool is_read_only() const { return storage_ != nullptr && storage_->read_only(); }
  // Throws Error "<op>: the tensor is read-only ..." for a read-only tensor; every in-place operation
  // calls it before writing.
  void check_writable(const char* op) const;

  // Pointer to element (0, ..., 0).
  void* data_ptr() const;
  // Typed pointer; throws when T does not match dtype().
  template <typename T>
  T* data() const;

  // ---- views (share storage) ----
  Tensor narrow(std::int64_t d, std::int64_t start, std::int64_t length) const;
  // Python-style slice along d: [start, end) with step > 0; start/end are clamped, negatives wrap.
  Tensor slice(std::int64_t d, std::int64_t start, std::int64_t end, std::int64_t step = 1) const;
  Tensor select(std::int64_t d, std::int64_t index) const;  // removes dim d
  Tensor transpose(std::int64_t d0, std::int64_t d1) const;
  Tensor permute(const Shape& dims) const;
  Tensor view(Shape shape) const;     // one -1 allowed; throws when strides do not allow a view
  Tensor reshape(Shape shape) const;  // view when possible, else a contiguous copy
  Tensor flatten() const { return reshape({-1}); }
  Tensor expand(const Shape& shape) const;  // -1 keeps a size; new leading dims allowed
  Tensor unsqueeze(std::int64_t d) const;
  Tensor squeeze(std::int64_t d) const;  // no-op when size(d) != 1, as in torch
  Tensor squeeze() const;                // all size-1 dims
  // Reinterprets the bytes as another dtype of the same size (a view), as torch's Tensor.view(dtype).
  Tensor view_as_dtype(DType dtype) const;

  // ---- copies ----
  Tensor contiguous() const;     // *this when already contiguous
  Tensor clone() const;          // always a fresh contiguous copy
  Tensor to(DType dtype) const;  // cast; *this when dtype matches
  // Copies src into *this with broadcasting and casting. Returns *this.
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }

  // Element at a multi-index, converted to double (for tests and small tools, not kernels).
  double item_as_double(const Shape& index = {}) const;
  // Copy of the elements, in row-major order, converted to T.
  template <typename T>
  std::vector<T> to_vector() const;

  // "Tensor(f32[2, 3], strides [3, 1])"
  std::string describe() const;

 private:
  std::shared_ptr<Storage> storage_;
  DType dtype_ = DType::f32;
  Shape shape_;
  Shape strides_;
  std::int64_t offset_ = 0;
};

// Contiguous (row-major) strides for a shape.
Shape contiguous_strides(const Shape& shape);
// Product of sizes; throws Error on overflow or negative sizes, naming `what`.
std::int64_t checked_numel(const Shape& shape, const char* what = "shape");
// Broadcast shape of two shapes (torch rules); throws Error naming `op`.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Wraps a possibly negative dim into [0, ndim); throws Error naming `op`.
std::int64_t wrap_dim(std::int64_t d, std::int64_t ndim, const char* op);
// "[2, 3, 4]"
std::string shape_str(const Shape& shape);

// ---- template definitions ----

template <typename T>
T* Tensor::data() const {
  LMCORE_CHECK(defined(), "Tensor::data: tensor is undefined");
  LMCORE_CHECK(dtype_of<T> == dtype_, "Tensor::data: expected element type {}, found tensor of {}", dtype_of<T>,
               dtype_);
  return static_cast<T*>(data_ptr());
}

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  Tensor t = empty(shape, dtype_of<T>);
  LMCORE_CHECK(static_cast<std::int64_t>(values.size()) == t.numel(),
               "Tensor::from_vector: expected {} values for shape {}, found {}", t.numel(), shape_str(shape),
               values.size());
  T* out = t.data<T>();
  for (std::size_t i = 0; i < values.size(); ++i) out[i] = values[i];
  return t;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = to(dtype_of<T>).contiguous();
  const T* p = c.data<T>();
  return std::vector<T>(p, p + c.numel());
}

}  // namespace lmcore
