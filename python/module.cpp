// The extension module lmcore._lmcore (python/lmcore/__init__.py re-exports it as `lmcore`). Each part
// binds its API in python/bind_<part>.cpp.
#include <pybind11/pybind11.h>

#include <string_view>

#include "lmcore/core/error.h"
#include "lmcore/version.h"

namespace py = pybind11;

namespace lmcore::python {
void bind_core(py::module_& m);
void bind_dist(py::module_& m);
void bind_attention(py::module_& m);
void bind_io(py::module_& m);
void bind_loss(py::module_& m);
void bind_model(py::module_& m);
void bind_text(py::module_& m);
}  // namespace lmcore::python

PYBIND11_MODULE(_lmcore, m) {
  m.doc() = "lmcore: LLM training kernels, checkpoint I/O and collectives in C++";
  m.attr("__version__") = LMCORE_VERSION_STRING;
  // lmcore::Error becomes lmcore.Error, a ValueError (bad input is what it reports).
  static py::exception<lmcore::Error> error(m, "Error", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const lmcore::Error& e) {
      // Messages quote file names, which on Linux are any bytes: PyErr_SetString would raise a
      // UnicodeDecodeError instead of this error for one that is not UTF-8.
      const std::string_view what = e.what();
      PyObject* text = PyUnicode_DecodeUTF8(what.data(), static_cast<Py_ssize_t>(what.size()), "backslashreplace");
      if (text == nullptr) return;  // the decoder's own error (out of memory) stands
      PyErr_SetObject(error.ptr(), text);
      Py_DECREF(text);
    }
  });
  lmcore::python::bind_core(m);
  lmcore::python::bind_dist(m);
  lmcore::python::bind_attention(m);
  lmcore::python::bind_io(m);
  lmcore::python::bind_loss(m);
  lmcore::python::bind_model(m);
  lmcore::python::bind_text(m);
}
