// Conversions between lmcore::Tensor and Python objects (NumPy arrays, DLPack capsules), shared by
// every bind_<part>.cpp. Both directions are zero-copy: the result keeps the source alive.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "lmcore/core/tensor.h"

namespace lmcore::python {

namespace py = pybind11;

// A NumPy array viewing t's memory (bf16/f16/f8 become uint16/float16/uint8 views: NumPy has no bf16 or
// f8). The array holds a reference to the storage.
py::array tensor_to_numpy(const Tensor& t);
// A tensor viewing the array's memory (any strides); bool, ints, f16, f32, f64 arrays.
Tensor numpy_to_tensor(const py::array& array);
// Accepts an lmcore.Tensor, a NumPy array, or anything with __dlpack__ (e.g. a torch tensor).
Tensor to_tensor(const py::object& obj, const char* arg_name);

// DLPack: a "dltensor" capsule viewing t, and a tensor viewing a capsule (or an object with __dlpack__).
py::capsule tensor_to_dlpack(const Tensor& t);
Tensor tensor_from_dlpack(const py::object& obj);

}  // namespace lmcore::python
