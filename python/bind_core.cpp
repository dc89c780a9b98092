// Python bindings of the tensor core: lmcore.Tensor, conversions, allocator and threads.
#include <pybind11/stl.h>

#include "lmcore/core/allocator.h"
#include "lmcore/core/parallel.h"
#include "lmcore/core/gemm_lowp.h"
#include "lmcore/core/runtime_info.h"
#include "python/tensor_convert.h"

namespace lmcore::python {

void bind_core_ops(py::module_& m);  // python/bind_core_ops.cpp

void bind_core(py::module_& m) {
  py::class_<Tensor>(m, "Tensor", py::buffer_protocol(),
                     "A strided view over shared storage. Converts zero-copy to and from NumPy and DLPack.")
      .def_property_readonly("shape", [](const Tensor& t) { return py::tuple(py::cast(t.shape())); })
      .def_property_readonly("strides", [](const Tensor& t) { return py::tuple(py::cast(t.strides())); })
      .def_property_readonly("dtype", [](const Tensor& t) { return std::string(dtype_name(t.dtype())); })
      .def_property_readonly("storage_offset", &Tensor::storage_offset)
      .def_property_readonly("ndim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("dim", &Tensor::dim)
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("numpy", &tensor_to_numpy, "Zero-copy NumPy view (bf16 and f8 as same-size unsigned integers).")
      .def("__array__", [](const Tensor& t, py::object) { return tensor_to_numpy(t); }, py::arg("dtype") = py::none())
      .def("__dlpack__", [](const Tensor& t, py::object) { return tensor_to_dlpack(t); }, py::arg("stream") = py::none())
      .def("__dlpack_device__", [](const Tensor&) { return py::make_tuple(1, 0); })  // (kDLCPU, 0)
      .def("narrow", &Tensor::narrow)
      .def("slice", &Tensor::slice, py::arg("dim"), py::arg("start"), py::arg("end"), py::arg("step") = 1)
      .def("select", &Tensor::select)
      .def("transpose", &Tensor::transpose)
      .def("permute", &Tensor::permute)
      .def("view", &Tensor::view)
      .def("reshape", &Tensor::reshape)
      .def("expand", &Tensor::expand)
      .def("unsqueeze", &Tensor::unsqueeze)
      .def("squeeze", py::overload_cast<>(&Tensor::squeeze, py::const_))
      .def("squeeze", py::overload_cast<std::int64_t>(&Tensor::squeeze, py::const_))
      .def("contiguous", &Tensor::contiguous)
      .def("clone", &Tensor::clone)
      .def("to", [](const Tensor& t, const std::string& dtype) { return t.to(dtype_from_name(dtype)); })
      .def("view_as_dtype", [](const Tensor& t, const std::string& dtype) { return t.view_as_dtype(dtype_from_name(dtype)); })
      .def("copy_", [](Tensor& t, const py::object& src) { return t.copy_(to_tensor(src, "src")); })
      .def("fill_", &Tensor::fill_)
      .def_property_readonly("read_only", &Tensor::is_read_only,
                             "True for a view of read-only memory (e.g. from_numpy of a writeable=False array): "
                             "in-place operations on it raise lmcore.Error.")
      .def("__repr__", &Tensor::describe);

  m.def("from_numpy", &numpy_to_tensor, py::arg("array"),
        "Zero-copy tensor viewing a NumPy array. A read-only array (writeable=False: np.frombuffer of bytes, a "
        "mode='r' memmap) gives a read-only tensor; a big-endian array is refused (convert it with astype).");
  m.def("from_dlpack", &tensor_from_dlpack, py::arg("obj"), "Zero-copy tensor from a DLPack capsule or tensor.");
  m.def("to_dlpack", &tensor_to_dlpack, py::arg("tensor"));
  m.def("as_tensor", [](const py::object& o) { return to_tensor(o, "obj"); }, py::arg("obj"),
        "lmcore.Tensor viewing a Tensor, NumPy array or DLPack tensor (zero-copy).");
  m.def("empty", [](const Shape& s, const std::string& d) { return Tensor::empty(s, dtype_from_name(d)); },
        py::arg("shape"), py::arg("dtype") = "f32");
  m.def("zeros", [](const Shape& s, const std::string& d) { return Tensor::zeros(s, dtype_from_name(d)); },
        py::arg("shape"), py::arg("dtype") = "f32");
  m.def("full", [](const Shape& s, double v, const std::string& d) { return Tensor::full(s, v, dtype_from_name(d)); },
        py::arg("shape"), py::arg("value"), py::arg("dtype") = "f32");
  m.def("arange", [](std::int64_t n, const std::string& d) { return Tensor::arange(n, dtype_from_name(d)); },
        py::arg("n"), py::arg("dtype") = "i64");

  m.def("current_bytes", &current_bytes, "Bytes of tensor storage allocated now.");
  m.def("peak_bytes", &peak_bytes, "Most bytes of tensor storage allocated at once since the last reset.");
  m.def("reset_peak_bytes", &reset_peak_bytes);
  m.def("num_threads", &num_threads);
  m.def("set_num_threads", &set_num_threads, py::arg("n"));
  m.def("simd_target", &simd_target_name);
  // bf16/f16 GEMM path (lmcore/core/gemm_lowp.h): "onednn" (matrix units) or "widened" (f32 sgemm).
  m.def("lowp_gemm_path", [](const std::string& d) {
    return lowp_gemm_path(dtype_from_name(d)) == LowpGemmPath::onednn ? "onednn" : "widened";
  }, py::arg("dtype"));
  m.def("set_lowp_gemm_onednn", &set_lowp_gemm_onednn, py::arg("enabled"),
        "False forces bf16 GEMMs onto the widened f32 path; True restores the automatic choice.");
  m.def("onednn_info", &onednn_info);

  bind_core_ops(m);
}

}  // namespace lmcore::python
